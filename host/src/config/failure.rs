//! `[handler.failure]`: what becomes of an event whose retries are spent
//! (`on_exhausted`), and how much the quarantine may hold.
//!
//! `on_exhausted = "quarantine"` parks the failing event's *key* instead of
//! dead-lettering the event: it and every later event of that key wait in
//! PostgreSQL, in order, while the partition's other keys flow, until an
//! operator releases the key (they run again, in order, each once) or
//! dead-letters it (see `pipeline/quarantine`). With it, a retryable
//! failure waits out its backoff parked as well, so nothing behind it in
//! its lane waits. It needs an order by key (`ordering = "key"`, or
//! `"none"`, which promises none) and a dead-letter topic (`[handler.retry]
//! on_failure = "dlq"`): a failure that retrying cannot mend (permanent,
//! invalid) and a record without a key still go there.

use anyhow::bail;
use serde::Deserialize;

use super::{OnFailure, Ordering};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerFailure {
    /// `"dlq"` (default) or `"quarantine"`.
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// Events the handler's quarantine holds at most, over all its keys.
    /// At the cap, an event that would be parked goes to the dead-letter
    /// topic instead (as under `on_exhausted = "dlq"`), with a reason
    /// saying so, and `idem_quarantine_overflow_total` counts it: nothing
    /// is lost, and the database does not grow without bound.
    #[serde(default = "default_max_parked")]
    pub max_parked: u64,
}

impl Default for HandlerFailure {
    fn default() -> Self {
        Self { on_exhausted: OnExhausted::default(), max_parked: default_max_parked() }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExhausted {
    /// The event goes to the dead-letter topic; its key's later events go on.
    #[default]
    Dlq,
    /// The event's key is parked until an operator acts.
    Quarantine,
}

fn default_max_parked() -> u64 {
    100_000
}

/// `[handler.failure]` against the rest of the handler's keys.
pub(super) fn check(
    at: &str,
    failure: &HandlerFailure,
    ordering: Ordering,
    on_failure: OnFailure,
) -> anyhow::Result<()> {
    if failure.on_exhausted != OnExhausted::Quarantine {
        return Ok(());
    }
    if ordering == Ordering::Partition {
        bail!(
            "{at}: failure.on_exhausted = \"quarantine\" parks one key while the others flow, which ordering = \
             \"partition\" forbids: set ordering = \"key\""
        );
    }
    if on_failure != OnFailure::Dlq {
        bail!(
            "{at}: failure.on_exhausted = \"quarantine\" needs retry.on_failure = \"dlq\" (records without a key and \
             failures retrying cannot mend go to the dead-letter topic)"
        );
    }
    if !(1..=10_000_000).contains(&failure.max_parked) {
        bail!("{at}: failure.max_parked = {} must be between 1 and 10000000", failure.max_parked);
    }
    Ok(())
}
