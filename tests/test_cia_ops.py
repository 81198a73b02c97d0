"""capture/cia_ops.py: the preservable CompositeImplicitAutograd ops PyTorch lists for
run_decompositions, memoized per set of registered ops, only inside capture's call."""
import torch
from torch.export import exported_program as ep_module

import uniorch
from uniorch.capture import cia_ops


def test_the_memoized_list_is_pytorchs_and_the_function_is_restored():
    original = ep_module._collect_all_valid_cia_ops
    with cia_ops.memoized():
        first = ep_module._collect_all_valid_cia_ops()
        again = ep_module._collect_all_valid_cia_ops()
    assert ep_module._collect_all_valid_cia_ops is original
    assert first is again and set(first) == original()


def test_an_op_registered_after_the_first_compile_is_decomposed():
    """Registered before capture's table is first built, a custom op's CompositeImplicitAutograd
    kernel is its decomposition (PyTorch's core-ATen table maps it); registered after, it was
    preserved and ran eagerly. Now both compile."""
    uniorch.compile(lambda t: t.cos())(torch.randn(3))  # the table is built by now
    lib = torch.library.Library("uniorch_cia_test", "DEF")
    with cia_ops.memoized():
        before = ep_module._collect_all_valid_cia_ops()
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x + x, "CompositeImplicitAutograd")
    op = torch.ops.uniorch_cia_test.twice.default
    with cia_ops.memoized():
        after = ep_module._collect_all_valid_cia_ops()
    assert op not in before and op in after
    # and a model calling it compiles to its decomposition, as eager computes it
    x = torch.randn(5, 3)
    fn = lambda t: torch.ops.uniorch_cia_test.twice(t).sin()  # noqa: E731
    torch.testing.assert_close(uniorch.compile(fn)(x), fn(x))
    assert not uniorch.explain(fn, x).fallbacks
