"""AOT kernels specialized as Triton's JIT specializes them (backends/specialization.py).

A kernel compiled ahead of time for any argument values gets scalar loads and 4-byte `cp.async`;
the JIT compiles the same source for its launch's arguments (aligned pointers, innermost strides 1)
and gets vector loads. `compile_aot` now compiles both forms, and the driver launcher picks the
specialized one when a launch's arguments have its specialization. Checked here: the keys agree
with Triton's own specialization, the recorded specialization is what Triton computes for the
plan's real arguments, the specialized PTX/AMDGCN has the wide memory operations the generic lacks
(and passes ptxas, since the cubin is built), the launcher's choice, and the bundle round trip.
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from torch import nn

import uniorch
from uniorch.backends.binary_launch import DriverLauncher
from uniorch.backends.sdk import tensor_args
from uniorch.backends.specialization import accepts, arg_key, keys


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 512)
        self.norm = nn.LayerNorm(512)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.lin(x)))


def _args():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(512, 256),)


_ART: dict = {}


def _compiled(target: str):
    if target not in _ART:
        model, args = _args()
        _ART[target] = uniorch.compile_aot(model, args, target=target)
    return _ART[target]


class _Ptr:
    """What Triton's specializer reads off a tensor argument: its address and dtype."""

    def __init__(self, ptr: int):
        self.ptr, self.dtype = ptr, torch.float32

    def data_ptr(self) -> int:
        return self.ptr


INTS = [-2 ** 40, -32, -17, -16, -1, 0, 1, 2, 15, 16, 17, 48, 2 ** 31 - 16, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 16,
        2 ** 40, 2 ** 63 - 16, 2 ** 63, 2 ** 63 + 16]
PTRS = [0, 4, 8, 12, 16, 0x7F00_0000_1000, 0x7F00_0000_1004]


def _triton_key(a) -> str:
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend

    ty, attr = native_specialize_impl(CUDABackend, a, False, True, True)
    if ty == "constexpr":
        return str(attr)
    return ("*" if ty.startswith("*") else ty) + attr


def test_keys_agree_with_tritons_specialization():
    for a in INTS:
        assert arg_key(a) == _triton_key(a), a
    for p in PTRS:
        assert arg_key(_Ptr(p)) == _triton_key(_Ptr(p)), hex(p)
    x = torch.empty(8, 8)
    for t in (x, x[1:], x[:, 1:], x.T, x[2:]):
        assert arg_key(t) == _triton_key(t)


def _plan_args(art, target):
    """Triton's own keys for the arguments every kernel gets when the region's plan runs on real
    (CPU) tensors of the example's shapes."""
    from uniorch.runtime.compiler import _launching

    region = art.program.regions[0]
    seen = {}

    def launch(kernel, ins, outs, sizes=None):
        seen[kernel.name] = [_triton_key(a) for a in tensor_args(kernel.source, ins, outs, sizes)]

    inputs = [torch.randn(tuple(s), dtype=d) for s, d in region.input_specs]
    with _launching(region.plan, launch), torch.no_grad():
        region.plan(inputs)
    return seen


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_recorded_specialization_is_tritons_for_the_real_arguments(target):
    art = _compiled(target)
    want = _plan_args(art, target)
    assert art.kernels and all(k.specialized is not None for k in art.kernels), str(art)
    for k in art.kernels:
        assert k.specialized.source.specialization == want[k.func], k.name
        assert k.source.specialization == []  # the generic form: any argument values


def _ops(text: str, pattern: str) -> collections.Counter:
    return collections.Counter(re.findall(pattern, text))


def test_specialized_ptx_has_the_jits_wide_memory_operations():
    art = _compiled("cuda:sm_90")
    kinds = {k.kind: k for k in art.kernels}
    mm, norm = kinds["contraction"], kinds["reduction"]
    assert "cubin" in mm.specialized.asm and "cubin" in norm.specialized.asm  # ptxas accepted both
    # the matmul's tiles: 16-byte asynchronous copies, where the generic form copies 4 bytes at a time
    g = _ops(mm.asm["ptx"], r"cp\.async\.(c[ag])\.shared\.global\S* \[[^]]+\], \[[^]]+\], (0x[0-9a-f]+|\d+)")
    s = _ops(mm.specialized.asm["ptx"], r"cp\.async\.(c[ag])\.shared\.global\S* \[[^]]+\], \[[^]]+\], (0x[0-9a-f]+|\d+)")
    assert g and set(g) == {("ca", "0x4")}, g
    assert s and set(s) == {("cg", "0x10")}, s
    assert sum(s.values()) * 4 == sum(g.values())
    # the norm's rows: vector loads and stores, where the generic form has scalar ones only
    for k, want in ((norm.asm, 0), (norm.specialized.asm, 1)):
        v4 = len(re.findall(r"ld\.global\S*\.v4\.", k["ptx"])) + len(re.findall(r"st\.global\S*\.v4\.", k["ptx"]))
        assert (v4 > 0) == bool(want), k["ptx"][:200]


def test_specialized_amdgcn_loads_16_bytes():
    art = _compiled("rocm:gfx942")
    norm = next(k for k in art.kernels if k.kind == "reduction")
    assert "hsaco" in norm.specialized.asm
    wide = r"global_load_dwordx4|buffer_load_dwordx4"
    assert re.search(wide, norm.specialized.asm["amdgcn"])
    assert not re.search(wide, norm.asm["amdgcn"])


def test_launcher_picks_the_specialized_kernel_only_for_matching_arguments():
    art = _compiled("cuda:sm_90")
    for k in art.kernels:
        ks = k.source
        launcher = DriverLauncher(k.compiled, "cuda", specialized=k.specialized)
        region = art.program.regions[0]
        shapes = {}

        def launch(kernel, ins, outs, sizes=None):
            shapes[kernel.name] = [t.clone() for t in list(ins) + list(outs)]

        from uniorch.runtime.compiler import _launching

        with _launching(region.plan, launch), torch.no_grad():
            region.plan([torch.randn(tuple(s), dtype=d) for s, d in region.input_specs])
        ts = shapes[k.func]
        n_in = len(ks.input_ranks)
        assert launcher.pick(ts[:n_in], ts[n_in:]) is launcher.specialized, k.name
        # the specialized binary's parameters: the runtime arguments not compiled in, then Triton's two
        storage, params = launcher.specialized.arguments(ts[:n_in], ts[n_in:], {"global_scratch": 0,
                                                                                  "profile_scratch": 0})
        kept = [a for a, key in zip(keys(tensor_args(ks, ts[:n_in], ts[n_in:])), k.specialized.source.specialization)
                if key != "1"]
        assert len(params) == len(kept) + 2
        # an input 4 bytes off its alignment, or read with another stride: the generic kernel
        off = list(ts)
        base = torch.empty(off[0].numel() + 1, dtype=off[0].dtype)
        off[0] = base[1:].view(off[0].shape)
        assert launcher.pick(off[:n_in], off[n_in:]) is launcher, k.name
        if ts[0].dim() == 2 and ts[0].shape[0] == ts[0].shape[1]:
            t = list(ts)
            t[0] = ts[0].T
            assert launcher.pick(t[:n_in], t[n_in:]) is launcher


def test_accepts_requires_the_exact_specialization():
    spec = ["*D", "i32D", "1", "i32"]
    assert accepts(spec, [0x1000, 512, 1, 7])
    assert not accepts(spec, [0x1004, 512, 1, 7])   # unaligned pointer
    assert not accepts(spec, [0x1000, 512, 2, 7])   # a stride compiled in as 1
    assert not accepts(spec, [0x1000, 513, 1, 7])   # no longer divisible by 16
    assert not accepts(spec, [0x1000, 512, 1, 16])  # now divisible: Triton's JIT would compile again
    assert not accepts(spec, [0x1000, 2 ** 31 + 16, 1, 7])  # past i32
    assert not accepts(spec, [0x1000, 512, 1])


LOAD = r"""
import sys, json
sys.modules["triton"] = None  # a bundle loads and picks its kernels without Triton
import torch, uniorch
from uniorch.targets import parse_target
path, target = sys.argv[1], sys.argv[2]
cls = type(parse_target(target).backend)
cls.is_available = classmethod(lambda c: True)
cls.present_arch = classmethod(lambda c, a=target.split(":")[1]: a)
fn = uniorch.load(path)
out = []
for r in fn.program.children():
    if hasattr(r, "plan"):
        for k in r.plan.kernels.values():
            out.append([k.name, type(k.fn).__name__, k.fn.specialized is not None,
                        k.fn.specialized.kernel.specialization if k.fn.specialized else None])
print(json.dumps(out))
"""


def _block_fn(x, w, b):
    return torch.nn.functional.layer_norm(torch.nn.functional.gelu(x @ w.T + b), (w.shape[0],))


def test_bundle_keeps_both_forms_and_loads_them(tmp_path):
    # weights as inputs: a bundle's saved weights would load onto a GPU this machine lacks
    torch.manual_seed(0)
    art = uniorch.compile_aot(_block_fn, (torch.randn(512, 256), torch.randn(512, 256), torch.randn(512)),
                              target="cuda:sm_90")
    path = str(tmp_path / "bundle")
    art.save(path)
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    for e in manifest["kernels"]:
        assert "specialized" in e and "cubin" in e["specialized"]["binary"], e
        # the specialized form keeps what its launch reads: the bundle carries no second set of IRs
        assert set(e["specialized"]["stages"]) == {"triton", "ptx", "cubin"}, e["specialized"]["stages"]
        for rel in list(e["specialized"]["stages"].values()) + [e["specialized"]["info"]]:
            assert rel in manifest["files"]
    proc = subprocess.run([sys.executable, "-c", LOAD, path, "cuda:sm_90"], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    by_func = {k.func: k for k in art.kernels}
    assert sorted(n for n, *_ in loaded) == sorted(by_func)
    for name, kind, has, spec in loaded:
        assert kind == "DriverLauncher" and has
        assert spec == by_func[name].specialized.source.specialization


def test_interpret_and_cpu_targets_compile_one_form():
    model, args = _args()
    art = uniorch.compile_aot(model, args, target="interpret")
    assert art.kernels and all(k.specialized is None for k in art.kernels)


class _Plan:
    """A launch plan stand-in that launches one kernel with each argument set in turn."""

    def __init__(self, calls):
        self.calls, self.launch = calls, None

    def __call__(self, inputs):
        from types import SimpleNamespace

        kernel = SimpleNamespace(name="k0", source=SimpleNamespace(symbols=[]))
        for ins in self.calls:
            self.launch(kernel, [ins], [])


def test_a_kernel_launched_with_two_specializations_gets_none():
    from uniorch.backends.specialization import recorded

    x = torch.empty(8, 8, device="meta")
    spec = [((8, 8), torch.float32)]
    assert recorded(_Plan([x, x]), spec) == {"k0": keys([x, *x.stride()])}
    # contiguous, then transposed, then contiguous again: no single specialization fits
    assert recorded(_Plan([x, x.T, x]), spec) == {}
