"""A build's progress on stderr: a line per step in a log, one updating line on a terminal.

Events come as ``(target, event, text)`` (``start``, ``progress``, ``done``, ``warning``). Where
stderr is not a terminal (CI, a pipe, a file) each is a line of its own, with the time since the
build began: ``[  12.3s] policy_xnnpack: lowering for xnnpack``. On a terminal, as ninja does, the
steps share one line that is rewritten in place (the count of targets done, then each running
target's latest step, cut to the terminal's width), and only what stays worth reading is printed
for good above it: each target's end (``built``, ``cached``, ``failed``...) and every warning.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # typing is not imported at run time (a no-op build replays its events through this)
if TYPE_CHECKING:
    from typing import TextIO


class TerminalReport:
    """Progress on ``stream`` (see the module docstring); ``quiet``: warnings only (``--json``);
    ``live``: one updating line (default: whether ``stream`` is a terminal)."""

    def __init__(self, stream: TextIO, quiet: bool, live: bool | None = None) -> None:
        self.stream = stream
        self.quiet = quiet
        self.live = _is_terminal(stream) if live is None else live
        self.started = time.monotonic()
        self.running: dict[str, str] = {}
        """Each target that started and is not done: its latest step."""
        self.done = 0
        self.shown = False
        """Whether the live line is on the screen (and must be cleared before a line that stays)."""

    def __call__(self, name: str, event: str, text: str) -> None:
        if event == "warning":
            self._keep(f"warning: {name + ': ' if name else ''}{text}")
            return
        if self.quiet:
            return
        stamp = f"[{time.monotonic() - self.started:6.1f}s]"
        if not self.live:
            print(f"{stamp} {name}: {text}", file=self.stream, flush=True)
            return
        if event == "done":
            self.running.pop(name, None)
            self.done += 1
            self._keep(f"{stamp} {name}: {text}")
        else:
            self.running[name] = text
        self._status(stamp)

    def close(self) -> None:
        """Clear the live line (before the build's table is printed)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

    def _keep(self, line: str) -> None:
        self.close()
        print(line, file=self.stream, flush=True)

    def _status(self, stamp: str) -> None:
        if not self.running:
            self.close()
            return
        steps = "; ".join(f"{name}: {text}" for name, text in self.running.items())
        line = f"{stamp} {self.done} done, {len(self.running)} running: {steps}"
        width = _width(self.stream)
        if len(line) >= width:
            line = line[: max(0, width - 2)] + "…"
        self.stream.write("\r\x1b[K" + line)
        self.stream.flush()
        self.shown = True


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def _width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
