//! Operators' rewinds: a handler's group sent back to an offset, a time or
//! the earliest record kept (`idem rewind`, `POST /handlers/{name}/rewind`),
//! on every host of the group, none stopped.
//!
//! A rewind is safe in idem as it is nowhere else: every event of the
//! window that was applied already is a duplicate in the dedup ledger and
//! is skipped, so a rewind re-runs only what did not take effect (an
//! effect a restore from a backup lost with its dedup row, an event
//! dead-lettered whose dead letter is gone). Only the ledger's
//! retention bounds it: an event older than the handler's
//! `dedup_retention` may have lost its row, so a window that reaches that
//! far is refused unless forced ([`census`] counts such events).
//!
//! How it is applied, every host cooperating:
//! - the host that takes the request resolves the target to one offset per
//!   partition ([`target`]) and writes it in `idem.rewind_partition`; every
//!   owner then applies the same offset, whenever it applies it;
//! - every host reads the pending rows each second ([`follow`]); the owner
//!   of a partition applies its row at the polling thread's next pass
//!   (`consumer::rewind`): it lets the partition's event in flight end,
//!   seeks the partition, commits the offset and starts the partition
//!   afresh from there, then records when and from where (`Rewinds::applied`). A
//!   partition that changes owner first is applied by its next owner; one
//!   applied twice (a crash before the record) re-runs a window of
//!   duplicates, which change nothing.

pub mod census;
pub mod target;

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::watch;

use super::HandlerContext;
use crate::config::Config;
use crate::kafka_client::ProbeContext;

pub use super::follow::REFRESH;
pub use target::{Refused, Target, Window};

/// A partition's rewind, not applied yet.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Pending {
    pub id: i64,
    pub handler: String,
    pub topic: String,
    pub partition: i32,
    pub to_offset: i64,
}

/// The rewinds pending as this host last read them, and where it records
/// the ones it applied.
#[derive(Clone)]
pub struct Rewinds {
    pending: watch::Receiver<Arc<Vec<Pending>>>,
    pool: sqlx::PgPool,
    /// This host's name in the fleet, recorded with what it applied.
    host: String,
}

impl Rewinds {
    /// This host's name in the fleet.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// `handler`'s oldest rewind pending for `topic`/`partition`.
    pub(crate) fn first_for(&self, handler: &str, topic: &str, partition: i32) -> Option<Pending> {
        self.pending
            .borrow()
            .iter()
            .find(|p| p.handler == handler && p.topic == topic && p.partition == partition)
            .cloned()
    }

    /// Whether any rewind is pending for `handler` (the polling thread's
    /// every pass asks; nothing else is done while none is).
    pub(crate) fn any_for(&self, handler: &str) -> bool {
        self.pending.borrow().iter().any(|p| p.handler == handler)
    }

    /// Records `pending` applied at `at` (when its partition restarted),
    /// the partition having stood at `from`: in a task of its own, tried
    /// again every second until it is recorded (the polling thread does not
    /// wait on PostgreSQL). The time recorded is PostgreSQL's, less the
    /// time since `at`: the report splits the ledger's rows at it.
    pub(crate) fn applied(&self, runtime: &tokio::runtime::Handle, pending: &Pending, from: Option<i64>, at: Instant) {
        let (pool, host, pending) = (self.pool.clone(), self.host.clone(), pending.clone());
        runtime.spawn(async move {
            for attempt in 0u32.. {
                match record_applied(&pool, &pending, from, &host, at.elapsed()).await {
                    Ok(()) => return,
                    Err(e) if attempt % 30 == 0 => {
                        tracing::warn!(rewind = pending.id, "failed to record a rewind applied (trying again): {e}");
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(super::follow::REFRESH).await;
            }
        });
    }
}

async fn record_applied(
    pool: &sqlx::PgPool,
    p: &Pending,
    from: Option<i64>,
    host: &str,
    ago: std::time::Duration,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE idem.rewind_partition SET applied_at = now() - make_interval(secs => $5), applied_by = $3, \
         from_offset = $4 WHERE rewind = $1 AND \"partition\" = $2 AND applied_at IS NULL",
    )
    .bind(p.id)
    .bind(p.partition)
    .bind(host)
    .bind(from)
    .bind(ago.as_secs_f64())
    .execute(pool)
    .await
    .map(drop)
}

/// Every partition's rewind not applied yet, oldest first.
pub async fn read_pending(pool: &sqlx::PgPool) -> sqlx::Result<Vec<Pending>> {
    sqlx::query_as(
        "SELECT r.id, r.handler, r.topic, p.\"partition\", p.to_offset FROM idem.rewind_partition p \
         JOIN idem.rewind r ON r.id = p.rewind WHERE p.applied_at IS NULL ORDER BY r.id, p.\"partition\"",
    )
    .fetch_all(pool)
    .await
}

/// Reads the pending rewinds now, then every second until `stop`; `host`
/// is this host's name, recorded with each rewind it applies.
pub async fn follow(pool: sqlx::PgPool, stop: watch::Receiver<bool>, host: String) -> anyhow::Result<Rewinds> {
    let read = |pool: sqlx::PgPool| async move { read_pending(&pool).await };
    let pending = super::follow::follow(pool.clone(), stop, "the pending rewinds (idem.rewind_partition)", read).await?;
    Ok(Rewinds { pending, pool, host })
}

/// Each partition's window for `target` (of `only`, or every partition of
/// the handler's topic), as the brokers and the group's committed offsets
/// say now (on a blocking thread: a client of its own, with the group's
/// id, which reads the group's offsets without joining it).
pub(crate) async fn plan(
    config: Arc<Config>,
    handler: Arc<HandlerContext>,
    only: Option<i32>,
    target: Target,
) -> Result<Vec<Window>, Refused> {
    let resolved = tokio::task::spawn_blocking(move || {
        let kind = crate::kafka_client::ClientKind::Consumer;
        let mut client = crate::kafka_client::client_config(&config, Some(&handler.config), kind).map_err(Refused::Kafka)?;
        client.set("group.id", &handler.config.group_id);
        let probe = crate::kafka_client::create(&client, ProbeContext::default(), "a Kafka client").map_err(Refused::Kafka)?;
        target::resolve(&probe, &handler.config.topic, only, target)
    })
    .await;
    resolved.unwrap_or_else(|e| Err(Refused::Kafka(anyhow::anyhow!("the rewind's planner panicked: {e}"))))
}

/// A rewind as asked: its partitions' offsets, and who asked and why.
#[derive(Debug)]
pub struct Request<'a> {
    pub handler: &'a str,
    pub topic: &'a str,
    pub target: &'a Target,
    pub reason: &'a str,
    pub forced: bool,
    pub by: &'a str,
    /// `(partition, to_offset, the group's committed offset now)`.
    pub partitions: &'a [(i32, i64, i64)],
}

/// Writes `request`; its id.
pub async fn request(pool: &sqlx::PgPool, request: &Request<'_>) -> sqlx::Result<i64> {
    let mut tx = pool.begin().await?;
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO idem.rewind (handler, topic, target, reason, forced, requested_by) \
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
    )
    .bind(request.handler)
    .bind(request.topic)
    .bind(request.target.to_string())
    .bind(request.reason)
    .bind(request.forced)
    .bind(request.by)
    .fetch_one(&mut *tx)
    .await?;
    for &(partition, to_offset, asked_at) in request.partitions {
        sqlx::query(
            "INSERT INTO idem.rewind_partition (rewind, \"partition\", to_offset, asked_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(partition)
        .bind(to_offset)
        .bind(asked_at)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(id)
}

/// One rewind as recorded, with its partitions.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Recorded {
    pub id: i64,
    pub handler: String,
    pub topic: String,
    pub target: String,
    pub reason: String,
    pub forced: bool,
    pub requested_by: String,
    pub requested_at: chrono::DateTime<chrono::Utc>,
    #[sqlx(skip)]
    pub partitions: Vec<RecordedPartition>,
}

/// One partition of a recorded rewind.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct RecordedPartition {
    pub partition: i32,
    pub to_offset: i64,
    pub asked_at: i64,
    pub from_offset: Option<i64>,
    pub applied_at: Option<chrono::DateTime<chrono::Utc>>,
    pub applied_by: Option<String>,
}

/// `handler`'s rewinds, newest first (at most `limit`), or the one `id`.
pub async fn recorded(
    pool: &sqlx::PgPool,
    handler: &str,
    id: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<Recorded>> {
    let mut rewinds: Vec<Recorded> = sqlx::query_as(
        "SELECT id, handler, topic, target, reason, forced, requested_by, requested_at FROM idem.rewind \
         WHERE handler = $1 AND ($2::bigint IS NULL OR id = $2) ORDER BY id DESC LIMIT $3",
    )
    .bind(handler)
    .bind(id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    for rewind in &mut rewinds {
        rewind.partitions = sqlx::query_as(
            "SELECT \"partition\", to_offset, asked_at, from_offset, applied_at, applied_by \
             FROM idem.rewind_partition WHERE rewind = $1 ORDER BY \"partition\"",
        )
        .bind(rewind.id)
        .fetch_all(pool)
        .await?;
    }
    Ok(rewinds)
}
