//! `idem dlq reindex`: a handler's dead-letter index rebuilt from its
//! topic, the source of truth, saying what differed.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::Context as _;
use rdkafka::consumer::Consumer as _;
use rdkafka::message::{Headers as _, Message as _};
use serde::Serialize;

use super::read::{authenticity, read, small_consumer};
use super::Window;
use crate::config::{Config, HandlerConfig};
use crate::pipeline::dlq::index::{self, Entry, Parts, Position};
use crate::pipeline::dlq::seal::Keys;

/// What a rebuild found.
#[derive(Debug, Default, Serialize)]
pub struct Reindexed {
    pub topic: String,
    /// Records read from the topic.
    pub read: usize,
    /// Of them, records the index did not have (now added).
    pub added: usize,
    /// Rows whose record the topic no longer holds (removed by retention,
    /// or the topic was made again): now gone from the index.
    pub removed: u64,
}

/// Rebuilds `handler`'s rows of `idem.dead_letter` from its DLQ topic.
pub async fn reindex(config: &Config, handler: &HandlerConfig, pool: &sqlx::PgPool) -> anyhow::Result<Reindexed> {
    let keys = Keys::load(&config.dlq)?;
    let topic = handler.dlq_topic();
    let (config_owned, handler_owned) = (config.clone(), handler.clone());
    // Each partition's offsets before the read: rows below its start are
    // gone from the topic; rows up to its end that the read did not meet
    // are too. Records written during the rebuild are past it, kept.
    let (bounds, records) = tokio::task::spawn_blocking(move || {
        let bounds = watermarks(&config_owned, &handler_owned)?;
        let records = read(&config_owned, &handler_owned, &Window::default())?;
        anyhow::Ok((bounds, records))
    })
    .await??;
    let started = chrono::Utc::now();
    let rows: Vec<(i32, i64, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT \"partition\", \"offset\", failed_at FROM idem.dead_letter WHERE topic = $1")
            .bind(&topic)
            .fetch_all(pool)
            .await
            .context("failed to read idem.dead_letter")?;
    let had: HashSet<(i32, i64)> = rows.iter().map(|(p, o, _)| (*p, *o)).collect();
    let mut report = Reindexed { topic: topic.clone(), read: records.len(), ..Reindexed::default() };
    let mut met: HashSet<(i32, i64)> = HashSet::with_capacity(records.len());
    for m in &records {
        let at = Position { topic: topic.clone(), partition: m.partition(), offset: m.offset() };
        let headers = m.headers().map(|hs| hs.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default();
        let parts = Parts { key: m.key(), value: m.payload(), headers };
        let entry = Entry::of(at, &handler.name, &parts, authenticity(&keys, m));
        index::write(pool, &entry).await.context("failed to write idem.dead_letter")?;
        report.added += usize::from(!had.contains(&(m.partition(), m.offset())));
        met.insert((m.partition(), m.offset()));
    }
    let mut gone: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (partition, offset, failed_at) in rows {
        if !met.contains(&(partition, offset)) && absent(bounds.get(&partition), offset, failed_at, started) {
            gone.entry(partition).or_default().push(offset);
        }
    }
    for (partition, offsets) in gone {
        report.removed += sqlx::query(
            "DELETE FROM idem.dead_letter WHERE topic = $1 AND \"partition\" = $2 AND \"offset\" = ANY($3)",
        )
        .bind(&topic)
        .bind(partition)
        .bind(&offsets)
        .execute(pool)
        .await
        .context("failed to remove rows from idem.dead_letter")?
        .rows_affected();
    }
    Ok(report)
}

/// How long before a rebuild a record may have failed and still be written
/// to the topic after the rebuild began (the DLQ producer's 30 s timeout,
/// with room to spare).
const IN_FLIGHT: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Whether a row the read did not meet names a record the topic does not
/// hold: below the partition's start (retention removed it), below its
/// end when the rebuild began (the topic was made again), or past that end
/// yet failed long before (a record written since would be newer).
fn absent(
    bounds: Option<&(i64, i64)>,
    offset: i64,
    failed_at: chrono::DateTime<chrono::Utc>,
    started: chrono::DateTime<chrono::Utc>,
) -> bool {
    let old = failed_at < started - IN_FLIGHT;
    match bounds {
        Some((_, high)) if offset < *high => true,
        _ => old,
    }
}

/// Each partition's low and high watermark.
fn watermarks(config: &Config, handler: &HandlerConfig) -> anyhow::Result<BTreeMap<i32, (i64, i64)>> {
    let topic = handler.dlq_topic();
    let consumer = small_consumer(config, handler)?;
    let metadata = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .with_context(|| format!("failed to look up the DLQ topic {topic}"))?;
    let mut bounds = BTreeMap::new();
    for t in metadata.topics().iter().filter(|t| t.error().is_none()) {
        for p in t.partitions() {
            bounds.insert(p.id(), consumer.fetch_watermarks(&topic, p.id(), Duration::from_secs(10))?);
        }
    }
    Ok(bounds)
}
