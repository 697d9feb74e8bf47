//! The next link of the design notes' chain: billing emits
//! `payment.requested.v1` through the outbox when it charges an order, and
//! this handler takes each request once. It keeps the request with what
//! caused it (the `idem.causation-id` header: billing's source event).

use idem_guest::{Db, Event};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PaymentRequested {
    order_id: i64,
    amount: f64,
    currency: String,
}

fn handle(event: &Event, db: &Db) -> idem_guest::Result {
    let request: PaymentRequested = event.payload()?;
    let cause = event.header("idem.causation-id").map(|c| String::from_utf8_lossy(c).into_owned());
    db.execute(
        "INSERT INTO payments.request (event_id, order_id, amount, currency, caused_by) \
         VALUES ($1, $2, $3, $4, $5::uuid)",
        &[&event.id(), &request.order_id, &request.amount, &request.currency, &cause],
    )?;
    Ok(())
}

idem_guest::handler!(handle, reusable);
