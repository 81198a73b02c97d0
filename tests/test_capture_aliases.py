"""Outputs that are the model's own input objects (capture/aliases.py): a container given to the model,
updated in place and returned (transformers' caches), is the caller's object after a compiled call,
in eager's state, its tensors written in place."""
import torch
import torch.utils._pytree as pytree

import uniorch


class LazyCache:
    """A StaticCache in miniature: storage allocated on the first update, then written by
    index_copy_ at a position counter that is itself a tensor updated in place."""

    def __init__(self, size: int):
        self.size, self.store, self.length, self.ready = size, None, torch.zeros((), dtype=torch.long), False

    def update(self, x):
        if not self.ready:
            self.store, self.ready = torch.zeros(self.size, x.shape[1]), True
        pos = torch.arange(x.shape[0]) + self.length
        self.length.add_(x.shape[0])
        self.store.index_copy_(0, pos, x)
        return self.store


def _flatten(c):
    names = [k for k, v in vars(c).items() if isinstance(v, torch.Tensor)]
    return [getattr(c, k) for k in names], (names, {k: v for k, v in vars(c).items() if k not in names})


def _unflatten(values, context):
    names, rest = context
    c = LazyCache.__new__(LazyCache)
    c.__dict__.update(rest)
    c.__dict__.update(zip(names, values))
    return c


def _flatten_with_keys(c):
    values, context = _flatten(c)
    return [(pytree.GetAttrKey(k), v) for k, v in zip(context[0], values)], context


pytree.register_pytree_node(LazyCache, _flatten, _unflatten, flatten_with_keys_fn=_flatten_with_keys)


class Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, cache):
        store = cache.update(self.proj(x))
        return store.sum(0) * 2, cache


def _state(c):
    return c.ready, c.length.item(), None if c.store is None else c.store.clone()


def test_container_updated_in_place_is_the_callers_object():
    torch.manual_seed(0)
    model = Step().eval()
    cm = uniorch.compile(model, target="interpret")
    mine, ref = LazyCache(8), LazyCache(8)
    for n in (3, 1, 1):  # the first call initializes the container, later ones write into its storage
        x = torch.randn(n, 4)
        store_before, length_before = mine.store, mine.length
        out, back = cm(x, mine)
        want, ref_back = model(x, ref)
        assert ref_back is ref and back is mine  # eager returns the object it was given
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        assert mine.length is length_before  # the counter is written in place
        if store_before is not None:
            assert mine.store is store_before  # so is the storage, once it exists
        got, exp = _state(mine), _state(ref)
        assert got[:2] == exp[:2]
        torch.testing.assert_close(got[2], exp[2], rtol=1e-5, atol=1e-6)
    assert cm.cache_size == 2  # the uninitialized container and the initialized one: two specs


def test_returned_input_tensor_is_the_input():
    """An input tensor mutated in place and returned is, as in eager, the caller's tensor."""
    def f(x, y):
        x.mul_(2)
        return x, y + 1

    a, b = torch.randn(5), torch.randn(5)
    want = f(a.clone(), b)
    cm = uniorch.compile(f, target="interpret")
    got = cm(a, b)
    assert got[0] is a
    torch.testing.assert_close(a, want[0])
    torch.testing.assert_close(got[1], want[1])
