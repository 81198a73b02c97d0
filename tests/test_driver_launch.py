"""Kernel binaries launched through the vendor driver, without Triton: what can be checked with no
GPU, against what the compilers wrote.

The launch ABI comes from each kernel's own PTX / AMDGCN; here it is compared with uniorch's
argument list, with the parameter table inside the cubin (cuobjdump) and with the metadata note
inside the hsaco (llvm-readelf). The packing of arguments is read back at the offsets the cubin
declares. Bundles built by another Triton (3.6 under .venv-triton36, when present) load here up to the
launch, and a cuda/rocm bundle loads in a process where Triton cannot be imported at all. The one
test that launches needs a GPU and is skipped without one.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import uniorch
from uniorch.backends import BackendError
from uniorch.backends.binary_arch import cubin_sm, cuda_runs_on, hsaco_arch
from uniorch.backends.binary_launch import DriverLauncher
from uniorch.backends.kernel_abi import bind, parse_amdgcn, parse_ptx
from uniorch.runtime import bundle as bundle_mod
from uniorch.runtime.bundle import BundleError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# scripts/test.sh makes the Triton 3.6 venv and names its python here
T36 = os.environ.get("UNIORCH_COMPAT_PYTHON") or os.path.join(REPO, ".venv-triton36", "bin", "python")
EF_AMDGPU_MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx1100": 0x41}  # LLVM's AMDGPUUsage


class Sample(nn.Module):
    """One kernel of each template uniorch generates: a matmul (block-size constexprs, an output
    whose last stride is 1), row reductions (softmax), a pointwise chain with a broadcast."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 48)

    def forward(self, x, c):
        return torch.softmax(torch.relu(self.proj(x)), dim=-1), torch.tanh(c) * 2.0 + torch.sigmoid(c)


def _inputs():
    return torch.randn(16, 32), torch.randn(8, 24)


@functools.lru_cache(maxsize=None)
def compiled(target: str):
    torch.manual_seed(0)
    art = uniorch.compile_aot(Sample().eval(), _inputs(), target=target)
    assert art.kernels and not art.fallbacks, str(art)
    assert {"contraction", "reduction", "pointwise"} <= {k.kind for k in art.kernels}, [k.kind for k in art.kernels]
    return art


def _runtime_args(ks):
    """uniorch's runtime arguments by kind, from the launch contract: per tensor a pointer, then
    one i64 per dimension (block sizes are constexprs, compiled in)."""
    kinds = []
    for rank in ks.input_ranks + ks.output_ranks:
        kinds += ["pointer"] + ["i64"] * rank
    return kinds


# -- the ABI read from the compiler's text --------------------------------------------------------
@pytest.mark.parametrize("target", ["cuda:sm_90", "cuda:sm_80"])
def test_ptx_entry_params_are_uniorch_arguments_then_two_scratch_pointers(target):
    for k in compiled(target).kernels:
        ks, ptx = k.source, k.asm["ptx"]
        entry = re.search(rf"\.entry {ks.fn_name}\(\n(.*?)\n\)", ptx, re.S).group(1).splitlines()
        kinds = _runtime_args(ks) + ["pointer", "pointer"]
        assert len(entry) == len(kinds), (k.name, entry)
        for i, (line, kind) in enumerate(zip(entry, kinds)):  # what ptxas reads, line by line
            want = (f".param .u64 .ptr .global .align 1 {ks.fn_name}_param_{i}" if kind == "pointer"
                    else f".param .u64 {ks.fn_name}_param_{i}")
            assert line.strip().rstrip(",") == want, (k.name, i, line)
        abi = parse_ptx(ptx, ks.fn_name)
        assert [p.kind for p in abi.params] == [("pointer" if kd == "pointer" else "int") for kd in kinds]
        assert [p.size for p in abi.params] == [8] * len(kinds) and abi.size == 8 * len(kinds)
        assert abi.exact_block and abi.max_block == int(re.search(r"\.reqntid (\d+)", ptx).group(1))
    # Triton specialized nothing: every stride is an i64 argument of the TTIR function, those equal
    # to 1 at run time (the contiguous last dimensions) too; only the block sizes are constants
    contraction = next(k for k in compiled(target).kernels if k.kind == "contraction")
    ks = contraction.source
    head = re.search(rf"tt\.func public @{ks.fn_name}\((.*?)\)\s*(?:attributes|\{{)", contraction.asm["ttir"], re.S).group(1)
    assert len(re.findall(r"%\w+: i64", head)) == sum(ks.input_ranks + ks.output_ranks)
    assert ks.constexprs and len(re.findall(r"%\w+: ", head)) == len(_runtime_args(ks))


def _shapes(ks):
    """Contiguous shapes of the sample's tensors per kernel argument (any shape of the right rank
    serves the checks on argument lists)."""
    return [tuple(range(3, 3 + r)) for r in ks.input_ranks + ks.output_ranks]


def _cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return path if os.path.exists(path) else None


def _cubin_param_table(cubin: bytes, tmp_path) -> tuple[dict[int, tuple[int, int]], int, list[int], str]:
    """(ordinal -> (offset, size), parameter bank size, REQNTID, header line) from cuobjdump."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump")
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([tool, "-elf", str(path)], capture_output=True, text=True, timeout=60).stdout
    table = {int(o, 16): (int(off, 16), int(size, 16)) for o, off, size in
             re.findall(r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)", out)}
    bank = int(re.search(r"EIATTR_CBANK_PARAM_SIZE\s+Format:\s+\w+\s+Value:\s+0x([0-9a-f]+)", out).group(1), 16)
    reqntid = [int(v, 16) for v in re.search(r"EIATTR_REQNTID\s+Format:\s+\w+\s+Value:\s+((?:0x[0-9a-f]+\s*)+)",
                                             out).group(1).split()]
    header = next(line for line in out.splitlines() if "sm=" in line)
    return table, bank, reqntid, header


@pytest.mark.parametrize("target", ["cuda:sm_90", "cuda:sm_89"])
def test_ptx_layout_is_the_cubins_own_parameter_table(target, tmp_path):
    """The offsets and sizes derived from the PTX are the ones ptxas recorded in the cubin."""
    for k in compiled(target).kernels:
        launcher = DriverLauncher(k.compiled, "cuda")
        table, bank, reqntid, header = _cubin_param_table(k.asm["cubin"], tmp_path)
        assert {i: (p.offset, p.size) for i, p in enumerate(launcher.abi.params)} == table, k.name
        assert launcher.binding.size == bank
        assert launcher.block == reqntid[0] * reqntid[1] * reqntid[2]
        assert re.search(rf"sm={launcher.arch.removeprefix('sm_')}\b", header), (header, launcher.arch)


def _readelf_notes(hsaco: bytes, tmp_path) -> str:
    tool = shutil.which("llvm-readelf")
    if tool is None:
        pytest.skip("no llvm-readelf")
    path = tmp_path / "k.hsaco"
    path.write_bytes(hsaco)
    out = subprocess.run([tool, "--notes", str(path)], capture_output=True, text=True, timeout=60).stdout
    if "amdhsa.kernels:" not in out:
        pytest.skip("this llvm-readelf does not print AMDGPU metadata notes")
    return out


@pytest.mark.parametrize("target", ["rocm:gfx942", "rocm:gfx1100"])
def test_amdgcn_args_are_uniorch_arguments_and_the_hsacos_note(target, tmp_path):
    for k in compiled(target).kernels:
        ks = k.source
        abi = parse_amdgcn(k.asm["amdgcn"], ks.fn_name)
        kinds = _runtime_args(ks) + ["pointer", "pointer"]
        assert [p.kind for p in abi.params] == [("pointer" if kd == "pointer" else "value") for kd in kinds], k.name
        assert [(p.offset, p.size) for p in abi.params] == [(8 * i, 8) for i in range(len(kinds))]
        seg = int(re.search(r"\.kernarg_segment_size:\s+(\d+)", k.asm["amdgcn"]).group(1))
        assert abi.size == seg
        # the same arguments in the code object's own metadata note
        assert parse_amdgcn(_readelf_notes(k.asm["hsaco"], tmp_path), ks.fn_name) == abi
        launcher = DriverLauncher(k.compiled, "rocm")
        want = int(re.search(r"\.max_flat_workgroup_size:\s+(\d+)", k.asm["amdgcn"]).group(1))
        assert launcher.block == want, (launcher.block, want)


# -- packing: read back at the offsets the binary declares ---------------------------------------
@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_arguments_are_packed_where_the_binary_reads_them(target, tmp_path):
    vendor = target.split(":")[0]
    for k in compiled(target).kernels:
        ks = k.source
        launcher = DriverLauncher(k.compiled, vendor)
        ts = [torch.empty(s) for s in _shapes(ks)]
        ts[0] = torch.empty(tuple(reversed(_shapes(ks)[0]))).mT if len(_shapes(ks)[0]) == 2 else ts[0]
        inputs, outputs = ts[: len(ks.input_ranks)], ts[len(ks.input_ranks):]
        scratch, profile = 0x7F00_0000_1000, 0
        storage, params = launcher.arguments(inputs, outputs, {"global_scratch": scratch, "profile_scratch": profile})
        want = []
        for t in ts:
            want += [t.data_ptr(), *t.stride()]
        want += [scratch, profile]
        if vendor == "cuda":
            layout, _, _, _ = _cubin_param_table(k.asm["cubin"], tmp_path)
        else:  # the code object's own metadata note: .offset and .size of each argument, in order
            pairs = re.findall(r"\.offset:\s+(\d+)\s+\.size:\s+(\d+)", _readelf_notes(k.asm["hsaco"], tmp_path))
            layout = {i: (int(o), int(n)) for i, (o, n) in enumerate(pairs)}
            assert len(layout) == len(want), (k.name, pairs)
        base = ctypes.addressof(storage)
        got = []
        for i in range(len(want)):
            offset, size = layout[i]
            assert params[i] == base + offset, (k.name, i)
            got.append(int.from_bytes(ctypes.string_at(params[i], size), "little", signed=True))
        assert got == want, k.name


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_a_bound_launch_passes_the_arguments_the_usual_launch_packs(target, monkeypatch):
    """DriverLauncher.bind (runtime/bound_launch.py: a static plan's later calls): the form, the
    module and the buffer's layout chosen once, each call's tensor addresses filled in; the
    driver gets what `arguments` packs for the same tensors, on the stream the plan looked up."""
    vendor = target.split(":")[0]

    class Driver:
        """Reads the argument buffer while the launch is under way, as the vendor's driver does."""

        def __init__(self):
            self.calls, self.binding = [], None

        def launch(self, fn, grid, block, shared, stream, params, **options):
            b = self.binding
            data = ctypes.string_at(params[0] - b.offsets[0], b.size)
            self.calls.append((fn, grid, block, shared, stream, data, options))

    for k in compiled(target).kernels:
        ks = k.source
        driver = Driver()
        launcher = DriverLauncher(k.compiled, vendor, driver=driver)
        driver.binding = launcher.binding
        monkeypatch.setattr(DriverLauncher, "_device", lambda self, tensors: 0)
        monkeypatch.setattr(DriverLauncher, "_function", lambda self, index: f"fn{index}")

        def tensors():
            ts = [torch.empty(s) for s in _shapes(ks)]
            return ts[: len(ks.input_ranks)], ts[len(ks.input_ranks):]

        bound = launcher.bind(*tensors())
        assert bound is not None, k.name
        for stream in (11, 12):
            inputs, outputs = tensors()  # new addresses, the same strides
            bound(stream, *inputs, *outputs)
            fn, grid, block, shared, got_stream, data, options = driver.calls[-1]
            assert (fn, grid, block, shared, got_stream) == ("fn0", launcher.grid, launcher.block, launcher.shared,
                                                              stream), k.name
            storage, want = launcher.arguments(inputs, outputs, {"global_scratch": 0, "profile_scratch": 0})
            b = launcher.binding
            assert data == ctypes.string_at(want[0] - b.offsets[0], b.size), k.name
        assert launcher.launches == 2


@functools.lru_cache(maxsize=None)
def _mixed_width_kernel():
    """A Triton kernel with i32, i64 and pointer arguments interleaved, compiled for sm_90 by
    Triton itself (uniorch's own kernels take only pointers and i64 strides)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"x_ptr": "*fp32", "a": "i32", "b": "i64", "c": "i32", "y_ptr": "*fp32", "BLOCK": "constexpr"}
    src = ASTSource(_jit_scale_rows(), signature=sig, constexprs={"BLOCK": 64})
    return sig, triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": True})


def _jit_scale_rows():
    import triton
    import triton.language as tl

    @triton.jit
    def scale_rows(x_ptr, a, b, c, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < a
        x = tl.load(x_ptr + offs * b, mask=mask)
        tl.store(y_ptr + offs, x * c, mask=mask)

    return scale_rows


class _Contract:
    """A launch contract for the mixed-width kernel (what `KernelSource` states for uniorch's)."""

    def __init__(self, sig):
        self.sig, self.constexprs = sig, {"BLOCK": 64}

    def signature(self):
        return dict(self.sig)

    def arg_names(self):
        return [n for n in self.sig if n != "BLOCK"]


def test_mixed_width_parameters_pack_where_the_cubin_reads_them(tmp_path):
    """i32 parameters take 4 bytes and the next i64 or pointer its 8-byte alignment: the layout
    parsed from PTX is the cubin's own table, and packed values read back from it; an i64 value
    past 32 bits is an error naming the argument."""
    sig, ck = _mixed_width_kernel()
    name = ck.metadata.name
    ptx = ck.asm["ptx"]
    assert re.search(rf"\.param \.u32 {name}_param_1,", ptx) and re.search(rf"\.param \.u64 {name}_param_2,", ptx)
    abi = parse_ptx(ptx, name)
    table, bank, _, _ = _cubin_param_table(ck.asm["cubin"], tmp_path)
    assert {i: (p.offset, p.size) for i, p in enumerate(abi.params)} == table
    metadata = {"triton_version": __import__("triton").__version__}
    binding = bind(_Contract(sig), metadata, abi)
    assert binding.size == bank
    values = binding.values([0x7000_0000_0040, 1000, 3, -2, 0x7000_0000_0080], {"global_scratch": 0x6000_0000_0000,
                                                                                   "profile_scratch": 0})
    data = binding.pack(values)
    signed = {"i32", "i64"}
    for slot, value in zip(binding.slots, values):
        offset, size = table[binding.slots.index(slot)]
        assert int.from_bytes(data[offset:offset + size], "little", signed=slot.type in signed) == value, slot.name
    bad = list(values)
    bad[1] = 2 ** 40
    with pytest.raises(BackendError, match=rf"kernel {name}: an argument does not fit its parameter \(a as 'i'\)"):
        binding.pack(bad)


# -- clear errors ---------------------------------------------------------------------------------
def test_mismatched_argument_lists_name_the_kernel_and_both_lists():
    from dataclasses import replace

    k = next(k for k in compiled("cuda:sm_90").kernels if k.kind == "contraction")
    ks, abi = k.source, parse_ptx(k.asm["ptx"], k.source.fn_name)
    fewer = replace(ks, input_ranks=[r - 1 if i == 0 else r for i, r in enumerate(ks.input_ranks)])
    with pytest.raises(BackendError, match=rf"kernel {ks.fn_name}: the binary declares {len(abi.params)} parameters "
                                           rf"but uniorch passes {len(abi.params) - 1}; expected \[in0_ptr:pointer/8B"):
        bind(fewer, k.metadata, abi)
    # the same count, a pointer where the binary has a stride
    moved = replace(ks, input_ranks=[ks.input_ranks[0] - 1, ks.input_ranks[1] + 1] + ks.input_ranks[2:])
    with pytest.raises(BackendError, match=rf"parameter {ks.fn_name}_param_\d+ of the binary is int/8B, but uniorch "
                                           rf"passes in1_ptr \(\*fp32\) there"):
        bind(moved, k.metadata, abi)
    with pytest.raises(BackendError, match="compiled by Triton 3.4.1, older than Triton 3.6"):
        bind(ks, dict(k.metadata, triton_version="3.4.1"), abi)
    with pytest.raises(BackendError, match="names no Triton version"):
        bind(ks, {kk: v for kk, v in k.metadata.items() if kk != "triton_version"}, abi)
    launcher = DriverLauncher(k.compiled, "cuda")
    with pytest.raises(BackendError, match=rf"kernel {ks.fn_name}: launched with 3 arguments, its launch contract has"):
        launcher.binding.values([1, 2, 3], {"global_scratch": 0, "profile_scratch": 0})
    with pytest.raises(BackendError, match=rf"kernel {ks.fn_name}: a tensor argument is on cpu, not on the GPU"):
        launcher(*([torch.empty(s) for s in _shapes(ks)[:len(ks.input_ranks)]],
                   [torch.empty(s) for s in _shapes(ks)[len(ks.input_ranks):]]))
    block = launcher.block
    with pytest.raises(BackendError, match=rf"launching {2 * block} threads per block \(num_warps x warp size\), but "
                                           rf"its binary was compiled for exactly {block}"):
        DriverLauncher(type(k.compiled)(k.name, k.compiled.target, ks, k.asm,
                                        dict(k.metadata, num_warps=2 * k.metadata["num_warps"])), "cuda")


def test_missing_stages_are_clear_errors():
    k = compiled("cuda:sm_90").kernels[0]
    ck = k.compiled
    for stage in ("cubin", "ptx"):
        partial = type(ck)(ck.name, ck.target, ck.source, {s: v for s, v in ck.asm.items() if s != stage}, ck.metadata)
        with pytest.raises(BackendError, match=f"compiled without its '{stage}' stage, which the driver launcher needs"):
            DriverLauncher(partial, "cuda")


@pytest.mark.parametrize("target", ["cuda:sm_80", "cuda:sm_89", "cuda:sm_90"])
def test_cubin_arch_is_read_from_the_binary(target):
    arch = target.split(":")[1]
    for k in compiled(target).kernels:
        ptx_target = re.search(r"^\.target (sm_\w+)", k.asm["ptx"], re.M).group(1)
        assert f"sm_{cubin_sm(k.asm['cubin'])}" == arch
        launcher = DriverLauncher(k.compiled, "cuda")
        assert launcher.arch == ptx_target  # sm_90a for Hopper: wgmma needs the arch-specific target
        launcher.check_device(arch)


def test_arch_mismatch_is_a_clear_error():
    sm90 = DriverLauncher(compiled("cuda:sm_90").kernels[0].compiled, "cuda")
    with pytest.raises(BackendError, match=r"binary is for sm_90a, which cannot run on the device present \(sm_80\)"):
        sm90.check_device("sm_80")
    with pytest.raises(BackendError, match=r"sm_90a, which cannot run on the device present \(sm_100\)"):
        sm90.check_device("sm_100")
    sm80 = DriverLauncher(compiled("cuda:sm_80").kernels[0].compiled, "cuda")
    sm80.check_device("sm_86")  # NVIDIA's rule: same major, a minor at least the cubin's
    with pytest.raises(BackendError, match=r"binary is for sm_80, which cannot run on the device present \(sm_90\)"):
        sm80.check_device("sm_90")
    sm89 = DriverLauncher(compiled("cuda:sm_89").kernels[0].compiled, "cuda")
    with pytest.raises(BackendError, match=r"sm_89, which cannot run on the device present \(sm_86\)"):
        sm89.check_device("sm_86")
    assert cuda_runs_on("sm_80", "sm_89") and cuda_runs_on("sm_90a", "sm_90") and cuda_runs_on("sm_100", "sm_103")
    assert not cuda_runs_on("sm_100a", "sm_103") and not cuda_runs_on("sm_90", "sm_100")
    gfx = DriverLauncher(compiled("rocm:gfx942").kernels[0].compiled, "rocm")
    gfx.check_device("gfx942:sramecc+:xnack-")
    with pytest.raises(BackendError, match=r"binary is for gfx942, which cannot run on the device present \(gfx90a\)"):
        gfx.check_device("gfx90a:sramecc+:xnack-")


@pytest.mark.parametrize("target", ["rocm:gfx90a", "rocm:gfx942", "rocm:gfx1100"])
def test_hsaco_arch_is_read_from_the_binary(target):
    arch = target.split(":")[1]
    for k in compiled(target).kernels:
        assert hsaco_arch(k.asm["hsaco"]) == arch
        assert re.search(rf'\.amdgcn_target "[^"]*-{arch}"', k.asm["amdgcn"])
        flags = int.from_bytes(k.asm["hsaco"][48:52], "little")
        assert flags & 0xFF == EF_AMDGPU_MACH[arch]


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


def test_a_missing_driver_library_is_a_clear_error():
    from uniorch.backends import cuda_driver, hip_driver

    if _loadable("libcuda.so.1"):
        pytest.skip("this machine has the NVIDIA driver library")
    with pytest.raises(BackendError, match=r"cannot load libcuda\.so\.1, the NVIDIA driver library"):
        cuda_driver.driver()
    launcher = DriverLauncher(compiled("cuda:sm_90").kernels[0].compiled, "cuda")
    with pytest.raises(BackendError, match=r"cannot load libcuda\.so\.1"):
        launcher.driver()
    if not _loadable("libamdhip64.so"):
        with pytest.raises(BackendError, match=r"cannot load libamdhip64\.so, the HIP runtime library"):
            hip_driver.driver()


def test_ctypes_structures_match_cuda_h(tmp_path):
    """cuLaunchKernelEx's structures and the enum values, as the compiler lays them out from the
    cuda.h Triton ships (no libcuda needed)."""
    from uniorch.backends import cuda_driver as cd

    cc = shutil.which("cc") or shutil.which("gcc")
    import triton

    include = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "include")
    if cc is None or not os.path.exists(os.path.join(include, "cuda.h")):
        pytest.skip("no C compiler or cuda.h")
    names = ["CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
             "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
             "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "CU_LAUNCH_ATTRIBUTE_COOPERATIVE",
             "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", "CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE",
             "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION", "CU_CLUSTER_SCHEDULING_POLICY_SPREAD"]
    fields = ["gridDimX", "blockDimX", "sharedMemBytes", "hStream", "attrs", "numAttrs"]
    src = "#include <stdio.h>\n#include <stddef.h>\n#include <cuda.h>\nint main(void) {\n"
    src += "".join(f'  printf("{n} %d\\n", (int){n});\n' for n in names)
    src += "".join(f'  printf("config.{f} %zu\\n", offsetof(CUlaunchConfig, {f}));\n' for f in fields)
    src += ('  printf("sizeof.config %zu\\n", sizeof(CUlaunchConfig));\n'
            '  printf("sizeof.attr %zu\\n", sizeof(CUlaunchAttribute));\n'
            '  printf("attr.value %zu\\n", offsetof(CUlaunchAttribute, value));\n'
            '  printf("value.clusterDim %zu\\n", offsetof(CUlaunchAttributeValue, clusterDim));\n  return 0;\n}\n')
    (tmp_path / "layout.c").write_text(src)
    build = subprocess.run([cc, "-I", include, str(tmp_path / "layout.c"), "-o", str(tmp_path / "layout")],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    out = dict(line.split() for line in subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True,
                                                       timeout=60).stdout.splitlines())
    for n in names:
        assert int(out[n]) == getattr(cd, n), n
    for f in fields:
        assert int(out[f"config.{f}"]) == getattr(cd.LaunchConfig, f).offset, f
    assert int(out["sizeof.config"]) == ctypes.sizeof(cd.LaunchConfig)
    assert int(out["sizeof.attr"]) == ctypes.sizeof(cd.LaunchAttribute)
    assert int(out["attr.value"]) == cd.LaunchAttribute.value.offset
    assert int(out["value.clusterDim"]) == cd.LaunchAttributeValue.clusterDim.offset


def test_launch_config_for_clusters_cooperative_and_pdl():
    from uniorch.backends import cuda_driver as cd

    config, attrs = cd.launch_config((3, 2, 1), 128, 1024, 0, num_ctas=2, cooperative=True, pdl=True)
    assert (config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.sharedMemBytes) == (6, 2, 1, 128,
                                                                                                           1024)
    ids = [config.attrs[i].id for i in range(config.numAttrs)]
    assert ids == [cd.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, cd.CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                   cd.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, cd.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE]
    cluster = config.attrs[2].value.clusterDim
    assert (cluster.x, cluster.y, cluster.z) == (2, 1, 1)


# -- bundles: versions, no Triton, another Triton -------------------------------------------------
def _pretend_device(monkeypatch, target: str):
    """The device of `target` reported present (nothing launches: loading stops short of the driver)."""
    from uniorch.targets import parse_target

    cls = type(parse_target(target).backend)
    monkeypatch.setattr(cls, "is_available", classmethod(lambda c: True))
    monkeypatch.setattr(cls, "present_arch", classmethod(lambda c: target.split(":")[1]))


def _launchers(loaded) -> list:
    return [k.fn for region in loaded.program.children() if hasattr(region, "plan")
            for k in region.plan.kernels.values()]


def _rewrite(path, rel: str, edit) -> None:
    """Edits a bundle file and its checksum in the manifest, as another build would have written it."""
    import hashlib

    full = os.path.join(path, rel)
    with open(full) as f:
        data = edit(json.load(f))
    text = json.dumps(data, indent=1)
    with open(full, "w") as f:
        f.write(text)
    if rel != "manifest.json":
        _rewrite(path, "manifest.json", lambda m: {**m, "files": {**m["files"], rel: hashlib.sha256(
            text.encode()).hexdigest()}})


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_bundle_from_another_triton_passes_the_version_check(target, tmp_path, monkeypatch):
    art = compiled(target)
    path = str(tmp_path / "b")
    art.save(path)
    _rewrite(path, "manifest.json", lambda m: {**m, "versions": {**m["versions"], "triton": "3.6.0"}})
    for k in json.load(open(os.path.join(path, "manifest.json")))["kernels"]:
        _rewrite(path, k["info"], lambda info: {**info, "metadata": {**info["metadata"], "triton_version": "3.6.0"}})
    manifest = bundle_mod.read_manifest(path)  # no BundleError about triton
    assert manifest["versions"]["triton"] == "3.6.0"
    if not parse_target_available(target):
        with pytest.raises(BackendError, match="cannot run here"):
            uniorch.load(path)
    _pretend_device(monkeypatch, target)
    loaded = uniorch.load(path, model=Sample())
    assert _launchers(loaded) and all(isinstance(fn, DriverLauncher) for fn in _launchers(loaded))


def parse_target_available(target: str) -> bool:
    from uniorch.targets import parse_target

    return parse_target(target).backend.is_available()


def test_interpret_bundles_need_a_supported_triton(tmp_path, monkeypatch):
    path = str(tmp_path / "i")
    uniorch.compile_aot(lambda x: torch.relu(x) * 2, (torch.randn(4, 8),), target="interpret").save(path)
    _rewrite(path, "manifest.json", lambda m: {**m, "versions": {**m["versions"], "triton": "3.6.0"}})
    assert uniorch.load(path) is not None  # any supported Triton runs the source
    monkeypatch.setattr(bundle_mod, "_triton_version", lambda: None)
    with pytest.raises(BundleError, match="needs triton 3.6 to 3.9; triton is not installed here"):
        uniorch.load(path)
    monkeypatch.setattr(bundle_mod, "_triton_version", lambda: "3.10.0")
    with pytest.raises(BundleError, match="needs triton 3.6 to 3.9; this process has triton 3.10.0"):
        uniorch.load(path)


NO_TRITON = r"""
import sys
sys.modules["triton"] = None  # `import triton` raises ImportError from here on
import json
import uniorch
from uniorch.backends import BackendError
from uniorch.targets import parse_target
report = {}
for name, path, target in json.loads(sys.argv[1]):
    try:
        uniorch.load(path)
        report[name] = "loaded"
    except BackendError as err:
        report[name] = "BackendError: " + str(err)
    except Exception as err:
        report[name] = type(err).__name__ + ": " + str(err)
    # the same bundle with its device reported present: the load runs to its end (no launch)
    cls = type(parse_target(target).backend)
    cls.is_available = classmethod(lambda c: True)
    cls.present_arch = classmethod(lambda c, a=target.split(":")[1]: a)
    fn = uniorch.load(path)
    report[name + "_launchers"] = sorted({type(k.fn).__name__ for r in fn.program.children() if hasattr(r, "plan")
                                          for k in r.plan.kernels.values()})
report["triton_modules"] = sorted(m for m, v in sys.modules.items() if m.split(".")[0] == "triton" and v is not None)
print(json.dumps(report))
"""


def test_gpu_bundles_load_without_triton(tmp_path):
    cases = []
    for target in ("cuda:sm_90", "rocm:gfx942"):
        path = str(tmp_path / target.replace(":", "_"))
        uniorch.compile_aot(lambda x, y: torch.relu(x) @ y, (torch.randn(8, 16), torch.randn(16, 4)),
                            target=target).save(path)
        cases.append([target, path, target])
    proc = subprocess.run([sys.executable, "-c", NO_TRITON, json.dumps(cases)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for target, _, _ in cases:
        if not parse_target_available(target):
            assert report[target].startswith("BackendError: ") and "cannot run here" in report[target], report
        assert report[target + "_launchers"] == ["DriverLauncher"], report
    assert report["triton_modules"] == [], report


def _t36_ready() -> bool:
    if not os.path.exists(T36):
        return False
    proc = subprocess.run([T36, "-c", "import triton, uniorch; print(triton.__version__)"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    return proc.returncode == 0 and proc.stdout.strip().startswith("3.6")


BUILD = r"""
import sys, torch, uniorch
sys.path.insert(0, sys.argv[1])
from test_driver_launch import Sample, _inputs
torch.manual_seed(0)
for target, path in zip(sys.argv[2::2], sys.argv[3::2]):
    art = uniorch.compile_aot(Sample().eval(), _inputs(), target=target)
    assert art.kernels and not art.fallbacks, str(art)
    art.save(path)
"""


@pytest.mark.skipif(not os.path.exists(T36), reason="no Triton 3.6 venv (UNIORCH_COMPAT_PYTHON, or .venv-triton36 beside .venv)")
def test_bundles_built_by_triton_36_load_under_this_triton(tmp_path, monkeypatch):
    """Bundles Triton 3.6 built (ptxas 12.x cubins: ELF ABI 7) pass the version check and bind
    here, under another Triton: the ABI is read from their own PTX / AMDGCN."""
    if not _t36_ready():
        pytest.skip(".venv-triton36 cannot import triton 3.6 and uniorch")
    import triton

    if triton.__version__.startswith("3.6"):
        pytest.skip("this process runs triton 3.6 itself: no other Triton for its bundles to load under")
    targets = ["cuda:sm_90", "cuda:sm_80", "rocm:gfx942"]
    paths = [str(tmp_path / t.replace(":", "_")) for t in targets]
    args = [a for pair in zip(targets, paths) for a in pair]
    proc = subprocess.run([T36, "-c", BUILD, os.path.join(REPO, "tests"), *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path / "cache36")))
    assert proc.returncode == 0, proc.stderr[-4000:]
    for target, path in zip(targets, paths):
        manifest = bundle_mod.read_manifest(path)
        assert manifest["versions"]["triton"].startswith("3.6") and triton.__version__ != manifest["versions"]["triton"]
        with monkeypatch.context() as m:
            _pretend_device(m, target)
            loaded = uniorch.load(path, model=Sample())
        launchers = _launchers(loaded)
        assert launchers and all(isinstance(fn, DriverLauncher) for fn in launchers)
        for fn in launchers:
            assert len(fn.binding.slots) == len(_runtime_args(fn.kernel)) + 2
        if target.startswith("cuda"):
            cubin = open(next(os.path.join(path, k["stages"]["cubin"]) for k in manifest["kernels"]), "rb").read()
            assert cubin[8] in (7, 8)  # either ELF layout of the SM number is read
            assert f"sm_{cubin_sm(cubin)}" == target.split(":")[1]


CHILD_36 = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import triton, uniorch
from test_driver_launch import Sample
from uniorch.targets import parse_target
out = {"triton": triton.__version__}
for target, path in zip(sys.argv[2::2], sys.argv[3::2]):
    cls = type(parse_target(target).backend)
    cls.is_available = classmethod(lambda c: True)
    cls.present_arch = classmethod(lambda c, a=target.split(":")[1]: a)
    fn = uniorch.load(path, model=Sample())
    out[target] = sorted({type(k.fn).__name__ for r in fn.program.children() if hasattr(r, "plan")
                          for k in r.plan.kernels.values()})
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.exists(T36), reason="no Triton 3.6 venv (UNIORCH_COMPAT_PYTHON, or .venv-triton36 beside .venv)")
def test_bundles_built_here_load_under_triton_36(tmp_path):
    if not _t36_ready():
        pytest.skip(".venv-triton36 cannot import triton 3.6 and uniorch")
    targets = ["cuda:sm_90", "rocm:gfx942"]
    args = []
    for target in targets:
        path = str(tmp_path / target.replace(":", "_"))
        compiled(target).save(path)
        args += [target, path]
    proc = subprocess.run([T36, "-c", CHILD_36, os.path.join(REPO, "tests"), *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["triton"].startswith("3.6")
    assert all(out[t] == ["DriverLauncher"] for t in targets), out


# -- on a GPU -------------------------------------------------------------------------------------
GPU_CHILD = r"""
import sys
sys.modules["triton"] = None
import json, torch, uniorch
path, inputs, out = sys.argv[1:4]
fn = uniorch.load(path)
args = [a.cuda() for a in torch.load(inputs)]
with torch.no_grad():
    got = fn(*args)
torch.cuda.synchronize()
torch.save([g.cpu() for g in got], out)
print(json.dumps({"fallbacks": fn.fallbacks, "triton": [m for m, v in sys.modules.items() if m.split(".")[0] == "triton" and v is not None]}))
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_bundle_runs_through_the_driver_and_matches_eager(tmp_path):
    """Compiled for the GPU present, saved, loaded and run (in this process, and in one where Triton
    cannot be imported): every kernel launches through the driver and the results match eager."""
    from uniorch.targets import parse_target

    vendor = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    backend_cls = type(parse_target(vendor).backend)
    target = f"{vendor}:{backend_cls.present_arch()}"
    torch.manual_seed(0)
    model = Sample().eval()
    x, c = (torch.randn(16, 32), torch.randn(8, 24))
    art = uniorch.compile_aot(model, (x, c), target=target)
    assert not art.fallbacks, str(art)
    path = str(tmp_path / "bundle")
    art.save(path)
    with torch.no_grad():
        want = model(x, c)
    loaded = uniorch.load(path)
    assert all(isinstance(fn, DriverLauncher) for fn in _launchers(loaded))
    with torch.no_grad():
        got = loaded(x.cuda(), c.cuda())
    torch.cuda.synchronize()
    assert not loaded.fallbacks, loaded.fallbacks  # a failed launch would have run eagerly
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=2e-3, atol=2e-3)
    torch.save([x, c], str(tmp_path / "in.pt"))
    proc = subprocess.run([sys.executable, "-c", GPU_CHILD, path, str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"fallbacks": [], "triton": []}, report
    for g, w in zip(torch.load(str(tmp_path / "out.pt")), want):
        torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-3)
