"""The billing example in Python, doing exactly what examples/billing does in
Rust: one ``order.confirmed.v1`` event -> one row in ``billing.charge`` and one
charge at the payment provider. Dedup, the transaction, offsets and the
``Idempotency-Key`` header are the host's job. With ``payment_requests_topic``
configured it also announces each charge as ``payment.requested.v1`` through
the outbox (the ``payments`` example takes them).

It uses examples/billing's migrations, schemas and idem.toml; only the
component differs: ``scripts/sdk/build-python examples/billing-python OUT.wasm``.
"""

from dataclasses import dataclass

import idem


@dataclass
class OrderConfirmed:
    order_id: int
    customer_id: int
    total_amount: float
    currency: str


@idem.handler
def handle(event: idem.Event, db: idem.Db) -> None:
    order = event.payload_as(OrderConfirmed)
    db.execute(
        "INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, $5)",
        (event.id, order.order_id, order.customer_id, order.total_amount, order.currency),
    )
    # Keys in the order serde_json writes them, so both examples send the same bytes.
    request = {"amount": order.total_amount, "currency": order.currency, "orderId": order.order_id}
    # Published once this event's transaction commits, keyed by the order, or
    # with `payment_requests_key = "customer"` by the customer: then a
    # customer's requests reach `payments` in the order their charges committed.
    topic = idem.config.get("payment_requests_topic")
    if topic is not None:
        by_customer = idem.config.get("payment_requests_key") == "customer"
        key = order.customer_id if by_customer else order.order_id
        idem.emit.event(topic, "payment.requested.v1").key(key).json(request).send()
    # `charge_payment = "false"` leaves the provider out: only the benchmark
    # sets it, to measure the database path alone.
    if idem.config.get("charge_payment") == "false":
        return
    base = idem.config.require("payment_base_url")
    idem.http.post(f"{base}/v1/charges").json(request).send().raise_for_status()
