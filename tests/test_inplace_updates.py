"""State updates written in place by the kernels (runtime/inplace.py), checked against eager on
fresh inputs over several calls: what the kernels write into the inputs' memory must be what
eager's in-place ops leave there, and nothing may read an old value the kernels overwrote."""
from __future__ import annotations

import pytest
import torch

import uniorch


def _copies(monkeypatch) -> list:
    """Sizes of the tensors `Tensor.copy_` or `torch._foreach_copy_` writes while counting
    (finish's copies back)."""
    seen: list = []
    orig, orig_foreach = torch.Tensor.copy_, torch._foreach_copy_

    def counting(self, src, *a, **k):
        seen.append(self.numel())
        return orig(self, src, *a, **k)

    def counting_foreach(dests, srcs, *a, **k):
        seen.extend(d.numel() for d in dests)
        return orig_foreach(dests, srcs, *a, **k)

    monkeypatch.setattr(torch.Tensor, "copy_", counting)
    monkeypatch.setattr(torch, "_foreach_copy_", counting_foreach)
    return seen


def _entry(cm):
    (entry,) = cm._cache.values()
    return entry


def test_adamw_writes_parameters_and_moments_in_place(monkeypatch):
    torch.manual_seed(0)
    model, ref = torch.nn.Linear(64, 48), torch.nn.Linear(64, 48)
    ref.load_state_dict(model.state_dict())
    opt = uniorch.compile(torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1), "interpret")
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    ptrs = [p.data_ptr() for p in model.parameters()]
    for step in range(4):
        x = torch.randn(8, 64)
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
        versions = [p._version for p in model.parameters()]
        seen = _copies(monkeypatch) if step >= 2 else []   # from the second compiled step on
        opt.step()
        monkeypatch.undo()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
        for key in ("exp_avg", "exp_avg_sq"):
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(opt.state[p][key], ref_opt.state[q][key], rtol=1e-5, atol=1e-6)
        # autograd sees each parameter modified, as after eager's in-place update
        assert all(p._version > v for p, v in zip(model.parameters(), versions))
        if step >= 2:  # only the 0-d step counts are copied back
            assert seen and max(seen) == 1, seen
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    cm, _ = opt._last
    writes = _entry(cm).writes
    assert sum(why == "" for why in writes.values()) == 6, writes   # 2 parameters, 2 moments each
    rep = opt.explain()
    assert rep.bytes_moved <= 1.01 * rep.bytes_minimum, str(rep)


class _Stats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(16, 8))
        self.register_buffer("mirror", torch.zeros(16, 8))

    def forward(self, x):
        self.total.add_(x * 2)              # a pointwise update: written in place
        flipped = self.mirror.flip(0) * 3   # read at other elements than the update writes
        self.mirror.add_(x)
        return self.total + flipped


def _against_eager(cls, calls: int = 3):
    """A compiled `cls()` and an eager one, called alike on fresh inputs: outputs and buffers equal."""
    torch.manual_seed(0)
    model, ref = cls(), cls()
    cm = uniorch.compile(model, "interpret")
    for _ in range(calls):
        x = torch.randn(16, 8)
        torch.testing.assert_close(cm(x), ref(x))
        for (name, got), want in zip(model.named_buffers(), ref.buffers()):
            torch.testing.assert_close(got, want, msg=name)
    return cm


def test_buffer_updates_in_place_only_where_no_old_value_is_read():
    cm = _against_eager(_Stats)
    writes = _entry(cm).writes
    names = {cm_out.target: writes[o] for o, cm_out in enumerate(_entry(cm).captured.outputs) if o in writes}
    assert names["total"] == "", names
    assert names["mirror"], names   # the flip reads old elements another program may overwrite
    assert "'mirror': copied back" in str(cm.explain(torch.randn(16, 8)))


class _Summed(_Stats):
    def forward(self, x):
        self.total.add_(x * 2)
        return self.total.sum(0)   # the reduction recomputes the new total from the old one


def test_a_later_kernel_reading_the_old_value_keeps_the_copy():
    cm = _against_eager(_Summed)
    (why,) = [w for w in _entry(cm).writes.values()]
    assert "reads the old value after" in why, why


def _add_into(x, y):
    x.add_(y)
    return x * 2


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_user_input_updates_in_place_or_copied_by_layout(layout):
    cm = uniorch.compile(_add_into, "interpret")
    for _ in range(3):
        base = torch.randn(6, 5)
        x = base.clone() if layout == "contiguous" else base.t().clone().t()
        y = torch.randn(6, 5)
        ref_x = x.clone()
        expect = _add_into(ref_x, y)
        torch.testing.assert_close(cm(x, y), expect)
        torch.testing.assert_close(x, ref_x)


class _Cache(torch.nn.Module):
    """A static KV cache as transformers' StaticCache updates it: index_copy_ at the positions."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 2, 32, 8))

    def forward(self, new, pos):
        self.k.index_copy_(2, pos, new)
        return self.k.sum(-1)


def test_a_static_cache_update_matches_eager_over_calls():
    model, ref = _Cache(), _Cache()
    cm = uniorch.compile(model, "interpret")
    for t in range(4):
        new, pos = torch.randn(1, 2, 1, 8), torch.tensor([t])
        torch.testing.assert_close(cm(new, pos), ref(new, pos))
        torch.testing.assert_close(model.k, ref.k)


def test_an_optimizers_step_counts_are_copied_back_in_one_call(monkeypatch):
    """AdamW's 0-d step counts (one per parameter, read by every program of the update kernel, so
    copied back rather than written in place) go back in one `_foreach_copy_`, not a copy_ and a
    kernel launch each per step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(3)))
    ref = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(3)))
    ref.load_state_dict(model.state_dict())
    opt = uniorch.compile(torch.optim.AdamW(model.parameters(), lr=1e-2), "interpret")
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    calls: list = []
    orig_copy, orig_foreach = torch.Tensor.copy_, torch._foreach_copy_

    def copy(dest, src, *a, **k):
        calls.append(("copy_", dest.numel()))
        return orig_copy(dest, src, *a, **k)

    def foreach(dests, srcs, *a, **k):
        calls.append(("foreach", [d.numel() for d in dests]))
        return orig_foreach(dests, srcs, *a, **k)

    for step in range(4):
        x = torch.randn(4, 16)
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
        if step >= 2:  # from the second compiled step on
            monkeypatch.setattr(torch.Tensor, "copy_", copy)
            monkeypatch.setattr(torch, "_foreach_copy_", foreach)
        opt.step()
        monkeypatch.undo()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(opt.state[p]["step"], ref_opt.state[q]["step"])
    assert calls == [("foreach", [1] * 6)] * 2, calls


class _Swap(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.zeros(8))
        self.register_buffer("b", torch.arange(8.0))

    def forward(self, x):
        self.a.copy_(self.b)   # a takes b's old value: b's own update must come after
        self.b.mul_(2)
        return x + self.a


def test_state_copies_keep_their_order_where_a_value_is_a_destination():
    model, ref = _Swap(), _Swap()
    cm = uniorch.compile(model, "interpret")
    for _ in range(3):
        x = torch.randn(8)
        torch.testing.assert_close(cm(x), ref(x))
        torch.testing.assert_close(model.a, ref.a)
        torch.testing.assert_close(model.b, ref.b)
