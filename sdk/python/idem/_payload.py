"""Dataclasses from JSON payloads (``Event.payload_as``).

Mirrors what serde does for the Rust SDK's ``#[serde(rename_all =
"camelCase")]`` structs: camelCase keys, unknown keys ignored, ``X | None``
fields may be absent, and any other mismatch is a permanent error that names
the field (the payload will be the same on every retry).

Numbers are never rounded silently: for a class with a ``Decimal`` field
anywhere in it the payload is read with its decimals as ``Decimal``
(``exact``), so that field gets the exact text; other classes read them as
floats directly, the same doubles (an error message then shows ``1.5`` for
a payload's ``1.50``). An ``int`` field gets any integer, and a ``float``
field refuses an integer that a float cannot hold (beyond 2^53, where
``float`` would round it). ``Any`` fields get what ``Event.payload`` has
(decimals as floats).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar, cast
from uuid import UUID

from ._errors import Permanent

T = TypeVar("T")

_NAMES: dict[object, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "a boolean",
    Decimal: "a decimal number",
    UUID: "a UUID",
    datetime: "an RFC 3339 timestamp",
}


def exact(text: str) -> Any:
    """The payload's JSON with its decimals as ``Decimal``, for ``build``."""
    return json.loads(text, parse_float=Decimal)


def build(cls: type[T], data: object) -> T:
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"payload_as needs a dataclass, not {cls!r}")
    return cast(T, _reader(cls)(data, ""))


def load(cls: type[T], text: str) -> T:
    """``cls`` from the payload's JSON text: read with its decimals as
    ``Decimal`` only where ``cls`` has a ``Decimal`` to fill (a ``float``
    read from a ``Decimal`` is the same double as one read from the text)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"payload_as needs a dataclass, not {cls!r}")
    exact_needed = _EXACT.get(cls)
    if exact_needed is None:
        exact_needed = _EXACT[cls] = _holds_decimal(cls, set())
    return build(cls, exact(text) if exact_needed else json.loads(text))


_EXACT: dict[type[Any], bool] = {}


def _holds_decimal(tp: Any, seen: set[Any]) -> bool:
    """Whether a value of type ``tp`` may hold a ``Decimal`` (a type this
    module does not know counts as one: the exact reading is the safe one)."""
    if tp is Decimal:
        return True
    if tp in (Any, object, int, float, str, bool, UUID, datetime, type(None)):
        return False
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in seen:
            return False
        seen.add(tp)
        try:
            hints = typing.get_type_hints(tp)
        except Exception:
            # A hint that does not resolve fails only the conversion that
            # reaches its field (as it always did), never this question.
            return True
        return any(_holds_decimal(hints[f.name], seen) for f in dataclasses.fields(tp) if f.init)
    if typing.get_origin(tp) in (typing.Union, types.UnionType, list, dict):
        return any(_holds_decimal(arg, seen) for arg in typing.get_args(tp))
    return True


def camel(name: str) -> str:
    """``order_id`` -> ``orderId``: the payload key of a field."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp; ``Z`` is spelled out for Pythons before 3.11."""
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)


Reader = Callable[[object, str], Any]
"""Converts one payload value (at ``path``, for errors) to a field's type."""

# One reader per dataclass, built on first use: resolving a dataclass's type
# hints and walking its fields costs far more than the conversion itself, and
# a handler converts the same class on every event. Keyed by the class alone
# (a class is equal only to itself); the readers of its fields' types are
# built with its plan and kept in it, never shared through a key: Python
# holds `int | float` equal to `float | int`, whose readers try their options
# in another order.
_READERS: dict[type[Any], Reader] = {}


def _reader(tp: Any) -> Reader:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        found = _READERS.get(tp)
        if found is None:
            found = _READERS[tp] = _dataclass(tp)
        return found
    return _compile(tp)


def _compile(tp: Any) -> Reader:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return lambda value, path: _plain(value)
    if origin in (typing.Union, types.UnionType):
        return _union(args)
    if origin is list:
        return _list(args[0] if args else Any)
    if origin is dict:
        return _dict(args[1] if len(args) == 2 else Any)
    return lambda value, path: _scalar(tp, value, path)


def _union(args: tuple[Any, ...]) -> Reader:
    nullable = type(None) in args
    options = [a for a in args if a is not type(None)]
    expected = " or ".join(_NAMES.get(a, str(a)) for a in options)

    readers = [_reader(option) for option in options]

    def read(value: object, path: str) -> Any:
        if value is None and nullable:
            return None
        for convert in readers:
            try:
                return convert(value, path)
            except Permanent:
                continue
        raise _mismatch(expected, value, path)

    return read


def _list(item: Any) -> Reader:
    convert = _reader(item)

    def read(value: object, path: str) -> Any:
        if not isinstance(value, list):
            raise _mismatch("an array", value, path)
        return [convert(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return read


def _dict(item: Any) -> Reader:
    convert = _reader(item)

    def read(value: object, path: str) -> Any:
        if not isinstance(value, dict):
            raise _mismatch("an object", value, path)
        return {k: convert(v, f"{path}.{k}" if path else k) for k, v in value.items()}

    return read


class _Field(typing.NamedTuple):
    name: str
    key: str
    read: Reader
    # Absent from the payload: ``None`` if optional, else a permanent error;
    # a field with a default is left to its default.
    required: bool
    optional: bool


def _dataclass(cls: type[Any]) -> Reader:
    # Resolved on the first conversion, not here: a dataclass may name
    # itself in a field (a tree: its reader is cached before its plan asks
    # for it), and a hint that does not resolve fails that conversion (and
    # the next one again), as it did uncached.
    plan: list[_Field] | None = None

    def fields() -> list[_Field]:
        hints = typing.get_type_hints(cls)
        return [
            _Field(
                f.name,
                camel(f.name),
                _reader(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                _optional(hints[f.name]),
            )
            for f in dataclasses.fields(cls)
            if f.init
        ]

    def read(value: object, path: str) -> Any:
        nonlocal plan
        if not isinstance(value, dict):
            raise _mismatch("an object", value, path)
        if plan is None:
            plan = fields()
        kwargs: dict[str, Any] = {}
        for field in plan:
            where = f"{path}.{field.key}" if path else field.key
            if field.key in value:
                kwargs[field.name] = field.read(value[field.key], where)
            elif field.required:
                if not field.optional:
                    raise Permanent(f"payload field `{where}` is missing")
                kwargs[field.name] = None
        return cls(**kwargs)

    return read


def _scalar(tp: Any, value: object, path: str) -> Any:
    if tp is bool and isinstance(value, bool):
        return value
    # bool is a subclass of int in Python; JSON's true is not an integer.
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is float and isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        if isinstance(value, int) and abs(value) > 2**53 and int(float(value)) != value:
            raise Permanent(
                f"payload field `{path}`: the integer {value} does not fit a float exactly (it would be rounded); "
                "declare the field int or Decimal"
            )
        return float(value)
    if tp is str and isinstance(value, str):
        return value
    try:
        if tp is Decimal and isinstance(value, Decimal):
            return value
        if tp is Decimal and isinstance(value, (int, float, str)) and not isinstance(value, bool):
            return Decimal(str(value))
        if tp is UUID and isinstance(value, str):
            return UUID(value)
        if tp is datetime and isinstance(value, str):
            return parse_timestamp(value)
    except (InvalidOperation, ValueError):
        pass
    if tp not in _NAMES:
        raise TypeError(f"payload_as cannot build field `{path}` of type {tp!r}")
    raise _mismatch(_NAMES[tp], value, path)


def _plain(value: object) -> Any:
    """``value`` as ``Event.payload`` has it: decimals as floats."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _mismatch(expected: str, value: object, path: str) -> Permanent:
    shown = str(value) if isinstance(value, Decimal) else repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return Permanent(f"payload field `{path}`: expected {expected}, got {_json_type(value)} {shown}")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, Decimal)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
