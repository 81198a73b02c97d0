"""The Ascend stub: its "handoff" stage and bundle carry the exact toolchain commands, and it
refuses to run kernels, naming what is missing."""
from __future__ import annotations

import json
import os

import pytest
import torch

from uniorch.backends import BackendError, get_backend
from uniorch.backends.cann import write_bundle
from uniorch.backends.driver import compile_kernel, stage_names


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
    assert stage_names(get_backend("cann")) == ["triton", "ttir", "handoff"]
    kernels = _compiled("cann:ascend910b3")
    written = write_bundle([ck for ck, _ in kernels], str(tmp_path), linalg={ck.name: text for ck, text in kernels})
    ck, linalg = kernels[0]
    fn = ck.source.fn_name
    names = {os.path.basename(p) for p in written}
    assert {f"{fn}.ttir.mlir", f"{fn}.linalg.mlir", f"{fn}.manifest.json", "build.sh"} <= names
    assert "tt.func public @" + fn in (tmp_path / f"{fn}.ttir.mlir").read_text()
    assert "linalg.generic" in (tmp_path / f"{fn}.linalg.mlir").read_text()
    info = json.loads((tmp_path / f"{fn}.manifest.json").read_text())
    assert info["entry"] == fn and info["soc"] == "Ascend910B3" and info["inputs"]["linalg"] == f"{fn}.linalg.mlir"
    adapter, bisheng = (c["argv"] for c in info["commands"])
    assert adapter[:2] == ["triton-adapter-opt", f"{fn}.ttir.mlir"] and adapter[-2:] == ["-o", f"{fn}.ttadapter.mlir"]
    assert any(a.startswith("--triton-to-linalg=global-kernel=false named-ops=True") for a in adapter)
    assert bisheng[:3] == ["bishengir-compile", f"{fn}.ttadapter.mlir", "--target=Ascend910B3"]
    assert {"--enable-hfusion-compile=true", "--enable-triton-kernel-compile=true"} <= set(bisheng)
    assert info["launch"]["grid"] == list(ck.source.grid) and info["launch"]["arguments"] == ck.source.arg_names()
    script = (tmp_path / "build.sh").read_text()
    assert info["commands"][0]["shell"] in script and os.access(tmp_path / "build.sh", os.X_OK)


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
        assert [c["tool"] for c in manifest["commands"]] == ["triton-adapter-opt", "bishengir-compile"]
