//! The ledger audit (docs/guarantees.md, "The ledger audit"): a check, per
//! handler and on each host for the partitions it owns, that reconciles
//! what the group consumed with what took effect. Every
//! `[handler.audit] every`, a sweep reads each owned partition from the
//! oldest record the dedup retention still guards up to the group's
//! committed offset, as the handler's consumer reads it, and accounts for
//! every record (`ledger::account`): applied, a duplicate of an applied
//! event, dead-lettered, parked, or past the retention. A record nothing
//! accounts for is logged at ERROR and counted once
//! (`idem_audit_unaccounted_total`); a sweep that finds none sets
//! `idem_audit_clean_at_seconds`. The reading is paced
//! (`records_per_second`) and runs off the polling thread with clients of
//! its own, so the audit costs the handler a bounded share.

mod ledger;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::sync::watch;

use super::HandlerContext;
use super::consumer::IdemContext;
use crate::kafka_client::ProbeContext;
use ledger::Account;

/// Event ids looked up in the ledger per query, at most.
const CHUNK: usize = 10_000;

/// How long one broker request may take.
const WAIT: Duration = Duration::from_secs(10);

/// Unaccounted records remembered, so each is counted once.
const REMEMBERED: usize = 100_000;

/// Unaccounted records logged per sweep, at most (the count has them all).
const LOGGED: u64 = 20;

/// A partition's window: from the first guarded record to the committed offset.
type Bounds = (String, i32, i64, i64);

/// Starts `shared`'s audit until `stop`. `client`: a group-less client's
/// properties (brokers, credentials); `owned`: whose assignment says which
/// partitions this host audits.
pub(crate) fn spawn(
    shared: Arc<HandlerContext>,
    client: ClientConfig,
    owned: Arc<IdemContext>,
    mut stop: watch::Receiver<bool>,
) {
    let every = shared.config.audit.every.0;
    tokio::spawn(async move {
        let mut reported = HashSet::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            // Counted on every host, whatever it owns: the outbox is the
            // handler's, not a partition's.
            unpublished(&shared).await;
            let partitions: Vec<(String, i32)> = owned.states().iter().map(|s| (s.topic.clone(), s.partition)).collect();
            if partitions.is_empty() {
                continue;
            }
            match sweep(&shared, (&client, &owned), partitions, &mut reported, &stop).await {
                Ok(Some(0)) => {
                    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0);
                    shared.stats.audit_clean_at.store(now, Relaxed);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(handler = %shared.name, "the ledger audit's sweep stopped: {e:#}"),
            }
        }
    });
}

/// The handler's emitted rows unpublished 10 minutes after their commit,
/// counted into its stats: a signal of its own (a failed row waits for an
/// operator's redrive), not a condition of a clean sweep. When the
/// database cannot say, the last count stays (logged).
async fn unpublished(shared: &HandlerContext) {
    if shared.config.emit.is_empty() {
        return;
    }
    let n = match ledger::unpublished(&shared.idem_pool, &shared.name).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(handler = %shared.name, "the ledger audit could not count unpublished rows: {e:#}");
            return;
        }
    };
    shared.stats.audit_unpublished.store(n, Relaxed);
    if n > 0 {
        tracing::error!(
            handler = %shared.name, rows = n,
            "the ledger audit: emitted rows are not published 10 minutes after their commit (`idem outbox` shows them)"
        );
    }
}

/// One sweep over `partitions`: the unaccounted records it found (`None`:
/// stopped before its end, or a partition went to another host).
async fn sweep(
    shared: &Arc<HandlerContext>,
    (client, owned): (&ClientConfig, &IdemContext),
    partitions: Vec<(String, i32)>,
    reported: &mut HashSet<(String, i32, i64)>,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<Option<u64>> {
    let retention = chrono::Duration::from_std(shared.config.dedup_retention.0).ok();
    let since_ms = retention.and_then(|r| chrono::Utc::now().checked_sub_signed(r)).map(|t| t.timestamp_millis());
    let oldest_guarded = ledger::oldest_guarded(&shared.idem_pool, &shared.name).await?;
    let (group, base) = (shared.config.group_id.clone(), client.clone());
    let bounds = tokio::task::spawn_blocking(move || bounds(&base, &group, &partitions, since_ms))
        .await
        .context("the audit's planner panicked")??;
    let reader = crate::pipeline::replay::small_reader_with(client.clone(), "read_committed", "the ledger audit's reader")?;
    // Dropped aside, whichever way the sweep ends: a consumer's destroy
    // waits for its broker threads.
    let reader = crate::kafka_client::Aside::new(Arc::new(reader), "the ledger audit's reader");
    let per_second = usize::try_from(shared.config.audit.records_per_second).unwrap_or(CHUNK);
    let chunk = per_second.clamp(1, CHUNK);
    let mut found = 0;
    for (topic, partition, from, end) in bounds {
        let first = ledger::first_offset(&shared.idem_pool, &shared.name, (&topic, partition), end).await?;
        let mut at = from.max(first);
        while at < end {
            let still_owned = owned.states().iter().any(|s| s.topic == topic && s.partition == partition);
            if *stop.borrow() || !still_owned {
                return Ok(None);
            }
            let started = Instant::now();
            let (r, s, t) = (Arc::clone(&reader), shared.clone(), topic.clone());
            let read = tokio::task::spawn_blocking(move || {
                crate::pipeline::window::read(&r, &s.validator, (&t, partition), (at, end), chunk)
            })
            .await
            .context("the audit's reader panicked")??;
            // A valid event's id, else the id an invalid record carries.
            let records: Vec<(i64, Option<uuid::Uuid>)> =
                read.records.iter().map(|(offset, id)| (*offset, id.map_or_else(|raw| raw, Some))).collect();
            let place = (topic.as_str(), partition);
            let missing = unaccounted_in(shared, place, &records, oldest_guarded).await?;
            shared.stats.audit_checked.fetch_add((records.len() - missing.len()) as u64, Relaxed);
            for (offset, id, why) in missing {
                found += 1;
                unaccounted(shared, reported, (&topic, partition, offset), id, why, found);
            }
            at = match (read.capped, read.records.last()) {
                (true, Some((last, _))) => last + 1,
                _ => end,
            };
            // Paced: this chunk's share of a second per `per_second` records.
            let share = Duration::from_secs_f64(records.len() as f64 / per_second as f64);
            tokio::time::sleep(share.saturating_sub(started.elapsed())).await;
        }
    }
    Ok(Some(found))
}

/// The records of `records` nothing accounts for, each with why. One that
/// seems so is looked at again once: the quarantine's runner and an
/// operator's dead-lettering move a record from one place to another
/// between the lookups of one chunk.
async fn unaccounted_in(
    shared: &HandlerContext,
    place: (&str, i32),
    records: &[(i64, Option<uuid::Uuid>)],
    oldest_guarded: Option<chrono::DateTime<chrono::Utc>>,
) -> anyhow::Result<Vec<(i64, Option<uuid::Uuid>, &'static str)>> {
    let (topic, partition) = place;
    let mut missing: Vec<(i64, Option<uuid::Uuid>)> = records.to_vec();
    let mut why = Vec::new();
    for _ in 0..2 {
        let facts = ledger::facts(&shared.idem_pool, &shared.name, place, &missing).await?;
        why.clear();
        for (offset, id) in &missing {
            if let Account::Unaccounted(reason) = ledger::account((topic, partition, *offset), *id, &facts, oldest_guarded) {
                why.push((*offset, *id, reason));
            }
        }
        missing = why.iter().map(|(offset, id, _)| (*offset, *id)).collect();
        if missing.is_empty() {
            break;
        }
    }
    Ok(why)
}

/// A record nothing accounts for: counted once per process, logged (the
/// first [`LOGGED`] of a sweep).
fn unaccounted(
    shared: &HandlerContext,
    reported: &mut HashSet<(String, i32, i64)>,
    (topic, partition, offset): (&str, i32, i64),
    id: Option<uuid::Uuid>,
    why: &str,
    nth: u64,
) {
    if reported.len() >= REMEMBERED {
        reported.clear();
    }
    if reported.insert((topic.to_owned(), partition, offset)) {
        shared.stats.audit_unaccounted.fetch_add(1, Relaxed);
    }
    if nth <= LOGGED {
        let event_id = id.map(|id| id.to_string()).unwrap_or_default();
        tracing::error!(
            handler = %shared.name, %topic, partition, offset, %event_id,
            "the ledger audit: a record below the committed offset is unaccounted: {why}"
        );
    }
}


/// Each partition's window: from its first record at or after `since_ms`
/// (`None`: its earliest) up to the group's committed offset; partitions
/// the group never committed are left out. Through a client of the
/// group's id that never joins it (nor commits: auto-commit off).
fn bounds(
    client: &ClientConfig,
    group: &str,
    partitions: &[(String, i32)],
    since_ms: Option<i64>,
) -> anyhow::Result<Vec<Bounds>> {
    let mut config = client.clone();
    config.set("group.id", group).set("enable.auto.commit", "false");
    let probe: BaseConsumer<ProbeContext> = crate::kafka_client::create(&config, ProbeContext::default(), "a Kafka client")?;
    let mut asked = TopicPartitionList::new();
    for (topic, partition) in partitions {
        asked.add_partition(topic, *partition);
    }
    let committed = probe.committed_offsets(asked, WAIT).context("failed to read the group's committed offsets")?;
    let mut out = Vec::new();
    for (topic, partition) in partitions {
        let Some(Offset::Offset(end)) = committed.find_partition(topic, *partition).map(|e| e.offset()) else {
            continue;
        };
        let from = match since_ms {
            Some(ms) => first_at(&probe, topic, *partition, ms)?.unwrap_or(end),
            None => probe.fetch_watermarks(topic, *partition, WAIT)?.0,
        };
        out.push((topic.clone(), *partition, from, end));
    }
    Ok(out)
}

/// The first offset of `topic`/`partition` whose record's time is at or
/// after `ms` (`None`: no such record).
fn first_at(probe: &BaseConsumer<ProbeContext>, topic: &str, partition: i32, ms: i64) -> anyhow::Result<Option<i64>> {
    let mut asked = TopicPartitionList::new();
    asked.add_partition_offset(topic, partition, Offset::Offset(ms))?;
    let found = probe.offsets_for_times(asked, WAIT).with_context(|| format!("failed to look {topic}/{partition} up by time"))?;
    Ok(match found.find_partition(topic, partition).map(|e| e.offset()) {
        Some(Offset::Offset(n)) => Some(n),
        _ => None,
    })
}
