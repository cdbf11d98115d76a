"""A test that needs a real component (nginx, Ray, BuildGrid) never reads as a pass by skipping on CI.

Each case runs one real test of the suite in a fresh pytest with the component hidden: on a
developer's machine it is skipped with the reason, under ``CI`` it fails, naming the component.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT


def run_pytest(test: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    # A run of its own: not under CI, not one of this run's xdist workers, in one process (-n 0).
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CI", "PTEBUILD_TESTS_REQUIRE_ALL", "PTEBUILD_TEST_GROUPS") and not k.startswith("PYTEST_XDIST")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-rs", test],
        capture_output=True, text=True, cwd=ROOT, env={**clean, **env}, timeout=300,
    )


@pytest.fixture
def no_ray(tmp_path) -> dict[str, str]:
    """A ``ray`` that cannot be imported, first on the path."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    return {"PYTHONPATH": str(tmp_path)}


CASES = {
    "nginx": ("tests/store/test_signing.py::test_signed_entries", {"PTEBUILD_TEST_NGINX": "none"}, "nginx is not installed"),
    "ray": ("tests/executors/test_ray.py", None, "ray cannot be imported"),  # skipped whole, at import
    "buildgrid": ("tests/store/test_grpc.py::test_a_blob_of_a_size_never_met_cannot_be_fetched",
                  {"PTEBUILD_TEST_BUILDGRID": "none"}, "BuildGrid is not installed"),
}


@pytest.mark.parametrize("component", sorted(CASES))
def test_a_missing_component_skips_on_a_laptop_and_fails_on_ci(component, no_ray):
    test, env, reason = CASES[component]
    env = env or no_ray
    laptop = run_pytest(test, env)
    # exit 5: a module skipped whole at import collects no test
    assert laptop.returncode in (0, 5) and "1 skipped" in laptop.stdout and reason in laptop.stdout, laptop.stdout[-2000:]
    ci = run_pytest(test, {**env, "CI": "true"})
    assert ci.returncode != 0, ci.stdout[-2000:]
    assert reason in ci.stdout and "required under CI" in ci.stdout, ci.stdout[-2000:]
