"""The warm worker servers of a cache folder, seen from outside: which answer, and stopping them.

A server is found by its socket, ``<cache>/workers/<toolchain-id>.sock``
(:mod:`ptebuild.daemon.protocol`); ``ptebuild workers`` renders what this module finds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ptebuild.daemon import protocol


def servers(cache_root: Path) -> tuple[Path, list[tuple[Path, dict[str, Any] | None]]]:
    """(the workers folder, [(socket, the server's status, or None if nothing answers there)])."""
    folder = protocol.workers_dir(cache_root)
    found = []
    for sock_path in sorted(folder.glob("*.sock")):
        try:
            with protocol.connect(sock_path, timeout=2) as sock:
                answer = protocol.request(sock, {"op": "status"}, timeout=5)
        except OSError:
            answer = None
        found.append((sock_path, answer if answer and answer.get("op") == "status" else None))
    return folder, found


def stop(sock_path: Path, wait: float = 10.0) -> bool:
    """Ask the server at ``sock_path`` to stop and wait up to ``wait`` seconds for its socket to go;
    False if nothing answered."""
    try:
        with protocol.connect(sock_path, timeout=2) as sock:
            protocol.request(sock, {"op": "stop"}, timeout=5)
    except OSError:
        return False
    deadline = time.monotonic() + wait
    while sock_path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return True
