"""Where in a manifest a validation error is: dotted locations and one-line messages.

Shared by :mod:`ptebuild.manifest.load` (the manifest's tables) and
:mod:`ptebuild.manifest.resolve` (a backend's options), so neither imports the other.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ptebuild.manifest.typos import did_you_mean

if TYPE_CHECKING:
    from pydantic import ValidationError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dotted(loc: tuple[Any, ...]) -> str:
    """``('programs', 'p', 'methods', 0)`` -> ``programs.p.methods[0]``, keys quoted as TOML does
    (a basic string: a quote, a backslash and control characters escaped, so always one line)."""
    import json

    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = str(part) if _BARE_KEY.fullmatch(str(part)) else json.dumps(str(part), ensure_ascii=False).replace("\x7f", "\\u007f")
            out += ("." if out else "") + key
    return out


def _fields_at(model: type, loc: tuple[Any, ...]) -> set[str]:
    """The keys allowed in the table at ``loc`` (a path into ``model``), for suggestions."""
    from pydantic import BaseModel

    current: Any = model
    for part in loc:
        origin = typing.get_origin(current)
        if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            current = next(a for a in typing.get_args(current) if a is not type(None))
            origin = typing.get_origin(current)
        if origin is typing.Annotated:
            current = typing.get_args(current)[0]
            origin = typing.get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return set()
            current = field.annotation
        elif origin is dict:
            current = typing.get_args(current)[1]
        elif origin is list:
            current = typing.get_args(current)[0]
        else:
            return set()
    origin = typing.get_origin(current)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        current = next(a for a in typing.get_args(current) if a is not type(None))
    if isinstance(current, type) and issubclass(current, BaseModel):
        return set(current.model_fields)
    return set()


# Tags pydantic appends to a location for the member of a union or a validator, not manifest keys.
_UNION_TAG = re.compile(r"(constrained-\w+|function-.*|int|str|float|bool|.*\[.*\])")


def _clean_loc(loc: Iterable[int | str]) -> tuple[int | str, ...]:
    parts = tuple(loc)
    if _kind_tag(parts):  # models.NAME.<kind>...: the model table's kind (the union's tag), not a key
        parts = parts[:2] + parts[3:]
    return tuple(p for p in parts if not (isinstance(p, str) and _UNION_TAG.fullmatch(p)))


def _kind_tag(loc: tuple[int | str, ...]) -> str | None:
    """The model kind pydantic names in a location inside ``[models.NAME]`` (``('models', 'chat',
    'executorch-llm', 'tokenizr')``), or None."""
    from ptebuild.models import model_kind_names

    if len(loc) > 2 and loc[0] == "models" and loc[2] in model_kind_names():
        return str(loc[2])
    return None


def describe_validation_error(exc: ValidationError, display: str, model: type, prefix: tuple[int | str, ...] = ()) -> str:
    """One line for the first error of a pydantic ValidationError, located in the manifest."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = prefix + _clean_loc(first["loc"])
    errors = [e for e in errors if _clean_loc(e["loc"]) != _clean_loc(first["loc"])]
    errors.insert(0, first)
    kind = first["type"]
    where = dotted(loc)
    display = f"{display}: {where}" if where else display
    if kind == "extra_forbidden":
        key = loc[-1]
        table = model, loc[len(prefix):-1]
        tag = _kind_tag(tuple(first["loc"])) if not prefix else None
        if tag is not None:  # a key of a model table: that kind's table
            from ptebuild.models import get_model_kind

            table = get_model_kind(tag).spec_model(), loc[2:-1]
        hint = did_you_mean(str(key), _fields_at(*table))
        if not hint:
            allowed = sorted(_fields_at(*table))
            hint = f"; allowed keys: {', '.join(allowed)}" if allowed else "; this table takes no keys"
        message = f"{display}: unknown key {key!r}{hint}"
    elif kind == "literal_error":
        expected = re.findall(r"'([^']*)'", first["ctx"]["expected"])
        what = "backend" if loc and loc[-1] == "backend" else "value"
        given = first["input"]
        if isinstance(given, str):
            message = f"{display}: unknown {what} {given!r}{did_you_mean(given, expected)}; expected one of {', '.join(map(repr, expected))}"
        else:  # a list, a table, a number where a name belongs
            message = f"{display}: expected one of {', '.join(map(repr, expected))}, not {_toml_type(given)} {given!r}"
    elif kind == "missing":
        message = f"{display}: missing required key {loc[-1]!r}; add it"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        message = f"{display}: expected a table (got {first.get('input')!r}); write a table {{ key = value, ... }}"
    elif kind == "list_type":
        message = f"{display}: expected an array (got {first.get('input')!r}); write an array [ ... ]"
    elif kind == "model_kind":  # its message says what to give
        message = f"{display}: {first['msg']}"
    elif kind == "value_error":
        message = f"{display}: {first['msg'].removeprefix('Value error, ')}"
    else:
        given = first.get("input")
        shown = "" if isinstance(given, (dict, list)) else f" (got {given!r})"
        message = f"{display}: {first['msg'].lower()}{shown}; correct the value"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return message


def _toml_type(value: object) -> str:
    """What a TOML value is, in the manifest's words: ``an array``, ``a table``, ``an integer``..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time" if not isinstance(value, str) else "a string"
