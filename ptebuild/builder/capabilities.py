"""What this machine can do with each backend, known before anything is lowered.

Two sources:

- the backend's cheap hooks, per program (:meth:`~ptebuild.backends.base.Backend.can_build`,
  :meth:`~ptebuild.backends.base.Backend.can_check`: a GPU, a compiler, a cross toolchain), asked
  before a program is handed to an executor;
- the probe's verdict, per backend and toolchain: a fresh interpreter lowers and checks the
  smallest real program (:mod:`ptebuild.worker.probe`). It finds what no cheap fact shows, such as
  ExecuTorch's pip runtime failing every program under another torch ("tensor does not have a
  device" under torch 2.11.0+cu130). A kept verdict is asked before a program is lowered; with
  none, the builder lowers at once and runs the probe only when a program fails
  (:meth:`ptebuild.builder.program_target.ProgramTarget.obstacle`), and ``ptebuild doctor`` runs it.

The verdict is kept as a small JSON file, ``<capabilities>/<toolchain digest>.json``, where
``<capabilities>`` is ``$PTEBUILD_CAPABILITIES_DIR``, else ``capabilities/`` in the cache folder
(the default cache folder when the build has none). The digest covers the interpreter (its real
path and version), torch's and executorch's versions and their ``version.py`` files (torch's
names its CUDA build), the platform and ptebuild's lowering and probe code: a ``pip install``
probes again, an unchanged toolchain reads the file and imports nothing. Document::

    {"format": "ptebuild-capabilities", "version": 1, "digest": "<xxh3-128>",
     "facts": {"toolchain.torch": "2.13.0", ...},
     "backends": {"portable": {"lower": null, "check": null, "detail": ""}, ...}}

The probe runs only where tasks run on this machine (the ``local`` and ``daemon`` executors): a
Ray cluster's nodes are not this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild import backend_registry, own_code
from ptebuild.canonical import canonical_json
from ptebuild.results import Status

if TYPE_CHECKING:
    from ptebuild.backends.base import Backend, Options

FORMAT = "ptebuild-capabilities"
VERSION = 1
DIR_ENV = "PTEBUILD_CAPABILITIES_DIR"
PROBE_TIMEOUT = 600.0
"""Seconds the probe may take (importing torch and executorch, then two small lowerings: about
15 s on this 2-core machine)."""
EXECUTORS_ON_THIS_MACHINE = ("local", "daemon")

DigestFile = Callable[[Path], tuple[str, int]]


@dataclass(frozen=True)
class Verdict:
    """What the probe found for one backend: None where a step works, else its one-line cause."""

    lower: str | None = None
    check: str | None = None
    detail: str = ""
    """The failure's whole text (for ``ptebuild doctor --json``)."""

    def to_json(self) -> dict[str, Any]:
        return {"lower": self.lower, "check": self.check, "detail": self.detail}

    @classmethod
    def from_json(cls, data: object) -> Verdict:
        if not isinstance(data, dict):
            raise TypeError("a verdict is an object")
        lower, check = data.get("lower"), data.get("check")
        if not all(v is None or isinstance(v, str) for v in (lower, check)):
            raise TypeError("lower and check are null or a line")
        return cls(lower, check, str(data.get("detail") or ""))


@dataclass(frozen=True)
class Obstacle:
    """Why this machine will not lower a program: the status it is reported with, and the line."""

    status: Status
    reason: str
    way_out: str


def capabilities_dir(cache_root: Path | None) -> Path:
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    if cache_root is None:
        from ptebuild.cache_dir import default_cache_dir

        cache_root = default_cache_dir()
    return Path(cache_root) / "capabilities"


def _module_file(name: str) -> Path | None:
    """``<package>/version.py`` of an installed package, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder, "version.py")
        if path.is_file():
            return path
    return None


def toolchain_facts(digest_file: DigestFile) -> dict[str, str]:
    """What the verdict depends on (no torch import): the key's toolchain facts, the interpreter,
    torch's and executorch's ``version.py``, ptebuild's probe code and the installed plug-in backends."""
    from ptebuild.builder.keys import toolchain_facts as key_facts

    facts = key_facts(digest_file)
    facts["interpreter"] = f"{os.path.realpath(sys.executable)} ({sys.prefix})"
    for package in ("torch", "executorch"):
        path = _module_file(package)
        facts[f"{package}.version_py"] = digest_file(path)[0] if path is not None else "none"
    facts["probe-code"] = own_code.closure_digest(["ptebuild.worker.probe", "ptebuild.builder.capabilities"], digest_file)
    plugins = backend_registry.fingerprint(digest_file)
    if plugins:  # a plug-in backend's verdict is its code's
        facts["backend-plugins"] = plugins
    return facts


def digest(facts: dict[str, str]) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(canonical_json(facts).encode())


class Capabilities:
    """The verdicts of one toolchain, read from their file or probed (once, for the backends asked)."""

    def __init__(self, cache_root: Path | None, digest_file: DigestFile, report: Callable[[str], None] | None = None):
        self.folder = capabilities_dir(cache_root)
        self.digest_file = digest_file
        self.report = report or (lambda _text: None)
        self._facts: dict[str, str] | None = None
        self._verdicts: dict[str, Verdict] | None = None

    @property
    def facts(self) -> dict[str, str]:
        if self._facts is None:
            self._facts = toolchain_facts(self.digest_file)
        return self._facts

    @property
    def path(self) -> Path:
        return self.folder / f"{digest(self.facts)}.json"

    def _read(self) -> dict[str, Verdict]:
        if self._verdicts is None:
            self._verdicts = {}
            try:
                document = json.loads(self.path.read_text())
                if document.get("format") == FORMAT and document.get("version") == VERSION:
                    self._verdicts = {str(k): Verdict.from_json(v) for k, v in document["backends"].items()}
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                pass  # no verdict yet, or one this ptebuild cannot read: probe again
        return self._verdicts

    def known(self) -> dict[str, Verdict]:
        """The verdicts found so far (no probe)."""
        return dict(self._read())

    def verdicts(self, backends: Iterable[str]) -> dict[str, Verdict]:
        """The verdict of each backend, probing (one fresh interpreter) those with none yet."""
        wanted = list(dict.fromkeys(backends))
        kept = self._read()
        missing = [name for name in wanted if name not in kept]
        if missing:
            kept.update(self._probe(missing))
            self._write(kept)
        return {name: kept[name] for name in wanted}

    def _write(self, verdicts: dict[str, Verdict]) -> None:
        from ptebuild.atomic import write_atomically

        document = {
            "format": FORMAT, "version": VERSION, "digest": digest(self.facts), "facts": self.facts,
            "backends": {name: v.to_json() for name, v in sorted(verdicts.items())},
        }
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())
        except OSError as exc:
            self.report(f"cannot keep the capability probe's verdict in {self.folder}: {exc}")

    def _probe(self, backends: list[str]) -> dict[str, Verdict]:
        """Run :mod:`ptebuild.worker.probe` until every backend has a verdict; a crash is the
        verdict of the step it happened in."""
        from ptebuild.causes import shorten
        from ptebuild.processes import worker_environment

        found: dict[str, Verdict] = {}
        left = list(backends)
        while left:
            self.report(f"probing what this machine can lower and check: {', '.join(left)} (once per toolchain)")
            started, step = time.monotonic(), None
            env = worker_environment(os.environ)
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "ptebuild.worker.probe", *left], capture_output=True, text=True,
                    timeout=PROBE_TIMEOUT, env=env, stdin=subprocess.DEVNULL,
                )
                out, err, code = done.stdout, done.stderr, done.returncode
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                err, code = "", None
            for line in out.splitlines():
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(data, dict) or data.get("backend") not in left:
                    continue
                if "step" in data:
                    step = (data["backend"], data["step"])
                    continue
                try:
                    found[data["backend"]] = Verdict.from_json(data)
                except TypeError:
                    continue
                left.remove(data["backend"])
                step = None
            if not left:
                break
            # The step that was running when the interpreter ended is the one that failed; none
            # started: the backend's code did not even import.
            name = step[0] if step else left[0]
            what = step[1] if step else "lower"
            if code is None:
                why = f"the probe did not finish in {PROBE_TIMEOUT:.0f} s"
            else:
                tail = shorten(" ".join(err.strip().splitlines()[-2:]), 200) if err.strip() else ""
                ended = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                why = f"the probe's interpreter {ended}" + (f" while it ran the {what} step" if step else "") + \
                    (f": {tail}" if tail else "")
            verdict = Verdict(lower=why, check=why, detail=err) if what == "lower" else Verdict(check=why, detail=err)
            found[name] = verdict
            left.remove(name)
            if time.monotonic() - started > PROBE_TIMEOUT:
                for rest in left:
                    found[rest] = Verdict(lower=why, check=why)
                break
        return found


def obstacle(backend: Backend, options: Options, check_enabled: bool, verdict: Verdict | None) -> Obstacle | None:
    """Why this machine will not build a program of ``backend`` with ``options``, or None.

    A program whose check is off needs only the lowering.
    """
    way_out = f"leave it out with --skip-backend {backend.name}"
    reason = backend.can_build(options)
    if reason is not None:
        status = Status.NEEDS_GPU if backend.needs_gpu else Status.CANNOT_LOWER
        return Obstacle(status, f"this machine cannot build it: {reason}",
                        f"build it there (with a shared cache), or {way_out}")
    if verdict is not None and verdict.lower is not None:
        return Obstacle(Status.CANNOT_LOWER, f"this machine cannot lower {backend.name} programs: {verdict.lower}",
                        f"build it where it lowers (with a shared cache), or {way_out}")
    if not check_enabled:
        return None
    reason = backend.can_check(options)
    if reason is None and verdict is not None:
        reason = verdict.check
    if reason is not None:
        kind = backend.check_kind(options).name
        return Obstacle(
            Status.CANNOT_CHECK, f"this machine cannot run its check ({kind}): {reason}",
            f"build it where the check runs ({backend.checked_with}) with a shared cache, or {way_out}",
        )
    return None
