"""Backend discovery through the `uniorch.backends` entry-point group: broken plugins are skipped
with a warning naming them, and every other backend keeps working."""
from __future__ import annotations

import sys
import types
from importlib import metadata

import pytest

from uniorch.backends import Backend, registry


class GoodBackend(Backend):
    name = "good"
    archs = ("x1",)


class ImpostorBackend(Backend):  # a second package claiming the name "good"
    name = "good"
    archs = ("x2",)


class NotABackend:
    name = "notabackend"
    archs = ("x",)


@pytest.fixture
def plugins(monkeypatch):
    """Installs fake entry points (name → "module:attr") beside the real ones, for one test."""
    module = types.ModuleType("fake_uniorch_plugins")
    module.GoodBackend, module.ImpostorBackend, module.NotABackend = GoodBackend, ImpostorBackend, NotABackend
    monkeypatch.setitem(sys.modules, "fake_uniorch_plugins", module)
    real = metadata.entry_points

    def install(*pairs):
        fake = [metadata.EntryPoint(name, value, registry.GROUP) for name, value in pairs]

        def entry_points(**params):
            found = real(**params)
            return list(found) + fake if params.get("group") == registry.GROUP else found

        monkeypatch.setattr(metadata, "entry_points", entry_points)
        registry.reset()

    yield install
    registry.reset()


def _discover():
    with pytest.warns(registry.PluginWarning) as record:
        table = registry.backends()
    return table, [str(w.message) for w in record]


def _builtins_work(table):
    assert {"interpret", "cuda", "rocm", "cann"} <= set(table)
    from uniorch.targets import parse_target

    assert str(parse_target("rocm:gfx942")) == "rocm:gfx942"


def test_good_plugin_is_a_target(plugins):
    plugins(("good", "fake_uniorch_plugins:GoodBackend"))
    from uniorch.targets import known_targets, parse_target

    assert registry.backends()["good"] is GoodBackend
    assert str(parse_target("good")) == "good:x1" and "good:x1" in known_targets()


def test_auto_never_picks_a_backend_that_opts_out(plugins):
    class AlwaysThere(GoodBackend):
        name = "alwaysthere"
        auto_select = False

        @classmethod
        def is_available(cls):
            return True

    sys.modules["fake_uniorch_plugins"].AlwaysThere = AlwaysThere
    plugins(("alwaysthere", "fake_uniorch_plugins:AlwaysThere"))
    from uniorch.targets import auto_target

    assert registry.backends()["alwaysthere"] is AlwaysThere
    assert auto_target().vendor != "alwaysthere"


def test_plugin_that_fails_to_import_is_skipped(plugins):
    plugins(("broken", "no_such_module_for_uniorch:Thing"), ("good", "fake_uniorch_plugins:GoodBackend"))
    table, messages = _discover()
    assert "broken" not in table and table["good"] is GoodBackend
    assert any("'broken'" in m and "no_such_module_for_uniorch" in m and "failed to import" in m for m in messages)
    _builtins_work(table)


def test_plugin_that_is_not_a_backend_is_skipped(plugins):
    plugins(("notabackend", "fake_uniorch_plugins:NotABackend"))
    table, messages = _discover()
    assert "notabackend" not in table
    assert any("'notabackend'" in m and "not a subclass" in m for m in messages)
    _builtins_work(table)


def test_duplicate_name_keeps_the_first_and_names_both(plugins):
    plugins(("good", "fake_uniorch_plugins:GoodBackend"), ("good", "fake_uniorch_plugins:ImpostorBackend"))
    table, messages = _discover()
    assert table["good"] is GoodBackend
    assert any("ImpostorBackend" in m and "already taken" in m and "GoodBackend" in m for m in messages)
    _builtins_work(table)


def test_plugin_cannot_replace_a_builtin(plugins):
    class FakeCuda(Backend):
        name = "cuda"
        archs = ("sm_1",)

    sys.modules["fake_uniorch_plugins"].FakeCuda = FakeCuda
    plugins(("cuda", "fake_uniorch_plugins:FakeCuda"))
    table, messages = _discover()
    assert table["cuda"].__module__ == "uniorch.backends.cuda"
    assert any("FakeCuda" in m and "already taken" in m for m in messages)


def test_a_plugins_code_is_in_the_compiled_kernel_cache_key(tmp_path, monkeypatch):
    """A vendor who fixed a stage kept getting the old stage's output from the disk cache: the key
    named the class, not its code. The plugin's package is hashed into it now."""
    from uniorch.backends import driver

    pkg = tmp_path / "vend_pkg"
    pkg.mkdir()
    stage = pkg / "stages.py"
    (pkg / "__init__.py").write_text("from uniorch.backends import Backend\nfrom . import stages\n\n\n"
                                     "class VendBackend(Backend):\n    name = 'vend'\n    archs = ('v1',)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def load():
        for name in [m for m in sys.modules if m == "vend_pkg" or m.startswith("vend_pkg.")]:
            del sys.modules[name]
        import vend_pkg

        return driver._code_hash(vend_pkg.VendBackend)

    stage.write_text("def vasm(src, md):\n    return 'v1'\n")
    before = load()
    stage.write_text("def vasm(src, md):\n    return 'v2, fixed'\n")
    assert before and load() != before
    from uniorch.backends.cuda import CudaBackend

    assert driver._code_hash(CudaBackend)


# -- half-written plugins: an error naming the plugin and the contract, never a raw exception --
class _Runs(Backend):
    """A plugin that runs kernels on the CPU in Triton's interpreter, as the SDK's example does."""

    archs = ("v1",)
    auto_select = False

    @classmethod
    def is_available(cls):
        return True

    def load(self, kernel):
        from uniorch.backends.interpret import InterpretBackend

        return InterpretBackend().load(kernel)


def test_plugin_with_options_that_are_not_kernel_options_is_skipped(plugins):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Opts:  # no hash() for the cache key
        num_warps: int = 4
        num_stages: int = 1

    class PlainOpts(_Runs):
        name = "plainopts"
        options_class = Opts

    sys.modules["fake_uniorch_plugins"].PlainOpts = PlainOpts
    plugins(("plainopts", "fake_uniorch_plugins:PlainOpts"))
    table, messages = _discover()
    assert "plainopts" not in table
    assert any("'plainopts'" in m and "KernelOptions" in m for m in messages), messages


@pytest.mark.parametrize("stage", ["ttir", "v/asm"])
def test_a_stage_name_the_driver_cannot_keep_is_refused(stage):
    from uniorch.backends.driver import stage_names
    from uniorch.backends.sdk import BackendError

    class Staged(_Runs):
        name = "staged"

        def add_stages(self, stages, options):
            stages[stage] = lambda src, md: str(src)

    with pytest.raises(BackendError, match="backend 'staged'.*(driver's own|not identifiers)"):
        stage_names(Staged())


def test_a_probe_that_raises_or_an_unknown_device_type_is_a_clear_error():
    from uniorch.backends.sdk import BackendError, availability, torch_device

    class Raises(_Runs):
        name = "raises"

        @classmethod
        def is_available(cls):
            raise OSError("libvend.so: cannot open shared object file")

    ok, why = availability(Raises)
    assert not ok and "availability check raised OSError: libvend.so" in why

    class Npu(_Runs):
        name = "npudev"
        device_type = "no_such_device_type"

    with pytest.raises(BackendError, match="device type 'no_such_device_type'.*PyTorch extension"):
        torch_device(Npu())


def test_prepare_that_raises_runs_the_region_eagerly(plugins):
    import torch

    import uniorch

    class PrepFail(_Runs):
        name = "prepfail"

        def prepare(self, kernels):
            raise RuntimeError("vendor batch compiler crashed")

    sys.modules["fake_uniorch_plugins"].PrepFail = PrepFail
    plugins(("prepfail", "fake_uniorch_plugins:PrepFail"))
    cm = uniorch.compile(lambda x: torch.relu(x) * 2, target="prepfail")
    x = torch.randn(4, 4)
    torch.testing.assert_close(cm(x), torch.relu(x) * 2)
    fbs = cm.explain(x).fallbacks
    assert fbs and all(fb.stage == "backend" for fb in fbs), fbs
    assert "PrepFail.prepare() raised RuntimeError: vendor batch compiler crashed" in fbs[0].why


def test_a_bundle_of_a_plugin_not_installed_names_the_missing_plugin(tmp_path):
    import json

    import torch

    import uniorch
    from uniorch.targets import TargetError

    uniorch.compile_aot(lambda x: x * 2, (torch.randn(3),), target="interpret").save(str(tmp_path / "b"))
    manifest = tmp_path / "b" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["target"] = "vend:v1"
    manifest.write_text(json.dumps(data))
    with pytest.raises(TargetError, match="'vend:v1', and no installed backend provides 'vend'.*plugin"):
        uniorch.load(str(tmp_path / "b"))
