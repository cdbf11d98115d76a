"""What this machine can lower and check, known before anything is lowered.

The probe is real (it lowers and checks a 1-op program for portable and XNNPACK in a fresh
interpreter). The GPU machine's verdict, where ExecuTorch's pip runtime fails under torch
2.11.0+cu130, is written as that machine's verdict file would read, for this toolchain's digest:
what the builder then does with it is real (a real build, a real cache).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from helpers import ptebuild

from ptebuild.builder import capabilities
from ptebuild.builder.capabilities import Capabilities, Verdict
from ptebuild.hashing import hash_file
from ptebuild.results import Status

GPU_MACHINE_CHECK = "RuntimeError: tensor does not have a device"
"""The first line of what ExecuTorch 1.5.1's runtime raised for every program on the GPU machine."""


def test_this_machine_lowers_and_checks_portable_and_xnnpack():
    found = Capabilities(None, hash_file).verdicts(["portable", "xnnpack"])
    assert {name: found[name] for name in ("portable", "xnnpack")} == {"portable": Verdict(), "xnnpack": Verdict()}
    again = Capabilities(None, hash_file)
    known = again.known()  # read from the file: no probe (the probe checks every registered backend at once)
    assert {name: known[name] for name in found} == found
    document = json.loads(again.path.read_text())
    assert document["format"] == "ptebuild-capabilities" and document["facts"]["toolchain.torch"].startswith("2.13.0")


def _gpu_machine_verdicts(folder: Path, monkeypatch) -> None:
    monkeypatch.setenv(capabilities.DIR_ENV, str(folder))
    kept = Capabilities(None, hash_file)
    kept._write({"portable": Verdict(check=GPU_MACHINE_CHECK), "xnnpack": Verdict(check=GPU_MACHINE_CHECK)})


def test_a_check_that_cannot_run_here_fails_in_seconds_before_lowering(tiny_project, tmp_path, monkeypatch):
    _gpu_machine_verdicts(tmp_path / "caps", monkeypatch)
    started = time.monotonic()
    done = ptebuild("build", tiny_project, "--cache", tmp_path / "cache", "--json", "--keep-going")
    seconds = time.monotonic() - started
    assert done.returncode == 1
    programs = json.loads(done.stdout)["targets"]
    assert {p["status"] for p in programs} == {Status.CANNOT_CHECK.value}
    portable = next(p for p in programs if p["name"] == "tiny_portable")
    assert portable["message"] == (
        f"{tiny_project}: programs.tiny_portable: not in the cache, and this machine cannot run its check "
        f"(executorch-runtime): {GPU_MACHINE_CHECK}; build it where the check runs (torch 2.13.0 (CPU) with "
        "executorch 1.5.1) with a shared cache, or leave it out with --skip-backend portable"
    )
    assert "lowering" not in done.stderr and not (tiny_project.parent / "out" / "tiny_portable.pte").exists()
    assert seconds < 30, seconds


def test_programs_a_cpu_machine_built_are_restored(tiny_project, tmp_path, monkeypatch):
    """The CPU machine (torch 2.13.0) fills the cache; the GPU machine, whose check cannot run and
    whose key differs (its torch), restores what the CPU machine built instead of failing."""
    from ptebuild.builder import keys
    from ptebuild.manifest.load import load_manifest
    from ptebuild.results import ActionResult, OutputFile
    from ptebuild.store import Store
    from ptebuild.store.frontend import Cache
    from ptebuild.store.local import LocalTier

    cpu_cache, gpu_cache = tmp_path / "cpu-cache", tmp_path / "gpu-cache"
    built = ptebuild("build", tiny_project, "--cache", cpu_cache, "--only", "tiny_portable", "--json")
    assert built.returncode == 0, built.stderr
    out = tiny_project.parent / "out"
    plan = load_manifest(str(tiny_project))
    program = next(p for p in plan.programs if p.name == "tiny_portable")
    inputs = {**keys.program_inputs(program, plan, hash_file), "toolchain.torch": "2.13.0+cpu (the CPU runner)"}
    files = {name: out / name for name in program.output_names}
    result = ActionResult(
        key=keys.action_key(inputs), target=program.name, kind="program", backend="portable",
        outputs=tuple(OutputFile(n, *hash_file(p)) for n, p in sorted(files.items())), inputs=inputs,
        check="executorch-runtime", built_on="cpu-runner",
    )
    tier = LocalTier(Store(gpu_cache))
    Cache([tier], lambda text: None).save(result, files, aliases=(keys.elsewhere_key(inputs),))
    tier.close()
    for path in files.values():
        path.unlink()
    _gpu_machine_verdicts(tmp_path / "caps", monkeypatch)
    done = ptebuild("build", tiny_project, "--cache", gpu_cache, "--only", "tiny_portable", "--json", "--explain")
    assert done.returncode == 0, done.stderr
    (restored,) = json.loads(done.stdout)["targets"]
    assert restored["status"] == "cached" and restored["node"] == "cpu-runner"
    assert "built on cpu-runner" in restored["explain"][0]
    assert all(path.is_file() for path in files.values())


def test_a_program_without_a_check_only_needs_the_lowering():
    from ptebuild.backends import get_backend

    portable = get_backend("portable")
    broken = Verdict(check=GPU_MACHINE_CHECK)
    assert capabilities.obstacle(portable, {}, False, broken) is None
    blocked = capabilities.obstacle(portable, {}, True, broken)
    assert blocked is not None and blocked.status is Status.CANNOT_CHECK
    lowering = capabilities.obstacle(portable, {}, False, Verdict(lower="BuildError: no"))
    assert lowering is not None and lowering.status is Status.CANNOT_LOWER


def test_a_build_lowers_without_probing_first_and_probes_when_a_program_fails(tiny_project, tmp_path, monkeypatch):
    """No verdict kept: the programs are lowered at once (a program that lowers and passes its
    check proves what the probe would); a program that fails gets the probe, which tells a
    toolchain that cannot lower here (cannot-lower) from a program that is wrong (failed)."""
    monkeypatch.setenv(capabilities.DIR_ENV, str(tmp_path / "caps"))
    done = ptebuild("build", tiny_project, "--cache", tmp_path / "cache", "--only", "tiny_portable", "--json")
    assert done.returncode == 0, done.stderr
    assert "probing" not in done.stderr and not list((tmp_path / "caps").glob("*.json")), done.stderr

    source = tiny_project.parent / "tinymodels" / "tiny.py"  # a wrong program, not a wrong manifest (exit 2, no probe)
    source.write_text(source.read_text().replace("def make_tiny(**kwargs) -> Tiny:\n",
                                                 "def make_tiny(**kwargs) -> Tiny:\n    raise RuntimeError('broken on purpose')\n"))
    failed = ptebuild("build", tiny_project, "--cache", tmp_path / "cache", "--only", "tiny_portable")
    assert failed.returncode == 1
    assert "tiny_portable  portable  failed" in failed.stdout, failed.stdout
    assert "programs.tiny_portable: factory 'tinymodels.tiny:make_tiny' failed: RuntimeError: broken on purpose" in failed.stderr, \
        failed.stderr
    assert "probing what this machine can lower and check: portable" in failed.stderr, failed.stderr
    assert Capabilities(None, hash_file).known()["portable"] == Verdict()
