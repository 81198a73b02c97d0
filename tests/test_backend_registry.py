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
