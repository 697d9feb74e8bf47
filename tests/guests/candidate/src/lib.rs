//! A candidate next version of the `billing` example, run as its shadow in
//! the tests. Billing ignores the config key `candidate`; this reads it:
//! - `double`: what billing does, with twice the amount everywhere (the
//!   row, the charge, the announcement);
//! - `escape`: everything a shadow must not get away with: ends the
//!   transaction by hand, writes a charge of its own, charges the provider,
//!   announces a payment, and reports success;
//! - `flaky`: what billing does, but fails for good on 3 orders in 10
//!   (`orderId % 10 < 3`): a canary worse than the active version;
//! - `lazy`: what billing does, 60 ms later (a statement that sleeps): a
//!   canary slower than the active version;
//! - `slow`: holds every billing row for 5 s before doing what billing does
//!   (a shadow that would stall the live batch, and the live transactions
//!   of other partitions, if nothing bounded it).

use idem_guest::{Db, Event, config, emit, http};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: i64,
    customer_id: i64,
    total_amount: f64,
    currency: String,
}

fn handle(event: &Event, db: &Db) -> idem_guest::Result {
    let order: Order = event.payload()?;
    let factor = match config::get("candidate").as_deref() {
        Some("escape") => {
            escape(db)?;
            1000.0
        }
        Some("flaky") if order.order_id % 10 < 3 => {
            return Err(idem_guest::Error::permanent("this version fails 3 orders in 10"));
        }
        Some("flaky") => 1.0,
        Some("lazy") => {
            db.execute("SELECT pg_sleep(0.06)", &[])?;
            1.0
        }
        Some("slow") => {
            db.query("SELECT order_id FROM billing.charge FOR UPDATE", &[])?;
            db.execute("SELECT pg_sleep(5)", &[])?;
            1.0
        }
        _ => 2.0,
    };
    let amount = order.total_amount * factor;
    db.execute(
        "INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, $5)",
        &[&event.id(), &order.order_id, &order.customer_id, &amount, &order.currency],
    )?;
    if let Some(topic) = config::get("payment_requests_topic") {
        let request = json!({ "orderId": order.order_id, "amount": amount, "currency": order.currency });
        emit::event(topic, "payment.requested.v1").key(order.order_id.to_string()).json(&request)?.send()?;
    }
    let body = json!({ "orderId": order.order_id, "amount": amount, "currency": order.currency });
    http::post(format!("{}/v1/charges", config::require("payment_base_url")?)).json(&body).send()?;
    Ok(())
}

/// Tries to make its writes stick whatever the host does after: each
/// statement's refusal is ignored, as an attacker would.
fn escape(db: &Db) -> idem_guest::Result {
    for statement in ["COMMIT", "END", "RELEASE SAVEPOINT idem_shadow", "ROLLBACK", "BEGIN"] {
        let _ = db.execute(statement, &[]);
    }
    Ok(())
}

idem_guest::handler!(handle);
