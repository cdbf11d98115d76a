"""A failure's cause in one line, and its whole text for a log: the one place that shortens errors.

A lowering or a check fails with texts written for other readers: a C++ exception carries
``Exception raised from ...`` and twenty frames of backtrace; AOTInductor lists the missing
kernels on the lines after ``missing fallback kernels (2 total):``; ExecuTorch's runtime says
``failed with error 0x12`` and logs the reason on the side. :func:`summary` keeps what the user
needs on one line:

- the text up to the first sign of a backtrace (``Exception raised from``, ``C++ CapturedTraceback:``,
  ``frame #0:``, ``#4 symbol from file``), never the frames;
- the first line; when it ends with ``:`` (what follows is a list: missing kernels, unsupported
  operators, mismatched shapes), the items of that paragraph, bullets dropped, the first
  :data:`MAX_ITEMS` of them and how many more;
- at most :data:`MAX_LINE` characters.

:func:`chain` walks an exception's causes. :func:`describe` gives an exception's ``(line, text)``: the line as above, prefixed with the
exception's type, and the full text (traceback with chained causes) for the log file that the
line names. Nothing here imports torch; floor one.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

MAX_LINE = 400
"""The longest one-line cause, in characters (cut with ``...``)."""
MAX_ITEMS = 8
"""How many items of a list a line keeps (then ``and N more``)."""
MAX_TEXT = 1 << 20
"""The longest full text kept for a log (1 MiB: the end is cut, never the start)."""

_NOISE = re.compile(
    r"^\s*(Exception raised from |C\+\+ CapturedTraceback:|frame #\d+:|#\d+ .* from |"
    r"Traceback \(most recent call last\):)"
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_ERROR_CODE = re.compile(r"\berror(?: code)?:? 0x:?([0-9a-fA-F]+)\b")

# ExecuTorch's runtime error codes (runtime/core/error.h), for messages that give only the number.
EXECUTORCH_ERRORS = {
    0x01: "Internal", 0x02: "InvalidState", 0x03: "EndOfMethod", 0x04: "AlreadyLoaded",
    0x10: "NotSupported", 0x11: "NotImplemented", 0x12: "InvalidArgument", 0x13: "InvalidType",
    0x14: "OperatorMissing", 0x15: "RegistrationExceedingMaxKernels", 0x16: "RegistrationAlreadyRegistered",
    0x20: "NotFound", 0x21: "MemoryAllocationFailed", 0x22: "AccessFailed", 0x23: "InvalidProgram",
    0x24: "InvalidExternalData", 0x25: "OutOfResources", 0x30: "DelegateInvalidCompatibility",
    0x31: "DelegateMemoryAllocationFailed", 0x32: "DelegateInvalidHandle",
}


@dataclass(frozen=True)
class Cause:
    """Why something failed: ``line`` for the report, ``text`` (everything) for the log."""

    line: str
    text: str


def _meaningful_lines(text: str) -> list[str]:
    """The lines before the first backtrace marker, right-stripped."""
    lines = []
    for raw in text.splitlines():
        if _NOISE.match(raw):
            break
        lines.append(raw.rstrip())
    return lines


def shorten(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line, at most ``limit`` characters (``...`` where it was cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _with_error_name(line: str) -> str:
    """``error 0x12`` becomes ``error 0x12 (InvalidArgument)``: ExecuTorch gives only the number."""

    def name(match: re.Match[str]) -> str:
        code = int(match.group(1), 16)  # "error 0x12", or "error: 0x:14" as load_method says it
        known = EXECUTORCH_ERRORS.get(code)
        return f"{match.group(0)} ({known})" if known and f"({known})" not in line else match.group(0)

    return _ERROR_CODE.sub(name, line, count=1)


def summary(text: str, limit: int = MAX_LINE) -> str:
    """The one line that says what ``text`` (an error's message) is about; ``""`` for an empty text."""
    lines = _meaningful_lines(text)
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    head = lines[0].strip()
    if head.endswith(":"):
        rest = list(lines[1:])
        while rest and not rest[0].strip():
            rest.pop(0)
        bulleted = bool(rest) and _BULLET.match(rest[0]) is not None
        items = []
        for line in rest:
            # A bulleted list ends at its first other line ("Please add them to the AOTI
            # backend."); a plain one (one item a line) at the paragraph's end.
            if not line.strip() or (bulleted and not _BULLET.match(line)):
                break
            items.append(_BULLET.sub("", line).strip())
        if items:
            shown = items[:MAX_ITEMS]
            more = f" and {len(items) - MAX_ITEMS} more" if len(items) > MAX_ITEMS else ""
            head = f"{head} {', '.join(shown)}{more}"
    return shorten(_with_error_name(head), limit)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, nearest first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def full_text(exc: BaseException) -> str:
    """The exception with its traceback and chained causes, as Python prints it (cut at :data:`MAX_TEXT`)."""
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n[cut at 1 MiB]\n"


def describe(exc: BaseException, limit: int = MAX_LINE) -> Cause:
    """``exc`` as a :class:`Cause`: ``TypeName: summary`` (a ptebuild error: its message as it is),
    and the full text."""
    from ptebuild.errors import PtebuildError

    if isinstance(exc, PtebuildError):
        line = exc.said
    else:
        said = summary(str(exc), limit)
        line = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    return Cause(line=line, text=full_text(exc))
