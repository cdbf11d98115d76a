"""`ptebuild verify` through ptebuild.cli.main on a real build of the tiny project.

The project is built once per module; every test damages its own copy of the output folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild import cli
from ptebuild.runtime import read_ptd

PROGRAMS = ("tiny_portable", "tiny_xnnpack")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The output folder of one build of the tiny project (read-only for the tests)."""
    manifest = copy_project(tmp_path_factory.mktemp("verify-project"))
    # A cache shared by the modules of the session: the second module's build is a restore.
    cache = tmp_path_factory.getbasetemp() / "ptebuild-cache"
    assert cli.main(["build", str(manifest), "--cache", str(cache)]) == 0
    return manifest.parent / "out"


@pytest.fixture
def out(built, tmp_path) -> Path:
    """A private copy of the built output folder, free to damage."""
    return Path(shutil.copytree(built, tmp_path / "out"))


@pytest.fixture
def verify(capsys):
    """Run ``ptebuild verify``; returns (exit code, stdout lines, stderr)."""

    def run(*argv) -> tuple[int, list[str], str]:
        code = cli.main(["verify", *map(str, argv)])
        stdout, stderr = capsys.readouterr()
        assert "Traceback" not in stderr
        return code, stdout.splitlines(), stderr

    return run


def line_of(lines: list[str], target: str) -> str:
    [line] = [line for line in lines if line.split()[0] == target]
    return line


def patch_record(out: Path, file: str) -> None:
    """Make the record agree with ``file``'s current bytes, as a hand edit would."""
    record_path = out / "ptebuild.json"
    record = json.loads(record_path.read_text())
    data = (out / file).read_bytes()
    for entry in record["targets"].values():
        if file in entry["outputs"]:
            entry["outputs"][file] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    record_path.write_text(json.dumps(record))


@pytest.mark.parametrize("extra", [[], ["--bytes"]], ids=["keys", "bytes"])
def test_a_clean_build_verifies(out, verify, extra):
    code, lines, err = verify(out, *extra)
    assert (code, err) == (0, "")
    assert lines[:2] == ["tiny_portable  ok", "tiny_xnnpack   ok"]
    assert lines[2].startswith("2 targets: all ok (4 files, ")
    assert lines[2].endswith(f"-> {out}")
    assert len(lines) == 3


def test_json_report(out, verify):
    code, lines, _ = verify(out, "--json", "--bytes")
    document = json.loads("\n".join(lines))
    assert code == 0
    assert document["ok"] is True and document["bytes"] is True
    assert [t["name"] for t in document["targets"]] == list(PROGRAMS)
    for target in document["targets"]:
        assert target["ok"] and target["problems"] == []
        assert target["keys_checked"] > 0
        assert len(target["files"]) == 2


def test_a_flipped_byte_in_a_ptd_is_a_sha256_mismatch(out, verify):
    ptd = out / "tiny_xnnpack_weights.ptd"
    entry = next(iter(read_ptd(ptd).entries.values()))
    data = bytearray(ptd.read_bytes())
    data[entry.offset] ^= 0xFF  # inside a blob: the keys still match, the bytes do not
    ptd.write_bytes(bytes(data))

    code, lines, err = verify(out)
    assert (code, err) == (1, "")
    assert line_of(lines, "tiny_portable") == "tiny_portable  ok"
    problem = line_of(lines, "tiny_xnnpack")
    assert "FAILED: tiny_xnnpack_weights.ptd: sha256 mismatch" in problem
    assert "changed after the build" in problem
    assert lines[-1].startswith("2 targets: 1 failed")

    # With the record patched to match, only --bytes (rehash each blob against its key) sees it.
    patch_record(out, ptd.name)
    assert verify(out)[0] == 0
    code, lines, _ = verify(out, "--bytes")
    assert code == 1
    problem = line_of(lines, "tiny_xnnpack")
    assert f"tiny_xnnpack_weights.ptd: blob of key {entry.key!r}" in problem
    assert "the file is corrupt" in problem


def test_a_ptd_of_another_program_is_caught_by_its_keys_despite_a_patched_record(out, verify):
    shutil.copyfile(out / "tiny_xnnpack_weights.ptd", out / "tiny_portable_weights.ptd")
    patch_record(out, "tiny_portable_weights.ptd")

    code, lines, err = verify(out)
    assert (code, err) == (1, "")
    problem = line_of(lines, "tiny_portable")
    assert "sha256" not in problem.split("needs key")[0]  # the digests agree now
    assert problem.startswith("tiny_portable  FAILED: tiny_portable.pte: needs key 'model.")
    assert "not found in the .ptd files searched: tiny_portable_weights.ptd" in problem
    assert line_of(lines, "tiny_xnnpack") == "tiny_xnnpack   ok"


@pytest.mark.parametrize("keep", [0, 3, 8, 40, 500, -1], ids=lambda n: f"keep{n}")
@pytest.mark.parametrize("patched", [False, True], ids=["record", "patched-record"])
def test_a_truncated_pte_is_one_line(out, verify, keep, patched):
    pte = out / "tiny_xnnpack.pte"
    data = pte.read_bytes()
    pte.write_bytes(data[:keep])
    if patched:
        patch_record(out, pte.name)

    code, lines, err = verify(out)
    assert (code, err) == (1, "")
    assert len(lines) == 3
    problem = line_of(lines, "tiny_xnnpack")
    assert problem.startswith("tiny_xnnpack   FAILED: tiny_xnnpack.pte: ")
    if not patched:
        assert f"tiny_xnnpack.pte: {len(data[:keep])} bytes, the record says {len(data)}" in problem
    else:
        assert "the record says" not in problem  # only the .pte reader can tell now
        assert "truncated" in problem
    assert line_of(lines, "tiny_portable") == "tiny_portable  ok"


@pytest.mark.parametrize("name", ["tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd"])
def test_a_deleted_file_is_reported_as_missing(out, verify, name):
    (out / name).unlink()
    code, lines, err = verify(out)
    assert (code, err) == (1, "")
    problem = line_of(lines, "tiny_xnnpack")
    assert problem == f"tiny_xnnpack   FAILED: {name}: missing"


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda out: (out / "ptebuild.json").unlink(), "no ptebuild.json; give the output folder of a ptebuild build"),
        (lambda out: (out / "ptebuild.json").write_text("{"), "ptebuild.json: not valid JSON"),
        (lambda out: (out / "ptebuild.json").write_text('{"format": "x"}'), "not a ptebuild build record"),
        (
            lambda out: (out / "ptebuild.json").write_text(
                '{"format": "ptebuild-record", "version": 1, "targets": {"a": {"outputs": {"../x.pte": {}}}}}'
            ),
            "targets.a.outputs.../x.pte: needs a plain file name with sha256 and bytes",
        ),
        (lambda out: shutil.rmtree(out), "no such folder"),
    ],
    ids=["no-record", "bad-json", "not-a-record", "bad-entry", "no-folder"],
)
def test_no_usable_record_is_a_usage_error(out, verify, damage, message):
    damage(out)
    code, lines, err = verify(out)
    assert (code, lines) == (2, [])
    assert err.startswith("error: ") and message in err
    assert err.count("\n") == 1


def test_verify_imports_neither_torch_nor_executorch(out):
    (out / "tiny_portable_weights.ptd").unlink()
    script = (
        "import sys\n"
        "from ptebuild import cli\n"
        f"code = cli.main(['verify', {str(out)!r}, '--bytes'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch'))\n"
        "print('heavy:', heavy)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "tiny_portable_weights.ptd: missing" in done.stdout
    assert done.stdout.splitlines()[-1] == "heavy: []"


def test_runtime_judges_every_program_of_a_folder(out, capsys):
    """`verify --runtime` on an output folder: a program with a .ptd needs a 0.7 runtime."""
    assert cli.main(["verify", str(out), "--runtime", "0.6.0", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["runtime"] == "0.6.0"
    assert {t["name"]: t["problems"] for t in document["targets"]} == {
        name: ["runtime 0.6.0 cannot load it: weights in an external .ptd (FlatTensor layout of 0.7) needs runtime >= 0.7.0"]
        for name in PROGRAMS
    }
    assert {t["runtime"]["minimum"] for t in document["targets"]} == {"0.7.0"}
    assert cli.main(["verify", str(out), "--runtime", "1.5.1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"judged for runtime 1.5.1) -> {out}")


def test_a_manifest_names_its_output_folder(built, verify):
    """``ptebuild verify MANIFEST``: the folder its defaults.out names (what ``build`` wrote),
    without importing torch or executorch."""
    manifest = built.parent / "tiny.toml"
    assert manifest.is_file()
    code, lines, err = verify(manifest)
    assert (code, err) == (0, "")
    assert lines[-1].startswith("2 targets: all ok (4 files, ") and lines[-1].endswith(f"-> {built}")
    script = (
        "import sys\n"
        "from ptebuild import cli\n"
        f"code = cli.main(['verify', {str(manifest)!r}])\n"
        "print('heavy:', sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch')))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "heavy: []"
