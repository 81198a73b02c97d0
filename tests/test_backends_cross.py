"""The GPU backends on a machine without a GPU: real kernels cross-compiled for three NVIDIA and
three AMD architectures through every stage, each PTX assembled by ptxas, each binary an ELF for
its GPU; the stage driver's cache and failures; the launchers' argument lists.

FileCheck tests of the same stages through uniorch-opt are in tests/filecheck/backends.
"""
from __future__ import annotations

import functools
import os
import re
import struct

import pytest
import torch

import uniorch

from cross_util import EM_AMDGPU, EM_CUDA, elf_machine, ptx_target, ptxas_tools, run_ptxas, scheduled_module

from uniorch.backends import BackendError
from uniorch.backends.driver import compile_kernel, stage_names
from uniorch.backends.sdk import tensor_args
from uniorch.codegen import generate
from uniorch.runtime.compiler import kernel_functions
from uniorch.targets import parse_target

CUDA = ("cuda:sm_80", "cuda:sm_89", "cuda:sm_90")
ROCM = ("rocm:gfx90a", "rocm:gfx942", "rocm:gfx1100")
# EF_AMDGPU_MACH_* in the low byte of a code object's e_flags (LLVM's AMDGPUUsage)
AMDGPU_MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx1100": 0x41}
WAVEFRONT = {"gfx90a": 64, "gfx942": 64, "gfx1100": 32}


def sample(a, b, c):
    """One kernel of each template: a matmul with a relu epilogue, a softmax row reduction, a
    pointwise chain with a broadcast."""
    p = torch.softmax(torch.relu(a @ b), dim=-1)
    return p, torch.tanh(c) * 2.0 + c.mean(dim=0)


ARGS = (torch.randn(32, 64), torch.randn(64, 48), torch.randn(16, 40))


@functools.lru_cache(maxsize=None)
def compiled_for(target_text: str):
    """(target, [(KernelSource, CompiledKernel)]) for the sample, every stage, no disk cache."""
    target = parse_target(target_text)
    module = scheduled_module(sample, ARGS, {}, target)
    out = []
    for op in kernel_functions(module):
        assert "uniorch.unsupported" not in op.attributes
        ks = generate(op, str(target))
        out.append((ks, compile_kernel(ks, target.backend, use_cache=False)))
    assert len(out) >= 3, [ks.name for ks, _ in out]
    return target, out


@pytest.fixture(params=CUDA + ROCM)
def compiled(request):
    return compiled_for(request.param)


@pytest.fixture(params=CUDA)
def compiled_cuda(request):
    return compiled_for(request.param)


@pytest.fixture(params=ROCM)
def compiled_rocm(request):
    return compiled_for(request.param)


def test_every_stage_of_every_kernel(compiled):
    target, kernels = compiled
    names = stage_names(target.backend)
    assert names[-1] == target.backend.binary_stage
    for ks, ck in kernels:
        assert list(ck.asm) == names, ks.name
        for stage in names[:-1]:
            assert isinstance(ck.asm[stage], str) and ck.asm[stage].strip(), (ks.name, stage)
        assert ck.target == str(target)
        assert ck.metadata["name"] == ks.fn_name


def test_ttgir_layouts_use_the_targets_warp_width(compiled):
    target, kernels = compiled
    width = WAVEFRONT[target.arch] if target.vendor == "rocm" else 32
    for ks, ck in kernels:
        assert f'"ttg.threads-per-warp" = {width} : i32' in ck.asm["ttgir"], ks.name
        for lanes in re.findall(r"threadsPerWarp = \[([\d, ]+)\]", ck.asm["ttgir"]):
            product = 1
            for n in lanes.split(","):
                product *= int(n)
            assert product == width, (ks.name, lanes)


def test_cuda_ptx_passes_ptxas_and_cubin_is_elf(compiled_cuda):
    target, kernels = compiled_cuda
    if not ptxas_tools():
        pytest.skip("no ptxas: none on PATH and Triton's NVIDIA backend ships none here")
    for ks, ck in kernels:
        ptx = ck.asm["ptx"]
        assert ptx_target(ptx) in (target.arch, target.arch + "a"), (ks.name, ptx_target(ptx))
        assert re.search(rf"^\.visible \.entry {ks.fn_name}\(", ptx, re.MULTILINE), ks.name
        proc = run_ptxas(ptx, target.arch)
        assert proc.returncode == 0, f"ptxas -arch={target.arch} rejected {ks.name}:\n{proc.stderr}"
        assert elf_machine(ck.asm["cubin"]) == EM_CUDA, ks.name


def test_rocm_hsaco_is_an_amdgpu_code_object_for_the_arch(compiled_rocm):
    target, kernels = compiled_rocm
    for ks, ck in kernels:
        hsaco = ck.asm["hsaco"]
        assert elf_machine(hsaco) == EM_AMDGPU, ks.name
        assert hsaco[4] == 2 and hsaco[5] == 1, "AMDGPU code objects are 64-bit little-endian"
        e_flags = struct.unpack_from("<I", hsaco, 48)[0]
        assert e_flags & 0xFF == AMDGPU_MACH[target.arch], (ks.name, hex(e_flags))
        # LLVM spells the target id amdgcn-amd-amdhsa--gfx942, or amdgpu9.42-amd-amdhsa-unknown-gfx942
        m = re.search(r'^\s*\.amdgcn_target "([^"]+)"', ck.asm["amdgcn"], re.MULTILINE)
        assert m and "-amd-amdhsa-" in m.group(1) and m.group(1).endswith(target.arch), (ks.name, m)
        assert f".amdhsa_kernel {ks.fn_name}" in ck.asm["amdgcn"]


# -- the driver -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def one_kernel():
    target = parse_target("cuda:sm_90")
    module = scheduled_module(lambda x: torch.relu(x) + 1.0, (torch.randn(8, 16),), {}, target)
    return target, generate(kernel_functions(module)[0], str(target))


def test_cache_upgrades_a_partial_entry(one_kernel, tmp_path, monkeypatch):
    """A listing stops at ttir; the full compile after it must replace that cache entry, or every
    later full compile of the kernel misses the cache."""
    from uniorch.backends import driver

    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    target, ks = one_kernel
    assert list(compile_kernel(ks, target.backend, stop_after="ttir").asm) == ["triton", "ttir"]
    full = compile_kernel(ks, target.backend)
    assert "cubin" in full.asm

    def no_compiling(*a, **k):
        raise AssertionError("compiled again instead of reading the cache")

    monkeypatch.setattr(driver, "_triton_frontend", no_compiling)
    again = compile_kernel(ks, target.backend)
    assert again.asm["cubin"] == full.asm["cubin"] and again.asm["ptx"] == full.asm["ptx"]
    assert compile_kernel(ks, target.backend, stop_after="llir").asm["llir"] == full.asm["llir"]


def test_stop_after_and_unknown_stage(one_kernel):
    target, ks = one_kernel
    ck = compile_kernel(ks, target.backend, stop_after="ttgir", use_cache=False)
    assert list(ck.asm) == ["triton", "ttir", "ttgir"]
    with pytest.raises(BackendError, match="backend 'cuda' has no stage 'hsaco'; its stages: triton, ttir, ttgir"):
        compile_kernel(ks, target.backend, stop_after="hsaco")


def test_failed_stage_names_kernel_and_keeps_earlier_stages(one_kernel):
    target, ks = one_kernel
    backend = target.backend

    class Broken(type(backend)):
        def add_stages(self, stages, options):
            super().add_stages(stages, options)

            def ptx(src, metadata):
                raise RuntimeError("LLVM ERROR: Cannot select")

            stages["ptx"] = ptx

    with pytest.raises(BackendError, match=f"cuda:sm_90: stage 'ptx' failed for kernel {ks.name}: "
                                           "RuntimeError: LLVM ERROR: Cannot select") as info:
        compile_kernel(ks, Broken("sm_90"), use_cache=False)
    assert list(info.value.compiled.asm) == ["triton", "ttir", "ttgir", "llir"]


# -- launchers: what runs without a GPU -------------------------------------------------------------
class _Recorder:
    """Stands in for a Triton kernel: `fn[grid](*args, **kwargs)` records the call."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


def _tensors(ks):
    shapes = [tuple(range(2, 2 + r)) for r in ks.input_ranks + ks.output_ranks]
    ts = [torch.empty(s) for s in shapes]
    # a transposed view: strides must be the view's, not its base's contiguous ones
    ts[0] = torch.empty(tuple(reversed(shapes[0]))).permute(*reversed(range(len(shapes[0]))))
    return ts[: len(ks.input_ranks)], ts[len(ks.input_ranks):]


def _check_positional(ks, args, inputs, outputs):
    """Positional kernel arguments line up with the signature: a tensor at each pointer, its
    strides after it, then (for Triton's launcher) the constexpr values."""
    sig = list(ks.signature().items())
    assert len(args) == len(sig), (len(args), sig)
    tensors = iter(inputs + outputs)
    strides = []
    for (name, kind), value in zip(sig, args):
        if kind.startswith("*"):
            t = next(tensors)
            assert value is t, name
            strides = list(t.stride())
        elif kind == "i64":
            assert value == strides.pop(0), name
        else:
            assert kind == "constexpr" and value == ks.constexprs[name], name


def test_signature_is_the_generated_functions_parameter_order(compiled):
    """Triton's launchers pass arguments by position: the signature's order must be the order of
    the generated function's parameters."""
    from uniorch.runtime import loader

    _, kernels = compiled
    for ks, _ in kernels:
        assert list(ks.signature()) == loader.load(ks, interpret=False).arg_names, ks.name


def test_triton_launcher_arguments(compiled):
    from uniorch.backends.triton_launch import TritonLauncher

    _, kernels = compiled
    for ks, _ in kernels:
        inputs, outputs = _tensors(ks)
        fn = _Recorder()
        TritonLauncher(ks, fn)(inputs, outputs)
        [(grid, args, kwargs)] = fn.calls
        assert grid == ks.grid
        _check_positional(ks, list(args) + list(ks.constexprs.values()), inputs, outputs)
        assert kwargs == {**ks.constexprs, "num_warps": ks.num_warps, "num_stages": ks.num_stages}
        assert len(args) == len(tensor_args(ks, inputs, outputs))


def test_driver_launcher_arguments(compiled):
    """The driver launcher (kernels compiled ahead of time, no Triton) packs, at each parameter the
    binary declares, a tensor's address at each pointer and its strides after it, then Triton's
    two scratch pointers; constexprs are compiled in. Grid and block are the launch contract's."""
    import ctypes

    from uniorch.backends.binary_launch import DriverLauncher

    target, kernels = compiled
    for ks, ck in kernels:
        launcher = DriverLauncher(ck, target.vendor)
        assert launcher.binary == ck.asm[target.backend.binary_stage]
        assert launcher.grid[: len(ks.grid)] == tuple(ks.grid) and set(launcher.grid[len(ks.grid):]) <= {1}
        warp = 32 if target.vendor == "cuda" else WAVEFRONT[target.arch]
        assert launcher.block == ks.num_warps * warp
        inputs, outputs = _tensors(ks)
        storage, params = launcher.arguments(inputs, outputs, {"global_scratch": 0, "profile_scratch": 0})
        got = [int.from_bytes(ctypes.string_at(params[i], 8), "little", signed=True)
               for i in range(len(launcher.binding.slots))]
        want = []
        for t in inputs + outputs:
            want += [t.data_ptr(), *t.stride()]
        assert got == want + [0, 0], ks.name


def test_driver_launcher_needs_the_binary_stage(one_kernel):
    from uniorch.backends.binary_launch import DriverLauncher

    target, ks = one_kernel
    ck = compile_kernel(ks, target.backend, stop_after="ptx", use_cache=False)
    with pytest.raises(BackendError, match="compiled without its 'cubin' stage"):
        DriverLauncher(ck, "cuda")


# -- uniorch-opt --dump-dir when a stage fails -------------------------------------------------------
def test_dump_dir_keeps_the_stages_before_a_failure(tmp_path, monkeypatch):
    """A kernel a backend stage rejects: the dump still holds every stage up to the failure and
    the error beside them (what a bug report needs), and uniorch-opt exits 1 with a diagnostic."""
    import io

    from uniorch.backends.cuda import CudaBackend
    from uniorch.tools import opt

    original = CudaBackend.add_stages

    def add_stages(self, stages, options):
        original(self, stages, options)

        def ptx(src, metadata):
            raise RuntimeError("LLVM ERROR: Cannot select")

        stages["ptx"] = ptx

    monkeypatch.setattr(CudaBackend, "add_stages", add_stages)
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path / "cache"))
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck", "Inputs", "matmul_main.mlir")
    out, err, dump = io.StringIO(), io.StringIO(), tmp_path / "dump"
    code = opt.main([src, "--target", "cuda:sm_90", "--dump-dir", str(dump)], stdout=out, stderr=err)
    assert code == 1 and out.getvalue() == ""
    assert "uniorch-opt: error: --dump-dir" in err.getvalue() and "stage 'ptx' failed for kernel k0_contraction" in err.getvalue()
    assert "Traceback" not in err.getvalue()
    files = sorted(p.name for p in (dump / "k0_contraction").iterdir())
    assert files == [f"k0_contraction.{s}" for s in ("error", "json", "llir", "triton", "ttgir", "ttir")]
    assert (dump / "module.scheduled.mlir").exists()


def test_corrupt_cache_entry_is_rebuilt_not_loaded(one_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    target, ks = one_kernel
    full = compile_kernel(ks, target.backend)
    cubins = [p for p in tmp_path.rglob(f"{ks.fn_name}.cubin")]
    assert len(cubins) == 1
    cubins[0].write_bytes(full.asm["cubin"][:100])  # a truncated write
    again = compile_kernel(ks, target.backend)
    assert again.asm["cubin"] == full.asm["cubin"]
    assert cubins[0].read_bytes() == full.asm["cubin"]  # the damaged entry was replaced
    (cubins[0].parent / "metadata.json").write_text("{not json")
    assert compile_kernel(ks, target.backend).asm["cubin"] == full.asm["cubin"]


def test_small_bf16_constants_keep_their_bits_in_gpu_code():
    """Triton's builder makes bf16 constants through a 6-decimal text form: `tl.full([], 1e-7,
    tl.bfloat16)` compiled to 0 for GPUs (the interpreter kept it, so no CPU test saw it). The PTX
    must hold each constant's bf16 bits as torch rounds it."""
    for value in (1e-7, 3e-6, 0.1):
        class FillNegatives(torch.nn.Module):
            def forward(self, x):
                return torch.where(x > 0, x, torch.full_like(x, value))

        x = torch.randn(64, 32, dtype=torch.bfloat16)
        art = uniorch.compile_aot(FillNegatives(), (x,), target="cuda:sm_90")
        assert len(art.kernels) == 1 and not art.fallbacks, str(art)
        ptx = art.kernels[0].asm["ptx"]
        bits = int(torch.tensor(value, dtype=torch.bfloat16).view(torch.int16)) & 0xFFFF
        # the constant is an immediate of the select, or moved into a register first
        assert re.search(rf"(selp\.b16\s+%rs\d+, %rs\d+, ({bits}|0x{bits:04X}), %p\d+;)|(mov\.b16\s+%rs\d+, "
                         rf"({bits}|0x{bits:04X});)", ptx), (value, hex(bits))
