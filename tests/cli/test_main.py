"""The command line through ``main(argv)``: exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptebuild import __version__
from ptebuild.backends import backend_names
from ptebuild.cli import main

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"

USAGE_ERRORS = [
    ([], "error: ptebuild: the following arguments are required: COMMAND"),
    (["bild"], "error: ptebuild: argument COMMAND: invalid choice: 'bild'"),
    (["build"], "error: ptebuild build: the following arguments are required: manifest"),
    (["build", "x.toml", "--jobs", "0"], "error: --jobs 0: give at least 1"),
    (["build", "x.toml", "--bogus"], "error: ptebuild: unrecognized arguments: --bogus"),
    (["build", "x.toml", "--cache", "c", "--no-cache"], "error: ptebuild build: argument --no-cache: not allowed with argument --cache"),
    (["build", "does-not-exist.toml", "--no-cache"], "error: does-not-exist.toml: no such file"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS, ids=[" ".join(a) or "(none)" for a, _ in USAGE_ERRORS])
def test_usage_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.strip().startswith(message), err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ptebuild {__version__}"


def test_help(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("build", "schema", "verify", "run", "cache", "shims"):
        assert command in out


def test_schema_is_json_schema_of_the_manifest(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "ptebuild manifest"
    assert set(schema["properties"]) == {"bundles", "defaults", "models", "programs", "shims"}
    assert schema["additionalProperties"] is False
    backend = schema["$defs"]["ProgramSpec"]["properties"]["backend"]
    assert {"enum": backend_names(), "type": "string"} in backend["anyOf"]
    assert {"portable", "xnnpack", "cuda", "openvino", "coreml", "vulkan"} <= set(backend_names())


def test_bad_manifest_through_main(capsys, monkeypatch):
    monkeypatch.chdir(MANIFESTS)
    assert main(["build", "bad-backend-typo.toml", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: bad-backend-typo.toml: programs.tiny_xnnpack.backend: unknown backend 'xnnpak' "
        f"(did you mean 'xnnpack'?); expected one of {', '.join(map(repr, backend_names()))}\n"
    )


def test_debug_shows_a_traceback(capsys, monkeypatch):
    monkeypatch.chdir(MANIFESTS)
    assert main(["--debug", "build", "bad-backend-typo.toml", "--no-cache"]) == 2
    assert "Traceback" in capsys.readouterr().err


SHIMS_MANIFEST = """
[defaults]
out = "out"

[shims.aoti_cuda_shims]
source = "shims.def"
"""


def test_manifest_declared_shim_library_is_built_then_cached(tmp_path, capsys):
    from ptebuild.shims import load_shim_list, write_import_library

    (tmp_path / "shims.def").write_text("LIBRARY aoti_cuda_shims.dll\nEXPORTS\n  aoti_torch_warn\n  aoti_torch_check\n")
    manifest = tmp_path / "shims.toml"
    manifest.write_text(SHIMS_MANIFEST)
    cache = tmp_path / "cache"
    assert main(["build", str(manifest), "--cache", str(cache), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["status"]) for p in first["targets"]] == [("aoti_cuda_shims", "built")]
    lib = tmp_path / "out" / "aoti_cuda_shims.lib"
    assert lib.read_bytes() == write_import_library(load_shim_list(tmp_path / "shims.def"))
    assert main(["build", str(manifest), "--cache", str(cache), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["targets"][0]["status"] == "cached"
    # An edit to the list regenerates the library, and --explain says why.
    (tmp_path / "shims.def").write_text("LIBRARY aoti_cuda_shims.dll\nEXPORTS\n  aoti_torch_warn\n")
    assert main(["build", str(manifest), "--cache", str(cache), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "aoti_cuda_shims: source file shims.def changed" in out
    assert lib.read_bytes() == write_import_library(load_shim_list(tmp_path / "shims.def"))


def test_unusable_cache_warns_once_and_builds_without_it(tmp_path, capsys):
    (tmp_path / "shims.def").write_text("LIBRARY a.dll\nEXPORTS\n  f\n")
    manifest = tmp_path / "shims.toml"
    manifest.write_text(SHIMS_MANIFEST)
    not_a_folder = tmp_path / "cache-is-a-file"
    not_a_folder.write_text("")
    assert main(["build", str(manifest), "--cache", str(not_a_folder)]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: local cache {not_a_folder} disabled for this build: "), err
    assert (tmp_path / "out" / "aoti_cuda_shims.lib").is_file()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 256 KiB filesystem (tmpfs; needs root, as CI has)."""
    import subprocess
    import uuid

    mnt = tmp_path / f"mnt-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_cache_too_full_for_a_programs_outputs_warns_once_and_builds(tiny_project, small_tmpfs, capsys):
    """The worker streams a program's outputs into the cache's store: a .ptd bigger than the
    space left fails that write; the cache is switched off (one warning) and the program is
    lowered again into the build's own store, and published."""
    text = tiny_project.read_text().replace("kwargs = { width = 16 }", "kwargs = { width = 300 }")  # a 360 KiB .ptd
    tiny_project.write_text(text)
    cache = small_tmpfs / "cache"
    assert main(["build", str(tiny_project), "--cache", str(cache), "--only", "tiny_portable"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: local cache {cache} disabled for this build: "), err
    assert "no space left" in warnings[0], warnings[0]
    out = tiny_project.parent / "out"
    assert (out / "tiny_portable_weights.ptd").stat().st_size > 256 << 10
    assert main(["verify", str(out), "--bytes"]) == 0


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_full_or_read_only_cache_warns_once_and_builds(tmp_path, small_tmpfs, capsys, fault):
    import subprocess

    from ptebuild.shims import load_shim_list, write_import_library

    exports = "\n".join(f"  aoti_shim_number_{i:05d}" for i in range(5000))
    (tmp_path / "shims.def").write_text(f"LIBRARY aoti_cuda_shims.dll\nEXPORTS\n{exports}\n")
    manifest = tmp_path / "shims.toml"
    manifest.write_text(SHIMS_MANIFEST)
    cache = small_tmpfs / "cache"
    if fault == "read-only":
        cache.mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    assert main(["build", str(manifest), "--cache", str(cache)]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: local cache {cache} disabled for this build: "), err
    expected = "no space left" if fault == "full" else "read-only"
    assert expected in warnings[0].lower(), warnings[0]
    lib = tmp_path / "out" / "aoti_cuda_shims.lib"
    assert lib.read_bytes() == write_import_library(load_shim_list(tmp_path / "shims.def"))
