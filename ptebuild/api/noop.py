"""When a build may be answered by its no-op stamp, and what the stamp keeps.

The mechanism (stat every file, folder and cache entry a build looked at; check by content what
moved) is :mod:`ptebuild.builder.noop`; this module decides:

- a build has a stamp (:func:`stamp_for`) unless it has no local cache, is ``locked`` or ``check``
  (those must look at the lock and lower again); its identity covers the manifest path and the
  whole request, besides what :func:`ptebuild.builder.noop.identity` covers (the working folder,
  the interpreter, ``sys.path``, the environment variables that steer a build);
- a stamp is written (:func:`remember`) only after a build in which every target was up to date
  in place, nothing was built, restored, failed or warned about, and no backend's key facts come
  from anything but files (a GPU query);
- it keeps the build's report (its JSON) and the progress events it reported, so that a replay
  (:func:`replay`) gives the caller the same report and the same lines.

Nothing here imports dataclasses, torch or pydantic: the CLI answers a stamped no-op through it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ptebuild.api.request import BuildRequest, cache_root
from ptebuild.builder import noop

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ptebuild.results import TargetResult

Event = tuple[str, str, str]
"""(target, event, text), as a build's progress callback receives them."""


def stamp_for(manifest: str, request: BuildRequest) -> Path | None:
    """Where the stamp of this build lives, or None when it may not have one."""
    if request.no_cache or request.locked or request.reproduce or request.timings:
        return None  # --timings: the page shows this build, which a replay does not make
    root = cache_root(request)
    assert root is not None
    material = json.dumps({"manifest": os.fspath(manifest), "request": request.to_json()}, sort_keys=True, default=str)
    return noop.stamp_path(root, [material])


def replay(stamp: Path) -> tuple[dict[str, Any], list[Event]] | None:
    """The stamped build's report (as JSON) and events, if nothing it looked at moved."""
    kept = noop.replay(stamp)
    try:
        # A report of an older ptebuild (its targets under "programs") is not replayed: built anew.
        if isinstance(kept, dict) and isinstance(kept["report"], dict) and isinstance(kept["report"].get("targets"), list):
            return kept["report"], [(str(a), str(b), str(c)) for a, b, c in kept["events"]]
    except (KeyError, TypeError, ValueError):
        pass
    if kept is not None:
        noop.forget(stamp)
    return None


def was_noop(targets: list[TargetResult], events: list[Event]) -> bool:
    """Every target up to date in place: nothing built, restored, failed or warned about, and
    nothing whose key depends on more than files (a GPU query)."""
    from ptebuild.backends import get_backend
    from ptebuild.results import Status

    return (
        bool(targets)
        and all(t.status is Status.CACHED and t.explain == ["up to date"] for t in targets)
        and all(t.backend is None or get_backend(t.backend).toolchain_from_files for t in targets)
        and not any(event == "warning" for _, event, _ in events)
    )


def remember(stamp: Path, looked_at: noop.LookedAt, since: int, report: dict[str, Any], events: list[Event]) -> bool:
    """Write the stamp of a no-op build that began at ``since`` (``time.time_ns()``); False if
    something it looked at changed just before or while it ran."""
    return noop.write(stamp, looked_at, {"report": report, "events": [list(e) for e in events]}, since)
