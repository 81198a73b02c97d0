"""AOT bundles with symbolic sizes: `compile_aot(..., dynamic=True)` or `mark_dynamic` on the
example inputs gives a bundle whose kernels take sizes at launch, whose manifest records each
symbol (where it is read, its range), and whose loader checks every call against them."""
import json

import pytest
import torch

import uniorch
from uniorch.ir import dims
from uniorch.runtime.bundle import InputSpecError
from uniorch.testing import zoo


def _rel_err(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


@pytest.fixture(scope="module")
def llama_bundle(tmp_path_factory):
    model, args, _ = zoo.load("llama_block")
    path = tmp_path_factory.mktemp("bundle") / "llama"
    art = uniorch.compile_aot(model, args, "interpret", dynamic=True)
    assert not art.fallbacks, art.fallbacks
    art.save(str(path))
    return model, args, path


def test_manifest_records_symbols_and_symbolic_input_dims(llama_bundle):
    _, _, path = llama_bundle
    manifest = json.loads((path / "manifest.json").read_text())
    user = [s for s in manifest["inputs"] if s["kind"] == "user"]
    assert len(user) == 2
    batch, length, feat = user[0]["shape"]
    assert feat == 32 and isinstance(batch, str) and isinstance(length, str) and batch != length
    # the int start_pos is a size too: taken as the rows of an (n, 0) tensor (capture/int_sizes.py)
    start, zero = user[1]["shape"]
    assert user[1].get("int_rows") and zero == 0 and isinstance(start, str) and start not in (batch, length)
    assert manifest["symbols"] == {batch: {"input": 0, "dim": 0, "range": [2, None]},
                                   length: {"input": 0, "dim": 1, "range": [2, None]},
                                   start: {"input": 1, "dim": 0, "range": [2, None]}}
    assert all(isinstance(d, int) for s in manifest["inputs"] if s["kind"] != "user" for d in s["shape"])
    # at least one kernel's grid is an expression of the symbols, stored as text
    grids = [json.loads((path / k["info"]).read_text())["launch"]["grid"] for k in manifest["kernels"]]
    assert any(isinstance(g, str) and {str(s) for s in dims.parse(g).free_symbols} <= {batch, length}
               for grid in grids for g in grid)


def test_loaded_bundle_matches_eager_at_every_size(llama_bundle):
    model, args, path = llama_bundle
    fn = uniorch.load(str(path))
    live = uniorch.load(str(path), model=model)  # weights read from the model, by its own names
    gen = torch.Generator().manual_seed(7)
    for b, t, start in [(2, 5, 3), (3, 19, 40), (8, 33, 2), (2, 8, 7)]:
        x = torch.randn(b, t, 32, generator=gen)
        with torch.no_grad():
            want = model(x, start)
        for f in (fn, live):
            got = f(x, start)
            assert got.shape == want.shape
            assert _rel_err(got, want) <= 1e-5, (b, t, _rel_err(got, want))


def test_loaded_bundle_rejects_sizes_outside_its_symbols(llama_bundle):
    model, args, path = llama_bundle
    fn = uniorch.load(str(path))
    with pytest.raises(InputSpecError, match=r"args\[0\] dim 0 is 1, outside the range \[2, inf\]"):
        fn(torch.randn(1, 9, 32), args[1])
    with pytest.raises(InputSpecError, match=r"args\[1\] is 1, outside the range \[2, inf\]"):
        fn(torch.randn(2, 9, 32), 1)  # start_pos 0 and 1 are traced apart, as torch.compile does
    with pytest.raises(InputSpecError, match=r"args\[1\]: expected an int"):
        fn(torch.randn(2, 9, 32), 2.5)
    with pytest.raises(InputSpecError, match=r"compiled for float32\[s\d+, s\d+, 32\].*float32\[2, 9, 16\]"):
        fn(torch.randn(2, 9, 16), args[1])
    with pytest.raises(InputSpecError, match="compiled for float32"):
        fn(torch.randn(2, 9, 32, dtype=torch.float64), args[1])


def test_mark_dynamic_keeps_only_the_marked_dim_symbolic(tmp_path):
    model, args, _ = zoo.load("llama_block")
    x = args[0].clone()
    torch._dynamo.mark_dynamic(x, 1)
    uniorch.compile_aot(model, (x, args[1]), "interpret").save(str(tmp_path / "b"))
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    (sym, info), = manifest["symbols"].items()
    assert info == {"input": 0, "dim": 1, "range": [2, None]}
    fn = uniorch.load(str(tmp_path / "b"))
    x = torch.randn(2, 13, 32)
    with torch.no_grad():
        assert _rel_err(fn(x, args[1]), model(x, args[1])) <= 1e-5
    with pytest.raises(InputSpecError, match=r"compiled for float32\[2, s\d+, 32\]"):
        fn(torch.randn(3, 13, 32), args[1])


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
def test_cross_compiled_symbolic_bundle_keeps_size_parameters(tmp_path, target, binary):
    """cuda:sm_90 (ptxas-checked cubins) and rocm:gfx942 (hsaco): the kernels take the symbols as
    integer parameters."""
    model, args, _ = zoo.load("llama_block")
    art = uniorch.compile_aot(model, args, target, dynamic=True)
    assert not art.fallbacks, art.fallbacks
    assert all(k.asm[binary][:4] == b"\x7fELF" for k in art.kernels)
    symbolic = [k for k in art.kernels if k.source.symbols]
    assert symbolic, "no kernel takes a size"
    for k in symbolic:
        sig = k.asm["ttir"].split("tt.func", 1)[1].split("{", 1)[0]
        assert sig.count(": i32") + sig.count(": i64") >= len(k.source.symbols), sig
    art.save(str(tmp_path / "b"))
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert len(manifest["symbols"]) == 3 and manifest["target"] == target  # batch, length, start_pos


def test_size_expressions_from_files_are_parsed_not_evaluated():
    """Grids and arg_dims come from bundles and MLIR files: only size expressions are read."""
    # symbols are positive integers: Max(s3, 1) is s3
    assert str(dims.parse("2*ceiling(s3*s5/64) + Max(s3, 1)")) == "s3 + 2*ceiling(s3*s5/64)"
    for text in ['__import__("os").system("true")', "s0.func", "lambda: 1", "exec('1')", "s0; 1", "x"]:
        with pytest.raises(ValueError, match="not a size expression"):
            dims.parse(text)
