"""Dataclasses from JSON payloads (``Event.payload_as``).

Mirrors what serde does for the Rust SDK's ``#[serde(rename_all =
"camelCase")]`` structs: camelCase keys, unknown keys ignored, ``X | None``
fields may be absent, and any other mismatch is a permanent error that names
the field (the payload will be the same on every retry).

Numbers are never rounded silently: the payload is read with its decimals
as ``Decimal`` (``exact``), so a ``Decimal`` field gets the exact text, an
``int`` field any integer, and a ``float`` field refuses an integer that a
float cannot hold (beyond 2^53, where ``float`` would round it). ``Any``
fields get what ``Event.payload`` has (decimals as floats).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
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
    return cast(T, _convert(cls, data, ""))


def camel(name: str) -> str:
    """``order_id`` -> ``orderId``: the payload key of a field."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp; ``Z`` is spelled out for Pythons before 3.11."""
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)


def _convert(tp: Any, value: object, path: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return _plain(value)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, value, path)
            except Permanent:
                continue
        raise _mismatch(" or ".join(_NAMES.get(a, str(a)) for a in args if a is not type(None)), value, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _mismatch("an object", value, path)
        return _dataclass(tp, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise _mismatch("an array", value, path)
        return [_convert(args[0] if args else Any, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _mismatch("an object", value, path)
        item = args[1] if len(args) == 2 else Any
        return {k: _convert(item, v, f"{path}.{k}" if path else k) for k, v in value.items()}
    return _scalar(tp, value, path)


def _dataclass(cls: type[Any], data: dict[str, Any], path: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        key = camel(field.name)
        where = f"{path}.{key}" if path else key
        if key in data:
            kwargs[field.name] = _convert(hints[field.name], data[key], where)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            if not _optional(hints[field.name]):
                raise Permanent(f"payload field `{where}` is missing")
            kwargs[field.name] = None
    return cls(**kwargs)


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
