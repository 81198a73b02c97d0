"""The direct launch path of JIT-compiled kernels (backends/triton_launch.py), checked against
Triton's own binder without a GPU: after the first launch, uniorch calls the compiled kernel's
launcher with its runtime arguments and then the constexprs in signature order, keyed by
Triton's specialization of each argument. Both must be what `JITFunction.run` computes, for
every kind of kernel uniorch generates (with and without size symbols), in the Triton installed
and in the GPU machine's (the compat run)."""
import pytest
import torch
from torch import nn

from uniorch.aot import compile_aot
from uniorch.backends.sdk import tensor_args
from uniorch.backends.triton_launch import TritonLauncher, constexpr_tail
from uniorch.runtime import loader


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(d), nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc(self.norm(x)))
        return x + self.proj(h).softmax(-1) * x.cumsum(-1)


def _kernels(dynamic):
    torch.manual_seed(0)
    art = compile_aot(Block().eval(), (torch.randn(4, 24, 64),), target="cuda:sm_90", dynamic=dynamic)
    assert len(art.kernels) >= 3
    kernels = [k.source for k in art.kernels]
    assert any(ks.symbols for ks in kernels) == dynamic
    return kernels


def _binder(fn):
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", 90, 32))
    return backend, create_function_from_signature(fn.signature, fn.params, backend)


def _example_args(ks, sizes, offset):
    """Tensors of the kernel's ranks (dtype and values do not matter to binding), one of them
    starting `offset` elements into its storage (alignment is part of the specialization)."""
    ins = [torch.zeros(64 * 64 * 8)[offset:offset + 5 ** r].view(*(5,) * r) if r else torch.zeros(())
           for r in ks.input_ranks]
    outs = [torch.zeros((3,) * r) for r in ks.output_ranks]
    return tensor_args(ks, ins, outs, sizes if ks.symbols else None)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("offset", [0, 1])
def test_direct_arguments_are_what_triton_binds(dynamic, offset):
    from triton._C.libtriton import native_specialize_impl

    for ks in _kernels(dynamic):
        fn = loader.load(ks, interpret=False)
        tail = constexpr_tail(fn, ks)
        assert tail is not None, ks.name
        backend, binder = _binder(fn)
        sizes = [16 + i for i in range(len(ks.symbols))]
        args = _example_args(ks, sizes, offset)
        bound, specialization, _ = binder(*args, **ks.constexprs, num_warps=ks.num_warps,
                                          num_stages=ks.num_stages)
        values = list(bound.values())
        assert len(values) == len(args) + len(tail), ks.name
        assert all(a is b for a, b in zip(values, args)), ks.name
        assert tuple(values[len(args):]) == tail, ks.name
        ours = [native_specialize_impl(type(backend), a, False, True, True) for a in args]
        assert [tuple(s) for s in specialization[:len(args)]] == [tuple(s) for s in ours], ks.name


def test_the_interpreter_keeps_tritons_path():
    ks = _kernels(False)[0]
    fn = loader.load(ks, interpret=True)
    launcher = TritonLauncher(ks, fn)
    assert launcher._specialize is None


def test_without_a_gpu_driver_there_is_no_direct_path():
    ks = _kernels(False)[0]
    launcher = TritonLauncher(ks, loader.load(ks, interpret=False))
    if not torch.cuda.is_available():
        assert launcher._specialize is None


def test_a_refused_direct_launch_goes_back_to_tritons_path():
    from uniorch.backends.triton_launch import _checked

    table, calls = {}, []

    def refused(grid, args):
        raise TypeError("function takes exactly 16 arguments (15 given)")

    table["k"] = _checked(refused, table, "k")
    assert table["k"]((1,), []) is False and table["k"] is None

    table["k"] = _checked(lambda grid, args: calls.append(grid), table, "k")
    assert table["k"]((2,), []) is True and table["k"]((3,), []) is True
    assert calls == [(2,), (3,)]


def test_empty_launch_hook_chains_keep_the_direct_launch(monkeypatch):
    """Triton's launch hooks are `HookChain`s, never None: only a chain holding a hook sends a
    launch through Triton's own path (which builds the hooks' metadata)."""
    from triton import knobs
    from triton.runtime.driver import driver

    from uniorch.backends.triton_launch import _direct_launch

    class Active:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 7

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def __init__(self):
            self.direct, self.own = [], []
            self.run = lambda *a: self.direct.append(a)

        def _init_handles(self):
            pass

        def __getitem__(self, grid):
            return lambda *args: self.own.append((grid, args))

    monkeypatch.setattr(driver, "_active", Active())
    compiled = Compiled()
    launch = _direct_launch(compiled, (64,))
    launch((3,), ["x", 1])
    assert compiled.direct == [(3, 1, 1, 7, "fn", "meta", None, None, None, "x", 1, 64)] and not compiled.own
    hook = lambda *a: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        launch((3,), ["x", 1])
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert compiled.own == [((3, 1, 1), ("x", 1, 64))]


def test_the_launch_key_never_joins_what_triton_specializes_apart():
    """The direct path's key (cheaper than Triton's own per tensor) may tell apart argument lists
    Triton launches alike, never the reverse: two lists with one key must get one kernel."""
    import itertools

    from triton._C.libtriton import native_specialize_impl

    from uniorch.backends.triton_launch import specialization_key

    backend, _ = _binder(loader.load(_kernels(False)[0], interpret=False))
    native = lambda a: native_specialize_impl(type(backend), a, False, True, True)  # noqa: E731
    key = specialization_key(native, lambda: 0)
    base = torch.zeros(256)
    values = [base, base[1:], base[4:], base[8:], base.to(torch.bfloat16), base.to(torch.bfloat16)[8:],
              nn.Parameter(base.clone()), base.long(), 0, 1, 2, 15, 16, 17, 32, -1, -16, 2 ** 31, 2 ** 32 + 16,
              2 ** 40, 1.0, 2.5, True, None]
    cases = [list(p) for p in itertools.product(values, repeat=2)]
    by_key: dict = {}
    for args in cases:
        by_key.setdefault(key(args), []).append(args)
    for group in by_key.values():
        first = [tuple(native(a)) for a in group[0]]
        assert all([tuple(native(a)) for a in args] == first for args in group[1:]), group
    # and it does tell apart what Triton does: alignment, dtype, an int's class
    assert key([base]) != key([base[1:]]) and key([base]) == key([base[8:]])
    assert key([base]) != key([base.to(torch.bfloat16)]) and key([1]) != key([16])
