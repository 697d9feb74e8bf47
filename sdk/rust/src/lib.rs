//! Write an idem handler: a WebAssembly component that gets one validated
//! Kafka event at a time and whose effect the host commits exactly once.
//!
//! The host has already done the hard part when your function runs: the
//! payload is valid JSON with a UUID v7 `eventId`, this `(eventId, handler)`
//! pair has been claimed in `idem.processed_event` inside a PostgreSQL
//! transaction, and every [`Db`] statement you run joins that transaction.
//! Return `Ok(())` and the host commits your writes together with the claim;
//! return an error (or panic) and nothing you wrote survives.
//!
//! ```no_run
//! use idem_guest::{config, http, Db, Event};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderConfirmed { order_id: i64, total_amount: f64, currency: String }
//!
//! fn handle(event: &Event, db: &Db) -> idem_guest::Result {
//!     let order: OrderConfirmed = event.payload()?;
//!     db.execute(
//!         "INSERT INTO billing.charge (event_id, order_id, amount, currency) VALUES ($1, $2, $3, $4)",
//!         &[&event.id(), &order.order_id, &order.total_amount, &order.currency],
//!     )?;
//!     // Carries `Idempotency-Key: <eventId>`, added by the host.
//!     http::post(format!("{}/v1/charges", config::require("payment_base_url")?))
//!         .json(&serde_json::json!({ "orderId": order.order_id }))
//!         .send()?
//!         .error_for_status()?;
//!     Ok(())
//! }
//!
//! idem_guest::handler!(handle);
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release`; the `.wasm`
//! file under `target/wasm32-wasip2/release/` is the component the host loads.

#[doc(hidden)]
pub mod bindings;
pub mod config;
pub mod db;
pub mod emit;
mod error;
mod event;
pub mod http;
pub mod log;
pub mod origin;

pub use db::{Db, DbError, FromValue, Row, Rows, ToValue, Value};
pub use error::{Error, Result};
pub use event::{Event, EventId};

/// Exports `f` as the component's `handle` function.
///
/// `f` has the signature `fn(&Event, &Db) -> idem_guest::Result`.
///
/// `handler!(f, reusable)` also declares that `f` keeps nothing in memory
/// from one event to the next (no `static` it writes, no cache): the host
/// may then run many events on one instance (1000 unless the handler's
/// `events_per_instance` says otherwise) instead of instantiating the
/// component afresh for each: the billing example costs the host about
/// 30% less CPU per event so (docs/handlers/rust.md). An event that traps
/// on a kept instance runs again on a fresh one, where only a trap is its
/// own; memory that grows from event to event is still a reason not to
/// declare it (each such trap costs a re-run). Without `reusable` every event gets a fresh
/// instance, so that nothing of one event's run, not even one whose
/// transaction rolled back, reaches the next. The declaration is a custom
/// section of the component (`idem:instances`), read when it is loaded; an
/// operator's `events_per_instance` always wins.
#[macro_export]
macro_rules! handler {
    ($f:path, reusable) => {
        $crate::handler!($f);

        // Read by the host (`runtime::policy`); kept by the linker because
        // it is used. Only in the component: a native build of the crate
        // (its tests, on any platform) has no use for it, and Mach-O would
        // refuse the section's name.
        #[cfg(target_family = "wasm")]
        #[used]
        #[unsafe(link_section = "idem:instances")]
        static __IDEM_INSTANCES: [u8; 8] = *b"reusable";
    };
    ($f:path) => {
        struct __IdemHandler;

        impl $crate::bindings::Guest for __IdemHandler {
            fn handle(
                event: $crate::bindings::idem::handler::types::Event,
            ) -> ::core::result::Result<(), $crate::bindings::idem::handler::types::HandlerError> {
                $crate::__run(event, $f)
            }
        }

        $crate::bindings::export_handler!(__IdemHandler with_types_in $crate::bindings);
    };
}

#[doc(hidden)]
pub fn __run(
    raw: bindings::idem::handler::types::Event,
    f: fn(&Event, &Db) -> Result,
) -> std::result::Result<(), bindings::idem::handler::types::HandlerError> {
    let event = Event::from(raw);
    f(&event, &Db::new()).map_err(Error::into_wit)
}
