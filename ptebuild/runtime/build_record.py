"""Reads ``ptebuild.json``, the build record next to a build's outputs, to say which program a file is for.

The record is written by the builder; the loader only uses it to explain a refusal
("other.ptd was built for program 'other'"). Layout (other top-level keys are ignored;
file names are relative to the record's folder)::

    {"programs": {"<program>": {"pte": "<program>.pte", "data": ["<data_name>.ptd", ...]}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ptebuild.errors import FormatError

RECORD_NAME = "ptebuild.json"


@dataclass(frozen=True)
class ProgramFiles:
    """The files one program was built into: a ``.pte`` and its ``.ptd`` files."""

    pte: str
    data: tuple[str, ...]


@dataclass(frozen=True)
class BuildRecord:
    path: Path
    programs: Mapping[str, ProgramFiles]

    def programs_using(self, file: Path) -> list[str]:
        """Names of programs whose ``.pte`` or ``.ptd`` is ``file`` (compared by name in the folder)."""
        if file.resolve().parent != self.path.resolve().parent:
            return []
        return [
            name
            for name, files in sorted(self.programs.items())
            if file.name == files.pte or file.name in files.data
        ]


def read_build_record(folder: Path) -> BuildRecord | None:
    """Returns the record in ``folder``, or None if there is none.

    Raises:
        FormatError: the record exists but is not valid JSON of the layout above.
    """
    path = folder / RECORD_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: not valid JSON: {exc}") from None
    programs = document.get("programs") if isinstance(document, dict) else None
    if not isinstance(programs, dict):
        raise FormatError(f"{path}: 'programs' must be an object of program name to files")
    parsed = {}
    for name, files in programs.items():
        where = f"{path}: programs.{name}"
        if not isinstance(files, dict) or not isinstance(files.get("pte"), str):
            raise FormatError(f"{where}.pte must be a file name")
        data = files.get("data", [])
        if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
            raise FormatError(f"{where}.data must be a list of file names")
        parsed[name] = ProgramFiles(files["pte"], tuple(data))
    return BuildRecord(path, parsed)
