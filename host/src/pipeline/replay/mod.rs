//! `idem dlq list` and `idem dlq replay`: what a handler's dead-letter topic
//! holds, and re-running it through that handler only.
//!
//! Replay never writes into the source topic, which other consumer groups
//! (some without dedup) also read: this process reads the DLQ and runs each
//! record through the handler's own executor, claim and all. An event that
//! was processed meanwhile is a duplicate and skipped; one that fails again
//! goes back to the DLQ with `idem.replay.count` one higher (the older copy
//! stays: Kafka topics are append-only; the next replay runs only the
//! latest copy of each original record). An infrastructure failure stops the replay with
//! what it did so far. A record whose event is older than the handler's
//! dedup retention is left in the DLQ unless `--force`: its dedup row may be
//! gone, so "not a duplicate" would not mean "not processed".
//!
//! A DLQ topic is not trusted: anyone allowed to produce to it could write
//! a record there. Replay applies only records whose seal verifies (see
//! `dlq::seal`); the others are counted as unauthenticated and left alone,
//! and never supersede a sealed copy. Records written before seals existed
//! run only with `--trust-unsigned`, which says so.

mod desk;
mod page;
mod read;
mod reindex;

use anyhow::{Context as _, bail};
use rdkafka::message::{Headers as _, Message as _, OwnedMessage};
use serde::Serialize;

use super::PreparedHandler;
use super::dlq::seal::{Authenticity, Keys};
use super::dlq::{DeadLetters, Failure, headers};
use crate::config::{Config, HandlerConfig};
use crate::error::ErrorClass;
use crate::executor::Outcome;
use crate::modules::Slot;
use crate::validate::{Record, Validator};
pub use desk::{Desk, MAX_SELECTED, Selection};
pub use page::{Page, PageQuery};
pub use read::{authenticity, header, list, read};
pub(crate) use read::{small_reader, small_reader_with};
pub use reindex::reindex;

/// Which DLQ records a command looks at.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Failed at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Failed before this time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    pub limit: Option<usize>,
    /// Only records that failed with this class (`permanent`, …).
    pub class: Option<String>,
}

/// How `idem dlq replay` runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// Count what would be applied and skipped; execute nothing.
    pub dry_run: bool,
    /// Also run events older than the handler's dedup retention.
    pub force: bool,
    /// Also run records without a seal (dead-lettered before seals).
    pub trust_unsigned: bool,
}

/// What `idem dlq replay` did.
#[derive(Debug, Default, Serialize)]
pub struct ReplayReport {
    pub read: usize,
    pub applied: usize,
    pub duplicates: usize,
    pub failed_again: usize,
    /// Records left alone: another handler's, or without idem's headers.
    pub foreign: usize,
    /// Records left alone because their seal is missing (without
    /// `--trust-unsigned`) or does not verify: idem did not write them.
    pub unauthenticated: usize,
    /// Unsealed records run because of `--trust-unsigned`.
    pub trusted_unsigned: usize,
    /// Envelopes (records the DLQ refused as they were): nothing to run;
    /// the record may still be on the source topic at the offset named.
    pub envelopes: usize,
    /// Older copies of a record that failed again in an earlier replay:
    /// only the latest copy runs.
    pub superseded: usize,
    /// Records left alone because their event is older than the handler's
    /// dedup_retention (its dedup row may be gone): `--force` runs them.
    pub stale: usize,
    /// Records left alone because an operator discarded them
    /// (`idem dlq discard`): a restore makes them replayable again.
    pub discarded: usize,
    /// `--dry-run`: nothing executed; `applied` counts the records that
    /// would be, `duplicates` those already processed.
    pub dry_run: bool,
    /// What became of each record read, in the order read (the first
    /// [`MAX_OUTCOMES`]; the counts above cover them all).
    pub outcomes: Vec<RecordOutcome>,
    /// Why the replay stopped before its end (an outage of the database or
    /// the DLQ): what it did so far is above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Every record's outcome (not only the first [`MAX_OUTCOMES`]), for
    /// the dead-letter index.
    #[serde(skip)]
    marks: Vec<(i32, i64, &'static str)>,
}

/// Outcomes a report lists one by one; the counts go on past them.
pub const MAX_OUTCOMES: usize = 1000;

/// What a replay did with one DLQ record (at `partition`/`offset` of the
/// DLQ topic).
#[derive(Debug, Clone, Serialize)]
pub struct RecordOutcome {
    pub partition: i32,
    pub offset: i64,
    /// `applied` (a dry run: would be), `duplicate`, `failed_again`,
    /// `stale`, `discarded`, `unauthenticated`, `envelope`, `superseded`, `foreign`,
    /// `not_run` (the replay stopped at it: see `stopped`).
    pub outcome: &'static str,
    /// Why it failed again (guest text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ReplayReport {
    fn outcome(&mut self, message: &OwnedMessage, outcome: &'static str, reason: Option<String>) {
        self.marks.push((message.partition(), message.offset(), outcome));
        if self.outcomes.len() < MAX_OUTCOMES {
            let reason = reason.map(|r| crate::text::shown(&r, 500));
            self.outcomes.push(RecordOutcome {
                partition: message.partition(),
                offset: message.offset(),
                outcome,
                reason,
            });
        }
    }
}

/// What a replay runs records through: one handler's executor, validator
/// and DLQ, whether `idem dlq replay` prepared them or a running host's
/// pipeline holds them (the console).
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub config: &'a HandlerConfig,
    pub slot: &'a Slot,
    pub validator: &'a Validator,
    /// `None`: `on_failure = "block"`.
    pub dead_letters: Option<&'a DeadLetters>,
}

impl PreparedHandler {
    fn target(&self) -> Target<'_> {
        Target {
            config: &self.config,
            slot: &self.slot,
            validator: &self.validator,
            dead_letters: self.dead_letters.as_ref(),
        }
    }
}

/// The record as it was on the source topic: original position, key,
/// value and headers (idem's own removed, the source's names unescaped).
fn original(message: &OwnedMessage) -> anyhow::Result<Record> {
    let field = |name: &str| header(message, name).with_context(|| format!("DLQ record without header {name}"));
    let kept = message
        .headers()
        .map(|hs| {
            hs.iter()
                .filter(|h| !headers::is_idems(h.key))
                .map(|h| (headers::unescaped(h.key).to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Record {
        topic: field(headers::TOPIC)?,
        partition: field(headers::PARTITION)?.parse().context("bad idem.original.partition")?,
        offset: field(headers::OFFSET)?.parse().context("bad idem.original.offset")?,
        key: message.key().map(<[u8]>::to_vec),
        payload: message.payload().map(<[u8]>::to_vec),
        headers: kept,
        timestamp: header(message, headers::TIMESTAMP).and_then(|t| t.parse().ok()),
    })
}

fn replays_of(message: &OwnedMessage) -> u32 {
    header(message, headers::REPLAY_COUNT).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Which records run: those the seal (or `--trust-unsigned`) admits, and
/// of several copies of one original record only the latest — a sealed
/// copy always before an unsealed one, so no unsealed record supersedes a
/// record idem wrote. Counts what it leaves out in `report`.
fn admitted(keys: &Keys, records: &[OwnedMessage], trust_unsigned: bool, report: &mut ReplayReport) -> Vec<usize> {
    type Position = (String, String, String);
    let mut latest: std::collections::HashMap<Position, ((bool, u32), usize)> = Default::default();
    for (i, m) in records.iter().enumerate() {
        let sealed = match authenticity(keys, m) {
            Authenticity::Sealed => true,
            Authenticity::Unsealed if trust_unsigned => false,
            Authenticity::Unsealed | Authenticity::Forged => {
                report.unauthenticated += 1;
                report.outcome(m, "unauthenticated", None);
                continue;
            }
        };
        if sealed && header(m, headers::ENVELOPE).is_some() {
            report.envelopes += 1;
            report.outcome(m, "envelope", None);
            continue;
        }
        let position = (
            header(m, headers::TOPIC).unwrap_or_default(),
            header(m, headers::PARTITION).unwrap_or_default(),
            header(m, headers::OFFSET).unwrap_or_default(),
        );
        let rank = (sealed, replays_of(m));
        let best = latest.entry(position).or_insert((rank, i));
        if rank >= best.0 {
            *best = (rank, i);
        }
    }
    let mut chosen: Vec<(bool, usize)> = latest.into_values().map(|((sealed, _), i)| (sealed, i)).collect();
    chosen.sort_unstable_by_key(|(_, i)| *i);
    let admitted_count = records.len() - report.unauthenticated - report.envelopes;
    report.superseded = admitted_count - chosen.len();
    if report.superseded > 0 {
        let kept: std::collections::HashSet<usize> = chosen.iter().map(|(_, i)| *i).collect();
        for (i, m) in records.iter().enumerate() {
            let counted = report.outcomes.iter().any(|o| o.partition == m.partition() && o.offset == m.offset());
            if !kept.contains(&i) && !counted {
                report.outcome(m, "superseded", None);
            }
        }
    }
    report.trusted_unsigned = chosen.iter().filter(|(sealed, _)| !sealed).count();
    if report.trusted_unsigned > 0 {
        tracing::warn!(
            records = report.trusted_unsigned,
            "--trust-unsigned: running DLQ records without a seal; anyone who could produce to the topic could \
             have written them"
        );
    }
    chosen.into_iter().map(|(_, i)| i).collect()
}

/// `idem dlq replay`: runs every admitted record of `window` through `handler`.
pub async fn replay(
    config: &Config,
    handler: &PreparedHandler,
    idem_pool: &sqlx::PgPool,
    window: &Window,
    options: ReplayOptions,
) -> anyhow::Result<ReplayReport> {
    let keys = match &handler.dead_letters {
        Some(d) => d.keys().clone(),
        None => Keys::load(&config.dlq)?,
    };
    let records = read(config, &handler.config, window)?;
    let report = replay_each(handler.target(), &keys, idem_pool, &records, options).await?;
    if let Some(why) = &report.stopped {
        bail!(
            "replay stopped ({} applied, {} already processed, {} failed again before it): {why}",
            report.applied,
            report.duplicates,
            report.failed_again
        );
    }
    Ok(report)
}

/// Runs each admitted record of `records` (read from `target`'s DLQ)
/// through `target`: the one path of `idem dlq replay` and the console's.
pub(crate) async fn replay_each(
    target: Target<'_>,
    keys: &Keys,
    idem_pool: &sqlx::PgPool,
    records: &[OwnedMessage],
    options: ReplayOptions,
) -> anyhow::Result<ReplayReport> {
    let dead_letters = match (target.dead_letters, options.dry_run) {
        (Some(d), _) => Some(d),
        (None, true) => None,
        (None, false) => {
            bail!("handler `{}` has on_failure = \"block\": it has no DLQ to replay into", target.config.name)
        }
    };
    let (oldest_ms, newest_ms) = claim_bounds(idem_pool, &target.config.name).await?;
    let mut run = Replay {
        target,
        idem_pool,
        dead_letters,
        module: target.slot.executor().handler().sha256().to_owned(),
        oldest_ms,
        newest_ms,
        options,
        seen: Default::default(),
        report: ReplayReport { read: records.len(), dry_run: options.dry_run, ..ReplayReport::default() },
    };
    let topic = target.config.dlq_topic();
    let positions: Vec<(i32, i64)> = records.iter().map(|m| (m.partition(), m.offset())).collect();
    let discarded = super::dlq::index::discarded(idem_pool, &topic, &positions)
        .await
        .context("failed to read which dead letters were discarded")?;
    for i in admitted(keys, records, options.trust_unsigned, &mut run.report) {
        let m = &records[i];
        if discarded.contains(&(m.partition(), m.offset())) {
            run.report.discarded += 1;
            run.report.outcome(m, super::dlq::index::DISCARDED, None);
            continue;
        }
        run.record(m).await?;
        if run.report.stopped.is_some() {
            break;
        }
    }
    if !options.dry_run {
        // Each original marked with what became of it: the explorer shows
        // it beside the record. The replay itself is done: a failure here
        // only leaves the marks out.
        if let Err(e) = super::dlq::index::mark_outcomes(idem_pool, &topic, &run.report.marks).await {
            tracing::warn!(handler = %target.config.name, "the replay's outcomes are not in idem.dead_letter: {e}");
        }
    }
    Ok(run.report)
}

/// The oldest and the newest event creation times (ms since the epoch) the
/// claim accepts for `handler`: its dedup retention and future skew as the
/// database recorded them, on the database's clock.
async fn claim_bounds(idem_pool: &sqlx::PgPool, handler: &str) -> anyhow::Result<(i64, i64)> {
    sqlx::query_as(
        "SELECT floor(extract(epoch FROM now() - idem.retention_of($1)) * 1000)::bigint, \
                floor(extract(epoch FROM now() + coalesce((SELECT future_skew FROM idem.consumer_retention \
                    WHERE consumer = $1), interval '1 hour')) * 1000)::bigint",
    )
    .bind(handler)
    .fetch_one(idem_pool)
    .await
    .context("failed to read the handler's dedup retention")
}

/// One replay in progress.
struct Replay<'a> {
    target: Target<'a>,
    idem_pool: &'a sqlx::PgPool,
    /// Where records that fail again go (`None` only in a dry run).
    dead_letters: Option<&'a DeadLetters>,
    /// The active module's hash, for the DLQ's headers.
    module: String,
    oldest_ms: i64,
    newest_ms: i64,
    options: ReplayOptions,
    /// Copies of one event (dead-lettered from two offsets, say) run once
    /// per replay, even where no dedup row guards them (`--force` past a
    /// dropped window).
    seen: std::collections::HashSet<uuid::Uuid>,
    report: ReplayReport,
}

impl Replay<'_> {
    /// Runs (or, dry, judges) one admitted DLQ record.
    async fn record(&mut self, message: &OwnedMessage) -> anyhow::Result<()> {
        let name = self.target.config.name.as_str();
        // Only this handler's own dead letters; a record that is not one
        // (another handler's, or malformed) is counted and left alone.
        let record = match original(message) {
            Ok(record) if header(message, headers::HANDLER).as_deref() == Some(name) => record,
            Ok(_) | Err(_) => {
                self.report.foreign += 1;
                self.report.outcome(message, "foreign", None);
                return Ok(());
            }
        };
        let replays = replays_of(message) + 1;
        // A registry that does not answer stops the replay (its records stay in the DLQ).
        let event = match self.target.validator.check(&record).await? {
            Ok(event) => event,
            Err(invalid) => {
                let failure = Failure { class: ErrorClass::Invalid, reason: invalid.to_string(), attempts: 0, replays, version: None };
                return self.again(message, &record, &failure).await;
            }
        };
        let created_ms = event.created_at().map_or(i64::MIN, |t| t.timestamp_millis());
        if created_ms < self.oldest_ms && !self.options.force {
            self.report.stale += 1;
            self.report.outcome(message, "stale", None);
            return Ok(());
        }
        if !self.seen.insert(event.id) {
            self.report.duplicates += 1;
            self.report.outcome(message, "duplicate", None);
            return Ok(());
        }
        if self.options.dry_run {
            return self.judge(message, &event, created_ms).await;
        }
        let executor = self.target.slot.executor();
        let executor = if self.options.force { executor.forcing_stale() } else { executor };
        match executor.execute(&event, 1).await {
            Ok(Outcome::Processed) => {
                self.report.applied += 1;
                self.report.outcome(message, "applied", None);
            }
            Ok(Outcome::Duplicate) => {
                self.report.duplicates += 1;
                self.report.outcome(message, "duplicate", None);
            }
            Ok(Outcome::Skipped) => {
                self.report.stale += 1;
                self.report.outcome(message, "stale", None);
            }
            Err(e) if matches!(e.class(), ErrorClass::Unavailable | ErrorClass::Fatal) => {
                self.report.outcome(message, "not_run", Some(e.to_string()));
                self.report.stopped = Some(e.to_string());
            }
            Err(e) => {
                let failure = Failure { class: e.class(), reason: e.to_string(), attempts: 1, replays, version: None };
                self.again(message, &record, &failure).await?;
            }
        }
        Ok(())
    }

    /// A dry run answers what the replay would do with `event`.
    async fn judge(
        &mut self,
        message: &OwnedMessage,
        event: &crate::event::Event,
        created_ms: i64,
    ) -> anyhow::Result<()> {
        // An id further ahead than the future skew is refused by the claim,
        // whatever the policy, and fails again.
        if created_ms > self.newest_ms {
            self.report.failed_again += 1;
            self.report.outcome(
                message,
                "failed_again",
                Some("its event id is further ahead than the future skew".into()),
            );
            return Ok(());
        }
        let done: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM idem.processed_event WHERE event_id = $1 AND consumer = $2)",
        )
        .bind(event.id)
        .bind(&self.target.config.name)
        .fetch_one(self.idem_pool)
        .await
        .context("failed to look up processed events")?;
        if done {
            self.report.duplicates += 1;
            self.report.outcome(message, "duplicate", None);
        } else {
            self.report.applied += 1;
            self.report.outcome(message, "applied", None);
        }
        Ok(())
    }

    /// A record that failed again goes back to the DLQ, its replay count
    /// one up (a dry run only counts it).
    async fn again(&mut self, message: &OwnedMessage, record: &Record, failure: &Failure) -> anyhow::Result<()> {
        self.report.failed_again += 1;
        self.report.outcome(message, "failed_again", Some(format!("{}: {}", failure.class.as_str(), failure.reason)));
        match self.dead_letters {
            Some(dead_letters) if !self.options.dry_run => {
                let entry = send_again(dead_letters, &self.module, record, failure).await?;
                if let Err(e) = super::dlq::index::write(self.idem_pool, &entry).await {
                    tracing::warn!(dlq = %dead_letters.topic, "the dead letter is not in idem.dead_letter ({e}): `idem dlq reindex` adds it");
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Writes `record` to the DLQ again; too large for it now (idem's headers
/// grew), its envelope.
async fn send_again(
    dead_letters: &DeadLetters,
    module: &str,
    record: &Record,
    failure: &Failure,
) -> anyhow::Result<super::dlq::index::Entry> {
    match dead_letters.send(record, failure, module).await {
        Ok(entry) => Ok(entry),
        Err(super::dlq::Refusal::Record(why)) => {
            dead_letters.send_envelope(record, failure, module, &why).await.map_err(|e| anyhow::anyhow!("{e}"))
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}
