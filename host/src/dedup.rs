//! The claim: one row per (event, handler) in `idem.processed_event`,
//! inserted in the same transaction as the handler's effect.

use sqlx::PgConnection;

use crate::event::Event;

/// Claims `event` for `consumer`. `true`: first time, run the handler;
/// `false`: already processed (committed by someone), skip it.
///
/// Under READ COMMITTED a concurrent claim of the same key waits for the
/// first transaction: if it commits, this returns `false`; if it rolls back,
/// this one claims. (Under REPEATABLE READ it would raise a serialization
/// error instead, which is why the executor pins the isolation level.)
pub async fn claim(conn: &mut PgConnection, event: &Event, consumer: &str) -> Result<bool, sqlx::Error> {
    let claimed: Option<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\") \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING event_id",
    )
    .bind(event.id)
    .bind(consumer)
    .bind(&event.topic)
    .bind(event.partition)
    .bind(event.offset)
    .fetch_optional(conn)
    .await?;
    Ok(claimed.is_some())
}
