"""The "runners" of the remote-cache build tests: separate project copies, local caches and output
folders on one machine, building the tiny project through ``ptebuild build`` in a new process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import ptebuild
from project_copy import copy_project


class Runner:
    """A runner building into ``remote``. ``salt``: a comment added to the model's source, which
    gives its programs keys of their own (a server the whole session shares, as BuildGrid is,
    then holds nothing of theirs); runners that share a salt share the keys."""

    def __init__(self, root: Path, remote: str, salt: str = ""):
        self.manifest = copy_project(root / "project")
        self.salt = salt
        if salt:
            model = self.manifest.parent / "tinymodels" / "tiny.py"
            model.write_text(model.read_text() + f"\n# {salt}\n")
        self.cache = root / "cache"
        self.out = self.manifest.parent / "out"
        self.remote = remote

    def build(self, *extra: str, remote: str | None = None, trace_imports: bool = False,
              env: dict | None = None) -> tuple[dict, subprocess.CompletedProcess]:
        result = ptebuild(
            "build", str(self.manifest), "--cache", str(self.cache), "--remote-cache", remote or self.remote,
            "--json", *extra, trace_imports=trace_imports, env=env,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout), result

    def files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.out.iterdir()) if p.suffix in (".pte", ".ptd")}

    def remote_stats(self) -> dict:
        """The remote tier's counters of this runner's last build (``ptebuild cache stats``)."""
        stats = ptebuild("cache", "stats", "--cache", str(self.cache), "--json")
        (remote,) = json.loads(stats.stdout)["last_build_remote"].values()
        return remote


def warnings(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def heavy_imports(result: subprocess.CompletedProcess) -> set[str]:
    names = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    return {n for n in names if n.split(".")[0] in ("torch", "executorch")}
