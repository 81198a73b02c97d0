"""Results that eager returns as transposed views of a computed tensor are views in the compiled
call too (passes/returned_views.py): no copy kernel, eager's strides, offsets and aliasing. A
training forward saves q, k and v as such views of the qkv projection. Where eager holds results
apart, or the view would be of the caller's tensor, they stay copies."""
import copy

import torch
from test_training import SplitAttention

import uniorch


def _permute_only(kernel) -> bool:
    return all(op.split(".")[1] in ("permute", "transpose", "t", "view", "reshape") for op, _ in kernel.ops)


def _split_heads(x, w):
    b, t, c = x.shape
    q, k, v = (x @ w).split(c, dim=2)
    k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (k, v))
    return q * 2, k, v


def test_returned_head_views_are_eagers_views():
    w = torch.randn(32, 96)
    cm = uniorch.compile(_split_heads, target="interpret")
    for _ in range(3):  # later calls run the plan's straight-line code
        x = torch.randn(2, 8, 32)
        out, ref = cm(x, w), _split_heads(x, w)
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
            assert o.stride() == r.stride() and o.storage_offset() == r.storage_offset()
        assert out[1].untyped_storage().data_ptr() == out[2].untyped_storage().data_ptr()  # k, v: one storage
    rep = cm.explain(x, w)
    assert not [k.name for k in rep.kernels if _permute_only(k)], [(k.name, k.ops) for k in rep.kernels]


def _held_apart(x, w, w2):
    y = x @ w2
    return y, y.t().clone(), x.t().clone(), (x @ w).view(4, 4, 2, 8).transpose(1, 2).contiguous()


def test_results_eager_holds_apart_stay_copies():
    """`y.t().clone()` has a view's strides but its own storage beside `y`; `x.t().clone()` would
    be a view of the caller's tensor; `.contiguous()` copies in eager. Writing into one result
    leaves the others, and the input, as they are."""
    w, w2 = torch.randn(8, 16), torch.randn(8, 6)
    cm = uniorch.compile(_held_apart, target="interpret")
    x = torch.randn(16, 8)
    keep = x.clone()
    out, ref = cm(x, w, w2), _held_apart(x, w, w2)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
        assert o.stride() == r.stride()
    before = [o.clone() for o in out]
    out[1].add_(1.0)
    out[2].add_(1.0)
    torch.testing.assert_close(out[0], before[0], rtol=0, atol=0)
    assert torch.equal(x, keep)
    assert len({o.untyped_storage().data_ptr() for o in out}) == len(out)


def test_training_forward_saves_q_k_v_as_views_without_a_copy_kernel():
    torch.manual_seed(0)
    model = SplitAttention()  # GPT-2's: q, k and v split off one projection
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        x = torch.randn(2, 8, 32)
        cm(x).pow(2).mean().backward()
        ref(x).pow(2).mean().backward()
        for p, r in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
    rep = cm.explain(torch.randn(2, 8, 32))
    assert not [k.name for k in rep.kernels if _permute_only(k)], [(k.name, k.ops) for k in rep.kernels]


def _bmm_operands(x, w):
    """nanoGPT's written-out attention at batch 1 saves bmm's operands: (B*H, T, d) views of the
    heads (a view only while B is 1), and kᵀ; v through a second copy dropping the unit batch."""
    b, t, c = x.shape
    q, k, v = (x @ w).split(c, dim=2)
    q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
    return q.reshape(b * 2, t, c // 2), k.transpose(-2, -1).reshape(b * 2, c // 2, t), v.reshape(b * 2, t, c // 2)


def test_views_through_reshapes_and_unit_dims_at_batch_one():
    w = torch.randn(32, 96)
    cm = uniorch.compile(_bmm_operands, target="interpret")
    for _ in range(2):
        x = torch.randn(1, 8, 32)
        out, ref = cm(x, w), _bmm_operands(x, w)
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
            assert o.stride() == r.stride() and o.storage_offset() == r.storage_offset()
        assert len({o.untyped_storage().data_ptr() for o in out}) == 1  # q, k and v: one storage, as eager's
    assert not [k.name for k in cm.explain(x, w).kernels if _permute_only(k)]
