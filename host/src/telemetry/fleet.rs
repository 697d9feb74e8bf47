//! The fleet: every host writes, every [`EVERY`], a row for itself and one
//! per partition it owns (`idem.fleet_host`, `idem.fleet_partition`), so
//! that any host answers for the whole group: which host owns which
//! partition, each host's health, version and console. The database is the
//! meeting point the hosts already share; nothing else coordinates them.
//! A partition's row belongs to whoever wrote it last; a row nobody has
//! written for [`GONE_AFTER`] is shown as such (its host died or lost it).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;
use tokio::sync::watch;

use super::Telemetry;

/// How often a host records itself.
const EVERY: Duration = Duration::from_secs(2);
/// How long a row may go unwritten before its host counts as gone.
pub const GONE_AFTER: Duration = Duration::from_secs(10);

/// This host, as the fleet knows it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// Its static-membership identity, else `<hostname>:<pid>`.
    pub host: String,
    /// Its admin listener's address.
    pub admin: Option<String>,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

/// Records this host every [`EVERY`] until `stop`, then removes its rows.
pub(crate) async fn serve(pool: PgPool, me: Member, telemetry: Arc<Telemetry>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        match record(&pool, &me, &telemetry).await {
            Ok(()) => failing = false,
            // Said once per outage: the pipelines say the rest.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!("fleet: cannot record this host in idem.fleet_host: {e}");
            }
            Err(_) => {}
        }
    }
    let gone = sqlx::query("DELETE FROM idem.fleet_host WHERE host = $1").bind(&me.host).execute(&pool);
    let _ = tokio::time::timeout(Duration::from_secs(1), gone).await;
}

/// One record of this host and the partitions it owns now.
async fn record(pool: &PgPool, me: &Member, telemetry: &Telemetry) -> Result<(), sqlx::Error> {
    let not_ready = telemetry.not_ready().await;
    sqlx::query(
        "INSERT INTO idem.fleet_host (host, version, admin, started_at, seen_at, not_ready) \
         VALUES ($1, $2, $3, $4, now(), $5) ON CONFLICT (host) DO UPDATE SET version = EXCLUDED.version, \
         admin = EXCLUDED.admin, started_at = EXCLUDED.started_at, seen_at = now(), not_ready = EXCLUDED.not_ready",
    )
    .bind(&me.host)
    .bind(env!("CARGO_PKG_VERSION"))
    .bind(&me.admin)
    .bind(me.started_at)
    .bind(&not_ready)
    .execute(pool)
    .await?;
    let mut owned = Owned::default();
    for handler in telemetry.handlers() {
        for p in handler.tap.partitions().into_iter().filter(|p| p.assigned) {
            owned.handler.push(handler.name.clone());
            owned.topic.push(p.topic);
            owned.partition.push(p.partition);
            owned.position.push(p.position);
            owned.end.push((p.high_watermark >= 0).then_some(p.high_watermark));
            owned.paused.push(p.paused);
            owned.held.push(p.held);
            owned.queued.push(i32::try_from(p.queued).unwrap_or(i32::MAX));
        }
    }
    sqlx::query(
        "INSERT INTO idem.fleet_partition (handler, topic, \"partition\", host, committed, end_offset, paused, \
         queued, seen_at, held) \
         SELECT h, t, p, $8, pos, e, pa, q, now(), he \
         FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::boolean[], \
                     $7::integer[], $9::boolean[]) AS o(h, t, p, pos, e, pa, q, he) \
         ON CONFLICT (handler, topic, \"partition\") DO UPDATE SET host = EXCLUDED.host, \
         committed = EXCLUDED.committed, end_offset = EXCLUDED.end_offset, paused = EXCLUDED.paused, \
         queued = EXCLUDED.queued, seen_at = EXCLUDED.seen_at, held = EXCLUDED.held",
    )
    .bind(&owned.handler)
    .bind(&owned.topic)
    .bind(&owned.partition)
    .bind(&owned.position)
    .bind(&owned.end)
    .bind(&owned.paused)
    .bind(&owned.queued)
    .bind(&me.host)
    .bind(&owned.held)
    .execute(pool)
    .await?;
    sqlx::query("DELETE FROM idem.fleet_host WHERE seen_at < now() - interval '1 day'").execute(pool).await?;
    Ok(())
}

/// The partitions a host owns now, column by column (for `unnest`).
#[derive(Default)]
struct Owned {
    handler: Vec<String>,
    topic: Vec<String>,
    partition: Vec<i32>,
    position: Vec<Option<i64>>,
    end: Vec<Option<i64>>,
    paused: Vec<bool>,
    held: Vec<bool>,
    queued: Vec<i32>,
}

/// The whole group as the hosts recorded it.
#[derive(Debug, Serialize)]
pub struct Fleet {
    pub hosts: Vec<FleetHost>,
    pub partitions: Vec<FleetPartition>,
}

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct FleetHost {
    pub host: String,
    pub version: String,
    pub admin: Option<String>,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub seen_at: chrono::DateTime<chrono::Utc>,
    pub not_ready: Vec<String>,
    /// Seen within [`GONE_AFTER`].
    pub alive: bool,
}

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct FleetPartition {
    pub handler: String,
    pub topic: String,
    pub partition: i32,
    pub host: String,
    /// The position its owner commits: every record before it is resolved.
    pub committed: Option<i64>,
    pub end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub paused: bool,
    /// An operator's pause holds it.
    pub held: bool,
    pub queued: i32,
    pub seen_at: chrono::DateTime<chrono::Utc>,
    /// Written within [`GONE_AFTER`] by a host that is alive.
    pub owned: bool,
}

/// The fleet as recorded: hosts by name, partitions by handler, topic, number.
pub async fn read(pool: &PgPool) -> Result<Fleet, sqlx::Error> {
    let gone = GONE_AFTER.as_secs_f64();
    let hosts = sqlx::query_as(
        "SELECT host, version, admin, started_at, seen_at, not_ready, \
         seen_at > now() - make_interval(secs => $1) AS alive FROM idem.fleet_host ORDER BY host",
    )
    .bind(gone)
    .fetch_all(pool)
    .await?;
    let partitions = sqlx::query_as(
        "SELECT p.handler, p.topic, p.\"partition\", p.host, p.committed, p.end_offset, \
         CASE WHEN p.end_offset IS NOT NULL AND p.committed IS NOT NULL \
              THEN greatest(p.end_offset - p.committed, 0) END AS lag, p.paused, p.held, p.queued, p.seen_at, \
         (p.seen_at > now() - make_interval(secs => $1) AND h.seen_at > now() - make_interval(secs => $1)) \
           IS TRUE AS owned \
         FROM idem.fleet_partition p LEFT JOIN idem.fleet_host h ON h.host = p.host \
         ORDER BY p.handler, p.topic, p.\"partition\"",
    )
    .bind(gone)
    .fetch_all(pool)
    .await?;
    Ok(Fleet { hosts, partitions })
}
