"""Make ``git merge`` merge import libraries by their export sets instead of failing on binaries.

``install_merge_driver`` sets, in the repository's local config::

    merge.ptebuild-shims.name   = ptebuild three-way merge of import library exports
    merge.ptebuild-shims.driver = <python> -m ptebuild.cli.shims merge %O %A %B -o %A

and appends ``*.lib -text merge=ptebuild-shims`` to the work tree's ``.gitattributes``. git runs
the driver with the base (%O), ours (%A, also the output) and theirs (%B) as temporary files;
exit 0 means merged, anything else leaves a conflict for the user.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from ptebuild.errors import UsageError

DRIVER_NAME = "ptebuild-shims"
DRIVER_DESCRIPTION = "ptebuild three-way merge of import library exports"


def default_driver_command() -> str:
    """The command git runs: this Python and this ptebuild, wherever they live."""
    command = f"{shlex.quote(sys.executable)} -m ptebuild.cli.shims merge %O %A %B -o %A"
    package_root = Path(__file__).resolve().parents[2]  # the folder holding ptebuild/
    if "site-packages" not in package_root.parts and "dist-packages" not in package_root.parts:
        # A source checkout that is not installed: point Python at it explicitly.
        command = f"PYTHONPATH={shlex.quote(str(package_root))} {command}"
    return command


def _git(repo: Path, *args: str) -> str:
    try:
        result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed or not on PATH; install git") from None
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise UsageError(f"{repo}: git {' '.join(args[:2])}: {message}; run it in a git checkout")
    return result.stdout


def install_merge_driver(repo: Path, pattern: str = "*.lib", command: str | None = None) -> Path:
    """Configure the merge driver in ``repo`` and return the ``.gitattributes`` path it updated.

    Idempotent: running it twice leaves one attribute line. Raises :class:`UsageError` when
    ``repo`` is not inside a git work tree.
    """
    top = Path(_git(Path(repo), "rev-parse", "--show-toplevel").strip())
    _git(top, "config", f"merge.{DRIVER_NAME}.name", DRIVER_DESCRIPTION)
    _git(top, "config", f"merge.{DRIVER_NAME}.driver", command or default_driver_command())
    attributes = top / ".gitattributes"
    line = f"{pattern} -text merge={DRIVER_NAME}"
    existing = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    if line not in existing.splitlines():
        separator = "" if not existing or existing.endswith("\n") else "\n"
        attributes.write_text(existing + separator + line + "\n", encoding="utf-8")
    return attributes
