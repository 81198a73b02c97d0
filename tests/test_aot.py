"""Ahead-of-time compilation: `compile_aot` for targets this CPU machine lacks, bundles, and
`uniorch.load` in a fresh process that recompiles nothing."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn

import uniorch
from uniorch.backends import BackendError
from uniorch.backends.driver import stage_names
from uniorch.runtime.bundle import BundleError, InputSpecError
from uniorch.targets import parse_target

ELF = b"\x7fELF"


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class NormSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.norm = nn.Linear(32, 32), nn.LayerNorm(32)

    def forward(self, x):
        return torch.softmax(self.norm(self.proj(x)), dim=-1)


class EagerMiddle(nn.Module):
    """An LDL factorization runs in PyTorch (nothing lowers Bunch-Kaufman pivoting): the program is
    region, eager op, region; outputs are a dict."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("scale", torch.rand(8))

    def forward(self, x, *, shift=2.0):
        y = torch.relu(self.lin(x))
        factored = torch.linalg.ldl_factor_ex(y.mT @ y + torch.eye(8))[0]
        return {"factored": factored * self.scale + shift, "relu": (y,)}


def _rel_err(got, want) -> float:
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("target", ["interpret", "cuda:sm_90", "rocm:gfx942"])
def test_compile_aot_emits_every_stage_without_a_device(target):
    art = uniorch.compile_aot(NormSoftmax(), (torch.randn(4, 32),), target=target)
    tgt = parse_target(target)
    assert art.target == str(tgt) and art.kernels and not art.fallbacks, str(art)
    expected = stage_names(tgt.backend)
    for k in art.kernels:
        assert k.stages == expected, (k.name, k.stages)
        assert "@jit" in k.asm["triton"] and "tt.func" in k.asm["ttir"]
    if tgt.vendor == "cuda":
        assert {"ttgir", "llir", "ptx", "cubin"} <= set(expected)
        assert all(".target sm_90" in k.asm["ptx"] and k.asm["cubin"].startswith(ELF) for k in art.kernels)
        assert all(k.metadata["warp_size"] == 32 for k in art.kernels)
    if tgt.vendor == "rocm":
        assert {"ttgir", "llir", "amdgcn", "hsaco"} <= set(expected)
        assert all("gfx942" in k.asm["amdgcn"] and k.asm["hsaco"].startswith(ELF) for k in art.kernels)
        assert all(k.metadata["warp_size"] == 64 for k in art.kernels)  # wavefronts: scheduled per target
    text = str(art)
    assert str(tgt) in text and all(k.name in text for k in art.kernels) and " ".join(expected) in text


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """Three interpret bundles, their inputs and eager outputs: a plain MLP, a model whose sort
    falls back to eager between two regions, and one whose matmuls are forced to fall back at the
    backend stage."""
    root = tmp_path_factory.mktemp("bundles")
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    cases = {"mlp": (MLP().eval(), (torch.randn(4, 16),), {}),
             "sort": (EagerMiddle().eval(), (torch.randn(4, 8),), {"shift": 3.0})}
    arts = {}
    for name, (model, args, kwargs) in cases.items():
        arts[name] = uniorch.compile_aot(model, args, target="interpret", kwargs=kwargs)
        arts[name].save(str(root / name))
    # a backend stage that fails for every contraction: its matmuls must run eagerly instead
    import uniorch.backends.driver as driver

    real = driver.compile_kernel

    def failing(ks, backend, **kw):
        if "contraction" in ks.name:
            raise BackendError(f"test: refusing {ks.name}")
        return real(ks, backend, **kw)

    driver.compile_kernel = failing
    try:
        model = NormSoftmax().eval()
        cases["forced"] = (model, (torch.randn(4, 32),), {})
        arts["forced"] = uniorch.compile_aot(model, cases["forced"][1], target="interpret")
        arts["forced"].save(str(root / "forced"))
    finally:
        driver.compile_kernel = real
    return root, cases, arts


def test_fallbacks_are_reported(bundles):
    _, _, arts = bundles
    assert not arts["mlp"].fallbacks
    sort = arts["sort"]
    assert [f.op for f in sort.fallbacks] == ["aten.linalg_ldl_factor_ex.default"] and "ldl_factor" in str(sort), str(sort)
    assert {k.region for k in sort.kernels} == {0, 1}
    # names unique in the bundle: the second region's start with r1_
    assert all(k.name.startswith("r1_") == (k.region == 1) for k in sort.kernels), [k.name for k in sort.kernels]
    forced = arts["forced"]
    assert forced.fallbacks and all(f.stage == "backend" and "refusing" in f.why for f in forced.fallbacks)
    assert forced.kernels and all(k.kind != "contraction" for k in forced.kernels), str(forced)


CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch, triton
import uniorch
import uniorch.backends.driver as driver
import triton.compiler.compiler as tcc
from triton.compiler import ASTSource

def forbid(owner, name):
    def called(*a, **k):
        raise AssertionError(f"{name} ran while loading a bundle: that is recompiling")
    setattr(owner, name, called)

for owner, name in [(driver, "compile_kernel"), (driver, "_triton_frontend"), (tcc, "compile"),
                    (triton, "compile"), (ASTSource, "make_ir")]:
    forbid(owner, name)
root, names = sys.argv[1], sys.argv[2:]
report = {"import_s": time.perf_counter() - t0}
for name in names:
    t = time.perf_counter()
    fn = uniorch.load(os.path.join(root, name))
    report[name + "_load_s"] = time.perf_counter() - t
    args, kwargs = torch.load(os.path.join(root, name + ".in.pt"))
    t = time.perf_counter()
    torch.save(fn(*args, **kwargs), os.path.join(root, name + ".out.pt"))
    report[name + "_run_s"] = time.perf_counter() - t
# capture, MLIR import, the pass pipeline and codegen were never even imported
report["compile_modules"] = [m for m in ("uniorch.capture.trace", "uniorch.ir.importer", "uniorch.passes",
                                         "uniorch.runtime.compiler", "uniorch.runtime.partition",
                                         "uniorch.codegen.generic", "uniorch.codegen.contraction") if m in sys.modules]
print(json.dumps(report))
"""


def test_load_in_fresh_process_matches_eager_without_recompiling(bundles, tmp_path):
    root, cases, _ = bundles
    expected = {}
    for name, (model, _, kwargs) in cases.items():
        args = (torch.randn_like(cases[name][1][0]),)  # fresh inputs, not the ones compiled with
        torch.save((args, kwargs), str(root / f"{name}.in.pt"))
        with torch.no_grad():
            expected[name] = model(*args, **kwargs)
    env = dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), *cases], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print("fresh process:", report)
    assert report["compile_modules"] == [], report
    assert not os.path.exists(tmp_path / "cache" / "compiled"), "the stage cache was used"
    for name in cases:
        got = torch.load(str(root / f"{name}.out.pt"))
        want = expected[name]
        if name == "sort":
            got, want = (got["factored"], got["relu"][0]), (want["factored"], want["relu"][0])
        for g, w in zip(*((got, want) if isinstance(got, tuple) else ((got,), (want,)))):
            assert g.shape == w.shape and not torch.isnan(g).any()
            assert _rel_err(g, w) <= 1e-4, (name, _rel_err(g, w), report)


def test_loaded_model_checks_inputs_and_reads_live_weights(bundles):
    root, cases, _ = bundles
    model, (x,), kwargs = cases["sort"]
    fn = uniorch.load(str(root / "sort"))
    assert [f["op"] for f in fn.fallbacks] == ["aten.linalg_ldl_factor_ex.default"]
    with pytest.raises(InputSpecError, match=r"args\[0\].*float32\[4, 8\].*float64\[4, 8\]"):
        fn(x.double(), **kwargs)
    with pytest.raises(InputSpecError, match=r"float32\[4, 8\].*float32\[5, 8\]"):
        fn(torch.randn(5, 8), **kwargs)
    with pytest.raises(InputSpecError, match=r"kwargs\['shift'\] was the constant 3.0"):
        fn(x, shift=1.0)
    with pytest.raises(InputSpecError, match="compiled for args"):
        fn(x)
    live = uniorch.load(str(root / "sort"), model=model)
    with torch.no_grad():
        model.lin.weight.mul_(-2.0)
        want = model(x, **kwargs)["factored"]
    assert _rel_err(live(x, **kwargs)["factored"], want) <= 1e-4
    with pytest.raises(BundleError, match="no parameter 'lin.weight'"):
        uniorch.load(str(root / "sort"), model=MLP())


def test_bundle_for_an_absent_device_gives_the_backends_error(tmp_path):
    if parse_target("cuda:sm_90").backend.is_available():
        pytest.skip("this machine has a CUDA GPU")
    art = uniorch.compile_aot(lambda x: torch.relu(x) * 2, (torch.randn(2, 16),), target="cuda:sm_90")
    art.save(str(tmp_path / "cuda"))
    manifest = json.loads((tmp_path / "cuda" / "manifest.json").read_text())
    assert manifest["target"] == "cuda:sm_90" and all("cubin" in k["binary"] for k in manifest["kernels"])
    with pytest.raises(BackendError, match="cuda:sm_90.*cannot run here"):
        uniorch.load(str(tmp_path / "cuda"))


def _copy(root, name, tmp_path):
    dst = tmp_path / name
    shutil.copytree(root / name, dst)
    return dst


def _edit_manifest(path, edit):
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_corrupted_or_mismatched_bundles_are_clear_errors(bundles, tmp_path):
    root, _, _ = bundles
    with pytest.raises(BundleError, match="no manifest.json"):
        uniorch.load(str(tmp_path))
    b = _copy(root, "mlp", tmp_path)
    (b / "manifest.json").write_text((b / "manifest.json").read_text()[:100])
    with pytest.raises(BundleError, match="corrupted"):
        uniorch.load(str(b))

    b = _copy(root, "sort", tmp_path)
    _edit_manifest(b, lambda m: m.update(format_version=999))
    with pytest.raises(BundleError, match="format version 999"):
        uniorch.load(str(b))
    # a bundle without operator schemas (saved before they were recorded) must match torch's major.minor
    _edit_manifest(b, lambda m: (m.update(format_version=1, versions=dict(m["versions"], torch="1.0.0")),
                                 m.pop("op_schemas", None)))
    with pytest.raises(BundleError, match="built with torch 1.0.0"):
        uniorch.load(str(b))
    assert uniorch.load(str(b), check_versions=False) is not None

    b = _copy(root, "forced", tmp_path)
    kernel = next(iter((b / "kernel").glob("*.triton")))
    kernel.write_text(kernel.read_text() + "\n# tampered\n")
    with pytest.raises(BundleError, match=f"{kernel.name} does not match its checksum"):
        uniorch.load(str(b))
    kernel.unlink()
    with pytest.raises(BundleError, match=f"{kernel.name} is missing"):
        uniorch.load(str(b))


# -- another torch ---------------------------------------------------------------------------------
def _saved(tmp_path):
    torch.manual_seed(0)
    model = NormSoftmax().eval()
    art = uniorch.compile_aot(model, (torch.randn(4, 32),), target="interpret")
    return model, art.save(str(tmp_path / "bundle"))


# the other end of the versions supported: under torch 2.11 itself, "2.11.0" would be no other torch
OTHER_TORCH = "2.13.0" if torch.__version__.startswith("2.11.") else "2.11.0"


def test_a_bundle_from_another_torch_runs_when_its_operators_agree(tmp_path):
    """A laptop's torch 2.13 bundle on a GPU machine's torch 2.11: the version differs, but every
    operator the bundle calls has the schema it was saved with, so it loads and runs."""
    from test_driver_launch import _rewrite

    model, path = _saved(tmp_path)
    _rewrite(path, "manifest.json", lambda m: {**m, "versions": {**m["versions"], "torch": OTHER_TORCH}})
    fn = uniorch.load(path, model=model)
    x = torch.randn(4, 32)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x), rtol=1e-4, atol=1e-5)


def test_an_operator_whose_schema_changed_is_named(tmp_path):
    from test_driver_launch import _rewrite

    model, path = _saved(tmp_path)
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    rel = next(r["eager"] for r in manifest["regions"] if r["eager"])
    changed = {}

    def edit(graph):
        for node in graph["nodes"]:
            if node.get("schema") and not changed:
                changed["op"] = node["target"]
                node["schema"] = node["schema"].replace(") -> ", ", int added_in_another_torch=0) -> ", 1)
        return graph

    _rewrite(path, rel, edit)
    with pytest.raises(BundleError, match=f"operator {changed['op']} differs in this torch.*added_in_another_torch"):
        uniorch.load(path, model=model)


def test_older_bundles_without_schemas_keep_the_torch_version_check(tmp_path):
    from test_driver_launch import _rewrite

    model, path = _saved(tmp_path)
    _rewrite(path, "manifest.json", lambda m: {**{k: v for k, v in m.items() if k != "op_schemas"},
                                                "versions": {**m["versions"], "torch": OTHER_TORCH}})
    with pytest.raises(BundleError, match=f"built with torch {OTHER_TORCH}"):
        uniorch.load(path, model=model)


_CACHE_CHILD = r"""
import sys, torch, uniorch
path = sys.argv[1]
saved = torch.load(path + "/../io.pt")
out = uniorch.load(path)(saved["ids"])
assert type(out.past_key_values).__name__ == "DynamicCache", type(out.past_key_values)
torch.testing.assert_close(out.logits, saved["logits"])
for got, want in zip(out.past_key_values.layers, saved["keys"]):
    torch.testing.assert_close(got.keys, want)
print("MATCHED")
"""


def test_a_bundle_returning_a_transformers_cache_loads_in_a_new_process(tmp_path):
    """A decoder in its default settings returns a DynamicCache; loading its bundle in a process that
    never compiled raised "Deserializing transformers.cache_utils:DynamicCache in pytree is not
    registered": loading registers transformers' cache classes as capture does."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (2, 6))
    uniorch.compile_aot(model, (ids,), target="interpret").save(str(tmp_path / "b"))
    ids = torch.randint(0, 64, (2, 6))
    with torch.no_grad():
        ref = model(ids)
    torch.save({"ids": ids, "logits": ref.logits, "keys": [layer.keys for layer in ref.past_key_values.layers]},
               tmp_path / "io.pt")
    proc = subprocess.run([sys.executable, "-c", _CACHE_CHILD, str(tmp_path / "b")], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and "MATCHED" in proc.stdout, proc.stderr[-3000:]
