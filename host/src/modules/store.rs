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
    /// Runs beside the active version, always rolled back (`crate::shadow`).
    pub shadow: bool,
    /// Runs this share of the handler's keys, in percent (`canary`).
    pub canary_percent: Option<i16>,
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
        "SELECT version, sha256, size, uploaded_at, uploaded_by, note, active, shadow, canary_percent \
         FROM idem.handler_module WHERE handler = $1 ORDER BY version DESC",
    )
    .bind(handler)
    .fetch_all(pool)
    .await
}

/// A module to store: `bytes` (already validated) for `handler`.
#[derive(Debug, Clone, Copy)]
pub struct Upload<'a> {
    pub handler: &'a str,
    pub bytes: &'a [u8],
    pub sha256: &'a str,
    pub uploaded_by: &'a str,
    pub note: Option<&'a str>,
}

/// Stores `upload` as its handler's next version and activates it, in one
/// transaction; bytes already stored are not stored again: their version
/// is activated. Returns the version and what happened.
pub async fn store_and_activate(pool: &PgPool, upload: &Upload<'_>) -> Result<(i32, Stored), sqlx::Error> {
    retrying(|| async move {
        let mut tx = pool.begin().await?;
        lock(&mut tx, upload.handler).await?;
        let existing = stored(&mut tx, upload).await?;
        let (version, stored) = match existing {
            Some((version, was_active)) => (version, Stored::Existing { was_active }),
            None => (insert_next(&mut tx, upload).await?, Stored::New),
        };
        if stored != (Stored::Existing { was_active: true }) {
            switch(&mut tx, upload.handler, version).await?;
        }
        tx.commit().await?;
        Ok((version, stored))
    })
    .await
}

/// Stores `upload` as its handler's version 1, active, unless the store
/// holds a version already (another host seeded first): `None` then.
pub async fn seed(pool: &PgPool, upload: &Upload<'_>) -> Result<Option<i32>, sqlx::Error> {
    retrying(|| async move {
        let mut tx = pool.begin().await?;
        lock(&mut tx, upload.handler).await?;
        let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM idem.handler_module WHERE handler = $1)")
            .bind(upload.handler)
            .fetch_one(&mut *tx)
            .await?;
        if any {
            return Ok(None);
        }
        let version = insert_next(&mut tx, upload).await?;
        switch(&mut tx, upload.handler, version).await?;
        tx.commit().await?;
        Ok(Some(version))
    })
    .await
}

/// The version `upload`'s bytes are stored as, and whether it is active.
pub(super) async fn stored(tx: &mut sqlx::PgConnection, upload: &Upload<'_>) -> Result<Option<(i32, bool)>, sqlx::Error> {
    sqlx::query_as("SELECT version, active FROM idem.handler_module WHERE handler = $1 AND sha256 = $2")
        .bind(upload.handler)
        .bind(upload.sha256)
        .fetch_optional(tx)
        .await
}

/// Inserts `upload` as its handler's next version (inactive), under [`lock`].
pub(super) async fn insert_next(tx: &mut sqlx::PgConnection, upload: &Upload<'_>) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO idem.handler_module (handler, version, sha256, bytes, size, uploaded_by, note) \
         SELECT $1, coalesce(max(version), 0) + 1, $2, $3, $4, $5, $6 \
         FROM idem.handler_module WHERE handler = $1 RETURNING version",
    )
    .bind(upload.handler)
    .bind(upload.sha256)
    .bind(upload.bytes)
    .bind(i32::try_from(upload.bytes.len()).unwrap_or(i32::MAX))
    .bind(upload.uploaded_by)
    .bind(upload.note)
    .fetch_one(&mut *tx)
    .await
}

/// Activates `handler`'s stored `version`; false if there is no such version.
pub async fn activate(pool: &PgPool, handler: &str, version: i32) -> Result<bool, sqlx::Error> {
    retrying(|| async move {
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
    })
    .await
}

/// Serialises changes to one handler's modules (the next version number,
/// the switch of the active row). Every claim of a stored version holds
/// one of the handler's 64 rows of `idem.module_gate` FOR KEY SHARE until
/// its transaction ends (`idem_api.claim_events`); this takes all of them
/// FOR UPDATE, so an activation waits for the transactions running the
/// version it replaces, and claims made after it see the new version. No
/// handler role can read or lock that table: no guest can hold this lock
/// (an advisory lock, which it was, any role could take).
///
/// While an activation waits for the lock, new claims queue behind it: the
/// wait is capped at [`LOCK_WAIT`], and retried, so that a long-running
/// batch delays a deploy instead of stalling every claim of the handler.
pub(super) async fn lock(tx: &mut sqlx::PgConnection, handler: &str) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("SET LOCAL lock_timeout = {}", LOCK_WAIT.as_millis())).execute(&mut *tx).await?;
    sqlx::query("SELECT idem.ensure_module_gate($1)").bind(handler).execute(&mut *tx).await?;
    sqlx::query("SELECT 1 FROM idem.module_gate WHERE handler = $1 ORDER BY slot FOR UPDATE")
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
pub(super) async fn retrying<T, F, Fut>(change: F) -> Result<T, sqlx::Error>
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
pub(super) async fn switch(tx: &mut sqlx::PgConnection, handler: &str, version: i32) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE idem.handler_module SET active = false WHERE handler = $1 AND active AND version <> $2")
        .bind(handler)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    // A canary ends with any activation (a promotion ends it before), said
    // in its verdicts; a shadow made active is no longer a shadow.
    sqlx::query(
        "INSERT INTO idem.canary_verdict (handler, version, percent, verdict, reason, by) \
         SELECT handler, version, canary_percent, 'aborted', 'version ' || $2 || ' was activated', 'idem' \
         FROM idem.handler_module WHERE handler = $1 AND canary_percent IS NOT NULL",
    )
    .bind(handler)
    .bind(version)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE idem.handler_module SET canary_percent = NULL, canary_since = NULL \
         WHERE handler = $1 AND canary_percent IS NOT NULL",
    )
    .bind(handler)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE idem.handler_module SET active = true, shadow = false, shadow_since = NULL \
         WHERE handler = $1 AND version = $2 AND NOT active",
    )
        .bind(handler)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// What storing a shadow came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shadowed {
    /// Stored (`new`: as a new version) and made the handler's shadow; its
    /// report starts afresh.
    Shadow { version: i32, new: bool },
    /// These bytes are the active version: nothing to compare it with.
    Active(i32),
}

/// Stores `upload` (bytes already stored are not stored again) and makes
/// it `handler`'s one shadow version, in one transaction; its report
/// starts afresh.
pub async fn store_as_shadow(pool: &PgPool, upload: &Upload<'_>) -> Result<Shadowed, sqlx::Error> {
    retrying(|| async move {
        let mut tx = pool.begin().await?;
        lock(&mut tx, upload.handler).await?;
        let existing = stored(&mut tx, upload).await?;
        let (version, new) = match existing {
            Some((version, true)) => return Ok(Shadowed::Active(version)),
            Some((version, false)) => (version, false),
            None => (insert_next(&mut tx, upload).await?, true),
        };
        sqlx::query(
            "UPDATE idem.handler_module SET shadow = false, shadow_since = NULL \
             WHERE handler = $1 AND shadow AND version <> $2",
        )
        .bind(upload.handler)
        .bind(version)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE idem.handler_module SET shadow = true, shadow_since = now(), canary_percent = NULL, \
             canary_since = NULL WHERE handler = $1 AND version = $2",
        )
            .bind(upload.handler)
            .bind(version)
            .execute(&mut *tx)
            .await?;
        for table in ["idem.shadow_tally", "idem.shadow_difference"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE handler = $1 AND version = $2"))
                .bind(upload.handler)
                .bind(version)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Shadowed::Shadow { version, new })
    })
    .await
}

/// `handler`'s shadow version (number and sha256), if it has one.
pub async fn shadow_version(pool: &PgPool, handler: &str) -> Result<Option<(i32, String)>, sqlx::Error> {
    sqlx::query_as("SELECT version, sha256 FROM idem.handler_module WHERE handler = $1 AND shadow")
        .bind(handler)
        .fetch_optional(pool)
        .await
}

/// `handler`'s shadow version with its bytes, if it has one.
pub async fn shadow(pool: &PgPool, handler: &str) -> Result<Option<ActiveModule>, sqlx::Error> {
    let row: Option<(i32, String, Vec<u8>)> =
        sqlx::query_as("SELECT version, sha256, bytes FROM idem.handler_module WHERE handler = $1 AND shadow")
            .bind(handler)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(version, sha256, bytes)| ActiveModule { version, sha256, bytes }))
}

/// Ends `handler`'s shadow run; the version it was, if there was one (its
/// report stays until it is shadowed again).
pub async fn stop_shadow(pool: &PgPool, handler: &str) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE idem.handler_module SET shadow = false, shadow_since = NULL WHERE handler = $1 AND shadow \
         RETURNING version",
    )
    .bind(handler)
    .fetch_optional(pool)
    .await
}
