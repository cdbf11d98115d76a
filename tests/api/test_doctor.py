"""ptebuild.doctor(): each backend's lower and check on this machine, from the real probe."""

from __future__ import annotations

import ptebuild


def test_this_cpu_machine(tmp_path):
    report = ptebuild.doctor(tmp_path / "cache")
    rows = {row.backend: row for row in report.backends}
    assert (rows["portable"].lower, rows["portable"].check) == (True, True)
    assert (rows["xnnpack"].lower, rows["xnnpack"].check) == (True, True)
    assert rows["cuda"].lower is False and rows["cuda"].why == "built on a machine with a CUDA GPU"
    assert rows["cuda"].check_kind == "aoti-runner-cuda"
    assert report.facts["toolchain.torch"].startswith("2.13.0") and report.facts["toolchain.executorch"] == "1.5.1"
    assert report.verdicts is not None and report.verdicts.is_file()
    assert report.to_json()["backends"][0]["backend"] == "portable"


def test_without_the_probe_nothing_is_guessed(tmp_path, monkeypatch):
    monkeypatch.setenv("PTEBUILD_CAPABILITIES_DIR", str(tmp_path / "empty"))
    rows = {row.backend: row for row in ptebuild.doctor(tmp_path / "cache", probe=False).backends}
    assert rows["portable"].lower is None and "not probed yet" in rows["portable"].why
