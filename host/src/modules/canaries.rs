//! The store's side of canaries (`canary`): the canary row of
//! `idem.handler_module` (`canary_percent`, `canary_since`) and how each
//! canary ended (`idem.canary_verdict`). Changes take the handler's module
//! gate (`store::lock`), as activations do: ending a canary waits for the
//! transactions running it, and claims after it refuse its version.

use serde::Serialize;
use sqlx::PgPool;

use super::store::{Upload, insert_next, lock, retrying, stored};

/// What storing a canary came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canaried {
    /// Stored (`new`: as a new version) and made the handler's canary.
    Canary { version: i32, new: bool },
    /// These bytes are the active version: there is nothing to try.
    Active(i32),
}

/// A handler's canary as the store has it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct CanaryRow {
    pub version: i32,
    pub sha256: String,
    pub percent: i16,
    pub since: chrono::DateTime<chrono::Utc>,
}

/// How a canary ended.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Verdict {
    pub version: i32,
    pub percent: i16,
    /// `promoted`, `aborted` or `rolled back`.
    pub verdict: String,
    pub reason: String,
    pub by: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Stores `upload` (bytes already stored are not stored again) and makes
/// it `handler`'s canary for `percent` of its keys, in one transaction.
pub async fn store_as_canary(pool: &PgPool, upload: &Upload<'_>, percent: i16) -> Result<Canaried, sqlx::Error> {
    retrying(|| async move {
        let mut tx = pool.begin().await?;
        lock(&mut tx, upload.handler).await?;
        let existing = stored(&mut tx, upload).await?;
        let (version, new) = match existing {
            Some((version, true)) => return Ok(Canaried::Active(version)),
            Some((version, false)) => (version, false),
            None => (insert_next(&mut tx, upload).await?, true),
        };
        let replaced: Option<(i32, i16)> = sqlx::query_as(
            "UPDATE idem.handler_module AS m SET canary_percent = NULL, canary_since = NULL \
             FROM (SELECT version, canary_percent FROM idem.handler_module \
                   WHERE handler = $1 AND canary_percent IS NOT NULL AND version <> $2) AS was \
             WHERE m.handler = $1 AND m.version = was.version RETURNING was.version, was.canary_percent",
        )
        .bind(upload.handler)
        .bind(version)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(old) = replaced {
            let why = format!("replaced by version {version}");
            record(&mut tx, upload.handler, old, ("aborted", &why, upload.uploaded_by)).await?;
        }
        sqlx::query(
            "UPDATE idem.handler_module SET canary_percent = $3, canary_since = now(), shadow = false, \
             shadow_since = NULL WHERE handler = $1 AND version = $2",
        )
        .bind(upload.handler)
        .bind(version)
        .bind(percent)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Canaried::Canary { version, new })
    })
    .await
}

/// `handler`'s canary, if it has one.
pub async fn canary(pool: &PgPool, handler: &str) -> Result<Option<CanaryRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT version, sha256, canary_percent AS percent, canary_since AS since FROM idem.handler_module \
         WHERE handler = $1 AND canary_percent IS NOT NULL",
    )
    .bind(handler)
    .fetch_optional(pool)
    .await
}

/// The bytes of `handler`'s `version`.
pub async fn bytes(pool: &PgPool, handler: &str, version: i32) -> Result<Option<Vec<u8>>, sqlx::Error> {
    sqlx::query_scalar("SELECT bytes FROM idem.handler_module WHERE handler = $1 AND version = $2")
        .bind(handler)
        .bind(version)
        .fetch_optional(pool)
        .await
}

/// Ends `handler`'s canary `version` with `verdict` (`aborted` or `rolled
/// back`), recording why and by whom; false if it was no longer the canary.
pub async fn end(pool: &PgPool, handler: &str, version: i32, verdict: &str, reason: &str, by: &str) -> Result<bool, sqlx::Error> {
    retrying(|| async move {
        let mut tx = pool.begin().await?;
        lock(&mut tx, handler).await?;
        let percent = clear(&mut tx, handler, version).await?;
        let Some(percent) = percent else { return Ok(false) };
        record(&mut tx, handler, (version, percent), (verdict, reason, by)).await?;
        tx.commit().await?;
        Ok(true)
    })
    .await
}

/// Makes `handler`'s canary `version` the active one, recording its
/// promotion by `by`; false if it is no longer the canary (rolled back or
/// replaced meanwhile): nothing changed then.
pub async fn promote(pool: &PgPool, handler: &str, version: i32, by: &str) -> Result<bool, sqlx::Error> {
    retrying(|| async move {
        let mut tx = pool.begin().await?;
        lock(&mut tx, handler).await?;
        let percent = clear(&mut tx, handler, version).await?;
        let Some(percent) = percent else { return Ok(false) };
        let why = format!("promoted by {by}");
        record(&mut tx, handler, (version, percent), ("promoted", &why, by)).await?;
        super::store::switch(&mut tx, handler, version).await?;
        tx.commit().await?;
        Ok(true)
    })
    .await
}

/// Clears `handler`'s canary row of `version`: the share it had, or
/// `None` when it was not the canary.
async fn clear(tx: &mut sqlx::PgConnection, handler: &str, version: i32) -> Result<Option<i16>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE idem.handler_module AS m SET canary_percent = NULL, canary_since = NULL \
         FROM (SELECT canary_percent FROM idem.handler_module WHERE handler = $1 AND version = $2) AS was \
         WHERE m.handler = $1 AND m.version = $2 AND m.canary_percent IS NOT NULL RETURNING was.canary_percent",
    )
    .bind(handler)
    .bind(version)
    .fetch_optional(tx)
    .await
}

/// Records how canary `version` (of `percent`) ended.
pub async fn record(
    conn: &mut sqlx::PgConnection,
    handler: &str,
    (version, percent): (i32, i16),
    (verdict, reason, by): (&str, &str, &str),
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO idem.canary_verdict (handler, version, percent, verdict, reason, by) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(handler)
        .bind(version)
        .bind(percent)
        .bind(verdict)
        .bind(reason)
        .bind(by)
        .execute(conn)
        .await
        .map(drop)
}

/// How `handler`'s last canaries ended, newest first.
pub async fn verdicts(pool: &PgPool, handler: &str) -> Result<Vec<Verdict>, sqlx::Error> {
    sqlx::query_as(
        "SELECT version, percent, verdict, reason, by, at FROM idem.canary_verdict WHERE handler = $1 \
         ORDER BY at DESC LIMIT 10",
    )
    .bind(handler)
    .fetch_all(pool)
    .await
}
