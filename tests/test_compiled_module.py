"""`uniorch.compile(module)` is an nn.Module (uniorch/compiled_nn.py): code written for modules
takes it where it took the model. Numerics against eager on fresh inputs."""
import copy
import inspect
import io

import pytest
import torch
from torch import nn

import uniorch

T = "interpret"


class Block(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.bn = nn.BatchNorm1d(width)

    def forward(self, x, scale: float = 1.0):
        return self.norm(x + torch.relu(self.bn(self.fc(x)))) * scale


class Net(nn.Module):
    """Compiled blocks held as submodules, as a user compiles a model's repeated layers."""

    def __init__(self, compile_blocks: bool):
        super().__init__()
        blocks = [Block() for _ in range(2)]
        self.blocks = nn.ModuleList([uniorch.compile(b, target=T) if compile_blocks else b for b in blocks])
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _pair(seed: int):
    """The same weights twice: with compiled blocks and plain."""
    torch.manual_seed(seed)
    compiled = Net(compile_blocks=True)
    plain = Net(compile_blocks=False)
    plain.load_state_dict(compiled.state_dict())
    return compiled, plain


def test_compiled_model_is_a_module_with_the_models_state_dict_keys():
    model = Block()
    cm = uniorch.compile(model, target=T)
    assert isinstance(cm, nn.Module) and cm._orig_mod is model
    assert list(cm.state_dict()) == list(model.state_dict())
    # as torch.compile's OptimizedModule names them
    assert [n for n, _ in cm.named_parameters()] == [f"_orig_mod.{n}" for n, _ in model.named_parameters()]
    assert inspect.signature(cm.forward) == inspect.signature(model.forward)


def test_compiled_blocks_in_a_module_list_match_eager_and_their_state_dict_round_trips():
    compiled, plain = _pair(0)
    compiled.eval(), plain.eval()
    assert not compiled.blocks[0].training and not compiled.blocks[0]._orig_mod.training
    assert list(compiled.state_dict()) == list(plain.state_dict())
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), plain(x), rtol=1e-4, atol=1e-4)
        assert all(b.cache_size == 1 for b in compiled.blocks)
    # strict loads both ways: a checkpoint of the compiled model into a fresh compiled one
    fresh = Net(compile_blocks=True).eval()
    fresh.load_state_dict(compiled.state_dict())
    y = torch.randn(3, 16)
    with torch.no_grad():
        torch.testing.assert_close(fresh(y), plain(y), rtol=1e-4, atol=1e-4)


def test_a_torch_compile_checkpoint_loads_into_a_compiled_model():
    torch.manual_seed(1)
    model = Block().eval()
    prefixed = torch.compile(model).state_dict()
    assert all(k.startswith("_orig_mod.") for k in prefixed)
    cm = uniorch.compile(Block().eval(), target=T)
    cm.load_state_dict(prefixed)
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-4)


def test_training_through_compiled_submodules_matches_eager():
    compiled, plain = _pair(2)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (compiled, plain)]
    assert len(list(compiled.parameters())) == len(list(plain.parameters())) == 14
    for step in range(2):
        x, target = torch.randn(6, 16), torch.randint(0, 3, (6,))
        for m, opt in zip((compiled, plain), opts):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), target).backward()
            opt.step()
    for (name, p), q in zip(compiled.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    # BatchNorm's running statistics were updated by the compiled training forward
    torch.testing.assert_close(compiled.blocks[0]._orig_mod.bn.running_mean, plain.blocks[0].bn.running_mean,
                               rtol=1e-4, atol=1e-5)
    assert compiled.blocks[0].training_compile.failure is None


def test_module_methods_and_attributes_reach_the_model():
    model = Block()
    cm = uniorch.compile(model, target=T)
    assert cm.eval() is cm and not model.training and not model.bn.training
    assert cm.train() is cm and model.bn.training
    cm.eval()
    cm.fc.weight.data.mul_(0.5)  # a submodule, read through the model
    cm.custom = 3  # set on the model, where its forward would read it
    assert model.custom == 3 and "custom" not in cm.__dict__
    assert cm.double() is cm and model.fc.weight.dtype == torch.float64
    x = torch.randn(4, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(cm(x, 2.0), model(x, 2.0))


def test_hooks_registered_on_the_compiled_model_run():
    model = Block().eval()
    cm = uniorch.compile(model, target=T)
    seen = []
    pre = cm.register_forward_pre_hook(lambda mod, args: seen.append(args[0].shape))
    post = cm.register_forward_hook(lambda mod, args, out: out * 2)
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), 2 * model(x), rtol=1e-4, atol=1e-4)
        assert seen == [x.shape]
        pre.remove(), post.remove()
        torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-4)


def test_saved_and_loaded_compiled_model_compiles_again():
    torch.manual_seed(3)
    cm = uniorch.compile(Block().eval(), target=T)
    x = torch.randn(4, 16)
    with torch.no_grad():
        want = cm(x)
        buf = io.BytesIO()
        torch.save(cm, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        assert isinstance(loaded, uniorch.api.CompiledModel) and loaded.cache_size == 0
        torch.testing.assert_close(loaded(x), want)
        assert loaded.cache_size == 1
        twin = copy.deepcopy(cm)
        torch.testing.assert_close(twin(x), want)


@pytest.mark.parametrize("train", [False, True])
def test_compiling_a_model_with_compiled_blocks_captures_one_graph(train):
    """The outer capture traces the inner compiled blocks as their models (one graph), instead of
    the inner compiles running inside the trace."""
    compiled, plain = _pair(4)
    compiled.train(train), plain.train(train)
    outer = uniorch.compile(compiled, target=T)
    x = torch.randn(5, 16)
    with torch.set_grad_enabled(train):
        got, want = outer(x), plain(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert all(b.cache_size == 0 for b in compiled.blocks)  # the inner blocks never compiled
    if train:
        assert outer.training_compile.failure is None and len(outer.training_compile.forward) == 1
    else:
        assert not outer.explain(x).fallbacks


def test_compiling_a_compiled_model_compiles_the_model():
    model = Block().eval()
    first = uniorch.compile(model, target=T)
    again = uniorch.compile(first, target=T, dynamic=False)
    assert again._orig_mod is model


def test_a_forward_replaced_by_a_library_runs():
    """accelerate's mixed precision (Trainer's `bf16=True`) replaces the model's `forward` with
    one running it under autocast. The compiled model's call went to its compile directly, as if
    nothing had replaced it: fp32 results where eager computes in bf16."""
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    ref = accelerate.Accelerator(cpu=True, mixed_precision="bf16").prepare(copy.deepcopy(model))
    cm = accelerate.Accelerator(cpu=True, mixed_precision="bf16").prepare(uniorch.compile(model, target="interpret"))
    assert isinstance(cm, nn.Module) and cm.forward is not cm._facade_forward
    x = torch.randn(4, 16)
    out, want = cm(x), ref(x)
    assert out.dtype == want.dtype == torch.float32  # accelerate converts the outputs back
    torch.testing.assert_close(out, want, rtol=1e-3, atol=1e-4)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
