//! Counters per handler: what the pipeline did with every record. Nothing is
//! dropped without being counted here and logged.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

#[derive(Debug, Default)]
pub struct Stats {
    pub delivered: AtomicU64,
    pub processed: AtomicU64,
    pub duplicates: AtomicU64,
    pub invalid: AtomicU64,
    pub failed: AtomicU64,
    pub retries: AtomicU64,
    pub unavailable: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub blocked: AtomicU64,
    pub offset_resets: AtomicU64,
    pub pauses: AtomicU64,
    pub rebalances: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn report(&self, handler: &str) -> HandlerReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HandlerReport {
            handler: handler.to_owned(),
            delivered: get(&self.delivered),
            processed: get(&self.processed),
            duplicates: get(&self.duplicates),
            invalid: get(&self.invalid),
            failed: get(&self.failed),
            retries: get(&self.retries),
            unavailable: get(&self.unavailable),
            dead_lettered: get(&self.dead_lettered),
            blocked: get(&self.blocked),
            offset_resets: get(&self.offset_resets),
            pauses: get(&self.pauses),
            rebalances: get(&self.rebalances),
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
}
