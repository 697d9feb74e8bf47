"""Write an idem handler in Python: a WebAssembly component that gets one
validated Kafka event at a time and whose effect the host commits exactly once.

The host has done the hard part when your function runs: the payload is valid
JSON with a UUID v7 ``eventId`` and passed the handler's schema, this
``(eventId, handler)`` pair is claimed inside a PostgreSQL transaction, and
every ``Db`` statement joins that transaction. Return and the host commits
your writes together with the claim; raise and nothing you wrote survives.

    # app.py
    from dataclasses import dataclass

    import idem

    @dataclass
    class OrderConfirmed:
        order_id: int          # from "orderId"
        total_amount: float    # from "totalAmount"
        currency: str

    @idem.handler
    def handle(event: idem.Event, db: idem.Db) -> None:
        order = event.payload_as(OrderConfirmed)
        db.execute(
            "INSERT INTO billing.charge (event_id, order_id, amount, currency) VALUES ($1, $2, $3, $4)",
            (event.id, order.order_id, order.total_amount, order.currency),
        )
        # Carries `Idempotency-Key: <eventId>`, added by the host.
        base = idem.config.require("payment_base_url")
        idem.http.post(f"{base}/v1/charges").json({"orderId": order.order_id}).send().raise_for_status()

Build it with ``scripts/sdk/build-python DIR OUT.wasm`` (DIR holds ``app.py``):
it runs componentize-py against the repository's ``wit/`` with this package on
the Python path. The ``.wasm`` file is the component the host loads.

What is here:

* ``handler`` -- the decorator that exports ``handle(event, db)``.
* ``Event`` -- the event: ``id``, ``event_type``, ``payload``, ``payload_as(cls)``...
* ``Db``, ``Rows``, ``Row`` -- statements in the event's transaction.
* ``idem.http`` -- outbound requests with host-set idempotency keys.
* ``idem.emit`` -- events published through the transactional outbox.
* ``idem.config`` -- ``get``/``require`` the handler's configured values.
* ``idem.log`` -- ``trace``/``debug``/``info``/``warn``/``error`` through the host.

How a handler fails: every failure rolls back all it did. Raise
``Retryable(msg)`` to have the event executed again later, ``Permanent(msg)``
to dead-letter it. The SDK raises subclasses of ``Error`` that carry
``retryable`` already: ``DbError`` (transient ones retryable; ``UniqueViolation``
can be caught and the handler goes on), ``HttpError`` (timeouts and failed
connections retryable), ``HttpStatusError`` (408/425/429/5xx retryable),
``EmitError`` (permanent). Any other exception is a permanent failure carrying
its type, message and traceback tail (see ``handler``).

Read each part with ``python3 -m pydoc idem.<name>`` (from ``sdk/python``),
e.g. ``idem.Db``, ``idem.http``, ``idem.emit``.
"""

from . import config, emit, http, log
from ._db import Db, Row, Rows
from ._errors import DbError, EmitError, Error, HttpError, HttpStatusError, Permanent, Retryable, UniqueViolation
from ._event import Event, EventId
from ._handler import handler
from ._values import Param

__all__ = [
    "Db",
    "DbError",
    "EmitError",
    "Error",
    "Event",
    "EventId",
    "HttpError",
    "HttpStatusError",
    "Param",
    "Permanent",
    "Retryable",
    "Row",
    "Rows",
    "UniqueViolation",
    "config",
    "emit",
    "handler",
    "http",
    "log",
]
