//! `idem.handler_module`: every uploaded version of every handler's
//! component, and which one is active. Written and read on idem's own pool
//! (handler roles have no right on it).

use serde::Serialize;
use sqlx::PgPool;

/// A stored version, without its bytes.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Version {
    pub version: i32,
    pub sha256: String,
    pub size: i32,
    pub uploaded_at: chrono::DateTime<chrono::Utc>,
    pub uploaded_by: String,
    pub note: Option<String>,
    pub active: bool,
}

/// The active version of a handler, with its bytes.
#[derive(Debug, Clone)]
pub struct ActiveModule {
    pub version: i32,
    pub sha256: String,
    pub bytes: Vec<u8>,
}

/// What storing an upload came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stored {
    /// A new version, now active.
    New,
    /// These bytes were already stored as this version; it is now active
    /// (it may have been already).
    Existing { was_active: bool },
}

/// The active version of `handler`, if the store has one.
pub async fn active(pool: &PgPool, handler: &str) -> Result<Option<ActiveModule>, sqlx::Error> {
    let row: Option<(i32, String, Vec<u8>)> =
        sqlx::query_as("SELECT version, sha256, bytes FROM idem.handler_module WHERE handler = $1 AND active")
            .bind(handler)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(version, sha256, bytes)| ActiveModule { version, sha256, bytes }))
}

/// The active version of `handler` (number and sha256), without its bytes.
pub async fn active_version(pool: &PgPool, handler: &str) -> Result<Option<(i32, String)>, sqlx::Error> {
    sqlx::query_as("SELECT version, sha256 FROM idem.handler_module WHERE handler = $1 AND active")
        .bind(handler)
        .fetch_optional(pool)
        .await
}

/// The active version number of every handler that has one.
pub async fn active_versions(pool: &PgPool) -> Result<Vec<(String, i32)>, sqlx::Error> {
    sqlx::query_as("SELECT handler, version FROM idem.handler_module WHERE active").fetch_all(pool).await
}

/// Every version of `handler`, newest first.
pub async fn versions(pool: &PgPool, handler: &str) -> Result<Vec<Version>, sqlx::Error> {
    sqlx::query_as(
        "SELECT version, sha256, size, uploaded_at, uploaded_by, note, active \
         FROM idem.handler_module WHERE handler = $1 ORDER BY version DESC",
    )
    .bind(handler)
    .fetch_all(pool)
    .await
}

/// Stores `bytes` (already validated) as `handler`'s next version and
/// activates it, in one transaction; bytes already stored are not stored
/// again: their version is activated. Returns the version and what happened.
pub async fn store_and_activate(
    pool: &PgPool,
    handler: &str,
    bytes: &[u8],
    sha256: &str,
    uploaded_by: &str,
    note: Option<&str>,
) -> Result<(i32, Stored), sqlx::Error> {
    retrying(|| store_and_activate_once(pool, handler, bytes, sha256, uploaded_by, note)).await
}

async fn store_and_activate_once(
    pool: &PgPool,
    handler: &str,
    bytes: &[u8],
    sha256: &str,
    uploaded_by: &str,
    note: Option<&str>,
) -> Result<(i32, Stored), sqlx::Error> {
    let mut tx = pool.begin().await?;
    lock(&mut tx, handler).await?;
    let existing: Option<(i32, bool)> =
        sqlx::query_as("SELECT version, active FROM idem.handler_module WHERE handler = $1 AND sha256 = $2")
            .bind(handler)
            .bind(sha256)
            .fetch_optional(&mut *tx)
            .await?;
    let (version, stored) = match existing {
        Some((version, was_active)) => (version, Stored::Existing { was_active }),
        None => {
            let version: i32 = sqlx::query_scalar(
                "INSERT INTO idem.handler_module (handler, version, sha256, bytes, size, uploaded_by, note) \
                 SELECT $1, coalesce(max(version), 0) + 1, $2, $3, $4, $5, $6 \
                 FROM idem.handler_module WHERE handler = $1 RETURNING version",
            )
            .bind(handler)
            .bind(sha256)
            .bind(bytes)
            .bind(i32::try_from(bytes.len()).unwrap_or(i32::MAX))
            .bind(uploaded_by)
            .bind(note)
            .fetch_one(&mut *tx)
            .await?;
            (version, Stored::New)
        }
    };
    if stored != (Stored::Existing { was_active: true }) {
        switch(&mut tx, handler, version).await?;
    }
    tx.commit().await?;
    Ok((version, stored))
}

/// Stores `bytes` as `handler`'s version 1, active, unless the store holds
/// a version already (another host seeded first): `None` then.
pub async fn seed(
    pool: &PgPool,
    handler: &str,
    bytes: &[u8],
    sha256: &str,
    uploaded_by: &str,
    note: Option<&str>,
) -> Result<Option<i32>, sqlx::Error> {
    retrying(|| seed_once(pool, handler, bytes, sha256, uploaded_by, note)).await
}

async fn seed_once(
    pool: &PgPool,
    handler: &str,
    bytes: &[u8],
    sha256: &str,
    uploaded_by: &str,
    note: Option<&str>,
) -> Result<Option<i32>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    lock(&mut tx, handler).await?;
    let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM idem.handler_module WHERE handler = $1)")
        .bind(handler)
        .fetch_one(&mut *tx)
        .await?;
    if any {
        return Ok(None);
    }
    sqlx::query(
        "INSERT INTO idem.handler_module (handler, version, sha256, bytes, size, uploaded_by, note, active) \
         VALUES ($1, 1, $2, $3, $4, $5, $6, true)",
    )
    .bind(handler)
    .bind(sha256)
    .bind(bytes)
    .bind(i32::try_from(bytes.len()).unwrap_or(i32::MAX))
    .bind(uploaded_by)
    .bind(note)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(1))
}

/// Activates `handler`'s stored `version`; false if there is no such version.
pub async fn activate(pool: &PgPool, handler: &str, version: i32) -> Result<bool, sqlx::Error> {
    retrying(|| activate_once(pool, handler, version)).await
}

async fn activate_once(pool: &PgPool, handler: &str, version: i32) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    lock(&mut tx, handler).await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM idem.handler_module WHERE handler = $1 AND version = $2)")
            .bind(handler)
            .bind(version)
            .fetch_one(&mut *tx)
            .await?;
    if !exists {
        return Ok(false);
    }
    switch(&mut tx, handler, version).await?;
    tx.commit().await?;
    Ok(true)
}

/// Serialises changes to one handler's modules (the next version number,
/// the switch of the active row). Every claim holds this lock shared until
/// its transaction ends (`idem_api.claim_events`): an activation waits for
/// the transactions running the version it replaces, and claims made after
/// it see the new version.
///
/// While an activation waits for the lock, new claims queue behind it: the
/// wait is capped at [`LOCK_WAIT`], and retried, so that a long-running
/// batch delays a deploy instead of stalling every claim of the handler.
async fn lock(tx: &mut sqlx::PgConnection, handler: &str) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("SET LOCAL lock_timeout = {}", LOCK_WAIT.as_millis())).execute(&mut *tx).await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('idem.handler_module'), hashtext($1))")
        .bind(handler)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// How long a change of a handler's modules waits for the transactions
/// running its current version, per try.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Tries of a change that found the handler's transactions running longer
/// than [`LOCK_WAIT`].
const LOCK_TRIES: u32 = 5;

/// Runs `change` again while it fails on the lock's timeout (55P03), with
/// a pause between tries so that the waiting claims get through.
async fn retrying<T, F, Fut>(change: F) -> Result<T, sqlx::Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut tries = 1;
    loop {
        match change().await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") && tries < LOCK_TRIES => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(tries))).await;
            }
            other => return other,
        }
    }
}

/// Makes `version` the one active row of `handler`: the old one is cleared
/// first, as the partial unique index checks each statement.
async fn switch(tx: &mut sqlx::PgConnection, handler: &str, version: i32) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE idem.handler_module SET active = false WHERE handler = $1 AND active AND version <> $2")
        .bind(handler)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE idem.handler_module SET active = true WHERE handler = $1 AND version = $2 AND NOT active")
        .bind(handler)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
