"""The database handle, bound to the host's transaction for this event."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ._errors import DbError, UniqueViolation
from ._values import Param, from_value, to_values
from ._wit import Err
from ._wit import db as wit


class Db:
    """The event's transaction. Parameters are PostgreSQL's ``$1, $2, ...``.

    Every statement runs under a savepoint of its own: one that fails is
    undone alone and raises, and the handler may catch that and go on (most
    often a ``UniqueViolation`` it expected). A ``DbError`` left uncaught is
    retryable when it is transient (deadlock, serialization failure, lock or
    statement timeout), permanent otherwise. Transaction control, session
    changes and DDL are refused by the host; it commits when the handler
    returns.

    Python values bind as: ``None`` null, ``bool`` boolean, ``int`` int8
    (outside int64 is an error), ``float`` float8, ``str`` text, ``EventId``
    (``event.id``) uuid, ``bytes`` bytea, ``Decimal`` numeric, ``UUID`` uuid,
    timezone-aware ``datetime`` timestamptz (a naive one is an error),
    ``dict``/``list`` jsonb. Columns come back as: numeric ``Decimal``, uuid
    ``UUID``, timestamptz aware ``datetime``, json/jsonb parsed, bytea
    ``bytes``, integers ``int``, floats ``float``, text and the types the host
    renders as text (date, time, timestamp) ``str``. Cast other types to text
    in the query.
    """

    def execute(self, sql: str, params: Sequence[Param] = ()) -> int:
        """Runs one statement; returns how many rows it affected."""
        values = to_values(params)
        try:
            return wit.execute(sql, values)
        except Err as e:
            raise db_error(e.value) from None

    def query(self, sql: str, params: Sequence[Param] = ()) -> Rows:
        """Runs one statement and returns its rows."""
        values = to_values(params)
        try:
            raw = wit.query(sql, values)
        except Err as e:
            raise db_error(e.value) from None
        return Rows(raw.columns, [[from_value(v) for v in row] for row in raw.rows])


def db_error(err: wit.DbError) -> DbError:
    """The SDK's exception for the host's ``db-error``."""
    if isinstance(err, wit.DbError_UniqueViolation):
        return UniqueViolation(err.value.message, err.value.code, err.value.constraint)
    if isinstance(err, wit.DbError_Transient):
        return DbError("transient", err.value.message, err.value.code, err.value.constraint)
    if isinstance(err, wit.DbError_Other):
        return DbError("other", err.value.message, err.value.code, err.value.constraint)
    if isinstance(err, wit.DbError_Refused):
        return DbError("refused", err.value)
    return DbError("invalid-value", err.value)


class Rows:
    """The rows a query returned: iterate them, index them, ``len()`` them.
    ``columns`` names the columns in order (empty when no row came back)."""

    def __init__(self, columns: Sequence[str], rows: list[list[Any]]) -> None:
        self.columns = tuple(columns)
        # The first column of a name wins, as in the Rust SDK.
        self._index = {name: i for i, name in reversed(list(enumerate(self.columns)))}
        self._rows = [Row(self.columns, self._index, values) for values in rows]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def __getitem__(self, i: int) -> Row:
        return self._rows[i]

    def first(self) -> Row | None:
        """The first row, or ``None`` when there is none."""
        return self._rows[0] if self._rows else None

    def __repr__(self) -> str:
        return f"Rows(columns={self.columns!r}, len={len(self)})"


class Row:
    """One row: ``row["amount"]`` by column name, ``row[0]`` by position;
    iterating gives the values in column order."""

    __slots__ = ("_columns", "_index", "_values")

    def __init__(self, columns: tuple[str, ...], index: dict[str, int], values: list[Any]) -> None:
        self._columns, self._index, self._values = columns, index, values

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, int):
            return self._values[key]
        if key not in self._index:
            raise KeyError(f"no column `{key}` in the result (columns: {', '.join(self._columns) or 'none'})")
        return self._values[self._index[key]]

    def get(self, name: str, default: Any = None) -> Any:
        """The value of column ``name``, or ``default`` if there is no such column."""
        return self._values[self._index[name]] if name in self._index else default

    def keys(self) -> tuple[str, ...]:
        return self._columns

    def as_dict(self) -> dict[str, Any]:
        return {name: self._values[i] for name, i in self._index.items()}

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Row({self.as_dict()!r})"
