"""A backend from outside ptebuild (``tests/plugins/ptebuild_demo_backend``, installed through its
``ptebuild.backends`` entry point): listed by ``doctor`` and ``schema``, built with a delegate of its
own, its payloads read by its own reader in ``inspect``, ``verify`` and the loader, packed; its code
in the action key and the warm server's identity; broken plug-ins reported in one line each."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import build_json, ptebuild
from install import HERE, install, plugin_env

MANIFESTS = HERE.parent / "manifests"
DELEGATE = "PtebuildDemoBackend"


@pytest.fixture(scope="module")
def demo_build(demo_env, tmp_path_factory):
    """``tests/plugins/demo.toml`` (two demo programs) built once: (project, report)."""
    project = tmp_path_factory.mktemp("demo")
    shutil.copy(HERE / "demo.toml", project / "demo.toml")
    shutil.copytree(MANIFESTS / "tinymodels", project / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))
    code, report = build_json(project / "demo.toml", "--cache", project / "cache", env=demo_env)
    assert code == 0, report
    return project, report


def run_python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with(env), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def env_with(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONWARNINGS": "ignore", **extra}


# --- listed ------------------------------------------------------------------------------------


def test_listed_by_doctor_with_its_distribution(demo_env, tmp_path):
    document = json.loads(ptebuild("doctor", "--json", "--no-probe", "--cache", tmp_path, env=demo_env).stdout)
    rows = {row["backend"]: row for row in document["backends"]}
    assert list(rows)[-1] == "demo" and rows["demo"]["plugin"] == "ptebuild-demo-backend 0.1.0"
    assert rows["demo"]["check_kind"] == "demo-structural" and rows["portable"]["plugin"] is None
    assert document["plugin_problems"] == []
    table = ptebuild("doctor", "--no-probe", "--cache", tmp_path, env=demo_env)
    assert table.returncode == 0, table.stderr
    assert "plug-in demo: ptebuild-demo-backend 0.1.0" in table.stdout.splitlines()
    assert any(line.split()[:1] == ["demo"] for line in table.stdout.splitlines())


def test_listed_by_schema_with_its_options(demo_env):
    result = ptebuild("schema", env=demo_env)
    assert result.returncode == 0 and result.stderr == ""
    schema = json.loads(result.stdout)
    backend = schema["$defs"]["ProgramSpec"]["properties"]["backend"]
    enum = next(choice["enum"] for choice in backend["anyOf"] if "enum" in choice)
    assert enum[:6] == ["portable", "xnnpack", "cuda", "openvino", "coreml", "vulkan"] and enum[6:] == ["demo"]
    assert schema["$defs"]["DemoOptions"]["properties"]["fuse"]["default"] is True
    assert {"if": {"properties": {"backend": {"const": "demo"}}, "required": ["backend"]},
            "then": {"properties": {"options": {"$ref": "#/$defs/DemoOptions"},
                                    "compile_specs": {"$ref": "#/$defs/DemoOptions"}}}} in schema["$defs"]["ProgramSpec"]["allOf"]


def test_not_installed_it_is_unknown(tmp_path):
    """Without the plug-in, no backend is called demo: the manifest is refused where it names one."""
    shutil.copy(HERE / "demo.toml", tmp_path / "demo.toml")
    result = ptebuild("build", tmp_path / "demo.toml", "--no-cache")
    assert result.returncode == 2
    assert "programs.tiny_demo.backend: unknown backend 'demo'" in result.stderr and len(result.stderr.splitlines()) == 1


# --- built, read back, packed -----------------------------------------------------------------


def test_builds_with_a_delegate_of_its_own_checked_structurally(demo_build):
    _, report = demo_build
    programs = {p["name"]: p for p in report["targets"]}
    assert {name: (p["status"], p["check"]) for name, p in programs.items()} == {
        "tiny_demo": ("built", "demo-structural"), "tiny_demo_inline": ("built", "demo-structural")}
    forward = next(m for m in programs["tiny_demo"]["figures"] if m["method"] == "forward")
    assert forward["structural"] and forward["delegate"] == DELEGATE and forward["kernel_calls"] == 0
    assert forward["inputs"] == ["float32[2, 6]"] and forward["outputs"] == ["float32[2, 3]"]
    assert {Path(o["path"]).name for o in programs["tiny_demo"]["outputs"]} == {"tiny_demo.pte", "tiny_demo_weights.ptd"}
    assert {Path(o["path"]).name for o in programs["tiny_demo_inline"]["outputs"]} == {"tiny_demo_inline.pte"}


def test_inspect_shows_what_its_reader_reads(demo_build, demo_env):
    project, _ = demo_build
    result = ptebuild("inspect", project / "out" / "tiny_demo.pte", "--json", env=demo_env)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    forward = next(m for m in document["methods"] if m["name"] == "forward")
    (delegate,) = forward["delegates"]
    assert delegate["backend"] == DELEGATE
    assert delegate["summary"].startswith("demo graph: ") and "aten.addmm.default 3" in delegate["summary"]
    assert delegate["contents"]["operators"]["aten.addmm.default"] == 3
    ptd_keys = json.loads(ptebuild("inspect", project / "out" / "tiny_demo_weights.ptd", "--json").stdout)["keys"]
    assert set(delegate["keys"]) <= {k["key"] for k in ptd_keys}
    assert set(document["needs"]) == {k["key"] for k in ptd_keys} and document["notes"] == []


def test_verify_checks_the_keys_its_payloads_name(demo_build, demo_env):
    project, _ = demo_build
    ok = ptebuild("verify", project / "out", "--bytes", env=demo_env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 targets: all ok" in ok.stdout
    # The payloads name their weights: without the .ptd that holds them, the program is refused.
    code = f"from ptebuild.runtime import check; check({str(project / 'out' / 'tiny_demo.pte')!r}, [])"
    refused = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with(demo_env))
    assert refused.returncode == 1 and "ptebuild.errors.LoadError" in refused.stderr, refused.stderr
    assert "needs key" in refused.stderr and "no .ptd given" in refused.stderr


def test_without_the_plug_in_its_delegates_are_opaque(demo_build):
    """The reader comes with the plug-in: without it, verify cannot list the keys, and says so."""
    project, _ = demo_build
    result = ptebuild("verify", project / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tiny_demo.pte: method 'forward' has a {DELEGATE} delegate blob whose keys cannot be listed" in result.stdout


def test_packs(demo_build, demo_env, tmp_path):
    project, _ = demo_build
    result = ptebuild("pack", project / "demo.toml", "-o", tmp_path / "dist", "--json", env=demo_env)
    assert result.returncode == 0, result.stderr
    import tarfile

    with tarfile.open(tmp_path / "dist" / "demo.tar.gz") as archive:
        names = {Path(n).name for n in archive.getnames()}
    assert {"tiny_demo.pte", "tiny_demo_weights.ptd", "SHA256SUMS", "ptebuild.json", "selected_operators.yaml"} <= names


# --- its code decides its programs' keys -------------------------------------------------------

KEYS = """
import json, sys
from ptebuild.builder import keys
from ptebuild.hashing import hash_file
from ptebuild.manifest import load_manifest
plan = load_manifest(sys.argv[1])
print(json.dumps({p.name: keys.program_inputs(p, plan, hash_file) for p in plan.programs}))
"""


def test_its_code_and_version_are_in_the_key(demo_env, tmp_path):
    portable = '\n[programs.tiny_portable]\nmodel = "tiny"\nbackend = "portable"\ndata_name = "tiny_portable_weights"\n'
    (tmp_path / "demo.toml").write_text((HERE / "demo.toml").read_text() + portable)
    shutil.copytree(MANIFESTS / "tinymodels", tmp_path / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))

    def inputs(env: dict[str, str]) -> dict:
        done = subprocess.run([sys.executable, "-c", KEYS, str(tmp_path / "demo.toml")], capture_output=True, text=True,
                              env=env_with(env), timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    before = inputs(demo_env)
    assert before["tiny_demo"]["toolchain.backend-plugin"] == "ptebuild-demo-backend 0.1.0"
    assert "toolchain.backend-plugin" not in before["tiny_portable"]  # a built-in backend's: ptebuild's code
    edited = tmp_path / "edited"
    shutil.copytree(HERE / "ptebuild_demo_backend", edited, ignore=shutil.ignore_patterns("__pycache__"))
    payload = edited / "src" / "ptebuild_demo_backend" / "lowering.py"
    payload.write_text(payload.read_text() + "\n# an edit\n")
    after = inputs(plugin_env(install(edited, tmp_path / "site")))
    assert after["tiny_demo"]["toolchain.backend-code"] != before["tiny_demo"]["toolchain.backend-code"]
    assert {k: v for k, v in after["tiny_demo"].items() if k != "toolchain.backend-code"} == {
        k: v for k, v in before["tiny_demo"].items() if k != "toolchain.backend-code"}
    assert after["tiny_portable"] == before["tiny_portable"]


def test_the_warm_servers_identity_names_the_plug_ins(demo_env):
    identity = "from ptebuild.daemon.protocol import toolchain_id; print(toolchain_id())"
    assert run_python(identity, demo_env) != run_python(identity, {"PYTHONPATH": ""})


# --- broken plug-ins ---------------------------------------------------------------------------


def test_broken_plug_ins_are_named_in_one_line_and_the_rest_work(broken_env, tmp_path):
    document = json.loads(ptebuild("doctor", "--json", "--no-probe", "--cache", tmp_path, env=broken_env).stdout)
    rows = {row["backend"]: row for row in document["backends"]}
    assert rows["broken"]["lower"] is False and rows["broken"]["why"] == (
        "backend 'broken' (plug-in of ptebuild-broken-backend 0.0.1): cannot load "
        "ptebuild_broken_backend.missing:BACKEND: ModuleNotFoundError: No module named 'ptebuild_broken_backend.missing'")
    assert rows["notabackend"]["why"] == (
        "backend 'notabackend' (plug-in of ptebuild-broken-backend 0.0.1): ptebuild_broken_backend:NOT_A_BACKEND "
        "is a dict, not a ptebuild.backends.base.Backend named 'notabackend'")
    assert rows["xnnpack"]["plugin"] is None and rows["demo"]["plugin"] == "ptebuild-demo-backend 0.1.0"
    assert document["plugin_problems"] == [
        "backend 'xnnpack' (plug-in of ptebuild-broken-backend 0.0.1): the name is taken by ptebuild's own backend; left out"]
    schema = ptebuild("schema", env=broken_env)
    assert schema.returncode == 0 and "Traceback" not in schema.stderr
    assert [line.split(":")[0] for line in schema.stderr.splitlines()] == ["warning"] * 3
    # A manifest naming a broken plug-in: one line, exit 2, no traceback.
    (tmp_path / "m.toml").write_text((HERE / "demo.toml").read_text().replace('backend = "demo"', 'backend = "broken"'))
    shutil.copytree(MANIFESTS / "tinymodels", tmp_path / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))
    result = ptebuild("build", tmp_path / "m.toml", "--no-cache", "--only", "tiny_demo", env=broken_env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1, result.stderr
    assert "plug-in of ptebuild-broken-backend 0.0.1" in result.stderr and "Traceback" not in result.stderr
