"""Publish events from a handler, exactly once per commit (the outbox).

    import idem

    event_id = (
        idem.emit.event("payments.requested", "payment.requested.v1")
        .key(str(order_id))
        .json({"orderId": order_id, "amount": 42.5})
        .send()
    )

An emitted event is written to the host's outbox in the same transaction as
everything else the handler does: if the handler fails, nothing is
published; once the transaction commits, the host publishes it to Kafka (at
least once, with the same ``eventId``, so consumers deduplicate it), a key's
events in the order their transactions committed.

The topic and event type must be configured for the handler
(``[[handler.emit]]``) and the payload must pass the topic's JSON Schema. The
host adds ``eventId`` (a fresh UUID v7), ``eventType`` and ``occurredAt`` to
the payload, and the headers ``idem.causation-id`` (this event's id),
``idem.correlation-id`` and ``traceparent``. A refused or invalid event
raises ``idem.EmitError``, which is permanent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from ._errors import EmitError, EmitErrorKind
from ._values import dumps
from ._wit import Err
from ._wit import emit as wit

__all__ = ["Emit", "event"]


def event(topic: str, event_type: str) -> Emit:
    """Starts an event of ``event_type`` on ``topic``."""
    return Emit(topic, event_type)


class Emit:
    """An event being built; nothing is written until ``send``. Each builder
    method returns the event, so calls chain."""

    def __init__(self, topic: str, event_type: str) -> None:
        self.topic, self.event_type = topic, event_type
        self.record_key = ""
        self.payload = "{}"
        self.headers: list[tuple[str, str]] = []

    def key(self, key: str | int) -> Self:
        """The record's key: the id of the aggregate the event is about. One
        key's events reach one partition, in commit order."""
        self.record_key = str(key)
        return self

    def json(self, payload: Mapping[str, Any]) -> Self:
        """The payload, a JSON object without ``eventId``, ``eventType`` and
        ``occurredAt`` (the host adds them). A value JSON cannot hold is a
        permanent ``EmitError`` at once."""
        try:
            self.payload = dumps(dict(payload))
        except (TypeError, ValueError) as e:
            raise EmitError("invalid", f"payload is not serializable: {e}") from None
        return self

    def header(self, name: str, value: str) -> Self:
        """A header of the record; ``idem.*`` and ``traceparent`` are the host's."""
        self.headers.append((name, value))
        return self

    def send(self) -> str:
        """Accepts the event for publishing once this event's transaction
        commits; returns the ``eventId`` it will carry."""
        message = wit.Message(self.topic, self.record_key, self.event_type, self.payload, list(self.headers))
        try:
            return wit.send(message)
        except Err as e:
            err: wit.EmitError = e.value
            kind: EmitErrorKind = "refused" if isinstance(err, wit.EmitError_Refused) else "invalid"
            raise EmitError(kind, err.value) from None
