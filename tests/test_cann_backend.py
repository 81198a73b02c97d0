"""The Ascend backend: every kernel goes through Ascend's own triton-adapter-opt ("ttadapter"),
whose linalg the bundle keeps; the hand-off names bishengir-compile as the one step left; it
refuses to run kernels, naming what is missing."""
from __future__ import annotations

import json
import os

import pytest
import torch

from uniorch.backends import BackendError, get_backend
from uniorch.backends.cann import write_bundle
from uniorch.backends.driver import compile_kernel, stage_names

from adapter_util import needs_adapter

pytestmark = needs_adapter


def _compiled(target: str):
    from uniorch.codegen import generate
    from uniorch.ir import to_mlir
    from uniorch.runtime.compiler import kernel_functions, to_kernel_stage
    from uniorch.targets import parse_target

    t = parse_target(target)
    module = to_mlir(lambda x, y: torch.softmax(x * y, -1), (torch.randn(6, 40), torch.randn(40)))
    to_kernel_stage(module, "scheduled", t)
    ops = kernel_functions(module)
    return [(compile_kernel(generate(op, str(t)), t.backend, use_cache=False), str(op)) for op in ops]


def test_bundle_has_ttir_linalg_manifest_and_build_script(tmp_path):
    assert stage_names(get_backend("cann")) == ["triton", "ttir", "ttadapter", "handoff"]
    kernels = _compiled("cann:ascend910b3")
    written = write_bundle([ck for ck, _ in kernels], str(tmp_path), linalg={ck.name: text for ck, text in kernels})
    ck, linalg = kernels[0]
    fn = ck.source.fn_name
    names = {os.path.basename(p) for p in written}
    assert {f"{fn}.ttir.mlir", f"{fn}.ttadapter.mlir", f"{fn}.linalg.mlir", f"{fn}.manifest.json", "build.sh"} <= names
    assert "tt.func public @" + fn in (tmp_path / f"{fn}.ttir.mlir").read_text()
    assert "linalg.generic" in (tmp_path / f"{fn}.linalg.mlir").read_text()
    info = json.loads((tmp_path / f"{fn}.manifest.json").read_text())
    assert info["entry"] == fn and info["soc"] == "Ascend910B3" and info["inputs"]["linalg"] == f"{fn}.linalg.mlir"
    assert info["remaining"] == ["bishengir-compile"] and info["mix_mode"] == "aiv"
    assert info["inputs"]["ttadapter"] == f"{fn}.ttadapter.mlir"
    (adapter,), (bisheng,) = (c["argv"] for c in info["done"]), (c["argv"] for c in info["commands"])
    assert adapter[:2] == ["triton-adapter-opt", f"{fn}.ttir.mlir"] and adapter[-2:] == ["-o", f"{fn}.ttadapter.mlir"]
    assert any(a.startswith("--triton-to-linalg=global-kernel=false named-ops=True") for a in adapter)
    assert bisheng[:3] == ["bishengir-compile", f"{fn}.ttadapter.mlir", "--target=Ascend910B3"]
    assert {"--enable-hfusion-compile=true", "--enable-triton-kernel-compile=true"} <= set(bisheng)
    assert info["launch"]["grid"] == list(ck.source.grid) and info["launch"]["arguments"] == ck.source.arg_names()
    script = (tmp_path / "build.sh").read_text()
    assert info["commands"][0]["shell"] in script and os.access(tmp_path / "build.sh", os.X_OK)
    assert "\ntriton-adapter-opt " not in script  # it already ran: its output is in the bundle


def test_stub_refuses_to_run_naming_what_is_missing():
    cann = get_backend("cann")
    assert cann.is_available() is False
    reason = cann.unavailable_reason()
    assert "launcher" in reason and ("torch_npu" in reason or "CANN" in reason)
    with pytest.raises(BackendError, match="cannot run kernels"):
        cann.load(None)


def test_aot_bundle_carries_the_ascend_handoff_with_linalg(tmp_path):
    import json

    import torch

    import uniorch

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU())
    art = uniorch.compile_aot(model, (torch.randn(2, 8),), target="cann")
    assert art.kernels and all(k.stages[-1] == "handoff" for k in art.kernels)
    art.save(str(tmp_path / "b"))
    for k in art.kernels:
        d = tmp_path / "b" / "handoff" / k.name
        stem = k.source.fn_name
        manifest = json.loads((d / f"{stem}.manifest.json").read_text())
        assert manifest["inputs"]["linalg"] == f"{stem}.linalg.mlir"
        linalg = (d / f"{stem}.linalg.mlir").read_text()
        assert "func.func" in linalg and "linalg." in linalg  # the kernel's own linalg form
        assert "tt.func" in (d / f"{stem}.ttir.mlir").read_text()
        assert [c["tool"] for c in manifest["commands"]] == ["bishengir-compile"]
        assert [c["tool"] for c in manifest["done"]] == ["triton-adapter-opt"]
        adapted = (d / f"{stem}.ttadapter.mlir").read_text()
        assert f"func.func @{stem}(" in adapted and "mix_mode" in adapted and "tt.load" not in adapted
    # one build script for the bundle (README and the load error name it; none was written), each
    # kernel's bishengir-compile run in its folder, on the adapter's output there
    script = (tmp_path / "b" / "handoff" / "build.sh").read_text()
    for k in art.kernels:
        stem = k.source.fn_name
        assert f"(cd {k.name} && bishengir-compile {stem}.ttadapter.mlir " in script, script
        assert (tmp_path / "b" / "handoff" / k.name / f"{stem}.ttadapter.mlir").exists()


def _filecheck(text: str, checks: str) -> None:
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".checks", delete=False) as f:
        f.write(checks)
    proc = subprocess.run([sys.executable, "-m", "filecheck", f.name], input=text, capture_output=True, text=True)
    os.unlink(f.name)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_ttadapter_stage_is_ascend_linalg_of_the_kernel():
    """The adapter's output for a generated softmax kernel: Ascend's argument convention (sync-lock
    and workspace memrefs, pointers as memrefs with their strides, six trailing i32 for the grid and
    program ids), vector-core placement, the kernel's max and sum reductions and exp as linalg."""
    (ck, _), = _compiled("cann:ascend910b3")
    fn = ck.source.fn_name
    _filecheck(ck.asm["ttadapter"], f"""
CHECK: func.func @{fn}(%arg0: memref<?xi8>, %arg1: memref<?xi8>, %arg2: memref<?xf32> {{tt.tensor_kind = 0 : i32}}, %arg3: i64, %arg4: i64, %arg5: memref<?xf32> {{tt.tensor_kind = 0 : i32}}
CHECK-SAME: %arg7: memref<?xf32> {{tt.tensor_kind = 1 : i32}}
CHECK-SAME: %arg10: i32, %arg11: i32, %arg12: i32, %arg13: i32, %arg14: i32, %arg15: i32)
CHECK-SAME: mix_mode = "aiv"
CHECK: arith.muli %arg13
CHECK: memref.reinterpret_cast %arg2
CHECK: linalg.reduce
CHECK: arith.cmpf ogt
CHECK: math.exp
CHECK: linalg.reduce
CHECK: arith.addf
CHECK: arith.divf
CHECK: memref.reinterpret_cast %arg7
CHECK: bufferization.materialize_in_destination
CHECK-NOT: tt.load
""")


def test_adapter_rejection_names_the_kernel_and_quotes_the_adapter():
    from uniorch.backends.cann import handoff

    (ck, _), = _compiled("cann:ascend910b3")
    fn = ck.source.fn_name
    bad = ck.asm["ttir"].replace("tt.get_program_id x", "tt.get_program_id w", 1)
    assert bad != ck.asm["ttir"]
    cann = get_backend("cann")
    stages: dict = {}
    cann.add_stages(stages, cann.parse_options({}))
    with pytest.raises(BackendError) as err:
        stages["ttadapter"](bad, {})
    msg = str(err.value)
    assert f"triton-adapter-opt rejected kernel {fn}" in msg
    assert "error:" in msg and "program_id" in msg  # the adapter's own diagnostic, quoted
    assert handoff.entry_name(bad) == fn


def test_missing_adapter_is_named(monkeypatch):
    from uniorch.backends import triton_adapter

    monkeypatch.setattr(triton_adapter, "path", lambda: None)
    assert "triton-adapter-opt not found" in get_backend("cann").unavailable_reason()
    with pytest.raises(BackendError, match="kernel k9: triton-adapter-opt not found.*scripts/setup.sh"):
        triton_adapter.run("module {}", "k9", get_backend("cann").parse_options({}))


def test_a_decode_steps_projection_builds_for_ascend():
    # one row (a decode step's token): its stores stepped by 0 along the rows, which the adapter
    # rejects ("strides must not be zero"); every such projection of a bundle was left to PyTorch
    import torch.nn.functional as F

    import uniorch

    x, w, res = torch.randn(1, 1, 32), torch.randn(32, 32), torch.randn(1, 1, 32)
    art = uniorch.compile_aot(lambda x, w, res: F.linear(x, w) + res, (x, w, res), target="cann")
    assert [k.name for k in art.kernels] == ["k0_contraction"] and not art.fallbacks, str(art)
    assert "ttadapter" in art.kernels[0].asm


def test_sorts_build_for_ascend_with_the_runtime_gather():
    # the bitonic network unrolled (as on GPUs) aborted the adapter when the sort's indices were not
    # kept; looped, each step reads its partner lanes with tl.gather, a call into Ascend's runtime
    import uniorch

    x = torch.randn(6, 40)
    for fn in (lambda t: torch.sort(t, -1)[0], lambda t: torch.topk(t, 3, largest=False)):
        art = uniorch.compile_aot(fn, (x,), target="cann")
        assert [k.kind for k in art.kernels] == ["sort"] and not art.fallbacks, str(art)
        _filecheck(art.kernels[0].asm["ttadapter"], """
CHECK: func.func private @triton_gather
CHECK: scf.for
CHECK: scf.for
CHECK: call @triton_gather
""")
