//! Retention of `idem.processed_event` (R-KFK-IDEM-2): what each host
//! records about its handlers, and the maintenance pass that keeps the
//! table's size bounded.
//!
//! - Each host records its handlers' `dedup_retention` (and `[retention]
//!   future_skew`) in `idem.consumer_retention` at start-up. The claim reads
//!   them there, and so does maintenance: no host decides from its own
//!   config alone what another host's handler still needs. One clock, the
//!   database's `now()`, decides every age.
//! - A pass ([`Maintenance::pass`]) runs at start-up and every `[retention]
//!   interval` on connections of idem's own pool, holding a row lock in
//!   `idem.maintenance_lock`, so passes of several hosts never run at once
//!   (the loser reports `busy` and does nothing). Not an advisory lock: any
//!   role can take any advisory key, a guest's role included.
//!   - partition mode ([`windows`]): creates the UTC days from the longest
//!     retention to `windows_ahead` days ahead, and drops a day once it is
//!     older than the longest retention recorded;
//!   - delete mode ([`delete`]): deletes expired rows in chunks.
//! - Every statement that needs a lock waits `lock_timeout` at most; what
//!   could not get its lock is retried after [`RETRY`].

mod delete;
pub mod topic;
pub mod windows;

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Serialize;
use sqlx::{Connection as _, Executor as _, PgConnection, PgPool};
use tokio::sync::watch;

use crate::config::{Config, RetentionConfig, RetentionMode};

/// How soon a pass that met a held lock tries again.
pub const RETRY: Duration = Duration::from_secs(30);

/// Retention of a consumer no host recorded (the seed's figure), and what
/// maintenance keeps while no host recorded any.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 86_400);

/// What a pass did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub mode: Option<&'static str>,
    /// Another pass (another host's) held the maintenance lock: nothing done.
    pub busy: bool,
    /// Windows created (UTC days).
    pub created: Vec<chrono::NaiveDate>,
    /// Windows dropped.
    pub dropped: Vec<Dropped>,
    /// Rows deleted (delete mode), and in how many chunks.
    pub deleted: u64,
    pub chunks: u64,
    /// What waited longer than `lock_timeout` for its lock: tried again
    /// after [`RETRY`].
    pub deferred: Vec<String>,
    /// Partitions of `idem.processed_event` that are not idem's windows.
    pub foreign: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Dropped {
    pub day: chrono::NaiveDate,
    /// The planner's estimate of its rows.
    pub rows: i64,
}

impl Report {
    /// One line per thing done, for logs and `idem maintenance`.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.busy {
            lines.push("another host's maintenance pass is running: nothing done".to_owned());
        }
        for day in &self.created {
            lines.push(format!("created window {day}"));
        }
        for d in &self.dropped {
            lines.push(format!("dropped window {} (about {} rows)", d.day, d.rows));
        }
        if self.mode == Some("delete") {
            lines.push(format!("deleted {} expired rows in {} chunk(s)", self.deleted, self.chunks));
        }
        for what in &self.deferred {
            lines.push(format!("deferred (lock not available): {what}"));
        }
        for name in &self.foreign {
            lines.push(format!("ignored partition idem.{name}: not one of idem's windows"));
        }
        lines
    }
}

/// The table's mode as created (`relkind` p or r).
pub async fn table_mode(conn: &mut PgConnection) -> anyhow::Result<RetentionMode> {
    let kind: String =
        sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE oid = 'idem.processed_event'::regclass")
            .fetch_one(conn)
            .await
            .context("failed to read idem.processed_event's kind")?;
    Ok(if kind == "p" { RetentionMode::Partition } else { RetentionMode::Delete })
}

/// Fails unless the table was created for `[retention] mode` and idem's
/// own role may maintain it: a pass that cannot create windows fails every
/// claim once the windows made ahead run out, days later.
pub async fn check_mode(pool: &PgPool, config: &RetentionConfig) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await.context("failed to connect to the database")?;
    let mode = table_mode(&mut conn).await?;
    if mode != config.mode {
        bail!(
            "[retention] mode = \"{}\", but idem.processed_event was created for mode \"{}\" (by `idem migrate`); \
             set mode = \"{}\" (a table is not converted in place after its creation)",
            config.mode.as_str(),
            mode.as_str(),
            mode.as_str()
        );
    }
    let (owner, may_own, may_delete, may_record, may_mark, may_lock): (String, bool, bool, bool, bool, bool) =
        sqlx::query_as(
            "SELECT pg_get_userbyid(c.relowner)::text, pg_has_role(current_user, c.relowner, 'USAGE'), \
                has_table_privilege('idem.processed_event', 'SELECT, DELETE'), \
                has_table_privilege('idem.consumer_retention', 'INSERT, UPDATE'), \
                has_table_privilege('idem.dropped_window', 'INSERT'), \
                has_table_privilege('idem.maintenance_lock', 'UPDATE') \
         FROM pg_class c WHERE c.oid = 'idem.processed_event'::regclass",
        )
        .fetch_one(&mut *conn)
        .await
        .context("failed to read idem's rights on its tables")?;
    let mut missing = Vec::new();
    if !may_own && mode == RetentionMode::Partition {
        missing.push(format!(
            "membership in role {owner}, which owns idem.processed_event (windows are attached and detached)"
        ));
    }
    if !may_delete && mode == RetentionMode::Delete {
        missing.push("SELECT, DELETE on idem.processed_event".to_owned());
    }
    for (ok, what) in [
        (may_record, "INSERT, UPDATE on idem.consumer_retention"),
        (may_mark, "INSERT on idem.dropped_window"),
        (may_lock, "UPDATE on idem.maintenance_lock"),
    ] {
        if !ok {
            missing.push(what.to_owned());
        }
    }
    if !missing.is_empty() {
        bail!(
            "idem's own role cannot maintain idem.processed_event (see docs/retention.md): it needs {}",
            missing.join("; ")
        );
    }
    Ok(())
}

/// Records each handler's retention and the future skew in
/// `idem.consumer_retention`, saying when it changes what another host
/// recorded.
pub async fn record(pool: &PgPool, config: &Config) -> anyhow::Result<()> {
    let by = format!("{}:{}", hostname(), std::process::id());
    for h in &config.handlers {
        let previous: Option<(bool, String, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
            "SELECT retention = $2::interval, retention::text, recorded_by, recorded_at \
             FROM idem.consumer_retention WHERE consumer = $1",
        )
        .bind(&h.name)
        .bind(h.dedup_retention.as_interval())
        .fetch_optional(pool)
        .await
        .context("failed to read idem.consumer_retention")?;
        sqlx::query(
            "INSERT INTO idem.consumer_retention (consumer, retention, future_skew, recorded_by) \
             VALUES ($1, $2::interval, $3::interval, $4) \
             ON CONFLICT (consumer) DO UPDATE SET retention = excluded.retention, \
                 future_skew = excluded.future_skew, recorded_at = now(), recorded_by = excluded.recorded_by",
        )
        .bind(&h.name)
        .bind(h.dedup_retention.as_interval())
        .bind(config.retention.future_skew.as_interval())
        .bind(&by)
        .execute(pool)
        .await
        .with_context(|| format!("handler `{}`: failed to record its dedup_retention", h.name))?;
        if let Some((false, old, who, when)) = previous {
            tracing::warn!(
                handler = %h.name,
                "dedup_retention is now {} (was {old}, recorded by {who} at {when}): maintenance and the \
                 stale-event guard follow the newest record",
                h.dedup_retention
            );
        }
    }
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// Maintenance of `idem.processed_event` on idem's own pool.
#[derive(Debug, Clone)]
pub struct Maintenance {
    pool: PgPool,
    settings: RetentionConfig,
}

impl Maintenance {
    pub fn new(pool: PgPool, settings: RetentionConfig) -> Self {
        Self { pool, settings }
    }

    /// One pass; `busy` when another pass holds the lock.
    pub async fn pass(&self) -> anyhow::Result<Report> {
        // The lock: a row of idem.maintenance_lock, held FOR UPDATE by an
        // open transaction on a connection of its own (the work cannot run
        // inside that transaction: DETACH … CONCURRENTLY refuses to).
        let mut lock = self.pool.acquire().await.context("failed to connect to the database")?;
        lock.close_on_drop();
        lock.execute(sqlx::raw_sql("BEGIN")).await.context("failed to take the maintenance lock")?;
        let taken =
            sqlx::query("SELECT 1 FROM idem.maintenance_lock WHERE id = 1 FOR UPDATE NOWAIT").execute(&mut *lock).await;
        match taken {
            Ok(_) => {}
            Err(e) if lock_timed_out(&e) => return Ok(Report { busy: true, ..Report::default() }),
            Err(e) => return Err(e).context("failed to take the maintenance lock"),
        }
        let mut conn = self.pool.acquire().await.context("failed to connect to the database")?;
        // A pass may stop half-way (a session setting, a statement cut):
        // its connection is closed, never handed to anyone else.
        conn.close_on_drop();
        let mode = table_mode(&mut conn).await?;
        let mut report = Report { mode: Some(mode.as_str()), ..Report::default() };
        let done = match mode {
            RetentionMode::Partition => windows::pass(&mut conn, &self.settings, &mut report).await,
            RetentionMode::Delete => delete::pass(&mut conn, &self.settings, &mut report).await,
        };
        drop(conn);
        let _ = lock.execute(sqlx::raw_sql("COMMIT")).await;
        done.map(|()| report)
    }

    /// Runs a pass after `first`, then every `interval` (after [`RETRY`]
    /// when one was deferred) until `stop` turns true. A failed pass is
    /// logged and tried again: claims go on meanwhile, on the windows
    /// created ahead.
    pub async fn run_after(self, first: Duration, mut stop: watch::Receiver<bool>) {
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(first) => {}
        }
        loop {
            let next = match self.pass().await {
                Ok(report) => {
                    for line in report.lines() {
                        tracing::info!("retention: {line}");
                    }
                    if report.deferred.is_empty() && !report.busy {
                        self.settings.interval.0
                    } else {
                        RETRY.min(self.settings.interval.0)
                    }
                }
                Err(e) => {
                    // Loud: claims fail (ID002) once the windows made ahead run out.
                    tracing::error!("retention: maintenance pass failed, trying again in {RETRY:?}: {e:#}");
                    RETRY.min(self.settings.interval.0)
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(next) => {}
            }
        }
    }
}

/// Whether `e` is PostgreSQL's "lock not available" (`lock_timeout`).
fn lock_timed_out(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "55P03")
}

/// Begins a transaction on `conn` whose lock waits end after `timeout`.
async fn begin_bounded<'c>(
    conn: &'c mut PgConnection,
    timeout: Duration,
) -> Result<sqlx::Transaction<'c, sqlx::Postgres>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    sqlx::query(&format!("SET LOCAL lock_timeout = {}", timeout.as_millis().max(1))).execute(&mut *tx).await?;
    Ok(tx)
}
