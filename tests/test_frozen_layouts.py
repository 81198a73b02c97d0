"""`uniorch.compile(model, freeze=True)`: a parameter's layout copy (a convolution's filters laid
out channels-last before a GPU kernel reads them) is made once and reused while the parameter's
storage and version counter are unchanged (runtime/frozen_layouts.py); explain leaves those copies
out. The launch plan's path is driven here on the interpreter by asking its kernels for a relayout
of their 2-d inputs: the kernels take strides as arguments, so any layout gives the same values."""
from __future__ import annotations

import copy
import dataclasses
import gc
import pickle

import pytest
import torch
from torch import nn
from torch_mlir import ir

import uniorch
from uniorch.api import explain_static
from uniorch.runtime import frozen_layouts, relayout


@pytest.fixture(autouse=True)
def _fresh_registry():
    frozen_layouts.forget()
    yield
    frozen_layouts.forget()


@pytest.fixture
def copies(monkeypatch):
    """The shapes of the layout copies made, in order."""
    made = []
    real = relayout._relaid

    def counting(t, order, warmup=False):
        made.append(tuple(t.shape))
        return real(t, order, warmup)

    monkeypatch.setattr(relayout, "_relaid", counting)
    return made


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


def _relayout_2d_inputs(cm):
    """Every kernel of `cm`'s compile asks for its 2-d inputs transposed (as a GPU's FMA dots do)."""
    for entry in cm._cache.values():
        for region in entry.program.regions:
            for k in region.plan.kernels.values():
                ft = ir.FunctionType(ir.TypeAttr(k.func_op.attributes["function_type"]).value)
                two = [i for i, t in enumerate(ft.inputs) if len(ir.RankedTensorType(t).shape) == 2]
                k.source = dataclasses.replace(k.source, relayout=[(i, [1, 0]) for i in two])


@pytest.mark.parametrize("freeze", [True, False])
def test_a_weights_copy_is_made_once_until_the_weight_changes(copies, freeze):
    model = _mlp()
    cm = uniorch.compile(model, target="interpret", freeze=freeze)
    x = torch.randn(4, 16)
    cm(x)
    _relayout_2d_inputs(cm)
    weights = [(32, 16), (8, 32)]
    for call in range(3):  # the first call records the launches; later ones replay them bound
        copies.clear()
        torch.testing.assert_close(cm(x), model(x))
        expect = [(4, 16)] if freeze and call else weights[:1] + [(4, 16)] + weights[1:]
        assert sorted(copies) == sorted(expect), (call, copies)
    with torch.no_grad():  # an in-place update bumps the version counter: copied again, once
        model[0].weight.mul_(-2.0)
    for call in range(2):
        copies.clear()
        torch.testing.assert_close(cm(x), model(x))
        if freeze:
            assert sorted(copies) == sorted([(32, 16), (4, 16)] if call == 0 else [(4, 16)]), copies
    with torch.no_grad():  # load_state_dict copies into the parameters in place too
        model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})
    torch.testing.assert_close(cm(x), model(x))


def test_only_registered_tensors_are_kept():
    w = nn.Parameter(torch.randn(6, 5))
    other = torch.randn(6, 5)
    frozen_layouts.register([w])
    a, b = relayout.relaid(w, [1, 0]), relayout.relaid(w, [1, 0])
    assert a is b and torch.equal(a, w) and a.stride() == (1, 6)
    assert relayout.relaid(other, [1, 0]) is not relayout.relaid(other, [1, 0])
    assert relayout.relaid(w[1:], [1, 0]) is not a  # a view of it is another copy
    with torch.no_grad():
        w.add_(1.0)
    c = relayout.relaid(w, [1, 0])
    assert c is not a and torch.equal(c, w)
    del w, a, b, c
    gc.collect()  # a dead weight's registration and copies go: its memory may hold another tensor
    assert not frozen_layouts._REGISTERED and not frozen_layouts._COPIES


def test_a_weight_dying_inside_the_registrys_lock_does_not_deadlock():
    """The cycle collector can run a dead weight's callback inside a locked block of the registry
    (an allocation there starts it): the callback takes the same lock, in the same thread."""
    import threading

    def scenario():
        w = nn.Parameter(torch.randn(4, 3))
        frozen_layouts.register([w])
        with frozen_layouts._LOCK:
            del w  # the last reference: its callback runs now, lock held
    worker = threading.Thread(target=scenario, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "deadlocked"
    assert not frozen_layouts._REGISTERED


def test_explain_leaves_the_filters_copies_out_when_frozen():
    """A bf16 3x3 convolution for sm_90 reads its filters channels-last: a copy each call, read and
    written, unless frozen."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1))
    model = model.eval().to(torch.bfloat16)
    x = torch.randn(2, 16, 12, 12, dtype=torch.bfloat16)
    plain = explain_static(model, (x,), target="cuda:sm_90")
    frozen = explain_static(model, (x,), target="cuda:sm_90", freeze=True)
    filters = sum(m.weight.numel() * 2 for m in model if isinstance(m, nn.Conv2d))
    assert filters and sum(k.weight_relayout for k in plain.kernels) == filters, str(plain)
    assert plain.bytes_moved - frozen.bytes_moved == 2 * filters
    assert [k.name for k in plain.kernels] == [k.name for k in frozen.kernels]


def test_the_option_survives_copies_and_reaches_torch_compile():
    model = _mlp()
    cm = uniorch.compile(model, target="interpret", freeze=True)
    assert copy.deepcopy(cm)._freeze and pickle.loads(pickle.dumps(cm))._freeze
    compiled = torch.compile(_mlp(), backend="uniorch", options={"target": "interpret", "freeze": True})
    x = torch.randn(4, 16)
    torch.testing.assert_close(compiled(x), _mlp()(x))
