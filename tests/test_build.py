"""End-to-end builds of the tiny project: real lowering, real runtime, a real cache.

The expensive cold build runs once per session (``built``); the tests after it edit copies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import STARTS, build_json, ptebuild, started
from project_copy import copy_project

TOOLS_ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


class Built:
    def __init__(self, root: Path):
        self.root = root
        self.manifest = copy_project(root / "project")
        self.cache = root / "cache"
        self.out = root / "project" / "out"
        self.code, self.document = build_json(str(self.manifest), "--cache", str(self.cache))

    def program(self, name: str) -> dict:
        return next(p for p in self.document["targets"] if p["name"] == name)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    return Built(tmp_path_factory.mktemp("build"))


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def test_cold_build_writes_checked_artifacts(built):
    assert built.code == 0, built.document
    assert built.document["ok"] is True
    for name, backend in (("tiny_portable", "portable"), ("tiny_xnnpack", "xnnpack")):
        program = built.program(name)
        assert program["status"] == "built"
        assert program["backend"] == backend
        assert [m["name"] for m in program["methods"]] == ["forward", "score"]
        assert program["methods"][1]["inputs"][1] == {"name": "tokens", "shape": ["batch"], "dtype": "int64"}
        files = {Path(o["path"]).name: o for o in program["outputs"]}
        assert set(files) == {f"{name}.pte", f"{name}_weights.ptd"}
        for output in program["outputs"]:
            data = Path(output["path"]).read_bytes()
            assert len(data) == output["bytes"]
            import hashlib

            assert hashlib.sha256(data).hexdigest() == output["sha256"]
        # Every method at the example size and the dynamic dim's extremes.
        checked = {(f["method"], f["sizes"]["batch"]) for f in program["figures"]}
        assert checked == {(m, b) for m in ("forward", "score") for b in (1, 2, 4)}
        assert all(f["max_abs_error"] < 1e-4 and f["cosine"] > 0.9999 for f in program["figures"])
    assert sorted(p.name for p in built.out.iterdir()) == [
        "ptebuild.json",
        "tiny_portable.pte",
        "tiny_portable_weights.ptd",
        "tiny_xnnpack.pte",
        "tiny_xnnpack_weights.ptd",
    ]
    record = json.loads((built.out / "ptebuild.json").read_text())
    assert set(record["targets"]) == {"tiny_portable", "tiny_xnnpack"}


def test_artifacts_run_in_executorch_runtime_outside_ptebuild(built):
    """Load with ExecuTorch's own runtime and compare with the eager model, built by hand."""
    code = f"""
import sys, torch
sys.path.insert(0, {str(built.manifest.parent)!r})
from executorch.runtime import Runtime
from tinymodels.tiny import make_tiny
torch.manual_seed(1)
model = make_tiny(width=16).eval()
x = torch.randn(3, 6)
tokens = torch.tensor([1, 5, 9])
mask = torch.tensor([True, False, True])
for name in ("tiny_portable", "tiny_xnnpack"):
    program = Runtime.get().load_program({str(built.out)!r} + f"/{{name}}.pte",
                                         data_path={str(built.out)!r} + f"/{{name}}_weights.ptd")
    out = program.load_method("forward").execute([x])[0]
    assert torch.allclose(out, model(x), atol=1e-5), name
    out = program.load_method("score").execute([x, tokens, mask])[0]
    assert torch.allclose(out, model.score(x, tokens, mask), atol=1e-5), name
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=TOOLS_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_noop_build_restores_nothing_and_imports_no_torch(built):
    before = snapshot(built.out)
    code = (
        "import sys\n"
        "from ptebuild.cli import main\n"
        f"rc = main(['build', {str(built.manifest)!r}, '--cache', {str(built.cache)!r}, '--explain'])\n"
        "heavy = sorted(m for m in ('torch', 'executorch', 'pydantic') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=TOOLS_ENV)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
    assert "tiny_portable: up to date" in result.stdout
    after = snapshot(built.out)
    assert {k: v for k, v in after.items() if k != "ptebuild.json"} == {
        k: v for k, v in before.items() if k != "ptebuild.json"
    }


def test_deleted_output_is_restored_as_an_independent_copy(built, tmp_path):
    out = tmp_path / "out"
    code, document = build_json(str(built.manifest), "--cache", str(built.cache), "--out", str(out))
    assert code == 0
    assert {p["status"] for p in document["targets"]} == {"cached"}
    ptd = out / "tiny_portable_weights.ptd"
    assert ptd.read_bytes() == (built.out / "tiny_portable_weights.ptd").read_bytes()
    assert ptd.stat().st_nlink == 1, "a restored output must never be a hardlink into the cache"
    digest = built.program("tiny_portable")["outputs"][1]["sha256"]
    blob = built.cache / "objects" / digest[:2] / digest[2:]
    ptd.write_bytes(b"edited by a user")
    assert blob.is_file() and len(blob.read_bytes()) == built.program("tiny_portable")["outputs"][1]["bytes"]


def test_only_and_unknown_only(built, tmp_path):
    result = ptebuild("build", str(built.manifest), "--cache", str(built.cache), "--only", "tiny_portble")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --only: {built.manifest} has no program 'tiny_portble' (did you mean 'tiny_portable'?); "
        "name one of tiny_portable, tiny_xnnpack"
    ]
    code, document = build_json(
        str(built.manifest), "--cache", str(built.cache), "--only", "tiny_xnnpack", "--out", str(tmp_path)
    )
    assert code == 0 and [p["name"] for p in document["targets"]] == ["tiny_xnnpack"]


def test_corrupt_blob_and_garbled_record_rebuild_identical_bytes(built, tmp_path):
    """A flipped byte in a cached blob is detected, removed, warned about and rebuilt; a garbled
    record is a miss. The rebuilt programs are byte-identical: lowering is reproducible."""
    cache = tmp_path / "cache"
    shutil.copytree(built.cache, cache, symlinks=True)
    portable_ptd = built.program("tiny_portable")["outputs"][1]
    blob = cache / "objects" / portable_ptd["sha256"][:2] / portable_ptd["sha256"][2:]
    os.chmod(blob, 0o644)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    record = cache / "actions" / built.program("tiny_xnnpack")["key"][:2] / f"{built.program('tiny_xnnpack')['key']}.json"
    record.write_bytes(record.read_bytes()[:-40] + b"garbage")

    out = tmp_path / "out"
    result = ptebuild("build", str(built.manifest), "--cache", str(cache), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [p["status"] for p in document["targets"]] == ["built", "built"]
    assert "is corrupt" in result.stderr and "rebuilding" in result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: tiny_portable:")]
    assert len(warned) == 1 and warned[0].endswith("; rebuilding"), warned  # once, without "build again" advice
    assert "build again" not in warned[0]
    assert not blob.exists() or blob.read_bytes() != bytes(data)
    for name in ("tiny_portable.pte", "tiny_portable_weights.ptd", "tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd"):
        assert (out / name).read_bytes() == (built.out / name).read_bytes(), name


def test_failed_program_keeps_its_last_good_artifacts(tmp_path):
    """A build that fails leaves the previous artifacts in place, untouched, and no stray file."""
    manifest = copy_project(tmp_path / "project")
    cache = tmp_path / "cache"
    out = manifest.parent / "out"
    out.mkdir()
    (out / "tiny_portable.pte").write_bytes(b"last good program")
    (out / "tiny_portable_weights.ptd").write_bytes(b"last good weights")
    source = manifest.parent / "tinymodels" / "tiny.py"
    source.write_text(source.read_text().replace("def make_tiny(**kwargs) -> Tiny:\n", "def make_tiny(**kwargs) -> Tiny:\n    raise RuntimeError('broken on purpose')\n"))
    result = ptebuild("build", str(manifest), "--cache", str(cache), "--only", "tiny_portable", "--explain")
    assert result.returncode == 1
    assert f"error: {manifest}: programs.tiny_portable: factory 'tinymodels.tiny:make_tiny' failed: " \
        "RuntimeError: broken on purpose" in result.stderr
    assert (out / "tiny_portable.pte").read_bytes() == b"last good program"
    assert (out / "tiny_portable_weights.ptd").read_bytes() == b"last good weights"
    # Nothing stray beside them: only the failure's own log, which the error line names.
    log = out / ".ptebuild" / "logs" / "tiny_portable.log"
    assert sorted(p.name for p in out.iterdir()) == [".ptebuild", "tiny_portable.pte", "tiny_portable_weights.ptd"]
    assert sorted(p.relative_to(out).as_posix() for p in (out / ".ptebuild").rglob("*")) == [
        ".ptebuild/logs", ".ptebuild/logs/tiny_portable.log"]
    assert f"(full output: {log})" in result.stderr
    assert "RuntimeError: broken on purpose" in log.read_text()


def test_explain_names_the_changed_source(built, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(built.manifest.parent, project, ignore=shutil.ignore_patterns("out"))
    cache = tmp_path / "cache"
    shutil.copytree(built.cache, cache, symlinks=True)
    (project / "tinymodels" / "__init__.py").write_text('"""Tiny models, edited."""\n')
    result = ptebuild("build", str(project / "tiny.toml"), "--cache", str(cache), "--explain", "--only", "tiny_portable")
    assert result.returncode == 0, result.stderr
    assert "tiny_portable: source file tinymodels/__init__.py changed" in result.stdout


def test_case_collision_with_a_file_already_in_the_output_folder(tiny_project):
    out = tiny_project.parent / "out"
    out.mkdir()
    (out / "TINY_PORTABLE_WEIGHTS.ptd").write_bytes(b"someone else's")
    result = ptebuild("build", str(tiny_project), "--no-cache")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tiny_project}: program 'tiny_portable' writes 'tiny_portable_weights.ptd', but {out} already "
        "has 'TINY_PORTABLE_WEIGHTS.ptd', one file on macOS and Windows; choose names that differ in more "
        "than case, or remove 'TINY_PORTABLE_WEIGHTS.ptd'"
    ]


def test_concurrent_builders_lower_each_program_once(tmp_path):
    """Three processes on one empty cache: each program is lowered by exactly one of them, the
    others wait for its lock and restore it; every output folder gets the same bytes. Two of
    them share an output folder."""
    manifest = copy_project(tmp_path / "project")
    cache = tmp_path / "cache"
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "ptebuild", "build", str(manifest), "--cache", str(cache),
             "--out", str(tmp_path / f"out{min(i, 1)}"), "--jobs", "1", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=TOOLS_ENV,
        )
        for i in range(3)
    ]
    documents = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr
        documents.append(json.loads(stdout))
    statuses = {}
    for document in documents:
        for program in document["targets"]:
            statuses.setdefault(program["name"], []).append(program["status"])
    assert {name: sorted(s) for name, s in statuses.items()} == {
        "tiny_portable": ["built", "cached", "cached"],
        "tiny_xnnpack": ["built", "cached", "cached"],
    }
    names = sorted(p.name for p in (tmp_path / "out0").iterdir() if p.suffix in (".pte", ".ptd"))
    assert len(names) == 4
    for name in names:
        assert (tmp_path / "out1" / name).read_bytes() == (tmp_path / "out0" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "out1").iterdir()) == sorted([*names, "ptebuild.json"])
    for out in ("out0", "out1"):
        assert ptebuild("verify", str(tmp_path / out)).returncode == 0
    stats = ptebuild("cache", "stats", "--cache", str(cache), "--json")
    assert stats.returncode == 0, stats.stderr
    figures = json.loads(stats.stdout)
    assert (figures["misses"], figures["hits"]) == (2, 4)


CRASHING_MODEL = """
import ctypes

def make_crash(**kwargs):
    ctypes.string_at(0)  # a segmentation fault, as a broken native extension would cause
"""


def test_a_crashing_worker_fails_only_its_program(tiny_project):
    (tiny_project.parent / "tinymodels" / "crash.py").write_text(CRASHING_MODEL)
    text = tiny_project.read_text() + """
[models.crash]
factory = "tinymodels.crash:make_crash"
[models.crash.methods.forward]
inputs = [{ name = "x", shape = [2, 6] }]

[programs.crash_portable]
model = "crash"
backend = "portable"
"""
    tiny_project.write_text(text)
    result = ptebuild("build", str(tiny_project), "--no-cache", "--jobs", "1", "--keep-going", "--json",
                      "--only", "crash_portable", "tiny_portable")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    statuses = {p["name"]: p["status"] for p in document["targets"]}
    assert statuses == {"tiny_portable": "built", "crash_portable": "failed"}
    crash = next(p for p in document["targets"] if p["name"] == "crash_portable")
    assert crash["message"].startswith(
        f"{tiny_project}: programs.crash_portable: the worker process crashed: killed by SIGSEGV"
    )
    assert (tiny_project.parent / "out" / "tiny_portable.pte").is_file()
    assert not (tiny_project.parent / "out" / "crash_portable.pte").exists()


def test_weights_files_and_factory_import_errors(tiny_project):
    """A model's weights file is what the program runs with; weights that do not fit, and a
    factory whose module fails to import, fail their own programs with located messages."""
    import torch
    from tinymodels_for_weights import save_weights

    project = tiny_project.parent
    _good, expected = save_weights(project / "good.pt", width=16, seed=99)
    save_weights(project / "bad.pt", width=8, seed=99)
    (project / "tinymodels" / "broken.py").write_text("import not_a_real_dependency\n")
    tiny_project.write_text(
        tiny_project.read_text()
        + """
[models.weighted]
factory = "tinymodels.tiny:make_tiny"
weights = "good.pt"
[models.weighted.methods.forward]
inputs = [{ name = "x", shape = [3, 6] }]

[models.misfit]
factory = "tinymodels.tiny:make_tiny"
weights = "bad.pt"
[models.misfit.methods.forward]
inputs = [{ name = "x", shape = [3, 6] }]

[models.broken]
factory = "tinymodels.broken:make"
[models.broken.methods.forward]
inputs = [{ name = "x", shape = [3, 6] }]

[programs.weighted]
model = "weighted"
backend = "portable"
data_name = "weighted_weights"

[programs.misfit]
model = "misfit"
backend = "portable"

[programs.broken]
model = "broken"
backend = "portable"
"""
    )
    result = ptebuild("build", str(tiny_project), "--no-cache", "--jobs", "1", "--keep-going", "--json",
                      "--only", "weighted", "misfit", "broken")
    assert result.returncode == 2, result.stderr  # a manifest problem (the factory) wins over a failed build
    programs = {p["name"]: p for p in json.loads(result.stdout)["targets"]}
    assert programs["weighted"]["status"] == "built"
    assert programs["misfit"]["status"] == "failed"
    assert programs["misfit"]["message"].startswith(
        f"{tiny_project}: models.misfit.weights: 'bad.pt' does not fit the model: Error(s) in loading state_dict"
    )
    assert programs["broken"]["message"] == (
        f"{tiny_project}: programs.broken: cannot import factory 'tinymodels.broken:make' of model 'broken': "
        "ModuleNotFoundError: No module named 'not_a_real_dependency'; fix the module, or put it beside the manifest"
        f" (full output: {project / 'out' / '.ptebuild' / 'logs' / 'broken.log'})"
    )
    from executorch.runtime import Runtime

    out = project / "out"
    loaded = Runtime.get().load_program(out / "weighted.pte", data_path=out / "weighted_weights.ptd")
    x = torch.randn(3, 6)
    actual = loaded.load_method("forward").execute([x])[0]
    assert torch.allclose(actual, expected(x), atol=1e-5)


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
def test_kill_9_mid_build_leaves_a_consistent_cache_and_no_orphans(tmp_path):
    """SIGKILL the builder after its first program is stored, while the second is lowering: its
    workers die with it, the cache verifies clean, nothing half-written is published, and the
    next build restores the first program and builds the second."""
    import signal
    import time

    manifest = copy_project(tmp_path / "project")
    cache = tmp_path / "cache"
    out = manifest.parent / "out"
    process = subprocess.Popen(
        # The local pool's promise (its workers are the builder's children); the warm server's
        # clients are tested in tests/executors.
        [sys.executable, "-m", "ptebuild", "build", str(manifest), "--cache", str(cache), "--jobs", "1",
         "--executor", "local"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=TOOLS_ENV,
    )
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.rstrip().endswith(": built"):
            break
    else:
        raise AssertionError("the build ended before a program was built:\n" + "".join(seen))
    first = seen[-1].split("]", 1)[-1].split(":", 1)[0].strip()
    # The second program's first stage line: it is being lowered now (its exports may be shared
    # with the first program's, so its first line need not say "exporting").
    line = process.stderr.readline()
    seen.append(line)
    assert line and first not in line and not line.rstrip().endswith(": built"), "".join(seen)
    workers = _children(process.pid)
    assert workers, "the builder should have a worker process"
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "workers outlived the killed builder"

    verify = ptebuild("cache", "verify", "--cache", str(cache))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    visible = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert visible in (["tiny_portable.pte", "tiny_portable_weights.ptd"],
                       ["tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd"])

    code, document = build_json(str(manifest), "--cache", str(cache), "--jobs", "1")
    assert code == 0
    assert sorted(p["status"] for p in document["targets"]) == ["built", "cached"]
    assert not (out / ".ptebuild-staging").exists()
    assert ptebuild("verify", str(out)).returncode == 0


# Started as a background job: slow (13 s more); its fast sibling in the default run is the warm
# server's (tests/executors/test_daemon.py), through the same command line.
@pytest.mark.parametrize("start", [pytest.param(s, marks=[pytest.mark.slow] if s == "background" else []) for s in STARTS])
def test_ctrl_c_stops_workers_and_leaves_no_partial_output(tmp_path, start):
    """Ctrl-C stops the build however it was started: a background job of a script (or of a CI
    runner's shell) starts with SIGINT ignored, and its SIGINT must stop it all the same."""
    import signal
    import time

    manifest = copy_project(tmp_path / "project")
    out = manifest.parent / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "ptebuild", "build", str(manifest), "--no-cache", "--jobs", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=TOOLS_ENV, preexec_fn=started(start),
    )
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "exporting" in line:
            break
    workers = _children(process.pid)
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130
    assert rest.strip().splitlines()[-1] == "error: interrupted"
    # A worker still starting when Ctrl-C came is not in the pool yet: it dies with its parent.
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)
    assert not out.exists()  # the build made the folder and wrote nothing into it: it is gone


QUANTIZED = """
[models.tiny]
factory = "tinymodels.tiny:make_tiny"
kwargs = { width = 64 }
seed = 1
dims = { batch = { min = 1, max = 4 } }
[models.tiny.methods.forward]
inputs = [{ name = "x", shape = ["batch", 6] }]

[programs.int8_dynamic]
model = "tiny"
backend = "xnnpack"
data_name = "int8_dynamic_weights"
options = { quantize = "int8-dynamic" }

[programs.int8_static]
model = "tiny"
backend = "xnnpack"
data_name = "int8_static_weights"
options = { quantize = "int8" }

[programs.float]
model = "tiny"
backend = "xnnpack"
data_name = "float_weights"
"""


@pytest.mark.slow
def test_quantized_xnnpack_programs(tiny_project):
    """int8 programs are smaller, checked against eager with their own tolerances, and their
    quantization scales in the .ptd are keyed by SHA-256 like every other weight."""
    from ptebuild.runtime import read_ptd
    from ptebuild.runtime.keys import sha256_in_key

    tiny_project.write_text(QUANTIZED)
    code, document = build_json(str(tiny_project), "--no-cache")
    assert code == 0, document
    programs = {p["name"]: p for p in document["targets"]}
    size = {name: next(o["bytes"] for o in p["outputs"] if o["path"].endswith(".ptd")) for name, p in programs.items()}
    assert size["int8_dynamic"] < size["float"] / 2 and size["int8_static"] < size["float"] / 2
    assert all(f["cosine"] >= 0.995 for f in programs["int8_dynamic"]["figures"])
    out = tiny_project.parent / "out"
    keys = read_ptd(out / "int8_static_weights.ptd").keys
    assert any(k.startswith("scale_") for k in keys)
    assert all(sha256_in_key(k) for k in keys)
    assert ptebuild("verify", str(out), "--bytes").returncode == 0


@pytest.mark.slow
def test_second_manifest_cannot_overwrite_the_first_ones_weights(tmp_path):
    """Two manifests exporting into one folder, same data name: the second is refused before
    lowering; renaming a program inside one manifest is not a conflict."""
    first = copy_project(tmp_path / "first")
    second = copy_project(tmp_path / "second")
    second.write_text(second.read_text().replace("[programs.tiny_portable]", "[programs.other_portable]"))
    out = tmp_path / "shared-out"
    assert ptebuild("build", str(first), "--no-cache", "--out", str(out), "--only", "tiny_portable").returncode == 0
    result = ptebuild("build", str(second), "--no-cache", "--out", str(out), "--only", "other_portable")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {second}: program 'other_portable' writes 'tiny_portable_weights.ptd', but {out} has the "
        "'tiny_portable_weights.ptd' that 'tiny_portable' of ../first/tiny.toml built (per ptebuild.json); "
        "give one of them another name or output folder, or delete 'tiny_portable_weights.ptd'"
    ]
    # The same manifest renaming its program takes its own file over.
    first.write_text(first.read_text().replace("[programs.tiny_portable]", "[programs.renamed_portable]"))
    assert ptebuild("build", str(first), "--no-cache", "--out", str(out), "--only", "renamed_portable").returncode == 0
    record = json.loads((out / "ptebuild.json").read_text())
    assert record["targets"]["renamed_portable"]["outputs"].keys() == {"renamed_portable.pte", "tiny_portable_weights.ptd"}
    assert record["targets"]["tiny_portable"]["outputs"].keys() == {"tiny_portable.pte"}

