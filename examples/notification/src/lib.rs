//! A second consumer of `order.confirmed.v1`: records one notification per
//! order. It shares the topic with billing but not its dedup namespace:
//! each handler processes every event once.

use idem_guest::{Db, Event};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderConfirmed {
    order_id: i64,
    customer_id: i64,
}

fn handle(event: &Event, db: &Db) -> idem_guest::Result {
    let order: OrderConfirmed = event.payload()?;
    db.execute(
        "INSERT INTO notification.sent (event_id, customer_id, message) VALUES ($1, $2, $3)",
        &[&event.id(), &order.customer_id, &format!("Your order {} is confirmed.", order.order_id)],
    )?;
    Ok(())
}

idem_guest::handler!(handle, reusable);
