//! The claim: one row per (event, handler) in `idem.processed_event`,
//! inserted in the same transaction as the handler's effect.
//!
//! The handler's role has no right on that table: it claims through
//! `idem_api.claim`, a SECURITY DEFINER function that takes the handler's
//! namespace from the login role (`session_user`), never from an argument.

use sqlx::PgConnection;

use crate::event::Event;

/// Claims `event` for the handler `conn` is logged in as. `true`: first
/// time, run the handler; `false`: already processed (committed by someone),
/// skip it.
///
/// Under READ COMMITTED a concurrent claim of the same key waits for the
/// first transaction: if it commits, this returns `false`; if it rolls back,
/// this one claims. (Under REPEATABLE READ it would raise a serialization
/// error instead, which is why the executor pins the isolation level.)
pub async fn claim(conn: &mut PgConnection, event: &Event) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT idem_api.claim($1, $2, $3, $4)")
        .bind(event.id)
        .bind(&event.topic)
        .bind(event.partition)
        .bind(event.offset)
        .fetch_one(conn)
        .await
}
