"""Python values to the world's ``db.value`` variant and back.

Each parameter is declared to PostgreSQL with the type its variant names, so
the mapping decides the SQL type: ``None`` null (the server infers it),
``bool`` boolean, ``int`` int8, ``float`` float8, ``str`` text, ``EventId``
uuid, ``bytes`` bytea, ``Decimal`` numeric, ``UUID`` uuid, aware ``datetime``
timestamptz, ``dict``/``list`` jsonb.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Union
from uuid import UUID

from ._errors import DbError
from ._event import EventId
from ._payload import parse_timestamp
from ._wit import db as wit

Param = Union[None, bool, int, float, str, bytes, bytearray, Decimal, UUID, datetime, dict[str, Any], list[Any]]
"""What ``Db.execute`` and ``Db.query`` accept as a parameter."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def dumps(value: object) -> str:
    """Compact JSON, as the Rust SDK's serde_json writes it; NaN and
    infinities are refused because JSON has no spelling for them."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def to_values(params: Sequence[Param]) -> list[wit.Value]:
    if isinstance(params, (str, bytes)):
        # A lone string would otherwise bind one parameter per character.
        raise DbError("invalid-value", "params must be a sequence of values, not a single str or bytes")
    return [to_value(p, n) for n, p in enumerate(params, start=1)]


def to_value(value: object, n: int) -> wit.Value:
    """The variant for parameter ``$n``; a value that cannot be bound is a
    permanent ``DbError`` naming it (like the host's own ``invalid-value``)."""
    # Order matters: bool is an int, EventId is a str, datetime is a date.
    if value is None:
        return wit.Value_Null()
    if isinstance(value, bool):
        return wit.Value_Boolean(value)
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise _invalid(n, f"{value} is outside int64; pass a Decimal to bind it as numeric")
        return wit.Value_Int64(value)
    if isinstance(value, float):
        return wit.Value_Float64(value)
    if isinstance(value, EventId):
        return wit.Value_Uuid(str(value))
    if isinstance(value, str):
        return wit.Value_Text(value)
    if isinstance(value, (bytes, bytearray)):
        return wit.Value_Bytes(bytes(value))
    if isinstance(value, Decimal):
        # Plain digits: str() may write an exponent (1E+2), which the host's
        # decimal parser need not take.
        return wit.Value_Numeric(format(value, "f") if value.is_finite() else str(value))
    if isinstance(value, UUID):
        return wit.Value_Uuid(str(value))
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise _invalid(n, f"naive datetime {value.isoformat()} has no time zone; use an aware one "
                           "(e.g. datetime.now(timezone.utc))")
        return wit.Value_Timestamp(value.isoformat())
    if isinstance(value, (dict, list)):
        try:
            return wit.Value_Json(dumps(value))
        except (TypeError, ValueError) as e:
            raise _invalid(n, f"not JSON-serializable: {e}") from None
    raise _invalid(n, f"cannot bind a {type(value).__name__}; convert it (e.g. to str and cast with ${n}::type)")


def from_value(value: wit.Value) -> Any:
    """A column value as Python: numeric as ``Decimal``, uuid as ``UUID``,
    timestamptz as an aware ``datetime``, json as what it parses to."""
    if isinstance(value, wit.Value_Null):
        return None
    if isinstance(value, wit.Value_Numeric):
        return Decimal(value.value)
    if isinstance(value, wit.Value_Uuid):
        return UUID(value.value)
    if isinstance(value, wit.Value_Timestamp):
        return parse_timestamp(value.value)
    if isinstance(value, wit.Value_Json):
        return json.loads(value.value)
    return value.value


def _invalid(n: int, why: str) -> DbError:
    return DbError("invalid-value", f"parameter ${n}: {why}")
