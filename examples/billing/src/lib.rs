//! The seed's billing consumer as an idem handler: one `order.confirmed.v1`
//! event → one row in `billing.charge` and one charge at the payment
//! provider. Dedup, the transaction, offsets and the `Idempotency-Key`
//! header are the host's job. With `payment_requests_topic` configured it
//! also announces each charge as `payment.requested.v1` through the outbox
//! (the `payments` example takes them).

use idem_guest::{Db, Event, config, emit, http};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderConfirmed {
    order_id: i64,
    customer_id: i64,
    total_amount: f64,
    currency: String,
}

fn handle(event: &Event, db: &Db) -> idem_guest::Result {
    let order: OrderConfirmed = event.payload()?;
    db.execute(
        "INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, $5)",
        &[&event.id(), &order.order_id, &order.customer_id, &order.total_amount, &order.currency],
    )?;
    // Published once this event's transaction commits, keyed by the order
    // (the payment's aggregate), or with `payment_requests_key = "customer"`
    // by the customer: then a customer's requests reach `payments` in the
    // order their charges committed, and a customer's charges commit one
    // at a time (each holds the key's outbox bucket until it commits).
    if let Some(topic) = config::get("payment_requests_topic") {
        let request = json!({ "orderId": order.order_id, "amount": order.total_amount, "currency": order.currency });
        let by_customer = config::get("payment_requests_key").as_deref() == Some("customer");
        let key = if by_customer { order.customer_id } else { order.order_id };
        emit::event(topic, "payment.requested.v1").key(key.to_string()).json(&request)?.send()?;
    }
    // `charge_payment = "false"` leaves the provider out: only the benchmark
    // sets it, to measure the database path alone.
    if config::get("charge_payment").as_deref() == Some("false") {
        return Ok(());
    }
    let body = json!({ "orderId": order.order_id, "amount": order.total_amount, "currency": order.currency });
    http::post(format!("{}/v1/charges", config::require("payment_base_url")?))
        .json(&body)
        .send()?
        .error_for_status()?;
    Ok(())
}

idem_guest::handler!(handle, reusable);
