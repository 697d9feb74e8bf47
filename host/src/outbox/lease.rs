//! One relay at a time per producer: a row of `idem.outbox_lease` (idem's
//! own table, which no handler or producer role can read or lock), held
//! while renewed, taken over by another host once it expires.

use std::time::Duration;

use sqlx::PgPool;

/// How long a lease lasts unless renewed: a dead holder's producer is
/// taken over within this (plus the taker's next try).
pub const TTL: Duration = Duration::from_secs(10);

/// Takes or renews `producer`'s lease for `holder`; whether it holds it now.
pub async fn hold(pool: &PgPool, producer: &str, holder: &str) -> Result<bool, sqlx::Error> {
    let held: Option<String> = sqlx::query_scalar(
        "INSERT INTO idem.outbox_lease AS l (producer, holder, expires_at) \
         VALUES ($1, $2, now() + make_interval(secs => $3)) \
         ON CONFLICT (producer) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
         WHERE l.holder = excluded.holder OR l.expires_at < now() \
         RETURNING holder",
    )
    .bind(producer)
    .bind(holder)
    .bind(TTL.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(held.is_some())
}

/// Gives the lease up (a clean stop), so that another host takes over now.
pub async fn release(pool: &PgPool, producer: &str, holder: &str) {
    let released = sqlx::query("DELETE FROM idem.outbox_lease WHERE producer = $1 AND holder = $2")
        .bind(producer)
        .bind(holder)
        .execute(pool)
        .await;
    if let Err(e) = released {
        tracing::warn!(producer, "failed to release the outbox lease (another host takes it when it expires): {e}");
    }
}

