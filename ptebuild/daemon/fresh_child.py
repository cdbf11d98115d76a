"""A warm server's task in a fresh interpreter, for backends that do not survive ``fork()``.

``python -m ptebuild.daemon.fresh_child --submit FILE --pipe FD --parent PID``: started by the
server (:func:`ptebuild.daemon.children.spawn_fresh`) with the build's environment and working
folder. Reads the submit message from ``FILE`` (and removes it), dies with the server, imports
the toolchain, runs the task and reports on the pipe exactly as a forked child does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ptebuild.daemon.fresh_child")
    parser.add_argument("--submit", required=True, type=Path)
    parser.add_argument("--pipe", required=True, type=int)
    parser.add_argument("--parent", required=True, type=int)
    args = parser.parse_args(argv)
    from ptebuild.daemon.children import run_child
    from ptebuild.processes import die_with_parent

    die_with_parent(args.parent)
    submit = json.loads(args.submit.read_text())
    with contextlib.suppress(OSError):
        args.submit.unlink()
    from ptebuild.daemon import protocol

    os.write(args.pipe, protocol.encode({"op": "progress", "text": "in a fresh interpreter (no fork): importing the toolchain"}))
    from ptebuild.worker.execute import prepare_worker

    prepare_worker()
    return run_child(submit, args.pipe)


if __name__ == "__main__":
    sys.exit(main())
