"""Capture and import: functional graphs, lifted state, output structures, locations, re-parsing."""
import copy
import inspect
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.capture import capture
from uniorch.ir import import_captured, lower, make_context, parse_module


def _line_of(fn, needle):
    """1-based line in this file of the first source line of `fn` containing `needle`."""
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if needle in text:
            return start + i
    raise AssertionError(needle)


def _mutating_ops(gm):
    return [
        n.target for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
    ]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        return self.fc2(h)


def test_weight_update_after_capture_is_seen():
    model = MLP()
    cg = capture(model, (torch.randn(3, 8),))
    with torch.no_grad():  # an optimizer step, in effect
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    x = torch.randn(3, 8)
    torch.testing.assert_close(cg(x), model(x), rtol=1e-5, atol=1e-6)
    kinds = [i.kind for i in cg.inputs]
    assert kinds.count("parameter") == 4 and kinds.count("user") == 1


def test_parameters_are_function_arguments_not_literals():
    module = uniorch.to_mlir(MLP(), (torch.randn(3, 8),), stage="linalg")
    text = str(module)
    main = re.search(r"func\.func @main\(([^)]*)\)", text).group(1)
    assert main.count("%arg") == 5  # fc1.weight, fc1.bias, fc2.weight, fc2.bias, x
    assert "tensor<16x8xf32>" in main and "dense<" not in text.replace("dense<0.000000e+00>", "")


class InPlace(nn.Module):
    def forward(self, x, mask):
        y = x.clone()
        y[:, 0] += 1.0
        y.masked_fill_(mask, -1.0)
        y.relu_()
        z = y.view(-1)
        z.mul_(2.0)  # mutates y through a view
        return y


def test_inplace_and_view_mutations_are_functionalized():
    x, mask = torch.randn(4, 5), torch.rand(4, 5) > 0.5
    cg = capture(InPlace(), (x, mask))
    assert _mutating_ops(cg.graph_module) == []
    x2, mask2 = torch.randn(4, 5), torch.rand(4, 5) > 0.5
    torch.testing.assert_close(cg(x2, mask2), InPlace()(x2, mask2))


class MutatesInput(nn.Module):
    def forward(self, x):
        x.add_(1.0)
        return x * 2


def test_user_input_mutation_is_applied():
    cg = capture(MutatesInput(), (torch.randn(3),))
    a = torch.randn(3)
    b = a.clone()
    out = cg(a)
    ref = MutatesInput()(b)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(a, b)  # the input was updated like eager updates it


def test_batchnorm_train_updates_buffers():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    ref_model = copy.deepcopy(model)
    cg = capture(model, (torch.randn(2, 3, 8, 8),))
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(cg(x), ref_model(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model[1].running_mean, ref_model[1].running_mean)
    torch.testing.assert_close(model[1].running_var, ref_model[1].running_var)
    assert int(model[1].num_batches_tracked) == int(ref_model[1].num_batches_tracked)
    assert {o.kind for o in cg.outputs} == {"user", "buffer_mutation"}


class Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale: float, bias=None, *, repeat: int = 2):
        y = self.lin(x) * scale
        return {"y": y, "parts": (y.sum(), [y.max(), y.min()]), "none": None, "rep": y.repeat(repeat, 1)}


def test_output_structure_and_constant_arguments():
    model = Structured()
    cg = capture(model, (torch.randn(2, 4), 0.5), {"repeat": 3})
    assert sorted(cg.constant_args.values(), key=str) == [0.5, 3]
    x = torch.randn(2, 4)
    got, ref = cg(x, 0.5, repeat=3), model(x, 0.5, repeat=3)
    assert set(got) == set(ref) and got["none"] is None
    assert isinstance(got["parts"], tuple) and isinstance(got["parts"][1], list)
    torch.testing.assert_close(got, ref)


def test_huggingface_model_output_structure():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(6, 6)

        def forward(self, x):
            h = torch.tanh(self.proj(x))
            return BaseModelOutputWithPooling(last_hidden_state=h, pooler_output=h[:, 0])

    model = Enc()
    cg = capture(model, (torch.randn(2, 3, 6),))
    x = torch.randn(2, 3, 6)
    got, ref = cg(x), model(x)
    assert type(got) is BaseModelOutputWithPooling
    torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state)
    torch.testing.assert_close(got.pooler_output, ref.pooler_output)


def test_plain_function_capture():
    w = torch.randn(5, 5)

    def fn(a, b):
        return torch.softmax(a @ w + b, dim=-1).cumsum(0)

    a, b = torch.randn(3, 5), torch.randn(5)
    cg = capture(fn, (a, b))
    a2, b2 = torch.randn(3, 5), torch.randn(5)
    torch.testing.assert_close(cg(a2, b2), fn(a2, b2))


def test_every_op_has_module_path_and_source_line():
    cg = capture(MLP(), (torch.randn(2, 8),))
    fc1_line = _line_of(MLP.forward, "self.fc1(x)")
    fc2_line = _line_of(MLP.forward, "self.fc2(h)")
    by_path = {}
    for op in cg.ops:
        assert op.loc.file == __file__, op
        by_path.setdefault(op.loc.module_path, set()).add(op.loc.line)
    assert by_path["fc1"] == {fc1_line} and by_path["fc2"] == {fc2_line}
    assert by_path[""] == {fc1_line}  # gelu is the root module's own op on the same line


def test_locations_travel_into_mlir_and_reparse():
    module = uniorch.to_mlir(MLP(), (torch.randn(2, 8),), stage="linalg")
    text = module.operation.get_asm(enable_debug_info=True)
    fc1_line = _line_of(MLP.forward, "self.fc1(x)")
    assert f'loc("fc1"("{__file__}":{fc1_line}:0))' in text or re.search(
        rf'loc\("fc1"\(#loc\d*\)\)', text) and f'"{__file__}":{fc1_line}:0' in text
    again = parse_module(text, make_context())
    assert "linalg.matmul" in str(again) or "linalg.generic" in str(again)
    assert "torch." not in str(again)


def test_torch_stage_then_linalg():
    cg = capture(MLP(), (torch.randn(2, 8),))
    module = import_captured(cg)
    lower(module, "torch")
    assert "torch.aten.mm" in str(module) or "torch.aten.linear" in str(module)
    lower(module, "linalg")
    assert "torch.aten" not in str(module)


def test_capture_error_names_the_users_exception():
    class Bad(nn.Module):
        def forward(self, x):
            raise RuntimeError("shape mismatch in user code")

    with pytest.raises(uniorch.CaptureError, match="shape mismatch in user code"):
        capture(Bad(), (torch.randn(2),))


def test_non_module_non_callable_is_rejected():
    with pytest.raises(uniorch.CaptureError, match="nn.Module or a callable"):
        capture(42, ())


def test_reassigned_weight_and_buffer_are_read_at_each_call():
    """Parameters and buffers are read from the module by attribute path at every call (the call
    path caches the path, not the tensor): a weight replaced after the first call, or a buffer
    updated in place, is the one the next call uses."""
    import uniorch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.register_buffer("shift", torch.zeros(3))

        def forward(self, x):
            return self.lin(x) + self.shift

    m = M().eval()
    cm = uniorch.compile(m, target="interpret")
    x = torch.randn(2, 4)
    torch.testing.assert_close(cm(x), m(x))
    m.lin.weight = torch.nn.Parameter(torch.randn(3, 4))
    m.shift.add_(torch.randn(3))
    torch.testing.assert_close(cm(x), m(x))
    torch.testing.assert_close(cm(x=x), m(x))  # keywords take the general path
