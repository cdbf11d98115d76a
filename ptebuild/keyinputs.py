"""The inputs of an action key, typed: what each entry of a key's breakdown is.

A key (:mod:`ptebuild.builder.keys`) digests a flat mapping *input name -> value*, and that
mapping is stored as is in action results, build records, the lockfile and provenance. The names
keep their text form there (a file format); in code they are :class:`InputName` values, parsed
and written only here:

=====================  ========================================  ==============================
text form              kind                                      value
=====================  ========================================  ==============================
``schema``             :attr:`InputKind.SCHEMA`                  the key schema's version
``manifest.<field>``   :attr:`InputKind.MANIFEST`                normalised JSON of the field
                       (``model.kwargs.width``, ``program.backend``)
``source:<file>``      :attr:`InputKind.SOURCE`                  SHA-256 of the file
``weights:<file>``     :attr:`InputKind.WEIGHTS`                 SHA-256 of the file
``samples:<file>``     :attr:`InputKind.SAMPLES`                 SHA-256 of a method's samples file
``toolchain.<fact>``   :attr:`InputKind.TOOLCHAIN`               a version or fact (``torch``,
                                                                 ``platform``, ``ptebuild-code``)
``shims.<option>``     :attr:`InputKind.SHIMS`                   a shim library's option
``member:<program>``   :attr:`InputKind.MEMBER`                  SHA-256 of a member's ``.ptd``
``workaround:<name>``  :attr:`InputKind.OTHER`                   ``applied``: a toolchain fix
anything else          :attr:`InputKind.OTHER`                   as given
=====================  ========================================  ==============================

:func:`describe` and :func:`describe_change` are the one place that puts an input in words, for
``--explain``, ``--locked`` and the lockfile's messages.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class InputKind(str, enum.Enum):
    SCHEMA = "schema"
    MANIFEST = "manifest"
    SOURCE = "source"
    WEIGHTS = "weights"
    SAMPLES = "samples"
    TOOLCHAIN = "toolchain"
    SHIMS = "shims"
    MEMBER = "member"
    OTHER = "other"


# kind -> the prefix of its text form (SCHEMA and OTHER have none)
_PREFIXES = {
    InputKind.MANIFEST: "manifest.",
    InputKind.SOURCE: "source:",
    InputKind.WEIGHTS: "weights:",
    InputKind.SAMPLES: "samples:",
    InputKind.TOOLCHAIN: "toolchain.",
    InputKind.SHIMS: "shims.",
    InputKind.MEMBER: "member:",
}
_DIGESTS = frozenset({InputKind.SOURCE, InputKind.WEIGHTS, InputKind.SAMPLES, InputKind.MEMBER})
"""Kinds whose values are SHA-256 digests of files."""


@dataclass(frozen=True, order=True)
class InputName:
    """One input of a key: its kind and its name within the kind (a file, a field, a fact)."""

    kind: InputKind
    name: str

    @classmethod
    def parse(cls, text: str) -> InputName:
        if text == "schema":
            return cls(InputKind.SCHEMA, "")
        for kind, prefix in _PREFIXES.items():
            if text.startswith(prefix):
                return cls(kind, text[len(prefix):])
        return cls(InputKind.OTHER, text)

    def __str__(self) -> str:
        if self.kind is InputKind.SCHEMA:
            return "schema"
        return _PREFIXES.get(self.kind, "") + self.name

    @property
    def is_digest(self) -> bool:
        """True if the value is the SHA-256 of a file."""
        return self.kind in _DIGESTS or (self.kind is InputKind.TOOLCHAIN and self.name.endswith("-code"))


def source(name: str) -> str:
    return str(InputName(InputKind.SOURCE, name))


def weights(name: str) -> str:
    return str(InputName(InputKind.WEIGHTS, name))


def samples(name: str) -> str:
    return str(InputName(InputKind.SAMPLES, name))


def toolchain(name: str) -> str:
    return str(InputName(InputKind.TOOLCHAIN, name))


def manifest(field: str) -> str:
    return str(InputName(InputKind.MANIFEST, field))


def shims(option: str) -> str:
    return str(InputName(InputKind.SHIMS, option))


def member(program: str) -> str:
    return str(InputName(InputKind.MEMBER, program))


def workaround(name: str) -> str:
    """A fix of a known toolchain fault applied to the program (an :attr:`InputKind.OTHER` input)."""
    return f"workaround:{name}"


def of_kind(inputs: Mapping[str, str], *kinds: InputKind) -> dict[str, str]:
    """The inputs of these kinds, by their name within the kind (``source:a.py`` -> ``a.py``)."""
    found = {}
    for text, value in inputs.items():
        name = InputName.parse(text)
        if name.kind in kinds:
            found[name.name] = value
    return found


def files(inputs: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(file, sha256)`` of the source, weights and samples files a key names, sorted."""
    return sorted(of_kind(inputs, InputKind.SOURCE, InputKind.WEIGHTS, InputKind.SAMPLES).items())


def without(inputs: Mapping[str, str], kinds: Iterable[InputKind], keep: Iterable[str] = ()) -> dict[str, str]:
    """``inputs`` less those of ``kinds``, except the names in ``keep`` (text form)."""
    dropped, kept = set(kinds), set(keep)
    return {k: v for k, v in inputs.items() if k in kept or InputName.parse(k).kind not in dropped}


# -- in words -------------------------------------------------------------------------------------


def describe(text: str, model: str = "", program: str = "") -> str:
    """What an input is, in words: ``source file layers/blocks.py``, ``torch version``...

    ``model`` and ``program`` name the manifest entries (``manifest field models.m.kwargs.width``);
    without them a manifest input reads ``manifest entry model.kwargs.width``.
    """
    name = InputName.parse(text)
    if name.kind is InputKind.SOURCE:
        return f"source file {name.name}"
    if name.kind is InputKind.WEIGHTS:
        return f"weights file {name.name}"
    if name.kind is InputKind.SAMPLES:
        return f"samples file {name.name}"
    if name.kind is InputKind.MEMBER:
        return f"weights file of {name.name}"
    if name.kind is InputKind.MANIFEST:
        if not (model or program):
            return f"manifest entry {name.name}"
        table_kind, _, field = name.name.partition(".")
        table = f"models.{model}" if table_kind == "model" else f"programs.{program}"
        return f"manifest field {table}.{field}" if field else f"manifest entry {table}"
    if name.kind is InputKind.TOOLCHAIN:
        if name.name.endswith("-code"):
            part = name.name[: -len("-code")]
            return f"ptebuild's {'lowering' if part == 'ptebuild' else part} code"
        return name.name if name.name == "platform" else f"{name.name} version"
    if name.kind is InputKind.SHIMS:
        return f"shim library option {name.name}"
    if name.kind is InputKind.OTHER and name.name.startswith("workaround:"):
        return f"toolchain workaround {name.name.removeprefix('workaround:')}"
    return "key schema" if name.kind is InputKind.SCHEMA else f"input {name.name}"


def describe_change(
    text: str, before: str | None, after: str | None, *, model: str = "", program: str = "", detail: bool = False
) -> str:
    """One line for a changed input: ``torch version changed (2.13.0 -> 2.14.0)``.

    ``detail`` (for the lockfile's messages): digests shown shortened, and ``is new`` / ``is no
    longer used``; without it (``--explain``): ``added`` / ``removed``, and a changed file is
    only ``changed``.
    """
    return f"{describe(text, model, program)} {change_words(before, after, InputName.parse(text).is_digest, detail)}"


def change_words(before: str | None, after: str | None, digest: bool, detail: bool = False) -> str:
    """``changed (a -> b)``, ``is new``...: how a value changed (see :func:`describe_change`);
    ``digest``: the values are SHA-256 digests."""
    if before is None:
        return "is new" if detail else "added"
    if after is None:
        return "is no longer used" if detail else "removed"
    if digest:
        return f"changed (sha256 {before[:12]}... -> {after[:12]}...)" if detail else "changed"
    return f"changed ({_short(before)} -> {_short(after)})" if detail else f"changed ({before} -> {after})"


def _short(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[: limit - 3] + "..."
