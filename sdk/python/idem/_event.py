"""The event a handler receives."""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ._payload import load
from ._wit import origin

if TYPE_CHECKING:
    from ._wit import types

T = TypeVar("T")


class EventId(str):
    """An event id: a UUID v7 in canonical text form.

    It is a ``str``, but as a ``Db`` parameter it binds as ``uuid`` (a plain
    ``str`` binds as ``text``), so ``event.id`` goes into a uuid column as is.
    """

    __slots__ = ()


class Event:
    """One Kafka record, validated by the host before the handler runs: its
    payload is a JSON object that passed the handler's schema, with a UUID v7
    ``eventId`` (the key the host deduplicates on) and a configured
    ``eventType``.

    Attributes: ``id`` (``EventId``), ``event_type``, ``occurred_at`` (the
    payload's ``occurredAt``, RFC 3339 text), ``topic``, ``partition``,
    ``offset``, ``key`` (``bytes`` or ``None``), ``headers`` (``(name, value)``
    pairs, value ``bytes`` or ``None``), ``attempt`` (1 on the first execution
    by this host process, then 2, 3, ...: never part of an idempotency key)
    and ``payload_text``; ``payload`` is the parsed payload, ``value_bytes`` the
    record's value as its producer wrote it (an Avro record's frame, say).
    """

    def __init__(
        self,
        *,
        id: str,
        event_type: str,
        occurred_at: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]],
        payload_text: str,
        attempt: int,
    ) -> None:
        self.id = EventId(id)
        self.event_type = event_type
        self.occurred_at = occurred_at
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.headers = headers
        self.payload_text = payload_text
        self.attempt = attempt

    @cached_property
    def payload(self) -> dict[str, Any]:
        """The whole payload (``eventId``, ``eventType`` and ``occurredAt``
        included) as a dict, parsed on first use."""
        parsed: dict[str, Any] = json.loads(self.payload_text)
        return parsed

    def payload_as(self, cls: type[T]) -> T:
        """The payload as an instance of the dataclass ``cls``.

        Each field is read from the payload key that is its name in camelCase
        (``order_id`` from ``orderId``); other keys are ignored. Field types are
        checked: ``int`` (not ``bool``), ``float`` (an integer is accepted),
        ``str``, ``bool``, ``Decimal``, ``UUID``, ``datetime``, ``X | None``,
        ``list[X]``, ``dict[str, X]``, nested dataclasses and ``Any``. A missing
        field without a default, or a value of another type, raises
        ``Permanent`` naming the field: retrying will not change the payload.
        Numbers are never rounded silently: a ``Decimal`` field gets the
        payload's exact digits, an ``int`` field any integer (Python's are
        unbounded), and a ``float`` field refuses an integer beyond 2^53 that
        a float would round.
        """
        return load(cls, self.payload_text)

    @property
    def value_bytes(self) -> bytes:
        """The record's value as its producer wrote it: on an Avro, Protobuf
        or JSON Schema topic the registry's frame (magic byte, schema id, body)
        the payload was decoded from; on a JSON topic the payload's UTF-8
        bytes, which are the value. Asked of the host on each read."""
        value = origin.value()
        return self.payload_text.encode() if value is None else value

    @property
    def schema_id(self) -> int | None:
        """The registry's id of the schema the record was written with
        (``None`` on a JSON topic)."""
        return origin.schema_id()

    def header(self, name: str) -> bytes | None:
        """The value of the first header called ``name``, if any."""
        return next((value for n, value in self.headers if n == name), None)

    def __repr__(self) -> str:
        return f"Event(id={self.id!r}, event_type={self.event_type!r}, topic={self.topic!r}, attempt={self.attempt})"


def from_wit(raw: types.Event) -> Event:
    return Event(
        id=raw.id,
        event_type=raw.event_type,
        occurred_at=raw.occurred_at,
        topic=raw.topic,
        partition=raw.partition,
        offset=raw.offset,
        key=raw.key,
        headers=[(h.name, h.value) for h in raw.headers],
        payload_text=raw.payload,
        attempt=raw.attempt,
    )
