//! The billing example (`examples/billing`) written as a native handler:
//! the same statement, the same provider call, the same config switch, no
//! wasm. `idem-under-test` registers it as `billing`, so the benchmark's
//! variant (c) runs it through the same pipeline, executor and
//! capabilities as the component, and the difference is what wasm costs.

use std::future::Future;
use std::pin::Pin;

use idem::runtime::bindings::db::{DbError, Value};
use idem::runtime::bindings::http::Request;
use idem::runtime::bindings::types::{Event, HandlerError};
use idem::runtime::{NativeContext, NativeHandler, NativeHandlers, NativeResult};
use serde::Deserialize;

/// Every native handler of the test build.
pub fn handlers() -> NativeHandlers {
    NativeHandlers::new().with("billing", Billing)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderConfirmed {
    order_id: i64,
    customer_id: i64,
    total_amount: f64,
    currency: String,
}

/// `examples/billing` in Rust, natively.
pub struct Billing;

impl NativeHandler for Billing {
    fn handle<'a>(
        &'a self,
        event: &'a Event,
        cx: &'a mut NativeContext<'_>,
    ) -> Pin<Box<dyn Future<Output = NativeResult> + Send + 'a>> {
        Box::pin(async move {
            let order: OrderConfirmed = match serde_json::from_str(&event.payload) {
                Ok(order) => order,
                Err(e) => return Ok(Err(HandlerError::Permanent(format!("invalid payload: {e}")))),
            };
            let params = vec![
                Value::Uuid(event.id.clone()),
                Value::Int64(order.order_id),
                Value::Int64(order.customer_id),
                Value::Float64(order.total_amount),
                Value::Text(order.currency.clone()),
            ];
            let inserted = cx
                .execute(
                    "INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) \
                     VALUES ($1, $2, $3, $4, $5)",
                    params,
                )
                .await?;
            // As the guest SDK classifies database errors.
            match inserted {
                Ok(_) => {}
                Err(DbError::Transient(e)) => return Ok(Err(HandlerError::Retryable(e.message))),
                Err(e) => return Ok(Err(HandlerError::Permanent(format!("{e:?}")))),
            }
            if cx.config("charge_payment").await?.as_deref() == Some("false") {
                return Ok(Ok(()));
            }
            let Some(base) = cx.config("payment_base_url").await? else {
                return Ok(Err(HandlerError::Permanent("config `payment_base_url` is not set".into())));
            };
            let body = serde_json::json!({
                "orderId": order.order_id, "amount": order.total_amount, "currency": order.currency,
            });
            let request = Request {
                method: "POST".into(),
                url: format!("{base}/v1/charges"),
                headers: vec![("content-type".into(), "application/json".into())],
                body: Some(body.to_string().into_bytes()),
                label: None,
            };
            // As the guest SDK's `error_for_status`.
            Ok(match cx.send(request).await? {
                Ok(response) if (200..300).contains(&response.status) => Ok(()),
                Ok(response) if matches!(response.status, 408 | 425 | 429) || response.status >= 500 => {
                    Err(HandlerError::Retryable(format!("HTTP {}", response.status)))
                }
                Ok(response) => Err(HandlerError::Permanent(format!("HTTP {}", response.status))),
                Err(e) => Err(HandlerError::Retryable(format!("{e:?}"))),
            })
        })
    }
}
