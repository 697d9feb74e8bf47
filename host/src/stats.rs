//! Counters per handler: what the pipeline did with every record. Nothing is
//! dropped without being counted here and logged.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::error::ErrorClass;
use crate::histogram::{self, Histogram};

#[derive(Debug)]
pub struct Stats {
    pub delivered: AtomicU64,
    pub processed: AtomicU64,
    pub duplicates: AtomicU64,
    pub skipped: AtomicU64,
    pub invalid: AtomicU64,
    pub failed: AtomicU64,
    pub retries: AtomicU64,
    pub unavailable: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Of them, envelopes (the DLQ refused the record as it was).
    pub enveloped: AtomicU64,
    /// Times the DLQ topic refused even an envelope (gone, not authorised).
    pub dlq_refused: AtomicU64,
    pub blocked: AtomicU64,
    pub offset_resets: AtomicU64,
    pub pauses: AtomicU64,
    pub rebalances: AtomicU64,
    pub transactions: AtomicU64,
    pub batch_splits: AtomicU64,
    /// Records parked in the quarantine (`pipeline::quarantine`).
    pub parked: AtomicU64,
    /// Parked events that ran (or were dead-lettered) and left it.
    pub unparked: AtomicU64,
    /// Events dead-lettered because the quarantine was full.
    pub quarantine_overflow: AtomicU64,
    /// The quarantine now, as the handler's runner last counted it: keys,
    /// events, and the age of the oldest in seconds.
    pub quarantine_keys: AtomicU64,
    pub quarantine_events: AtomicU64,
    pub quarantine_oldest_seconds: AtomicU64,
    /// The ledger audit (`pipeline::audit`): records accounted for, records
    /// found unaccounted (each once per process), and when the last sweep
    /// that found nothing ended (Unix seconds; 0: none yet).
    pub audit_checked: AtomicU64,
    pub audit_unaccounted: AtomicU64,
    pub audit_clean_at: AtomicU64,
    /// Rows the handler emitted that its last sweep found unpublished 10
    /// minutes after their commit (pending or failed).
    pub audit_unpublished: AtomicU64,
    /// Lanes waiting now for the schema registry to answer (their records'
    /// writer schemas unfetched): `/readyz` names the handler while any do.
    pub registry_waiting: AtomicU64,
    /// Offset commits the broker confirmed.
    pub commits_confirmed: AtomicU64,
    /// Offset commits the broker answered with a failure.
    pub commits_failed: AtomicU64,
    /// Final failures by class (`failed` counts them all).
    failed_by_class: [AtomicU64; 6],
    /// Seconds from a record's timestamp to its resolution (its
    /// transaction's commit, or its DLQ acknowledgement).
    pub latency: Histogram,
    /// Seconds one handler invocation took (guest code and its calls).
    pub execution: Histogram,
    /// Seconds from BEGIN to COMMIT of a transaction that committed.
    pub transaction: Histogram,
    /// Events per committed transaction.
    pub batch_size: Histogram,
    /// Statements guests ran.
    pub db_statements: AtomicU64,
    /// Events that trapped on an instance kept from earlier events, and ran
    /// again on a fresh one (`runtime::warm`).
    pub kept_traps: AtomicU64,
    /// HTTP requests guests sent, by host and status class (`2xx`, …,
    /// `error` when no response came).
    http: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Requests re-sent by the host, by host and reason.
    http_retries: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Milliseconds from each resolved record's timestamp to its resolution,
    /// for the report's percentiles.
    latencies: Mutex<Vec<u32>>,
    resolved_count: AtomicU64,
    /// The latest final failures, newest last (the console's list).
    recent: Mutex<std::collections::VecDeque<FailureNote>>,
    /// The handler's incidents (`pipeline::incident`).
    pub incidents: Incidents,
}

/// Why a handler's pipeline had to be made again: each is that handler's
/// incident only (see `pipeline::incident`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncidentKind {
    /// Its consumer was fenced: a member joined its group with its
    /// `group.instance.id` (another host, a client that took the id, or
    /// its own earlier session after a broker outage).
    Fenced,
    /// Its consumer failed for good for another reason.
    ConsumerFailed,
    /// A partition worker panicked.
    WorkerPanicked,
    /// idem's own tables refused the handler (a revoked grant, a dropped table).
    LedgerRefused,
    /// Its consumer showed no sign of being in its group for a minute while
    /// a broker answered (`pipeline::stall`): librdkafka can wait for a
    /// group coordinator for good after a broker restart.
    ConsumerStalled,
}

impl IncidentKind {
    pub const ALL: [Self; 5] =
        [Self::Fenced, Self::ConsumerFailed, Self::WorkerPanicked, Self::LedgerRefused, Self::ConsumerStalled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fenced => "fenced",
            Self::ConsumerFailed => "consumer_failed",
            Self::WorkerPanicked => "worker_panicked",
            Self::LedgerRefused => "ledger_refused",
            Self::ConsumerStalled => "consumer_stalled",
        }
    }
}

/// A handler's incidents: how many of each kind, and the one under way
/// (from its start until the consumer made again has joined its group).
#[derive(Debug, Default)]
pub struct Incidents {
    /// One count per kind, in [`IncidentKind::ALL`]'s order.
    total: [AtomicU64; IncidentKind::ALL.len()],
    current: Mutex<Option<IncidentKind>>,
}

impl Incidents {
    pub fn began(&self, kind: IncidentKind) {
        if let Some(i) = IncidentKind::ALL.iter().position(|k| *k == kind) {
            Stats::add(&self.total[i]);
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(kind);
    }

    pub fn ended(&self) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    pub fn current(&self) -> Option<IncidentKind> {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Each kind with its count.
    pub fn totals(&self) -> impl Iterator<Item = (IncidentKind, u64)> + '_ {
        IncidentKind::ALL.into_iter().zip(self.total.iter().map(|n| n.load(Ordering::Relaxed)))
    }
}

/// One final failure as the console lists it: where, when, class, reason
/// (guest text, cut to [`NOTE_REASON_CHARS`]; the console shows it as text).
#[derive(Debug, Clone, Serialize)]
pub struct FailureNote {
    pub at: chrono::DateTime<chrono::Utc>,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub class: &'static str,
    pub reason: String,
    pub attempts: u32,
}

/// Final failures kept per handler for the console.
const RECENT_FAILURES: usize = 50;
/// Characters of a failure's reason kept in a [`FailureNote`].
const NOTE_REASON_CHARS: usize = 500;

impl Default for Stats {
    fn default() -> Self {
        Self {
            delivered: AtomicU64::default(),
            processed: AtomicU64::default(),
            duplicates: AtomicU64::default(),
            skipped: AtomicU64::default(),
            invalid: AtomicU64::default(),
            failed: AtomicU64::default(),
            retries: AtomicU64::default(),
            unavailable: AtomicU64::default(),
            dead_lettered: AtomicU64::default(),
            enveloped: AtomicU64::default(),
            dlq_refused: AtomicU64::default(),
            blocked: AtomicU64::default(),
            offset_resets: AtomicU64::default(),
            pauses: AtomicU64::default(),
            rebalances: AtomicU64::default(),
            transactions: AtomicU64::default(),
            batch_splits: AtomicU64::default(),
            parked: AtomicU64::default(),
            unparked: AtomicU64::default(),
            quarantine_overflow: AtomicU64::default(),
            quarantine_keys: AtomicU64::default(),
            quarantine_events: AtomicU64::default(),
            quarantine_oldest_seconds: AtomicU64::default(),
            audit_checked: AtomicU64::default(),
            audit_unaccounted: AtomicU64::default(),
            audit_clean_at: AtomicU64::default(),
            audit_unpublished: AtomicU64::default(),
            registry_waiting: AtomicU64::new(0),
            commits_confirmed: AtomicU64::default(),
            commits_failed: AtomicU64::default(),
            failed_by_class: Default::default(),
            latency: Histogram::new(histogram::SECONDS),
            execution: Histogram::new(histogram::SECONDS),
            transaction: Histogram::new(histogram::SECONDS),
            batch_size: Histogram::new(histogram::EVENTS),
            db_statements: AtomicU64::default(),
            kept_traps: AtomicU64::default(),
            http: Mutex::default(),
            http_retries: Mutex::default(),
            latencies: Mutex::default(),
            resolved_count: AtomicU64::default(),
            recent: Mutex::default(),
            incidents: Incidents::default(),
        }
    }
}

/// Every class a final failure may have, in the order `failed_by_class` keeps them.
pub const CLASSES: [ErrorClass; 6] = [
    ErrorClass::Invalid,
    ErrorClass::Permanent,
    ErrorClass::Retryable,
    ErrorClass::Unavailable,
    ErrorClass::Conflicting,
    ErrorClass::Fatal,
];

/// Latencies kept for the report's percentiles (4 MiB at most); past that
/// each new one replaces the oldest, so the report describes the latest.
const MAX_LATENCIES: usize = 1 << 20;

impl Stats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A final failure of `class` (counted in `failed` too).
    pub fn failed(&self, class: ErrorClass) {
        Self::add(&self.failed);
        if let Some(i) = CLASSES.iter().position(|c| *c == class) {
            Self::add(&self.failed_by_class[i]);
        }
    }

    /// Keeps `note` among the latest [`RECENT_FAILURES`] final failures.
    pub fn note_failure(&self, mut note: FailureNote) {
        if note.reason.chars().count() > NOTE_REASON_CHARS {
            note.reason = note.reason.chars().take(NOTE_REASON_CHARS).chain(std::iter::once('…')).collect();
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT_FAILURES {
            recent.pop_front();
        }
        recent.push_back(note);
    }

    /// The latest final failures, newest first.
    pub fn recent_failures(&self) -> Vec<FailureNote> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner()).iter().rev().cloned().collect()
    }

    /// Final failures per class.
    pub fn failures(&self) -> Vec<(ErrorClass, u64)> {
        CLASSES.iter().zip(&self.failed_by_class).map(|(c, n)| (*c, n.load(Ordering::Relaxed))).collect()
    }

    /// An HTTP request a guest sent to `host`; `status` `None`: no response.
    pub fn http_request(&self, host: &str, status: Option<u16>) {
        let class = match status {
            Some(100..=199) => "1xx",
            Some(200..=299) => "2xx",
            Some(300..=399) => "3xx",
            Some(400..=499) => "4xx",
            Some(_) => "5xx",
            None => "error",
        };
        let mut http = self.http.lock().unwrap_or_else(|e| e.into_inner());
        *http.entry((host.to_owned(), class)).or_default() += 1;
    }

    /// A request to `host` the host re-sent after a transient failure.
    pub fn http_retry(&self, host: &str, reason: &'static str) {
        let mut retries = self.http_retries.lock().unwrap_or_else(|e| e.into_inner());
        *retries.entry((host.to_owned(), reason)).or_default() += 1;
    }

    /// Re-sends per (host, reason).
    pub fn http_retries(&self) -> Vec<((String, &'static str), u64)> {
        self.http_retries.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Requests per (host, status class).
    pub fn http_requests(&self) -> Vec<((String, &'static str), u64)> {
        self.http.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Records that the record with `timestamp` (ms since the epoch) was
    /// resolved now.
    pub fn resolved(&self, timestamp: Option<i64>) {
        let Some(timestamp) = timestamp else { return };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let latency = (now.as_millis() as i64 - timestamp).clamp(0, i64::from(u32::MAX)) as u32;
        self.latency.observe(f64::from(latency) / 1e3);
        let n = self.resolved_count.fetch_add(1, Ordering::Relaxed) as usize;
        let mut latencies = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        if latencies.len() < MAX_LATENCIES {
            latencies.push(latency);
        } else {
            latencies[n % MAX_LATENCIES] = latency;
        }
    }

    fn percentile(sorted: &[u32], p: f64) -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
        u64::from(sorted[rank - 1])
    }

    pub fn report(&self, handler: &str) -> HandlerReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut latencies = self.latencies.lock().unwrap_or_else(|e| e.into_inner()).clone();
        latencies.sort_unstable();
        HandlerReport {
            handler: handler.to_owned(),
            delivered: get(&self.delivered),
            processed: get(&self.processed),
            duplicates: get(&self.duplicates),
            skipped: get(&self.skipped),
            invalid: get(&self.invalid),
            failed: get(&self.failed),
            retries: get(&self.retries),
            unavailable: get(&self.unavailable),
            dead_lettered: get(&self.dead_lettered),
            http_retries: self.http_retries().iter().map(|(_, n)| n).sum(),
            enveloped: get(&self.enveloped),
            dlq_refused: get(&self.dlq_refused),
            blocked: get(&self.blocked),
            offset_resets: get(&self.offset_resets),
            pauses: get(&self.pauses),
            rebalances: get(&self.rebalances),
            transactions: get(&self.transactions),
            batch_splits: get(&self.batch_splits),
            audit_checked: get(&self.audit_checked),
            latency_p50_ms: Self::percentile(&latencies, 0.50),
            latency_p99_ms: Self::percentile(&latencies, 0.99),
        }
    }
}

/// A handler's counters at one moment; `idem run` prints them as JSON at exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HandlerReport {
    pub handler: String,
    /// Records handed to the handler's partition workers.
    pub delivered: u64,
    /// Events whose effect committed.
    pub processed: u64,
    /// Events skipped because this handler had already processed their id.
    pub duplicates: u64,
    /// Events older than the dedup retention (or too far in the future)
    /// skipped under `stale_events = "skip"`.
    #[serde(default)]
    pub skipped: u64,
    /// Records that failed validation (dead-lettered, or blocking).
    pub invalid: u64,
    /// Events whose failure is final: permanent, out of attempts, or an
    /// event id reused with another payload (dead-lettered, or blocking).
    pub failed: u64,
    /// Executions repeated after a retryable failure (each spent an attempt).
    pub retries: u64,
    /// Retries because the infrastructure failed (database, DLQ): no
    /// attempt spent.
    #[serde(default)]
    pub unavailable: u64,
    /// Records written to the dead-letter topic (invalid and failed).
    #[serde(default)]
    pub dead_lettered: u64,
    /// HTTP requests the host re-sent after a transient failure (no
    /// attempt spent: the event never failed).
    #[serde(default)]
    pub http_retries: u64,
    /// Of them, envelopes: the DLQ refused the record as it was (too
    /// large with idem's headers, say), so it holds a bounded description.
    #[serde(default)]
    pub enveloped: u64,
    /// Times the DLQ topic refused even an envelope (it is gone, or idem
    /// may not write to it): its partition waits for an operator.
    #[serde(default)]
    pub dlq_refused: u64,
    /// Partitions stopped at a failed record (`on_failure = "block"`).
    #[serde(default)]
    pub blocked: u64,
    /// Partitions that resumed somewhere other than their committed offset
    /// (a new group starting at `auto.offset.reset` is not one).
    pub offset_resets: u64,
    /// Times a partition was paused because its queue was full (backpressure).
    #[serde(default)]
    pub pauses: u64,
    pub rebalances: u64,
    /// Transactions that committed events (a batch is one).
    #[serde(default)]
    pub transactions: u64,
    /// Batches rolled back because one of their events failed (the events
    /// before it ran again, it alone went through the failure path).
    #[serde(default)]
    pub batch_splits: u64,
    /// Records the ledger audit accounted for (`pipeline::audit`).
    #[serde(default)]
    pub audit_checked: u64,
    /// Median and 99th percentile of the time from a record's timestamp
    /// (its producer's clock) to its resolution, in milliseconds.
    #[serde(default)]
    pub latency_p50_ms: u64,
    #[serde(default)]
    pub latency_p99_ms: u64,
}

/// What a scrape reads of a producer's outbox relay on this host.
#[derive(Debug, Default)]
pub struct RelayStats {
    pub published: AtomicU64,
    pub failed: AtomicU64,
    /// Rows not yet published nor failed, as last counted.
    pub pending: AtomicU64,
    /// The age of the oldest of them, in milliseconds.
    pub oldest_ms: AtomicU64,
    /// Whether this host holds the producer's lease.
    pub holding: std::sync::atomic::AtomicBool,
}

/// Events resolved per module version since the process started.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct VersionCounts {
    pub processed: u64,
    pub duplicates: u64,
    pub failed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_incident_is_counted_under_its_own_name() {
        // A kind added without its counter once panicked the host.
        let incidents = Incidents::default();
        for kind in IncidentKind::ALL {
            incidents.began(kind);
            assert_eq!(incidents.current(), Some(kind));
        }
        let totals: Vec<(IncidentKind, u64)> = incidents.totals().collect();
        assert_eq!(totals, IncidentKind::ALL.iter().map(|k| (*k, 1)).collect::<Vec<_>>());
    }
}
