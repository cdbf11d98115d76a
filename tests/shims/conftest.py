"""Fixtures of the shims tests (helpers live in shim_tools.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptebuild import cli


@pytest.fixture
def run_cli(capsys):
    """Run ``ptebuild`` through :func:`ptebuild.cli.main`; returns (exit code, stdout, stderr)."""

    def run(*argv: str | Path) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return run
