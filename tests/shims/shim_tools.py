"""Helpers of the shims tests: the shipped list and the real LLVM tools."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers import unavailable

SHIPPED_DEF = Path(__file__).resolve().parents[2] / "ptebuild" / "shims" / "aoti_cuda_shims.def"


def require_tool(name: str) -> str:
    """The tool's path; a missing tool fails the test in CI and skips it elsewhere."""
    path = shutil.which(name)
    if path:
        return path
    unavailable(f"{name} not found; install the Debian packages clang, lld, llvm and llvm-19")


def dlltool(def_path: Path, dll: str, out: Path, tool: str = "llvm-dlltool") -> bytes:
    """llvm-dlltool's import library for ``def_path`` (x86-64); ``tool`` picks the LLVM version."""
    path = require_tool(tool)
    subprocess.run([path, "-m", "i386:x86-64", "-D", dll, "-d", str(def_path), "-l", str(out)], check=True)
    return out.read_bytes()
