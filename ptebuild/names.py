"""Rules for the names that become file names: program names (``<name>.pte``) and data names
(``<name>.ptd``).

A name is 1 to 200 ASCII letters, digits, ``_``, ``-`` and ``.``; it does not start with ``.``
or ``-``, does not end with ``.``, a space or ``.ptd`` (the extension is added), and is not a
Windows device name (CON, PRN, AUX, NUL, COM0-COM9, LPT0-LPT9, in any case, also with an
extension such as ``NUL.weights``). These are the rules ExecuTorch's CUDA backend applies to its
data names, extended to program names, so that every output is one plain file inside the
output folder on Linux, macOS and Windows alike: no name can hold a path separator or ``..``.

Names that differ only in case are one file on macOS and Windows; :func:`case_key` gives the
key under which two names collide there.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 200
_ALLOWED = re.compile(r"[A-Za-z0-9_.\-]+")
_WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"]
    + [f"COM{i}" for i in range(10)]
    + [f"LPT{i}" for i in range(10)]
)


def name_problem(name: str, *, extension: str) -> str | None:
    """Say what is wrong with ``name`` as a file stem for ``extension`` (".pte" or ".ptd"), or None."""
    if not isinstance(name, str) or not name:
        return "is empty; use 1 to 200 ASCII letters, digits, '_', '-' and '.'"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long; use at most {MAX_NAME_LENGTH}"
    if not _ALLOWED.fullmatch(name):
        bad = next(ch for ch in name if not _ALLOWED.fullmatch(ch))
        return f"contains {bad!r}; use only ASCII letters, digits, '_', '-' and '.'"
    if name[0] in ".-":
        return f"starts with {name[0]!r}; start with a letter, digit or '_'"
    if name.lower().endswith(extension):
        return f"ends with {extension!r}; leave the extension out, ptebuild adds it"
    if name.endswith("."):
        return "ends with '.'; Windows drops a trailing dot, so end with a letter, digit, '_' or '-'"
    stem = name.split(".", 1)[0].upper()
    if stem in _WINDOWS_DEVICES:
        return f"is the Windows device name {stem!r} (also with an extension); choose another name"
    return None


def name_json_schema(extension: str) -> dict[str, object]:
    """The rules of :func:`name_problem` as JSON Schema (for ``ptebuild schema``; editors check
    them as a manifest is typed). Every rule is expressible: the characters, the length, the
    first and last character, the extension and the Windows device names (ECMA-262 patterns,
    no flags, so case is spelt out as ``[Cc][Oo][Nn]``)."""

    def any_case(text: str) -> str:
        return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else ("\\." if c == "." else c) for c in text)

    devices = "|".join(f"{any_case(d)}[0-9]" if d in ("COM", "LPT") else any_case(d)
                       for d in sorted({d.rstrip("0123456789") for d in _WINDOWS_DEVICES}))
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_NAME_LENGTH,
        "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.\\-]*$",
        "allOf": [
            {"not": {"pattern": "\\.$"}, "description": "does not end with '.'"},
            {"not": {"pattern": f"{any_case(extension)}$"}, "description": f"leave out the extension {extension}"},
            {"not": {"pattern": f"^({devices})(\\.|$)"}, "description": "not a Windows device name (CON, NUL, COM1...)"},
        ],
    }


def case_key(file_name: str) -> str:
    """The key under which two file names are the same file on a case-insensitive filesystem."""
    return file_name.casefold()
