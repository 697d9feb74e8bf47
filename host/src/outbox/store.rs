//! `idem outbox`: what each producer's outbox holds, the rows the broker
//! refused, and re-driving them.

use serde::Serialize;
use sqlx::PgPool;

/// One producer's rows, counted.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct Summary {
    pub producer: String,
    pub pending: i64,
    /// Seconds since the oldest pending row was written.
    pub oldest_pending_s: Option<f64>,
    pub published: i64,
    pub failed: i64,
    /// The host whose relay holds the lease now, if any.
    pub holder: Option<String>,
}

/// A row the broker refused for good.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct FailedRow {
    pub id: i64,
    pub producer: String,
    pub topic: String,
    pub key: String,
    pub event_id: uuid::Uuid,
    pub failed_at: chrono::DateTime<chrono::Utc>,
    pub failure: Option<String>,
}

/// Every producer's counts (those of `producers` at least, zero if empty).
pub async fn summary(pool: &PgPool, producers: &[String]) -> Result<Vec<Summary>, sqlx::Error> {
    sqlx::query_as(
        "WITH p AS (SELECT unnest($1::text[]) AS producer UNION SELECT DISTINCT producer FROM idem.outbox) \
         SELECT p.producer, \
           (SELECT count(*) FROM idem.outbox o WHERE o.producer = p.producer AND published_at IS NULL AND failed_at IS NULL) AS pending, \
           (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM idem.outbox o \
              WHERE o.producer = p.producer AND published_at IS NULL AND failed_at IS NULL) AS oldest_pending_s, \
           (SELECT count(*) FROM idem.outbox o WHERE o.producer = p.producer AND published_at IS NOT NULL) AS published, \
           (SELECT count(*) FROM idem.outbox o WHERE o.producer = p.producer AND failed_at IS NOT NULL) AS failed, \
           (SELECT holder FROM idem.outbox_lease l WHERE l.producer = p.producer AND expires_at > now()) AS holder \
         FROM p ORDER BY p.producer",
    )
    .bind(producers)
    .fetch_all(pool)
    .await
}

/// The failed rows of `producer` (all producers: `None`), oldest first.
pub async fn failed(pool: &PgPool, producer: Option<&str>, limit: i64) -> Result<Vec<FailedRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, producer, topic, key, event_id, failed_at, failure FROM idem.outbox \
         WHERE failed_at IS NOT NULL AND ($1::text IS NULL OR producer = $1) ORDER BY id LIMIT $2",
    )
    .bind(producer)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Makes failed rows pending again (those of `ids`, or every failed row of
/// `producer`), so the relay publishes them; how many.
pub async fn redrive(pool: &PgPool, producer: Option<&str>, ids: &[i64]) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE idem.outbox SET failed_at = NULL, failure = NULL \
         WHERE failed_at IS NOT NULL AND ($1::text IS NULL OR producer = $1) \
           AND (cardinality($2::bigint[]) = 0 OR id = ANY($2)) ",
    )
    .bind(producer)
    .bind(ids)
    .execute(pool)
    .await?;
    sqlx::query("SELECT pg_notify('idem_outbox', producer) FROM (SELECT DISTINCT producer FROM idem.outbox) p")
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}
