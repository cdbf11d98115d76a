"""Frozen dataclasses to and from JSON, generated from their fields' declared types.

A class that derives from :class:`Jsonable` gets ``to_json()`` and ``from_json(data)`` without
writing them: its JSON is an object of its fields by name, each value by its declared type:

- ``str``, ``int``, ``float``, ``bool``: as they are (a float field reads an integer too);
- an enum (``str`` or ``int`` valued): its value;
- ``tuple[X, ...]``, ``list[X]``: an array; ``dict[str, X]``: an object;
- ``X | None``: null or X;
- another dataclass: its own JSON (its ``to_json``/``from_json`` where it writes its own, as a
  class whose JSON is not its fields does, e.g. :class:`ptebuild.insight.delegation.Delegation`);
- ``Any``: as it is (a value already JSON).

Reading is kind to what older and newer ptebuilds wrote: a field that is missing, or null where
its type takes no null, reads as its default; a key the class does not know is ignored. A field
without a default that is missing raises :class:`JsonShapeError` naming its path
(``targets[2].figures[0].method``), as does a value of the wrong type.

A class whose JSON has several shapes (check figures of a numeric check and of a generation
check) names its variants with ``json_variant(data) -> type``, a classmethod on the base. A
subclass that defines its own ``from_json`` (a JSON that is not its fields) is read by it.

Field types are read once per class (:func:`typing.get_type_hints`), so the names in a class's
annotations must be importable at run time from its module (not only under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import dataclasses
import enum
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    T = TypeVar("T", bound="Jsonable")


class JsonShapeError(ValueError):
    """A JSON value that is not what the class reads: its path and what was expected."""


class Jsonable:
    """Mix into a frozen dataclass for :meth:`to_json` and :meth:`from_json` from its fields."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return encode_fields(self)

    @classmethod
    def from_json(cls: type[T], data: Mapping[str, Any]) -> T:
        """Raises :class:`JsonShapeError` where ``data`` cannot be read as this class."""
        return _decode_dataclass(cls, data, cls.__name__)


def encode_fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON, each by its declared type."""
    return {name: encode(getattr(value, name)) for name, _, _ in _plan(type(value))}


def encode(value: Any) -> Any:
    """Any value a :class:`Jsonable`'s field holds, as JSON."""
    if value is None or (isinstance(value, (bool, int, float, str)) and not isinstance(value, enum.Enum)):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    to_json = getattr(value, "to_json", None)
    if to_json is not None:
        return to_json()
    if dataclasses.is_dataclass(value):
        return encode_fields(value)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def decode(kind: Any, data: Any, path: str) -> Any:
    """``data`` read as ``kind`` (a type as a field declares it); ``path`` names it in errors."""
    return _reader(kind)(data, path)


_READERS: dict[Any, Callable[[Any, str], Any]] = {}
_PLANS: dict[type, list[tuple[str, Any, Any]]] = {}
_MISSING = dataclasses.MISSING


def _plan(cls: type) -> list[tuple[str, Any, Any]]:
    """Each field of ``cls``: its name, declared type and default (or ``MISSING``)."""
    plan = _PLANS.get(cls)
    if plan is None:
        import typing

        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        plan = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            default: Any = f.default
            if default is _MISSING and f.default_factory is not _MISSING:
                default = f.default_factory
            plan.append((f.name, hints[f.name], default))
        _PLANS[cls] = plan
    return plan


def _reader(kind: Any) -> Callable[[Any, str], Any]:
    reader = _READERS.get(kind)
    if reader is None:
        reader = _READERS[kind] = _make_reader(kind)
    return reader


def _make_reader(kind: Any) -> Callable[[Any, str], Any]:
    import types
    import typing

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is typing.Any:
        return lambda data, path: data
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = _reader(options[0]) if len(options) == 1 else None

        def optional(data: Any, path: str) -> Any:
            if data is None:
                return None
            if inner is None:
                raise JsonShapeError(f"{path}: a union of {len(options)} types cannot be read")
            return inner(data, path)
        return optional
    if origin in (tuple, list):
        item = _reader(args[0]) if args else _reader(typing.Any)
        made = tuple if origin is tuple else list

        def sequence(data: Any, path: str) -> Any:
            if not isinstance(data, (list, tuple)):
                raise JsonShapeError(f"{path}: expected an array, found {type(data).__name__}")
            return made(item(v, f"{path}[{i}]") for i, v in enumerate(data))
        return sequence
    if origin is dict:
        value = _reader(args[1]) if args else _reader(typing.Any)

        def mapping(data: Any, path: str) -> Any:
            if not isinstance(data, dict):
                raise JsonShapeError(f"{path}: expected an object, found {type(data).__name__}")
            return {str(k): value(v, f"{path}.{k}") for k, v in data.items()}
        return mapping
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        def member(data: Any, path: str) -> Any:
            try:
                return kind(data)
            except ValueError:
                raise JsonShapeError(f"{path}: {data!r} is not one of {', '.join(repr(m.value) for m in kind)}") from None
        return member
    if kind is float:
        def real(data: Any, path: str) -> float:
            if isinstance(data, bool) or not isinstance(data, (int, float)):
                raise JsonShapeError(f"{path}: expected a number, found {data!r}")
            return float(data)
        return real
    if kind in (int, str, bool):
        def plain(data: Any, path: str) -> Any:
            if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
                raise JsonShapeError(f"{path}: expected {kind.__name__}, found {data!r}")
            return data
        return plain
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        read_own = getattr(kind, "from_json", None)
        if read_own is not None and (not issubclass(kind, Jsonable) or "from_json" in kind.__dict__):  # its own JSON

            def custom(data: Any, path: str) -> Any:
                try:
                    return read_own(data)
                except JsonShapeError:
                    raise
                except (KeyError, TypeError, ValueError) as exc:
                    raise JsonShapeError(f"{path}: {exc}") from None
            return custom
        return lambda data, path: _decode_dataclass(kind, data, path)
    raise TypeError(f"no JSON reader for {kind!r}")


def _decode_dataclass(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise JsonShapeError(f"{path}: expected an object, found {type(data).__name__}")
    variant = getattr(cls, "json_variant", None)
    if variant is not None:
        chosen = variant(data)
        if chosen is not cls and "from_json" in chosen.__dict__:
            return chosen.from_json(data)
        cls = chosen
    values: dict[str, Any] = {}
    for name, kind, default in _plan(cls):
        found = data.get(name)
        if found is None and not (name in data and _takes_none(kind)):
            if default is _MISSING:
                raise JsonShapeError(f"{path}.{name}: missing")
            continue  # the default, as the dataclass makes it
        values[name] = _reader(kind)(found, f"{path}.{name}")
    return cls(**values)


def _takes_none(kind: Any) -> bool:
    import types
    import typing

    return typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in typing.get_args(kind)
