"""The backend registry: ptebuild's own backends by name, in order, listed without importing them.
(Installed plug-ins: ``tests/plugins``.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ptebuild import backend_registry
from ptebuild.backend_registry import BackendEntry
from ptebuild.backends import BUILTIN_BACKENDS, backend_names, entries, get_backend, is_plugin, plugin_problems, registry_problems
from ptebuild.errors import PluginError


def test_builtin_backends_come_first_in_their_order():
    found = entries()
    assert list(found)[:6] == list(BUILTIN_BACKENDS) == [
        "portable", "xnnpack", "cuda", "openvino", "coreml", "vulkan"]
    assert backend_names() == list(found)
    for name in BUILTIN_BACKENDS:
        assert not found[name].plugin and not is_plugin(name) and get_backend(name).name == name
        assert found[name].describe() == f"backend {name!r}" and backend_registry.plugin_facts(found[name]) == {}


def test_listing_imports_no_backend():
    code = ("import sys; from ptebuild.backends import backend_names; backend_names(); "
            "print(sorted(m for m in sys.modules if m.startswith('ptebuild.backends.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_plug_in_that_fails_to_load_is_one_line_naming_its_distribution():
    entry = BackendEntry("ghost", "ptebuild_no_such_module:BACKEND", "ghost-dist", "1.2")
    assert entry.describe() == "backend 'ghost' (plug-in of ghost-dist 1.2)"
    for _ in range(2):  # remembered
        with pytest.raises(PluginError) as err:
            backend_registry.load(entry)
        assert str(err.value) == ("backend 'ghost' (plug-in of ghost-dist 1.2): cannot load ptebuild_no_such_module:BACKEND: "
                                  "ModuleNotFoundError: No module named 'ptebuild_no_such_module'")
        assert err.value.exit_code == 2


def test_no_plug_ins_no_problems():
    assert registry_problems() == () and plugin_problems() == []
