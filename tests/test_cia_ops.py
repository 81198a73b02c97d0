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


class _CompositeOps(torch.nn.Module):
    """CompositeImplicitAutograd ops of several kinds: linear, conv, batch norm and LSTM, dropout
    (a schema that claims to be functional), upsampling and SDPA (tables of their own), one_hot and
    isclose (kept whole: capture's table has no entry for them)."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)
        self.lstm, self.lin = torch.nn.LSTM(8, 8, batch_first=True), torch.nn.Linear(8, 8)

    def forward(self, x):
        F = torch.nn.functional
        y = F.dropout(F.interpolate(self.bn(self.conv(x)).relu(), scale_factor=2), 0.2, training=True)
        z, _ = self.lstm(y.flatten(2).transpose(1, 2))
        z = F.gelu(self.lin(F.layer_norm(z, (8,))))
        q = z.reshape(2, -1, 2, 4).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return a.sum(-1).softmax(-1), z.std(-1), F.one_hot(torch.arange(3), 4), torch.isclose(z, z * 2)


def test_ops_decomposing_to_their_own_kernel_are_not_overridden_and_decompose_the_same():
    from uniorch.capture.decompositions import decomposition_table

    full = decomposition_table()
    with cia_ops.memoized(full) as table:
        listed = ep_module._collect_all_valid_cia_ops()
    linear = torch.ops.aten.linear.default
    assert linear in full and linear not in table and linear not in listed
    kept = torch.ops.aten.one_hot.default  # no entry: run_decompositions keeps it whole
    assert kept not in full and kept in listed
    # the decomposed program is the one the whole list and table gave
    torch.manual_seed(0)
    ep = torch.export.export(_CompositeOps().train(), (torch.randn(2, 3, 8, 8),), strict=False)
    codes = []
    for reduced in (True, False):
        if reduced:
            with cia_ops.memoized(full) as table:
                codes.append(ep.run_decompositions(table).graph_module.code)
        else:
            with cia_ops.memoized():
                codes.append(ep.run_decompositions(full).graph_module.code)
    assert codes[0] == codes[1]
    assert "one_hot" in codes[0] and "aten.linear" not in codes[0] and "aten.lstm" not in codes[0]
