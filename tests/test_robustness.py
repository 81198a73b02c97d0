"""Bad and unusual input to uniorch.compile: non-finite values, wrong devices, threads, a corrupt
kernel cache. Each must give eager PyTorch's answer or a clear error, never a wrong result."""
import os
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import uniorch


def _nonfinite(shape):
    x = torch.randn(shape)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel())[:3]
    flat[idx[0]], flat[idx[1]], flat[idx[2]] = float("nan"), float("inf"), float("-inf")
    return x


@pytest.mark.parametrize("fn", [
    lambda x: torch.relu(x) * 2 + 1,
    lambda x: torch.maximum(x, torch.zeros_like(x)),
    lambda x: x.amax(dim=-1),
    lambda x: x.sum(dim=0),
    lambda x: torch.softmax(x, dim=-1),
    lambda x: torch.where(torch.isnan(x), torch.zeros_like(x), x).clamp(-3, 3),
], ids=["relu-affine", "maximum", "amax", "sum", "softmax", "isnan-where-clamp"])
def test_nan_and_inf_follow_eager(fn):
    x = _nonfinite((6, 10))
    got = uniorch.compile(fn, target="interpret")(x)
    torch.testing.assert_close(got, fn(x), equal_nan=True)


CLAMPS = {
    "clamp": lambda x: torch.clamp(x, -1, 1),
    "clamp_min": lambda x: torch.clamp(x, min=-0.5),
    "clamp_max": lambda x: x.clamp(max=0.5) * 2,
    "clamp_tensors": lambda x: torch.clamp(x, x.flip(0) - 1, torch.full_like(x, 1.5)),
    "nan_bound": lambda x: torch.clamp(x, min=float("nan")),
    "int_by_floats": lambda x: torch.clamp(torch.arange(x.shape[-1]), 1.5, 6.2) + x,
    "hardtanh": F.hardtanh,
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
}


@pytest.mark.parametrize("target", ["interpret", "cpu"])
@pytest.mark.parametrize("name", sorted(CLAMPS))
def test_clamps_keep_nan(name, target):
    """A NaN stays NaN through clamp and the activations made of it (eager's rule; the cpu target
    gave the bound, relu6 and hardsigmoid 0 everywhere), and a NaN bound makes NaN."""
    fn = CLAMPS[name]
    x = _nonfinite((6, 10))
    got, want = uniorch.compile(fn, target=target)(x), fn(x)
    assert got.dtype == want.dtype and torch.equal(got.isnan(), want.isnan()), (got, want)
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), (got, want)


def test_masked_softmax_with_minus_inf():
    def fn(s, mask):
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)

    s = torch.randn(4, 8)
    mask = torch.rand(4, 8) > 0.6
    mask[:, 0] = False  # every row keeps one finite entry, as attention masks do
    torch.testing.assert_close(uniorch.compile(fn, target="interpret")(s, mask), fn(s, mask))


def test_input_on_an_unexpected_device_is_a_clear_error():
    cm = uniorch.compile(lambda x: x + 1, target="interpret")
    with pytest.raises(uniorch.UniorchError, match=r"device 'meta'.*target 'interpret:cpu'.*'cpu'"):
        cm(torch.empty(3, device="meta"))


def test_threads_compiling_at_once():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    cm = uniorch.compile(model, target="interpret")
    shapes = [(2, 8), (3, 8), (2, 8), (5, 8)]
    inputs = [torch.randn(s) for s in shapes]
    results, errors = [None] * len(shapes), []

    def work(i):
        try:
            with torch.no_grad():
                results[i] = cm(inputs[i])
        except Exception as err:  # noqa: BLE001 - collected and re-raised below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(shapes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with torch.no_grad():
        for x, got in zip(inputs, results):
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
    # one compile per need, however many threads asked: the first spec's, then (automatic dynamic)
    # one with a symbolic batch size that serves every later batch size
    assert cm.cache_size == 2


def test_corrupt_kernel_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    from uniorch.runtime import loader

    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(loader, "_SHARED", {})  # the process's kernels of the same code (loader.load)

    def fn(x):
        return F.silu(x) * 3 - 0.5

    x = torch.randn(7, 5)
    torch.testing.assert_close(uniorch.compile(fn, target="interpret")(x), fn(x))
    files = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path / "kernels") for f in fs if f.endswith(".py")]
    assert files
    for path in files:  # a truncated write, then a stale kernel of another name
        with open(path, "w") as f:
            f.write("def broken(:\n")
    import sys

    for name in [m for m in sys.modules if m.startswith("uniorch_kernel_")]:
        del sys.modules[name]  # as in a fresh process, which reads the files again
    loader._SHARED.clear()
    x = torch.randn(7, 5)
    torch.testing.assert_close(uniorch.compile(fn, target="interpret")(x), fn(x))


class _ThroughNumpy(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(x.numpy() * 2) + 1  # export's fake tensors have no NumPy view


class _VmapOverWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        # non-strict export: "We found a fake tensor in the exported program constant's list"
        return torch.vmap(lambda row: self.w @ row.tanh())(x).softmax(-1)


def test_an_unusable_cache_folder_is_named_and_kernels_still_compile(tmp_path, monkeypatch):
    """UNIORCH_CACHE_DIR naming a file: every kernel became an eager fallback blamed on Triton's
    front end, with no word about the cache."""
    from uniorch import config

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(blocker))
    monkeypatch.setattr(config, "_checked", {})
    with pytest.warns(RuntimeWarning, match="kernel cache folder .*a_file.*cannot be used: it is a file"):
        cm = uniorch.compile(lambda x: torch.relu(x) * 3, target="interpret")
        x = torch.randn(5, 7)
        torch.testing.assert_close(cm(x), torch.relu(x) * 3)
    rep = cm.explain(x)
    assert rep.kernels and not rep.fallbacks, str(rep)


@pytest.mark.parametrize("model,shape", [(_ThroughNumpy(), (3, 4)), (_VmapOverWeight(), (5, 8))],
                         ids=["numpy", "vmap"])
def test_what_export_cannot_trace_runs_through_dynamo(model, shape):
    """A call export fails on for a reason of its own goes to Dynamo, which traces NumPy and vmap,
    and its graphs compile with uniorch, as torch.compile would run them."""
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(*shape)
            torch.testing.assert_close(cm(x), model(x))
        rep = cm.explain(x)
    assert not rep.fallbacks and rep.kernels, str(rep)
    assert rep.capture_note.startswith(f"export could not capture the whole model (capturing {type(model).__name__}")
    assert not rep.graph_breaks and "traced by Dynamo: export could not" in str(rep), str(rep)
    with torch.no_grad(), pytest.raises(uniorch.UniorchError, match=f"capturing {type(model).__name__} failed"):
        uniorch.compile(model, target="interpret", fallback="error")(x)


def test_capture_failure_runs_eagerly_and_is_reported():
    class Opaque(torch.nn.Module):
        @torch.compiler.disable  # nor can Dynamo: nothing traces it
        def forward(self, x):
            return torch.from_numpy(x.numpy() * 2) + 1

    model = Opaque()
    cm = uniorch.compile(model, target="interpret")
    with pytest.warns(RuntimeWarning, match="Dynamo compiled nothing for Opaque"):
        for _ in range(2):
            x = torch.randn(3, 4)
            torch.testing.assert_close(cm(x), model(x))
    rep = cm.explain(x)
    assert [f.stage for f in rep.fallbacks] == ["capture"] and "capturing Opaque failed" in rep.fallbacks[0].why
    assert "Dynamo compiled no graph" in rep.fallbacks[0].why, rep.fallbacks[0].why


def test_a_training_call_dynamo_compiled_nothing_of_is_reported_not_an_index_error():
    class Opaque(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        @torch.compiler.disable
        def forward(self, x):
            return self.lin(x)

    model = Opaque()
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match="Dynamo compiled nothing for Opaque"):
        cm(x).sum().backward()
    rep = cm.training_compile.forward_report()  # no forward graph to merge: an IndexError before
    assert [f.stage for f in rep.fallbacks] == ["capture"] and not rep.kernels, str(rep)
    assert "Dynamo compiled no graph" in rep.fallbacks[0].why, rep.fallbacks[0].why


def test_a_models_own_error_raises_as_its_error_and_later_calls_compile():
    """A call the model itself fails (export and Dynamo both fail on it) raises eager's error,
    every time; calls of other shapes, which export captures, compile."""
    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(5, 3)

        def forward(self, x):
            return self.fc(x).relu()

    model = Linear()
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Dynamo cannot compile Linear": it failed on the model's error
        for _ in range(2):
            with pytest.raises(RuntimeError, match="cannot be multiplied") as err:
                cm(torch.randn(2, 4))
            assert not isinstance(err.value, uniorch.UniorchError)
        (fb,) = cm.explain(torch.randn(2, 4)).fallbacks
        assert fb.stage == "capture" and "same reduction dim" in fb.why, fb.why
        x = torch.randn(2, 5)
        torch.testing.assert_close(cm(x), model(x))
        rep = cm.explain(x)
    assert not rep.fallbacks and rep.kernels, str(rep)


def test_a_branch_on_a_tensors_value_is_split_there_or_raises_with_fallback_error():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else -x  # Python control flow on a tensor value

    model = DataDependent()
    cm = uniorch.compile(model, target="interpret")
    for sign in (1, -1, 1):
        x = torch.rand(3, 4) * sign
        torch.testing.assert_close(cm(x), model(x))
    rep = cm.explain(x)
    assert not rep.fallbacks and "DataDependent" in rep.capture_note and rep.graph_breaks, str(rep)
    with pytest.raises(uniorch.UniorchError, match="capturing DataDependent failed"):
        uniorch.compile(model, target="interpret", fallback="error")(x)


def test_explain_reports_a_piece_between_graph_breaks_that_takes_no_inputs():
    """Qwen2-VL's M-RoPE positions break the graph (`.tolist()`), and one piece between the breaks
    computes from constants alone: explain asked that piece for its last inputs and raised."""
    class Pieces(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            rows = y.tolist()  # a graph break
            pos = torch.arange(6.0).view(3, 2).cumsum(0).sum(-1, keepdim=True)  # no inputs
            print(len(rows), end="")  # a second one
            return y + pos

    model = Pieces()
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(3, 4)
    torch.testing.assert_close(cm(x), model(x))
    rep = cm.explain(x)
    assert len(rep.graph_breaks) == 2 and rep.kernels and not rep.fallbacks, str(rep)


def test_non_tensor_arguments_export_cannot_take_are_constants():
    def fn(x, dtype, device):
        return torch.softmax(x, -1, dtype=dtype).to(device) * 2

    cm = uniorch.compile(fn, target="interpret")
    x = torch.randn(3, 5)
    for dt in (torch.float64, torch.float32, torch.float64):
        got = cm(x, dt, torch.device("cpu"))
        torch.testing.assert_close(got, fn(x, dt, torch.device("cpu")))
    assert cm.cache_size == 2  # the dtype is a guard: a new one recompiles
    assert not cm.explain(x, torch.float64, torch.device("cpu")).fallbacks


def test_uint8_keeps_its_dtype_and_unsigned_semantics():
    def fn(x, y):
        s = x + y  # wraps modulo 256 like eager
        return s, s > 100, (x.float() * 0.5).to(torch.uint8), x.byte()

    x = torch.randint(0, 256, (6, 7), dtype=torch.uint8)
    y = torch.randint(0, 256, (6, 7), dtype=torch.uint8)
    got, want = uniorch.compile(fn, target="interpret")(x, y), fn(x, y)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_logcumsumexp_on_large_inputs_follows_eager():
    def fn(x):
        return torch.logcumsumexp(x * 100, dim=0) - 1

    x = torch.randn(6, 5)
    x[2, 1], x[4, 3] = -torch.inf, torch.inf
    cm = uniorch.compile(fn, target="interpret")
    torch.testing.assert_close(cm(x), fn(x))
    assert not cm.explain(x).fallbacks  # a stable all-pairs form (capture/counting.py)
    long = torch.randn(1500, 2)  # past the all-pairs bound torch-mlir's overflowing lowering would run: eager
    torch.testing.assert_close(cm(long), fn(long))
    assert any("logcumsumexp" in f.op for f in cm.explain(long).fallbacks)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_mean_of_a_long_row(dtype):
    def fn(x):
        return x.mean(dim=-1), x.mean()

    x = (torch.rand(2, 70000) + 0.5).to(dtype)
    got, want = uniorch.compile(fn, target="interpret")(x), fn(x)
    for g, w in zip(got, want):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2)


def test_interpreted_kernels_in_threads_leave_triton_language_alone():
    """Triton's interpreter patches triton.language while a kernel runs; unserialized threads left
    it patched, and a later cross-compile then built IR with the interpreter's builder."""
    import triton.language as tl

    before = {n: getattr(tl, n) for n in ("reduce", "associative_scan", "range", "multiple_of")}
    fns = [uniorch.compile(lambda x, k=k: (x * k).softmax(-1).sum(0), target="interpret") for k in range(4)]
    x = torch.randn(32, 32)
    for f in fns:
        f(x)
    threads = [threading.Thread(target=lambda f=f: [f(x) for _ in range(10)]) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {n: getattr(tl, n) for n in before} == before
    art = uniorch.compile_aot(lambda x: x.amax(-1), (x,), target="cuda:sm_90")  # Triton's front end still works
    assert art.kernels and "tt.reduce" in art.kernels[0].asm["ttir"]


def test_import_from_the_folder_holding_a_checkout_says_why(tmp_path):
    """Python imports ./uniorch from the current directory first: from the folder holding a checkout
    named uniorch, that is the checkout itself. The import fails at once, naming the cause and the
    fix, instead of an empty namespace package failing later with "no attribute 'compile'"."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "uniorch").symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)
    r = subprocess.run([sys.executable, "-c", "import uniorch; uniorch.compile"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "found the uniorch checkout" in r.stderr and "pip install -e" in r.stderr, r.stderr
    assert "has no attribute" not in r.stderr


def test_a_sparse_gradient_falls_back_with_a_reason_that_says_where():
    """torch-mlir's importer refuses a sparse COO tensor with a bare `assert`: the fallback used to
    read "AssertionError: " and nothing else."""
    emb = torch.nn.Embedding(20, 4, sparse=True)
    cm = uniorch.compile(emb, target="interpret")
    idx = torch.randint(0, 20, (3, 5))
    cm(idx).sum().backward()
    ref = torch.nn.Embedding(20, 4, sparse=True)
    ref.load_state_dict(emb.state_dict())
    ref(idx).sum().backward()
    torch.testing.assert_close(emb.weight.grad.to_dense(), ref.weight.grad.to_dense())
    whys = [f.why for f in cm.explain(idx).backward.fallbacks]
    assert whys and all(w.split("AssertionError:", 1)[-1].strip() for w in whys), whys
