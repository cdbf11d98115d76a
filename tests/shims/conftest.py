"""Fixtures of the shims tests: the CLI, the real LLVM tools, small shim lists."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ptebuild import cli

SHIPPED_DEF = Path(__file__).resolve().parents[2] / "ptebuild" / "shims" / "aoti_cuda_shims.def"


def require_tool(name: str) -> str:
    """The tool's path; a missing tool fails the test in CI and skips it elsewhere."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found; install the Debian packages clang, lld and llvm"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """Run ``ptebuild`` through :func:`ptebuild.cli.main`; returns (exit code, stdout, stderr).

    Subcommands whose modules other work has not landed yet are left out, so these tests
    exercise the real dispatcher without depending on unrelated commands.
    """
    available = {}
    for name, module in cli.SUBCOMMANDS.items():
        try:
            importlib.import_module(f"ptebuild.cli.{module}")
        except ModuleNotFoundError:
            continue
        available[name] = module
    monkeypatch.setattr(cli, "SUBCOMMANDS", available)

    def run(*argv: str | Path) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return run


def dlltool(def_path: Path, dll: str, out: Path) -> bytes:
    """llvm-dlltool's import library for ``def_path`` (x86-64)."""
    tool = require_tool("llvm-dlltool")
    subprocess.run([tool, "-m", "i386:x86-64", "-D", dll, "-d", str(def_path), "-l", str(out)], check=True)
    return out.read_bytes()
