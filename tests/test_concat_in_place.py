"""A concatenation's pieces written into its buffer by the kernels computing them
(passes/concat_in_place.py): no copy kernel, values as eager's. A training step's backward
concatenates dq, dk and dv for the qkv projection; the pieces come from contractions (short
sequences) or from the attention-backward chains (longer ones)."""
import copy

import pytest
import torch
from test_training import SplitAttention

import uniorch


def _two_products(x, w1, w2):
    return torch.cat([x @ w1, torch.relu(x.t() @ w2)], 1)


@pytest.mark.parametrize("target", ["interpret", "cpu"])
def test_a_returned_concatenation_of_two_products(target):
    cm = uniorch.compile(_two_products, target=target)
    outs, refs = [], []
    for _ in range(3):  # later calls run the plan's straight-line code
        x, w1, w2 = torch.randn(8, 8), torch.randn(8, 16), torch.randn(8, 16)
        outs.append(cm(x, w1, w2))
        refs.append(_two_products(x, w1, w2))
    for out, ref in zip(outs, refs):  # each call's result its own: later calls leave it as it was
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert not [k.name for k in cm.explain(x, w1, w2).kernels if k.kind == "copy"]


@pytest.mark.parametrize("t", [8, 64], ids=["products", "chains"])
def test_attention_backward_writes_dq_dk_dv_into_their_concatenation(t):
    torch.manual_seed(0)
    model = SplitAttention()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        x = torch.randn(2, t, 32)
        cm(x).pow(2).mean().backward()
        ref(x).pow(2).mean().backward()
        for p, r in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
    backward = cm.explain(torch.randn(2, t, 32)).backward
    assert not [k.name for k in backward.kernels if k.kind == "copy"], [(k.name, k.ops) for k in backward.kernels]


def test_a_bundle_keeps_the_concatenation_in_place(tmp_path):
    """An AOT bundle's plan is built from the same scheduled module: the concatenation in @main
    and its pieces' shared buffer load with it."""
    from uniorch.aot import compile_aot
    from uniorch.runtime.bundle import load

    args = (torch.randn(8, 8), torch.randn(8, 16), torch.randn(8, 16))
    art = compile_aot(_two_products, args, target="cpu")
    assert not [k for k in art.kernels if "copy" in k.name]
    loaded = load(art.save(str(tmp_path / "cat")))
    for _ in range(2):
        x, w1, w2 = torch.randn(8, 8), torch.randn(8, 16), torch.randn(8, 16)
        torch.testing.assert_close(loaded(x, w1, w2), _two_products(x, w1, w2), rtol=1e-5, atol=1e-5)
