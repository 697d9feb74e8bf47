//! Shadow runs: a stored version that runs beside the active one on the
//! same live events, so that a change is seen on real traffic before it is
//! made active (`idem deploy --shadow`, docs/deploys.md).
//!
//! A shadowed event runs on both versions, one after the other, in one
//! transaction of the handler's own role that is always rolled back, each
//! under a savepoint rolled back after it: both see the state the live run
//! sees, and nothing they do remains. Requests are recorded, never sent
//! (`capabilities::http`, `recording`); emits are kept, never written;
//! nothing is claimed. The two runs are compared ([`compare`]): outcome,
//! statements with their values, rows written per table, requests, emits.
//! Each host counts what it shadowed per event type in the database
//! ([`report`]), with the first differing events and both sides.
//!
//! The active version pays at most its share: a shadow run goes before the
//! live batch of the same events, holding one of the handler's execution
//! permits like any execution (none free: the host is behind, and the
//! events are skipped, counted), at most [`MAX_PER_BATCH`] events of a
//! batch, [`EVENTS_PER_SECOND`] a second on each host and `run::BUDGET` of
//! time (both versions, every event); the rest are skipped, counted. Its
//! report is written beside the live work, never before it.

mod compare;
pub mod report;
mod run;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::Semaphore;

use crate::event::Event;
use crate::executor::Executor;

/// Events a handler's shadow runs per second on one host, at most.
pub const EVENTS_PER_SECOND: f64 = 50.0;

/// Events of one batch shadowed at most (the live batch waits for them).
const MAX_PER_BATCH: usize = 20;

/// Event types a host counts skips of between two writes (the rest as
/// `(other)`: types come from payloads).
const MAX_TYPES: usize = 100;

/// How often skips are written when nothing was shadowed.
const FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// A handler's shadow version on this host.
pub struct Shadow {
    version: i32,
    sha256: String,
    /// The shadow version, rehearsing (`Executor::rehearsing`).
    executor: Executor,
    /// Tokens for [`EVENTS_PER_SECOND`]: how many, and when last filled.
    tokens: Mutex<(f64, Instant)>,
    /// Events not shadowed since the last write, per type.
    skipped: Mutex<BTreeMap<String, i64>>,
    /// When this host last wrote to the report.
    written: Mutex<Instant>,
}

impl std::fmt::Debug for Shadow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shadow").field("version", &self.version).finish_non_exhaustive()
    }
}

impl Shadow {
    /// `executor` runs the shadow version (`version`, whose bytes hash to
    /// `sha256`) on the handler's own pool.
    pub fn new(version: i32, sha256: String, executor: &Executor) -> Self {
        Self {
            version,
            sha256,
            executor: executor.rehearsing(),
            tokens: Mutex::new((EVENTS_PER_SECOND, Instant::now())),
            skipped: Mutex::default(),
            written: Mutex::new(Instant::now()),
        }
    }

    pub fn version(&self) -> i32 {
        self.version
    }

    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Shadows what it can of `events`, which `active` is about to run:
    /// as many as the rate allows, if one of the handler's `permits` (its
    /// executions at once) is free; the others are counted as skipped. Returns once the report is written.
    pub async fn offer(&self, active: &Executor, events: &[Event], permits: &Semaphore, idem: &sqlx::PgPool) {
        let mut tally = run::Tally::default();
        let n = self.take(events.len().min(MAX_PER_BATCH));
        let (shadowed, rest) = events.split_at(n);
        self.skip(rest);
        match permits.try_acquire() {
            Ok(_permit) if !shadowed.is_empty() => {
                tally = run::run(&active.rehearsing(), &self.executor, shadowed).await;
            }
            _ => self.skip(shadowed),
        }
        // Skips alone are written every few seconds, not per batch.
        let due = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner).elapsed() >= FLUSH;
        if tally.is_empty() && !due {
            return;
        }
        *self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        let skipped = std::mem::take(&mut *self.skipped.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        tally.add_skipped(skipped);
        if tally.is_empty() {
            return;
        }
        // Written beside the live work, never before it.
        let name = active.handler().settings().name.clone();
        let at = report::Versions { shadow: self.version, active: active.handler().version().unwrap_or(0) };
        let idem = idem.clone();
        tokio::spawn(async move {
            if let Err(e) = report::write(&idem, &name, at, &tally).await {
                tracing::warn!(handler = %name, version = at.shadow, "cannot write the shadow report: {e}");
            }
        });
    }

    /// Takes up to `wanted` tokens; how many it got.
    fn take(&self, wanted: usize) -> usize {
        let mut tokens = self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (had, since) = *tokens;
        let now = Instant::now();
        let filled = (had + since.elapsed().as_secs_f64() * EVENTS_PER_SECOND).min(EVENTS_PER_SECOND);
        let got = (filled.floor() as usize).min(wanted);
        *tokens = (filled - got as f64, now);
        got
    }

    /// Counts `events` as not shadowed.
    fn skip(&self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let mut skipped = self.skipped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for event in events {
            let kind = run::type_name(&event.event_type);
            let kind =
                if skipped.len() < MAX_TYPES || skipped.contains_key(&kind) { kind } else { run::OTHER.to_owned() };
            *skipped.entry(kind).or_default() += 1;
        }
    }
}
