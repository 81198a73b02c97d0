"""The AMD backend: TTIR → TTGIR → LLIR → AMDGCN → HSACO, Triton's own stages (LLVM's AMDGPU
target and lld). Cross-compiles for gfx90a / gfx942 / gfx1100 with no GPU present; runs kernels
when torch is a ROCm build and sees an AMD GPU.
"""
from __future__ import annotations

from typing import Optional

from ..triton_gpu import TritonGPUBackend

# RDNA (gfx10xx, gfx11xx, gfx12xx) runs 32-wide wavefronts by default; CDNA (gfx9xx) 64-wide.


class RocmBackend(TritonGPUBackend):
    name = "rocm"
    archs = ("gfx942", "gfx90a", "gfx1100")
    # the CDNA and RDNA processors Triton's AMD backend compiles for: another name (gfx999) failed
    # inside Triton's passes with an IndexError
    arch_pattern = r"gfx(908|90a|94[012]|950|10[3][0-6]|110[0-3]|115[0-3]|120[01])"
    warp_size = 64
    binary_stage = "hsaco"
    device_type = "cuda"  # ROCm builds of torch expose AMD GPUs as torch.device("cuda")
    triton_backend = "hip"

    def wavefront(self) -> int:
        return 32 if self.arch.startswith("gfx1") else 64

    def triton_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("hip", self.arch, self.wavefront())

    @classmethod
    def present_arch(cls) -> Optional[str]:
        if cls._torch_device_kind() != "hip":
            return None
        import torch

        return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]

    @classmethod
    def unavailable_reason(cls) -> str:
        import torch

        if cls._torch_device_kind() is None:
            return f"torch {torch.__version__} sees no GPU" + ("" if getattr(torch.version, "hip", None) else
                                                                " (it is not a ROCm build)")
        return "the GPU present is not an AMD GPU"
