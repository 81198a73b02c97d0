"""The NVIDIA backend: TTIR → TTGIR → LLIR → PTX → cubin, Triton's own stages (ptxas included).

Cross-compiles for any `sm_NN` with no GPU present; runs kernels when torch sees an NVIDIA GPU.
"""
from __future__ import annotations

from typing import Optional

from ..triton_gpu import TritonGPUBackend


class CudaBackend(TritonGPUBackend):
    name = "cuda"
    archs = ("sm_90", "sm_80", "sm_89")
    # the processors Triton's LLVM and ptxas take: another number (sm_99) aborted the process
    # inside LLVM ("Cannot select: intrinsic %llvm.nvvm.bar.warp.sync") instead of an error
    # NVIDIA's arch-specific `a` variants begin with Hopper: Triton reads only the digits, and
    # built plain sm_80 for sm_80a
    arch_pattern = r"sm_(75|80|86|87|89)|sm_(90|100|101|103|110|120|121)a?"
    warp_size = 32
    binary_stage = "cubin"
    device_type = "cuda"
    triton_backend = "cuda"

    def triton_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", int(self.arch.removeprefix("sm_").rstrip("a")), 32)

    @classmethod
    def present_arch(cls) -> Optional[str]:
        if cls._torch_device_kind() != "cuda":
            return None
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"

    @classmethod
    def unavailable_reason(cls) -> str:
        import torch

        if cls._torch_device_kind() is None:
            return (f"torch {torch.__version__} sees no CUDA GPU"
                    + ("" if torch.version.cuda else " (it is a CPU-only build)"))
        return "the GPU present is not an NVIDIA GPU"
