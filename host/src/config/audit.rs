//! `[handler.audit]`: the ledger audit (`pipeline/audit`), which
//! reconciles what the handler's group consumed with what took effect.
//! `every` after its last sweep ended, each host sweeps the partitions it owns, from the oldest
//! record the dedup retention still guards up to the group's committed
//! offset, and accounts for each record: applied (its event has a dedup
//! row), dead-lettered, parked in the quarantine, or older than the
//! retention. Anything else is unaccounted: a committed offset past an
//! unprocessed record, a dedup row deleted by hand.

use anyhow::bail;
use serde::Deserialize;

use super::Span;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerAudit {
    /// Whether the sweeps run (on by default).
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// The time from the end of one sweep to the start of the next.
    #[serde(default = "default_every")]
    pub every: Span,
    /// Records a host's sweep reads per second at most, over the
    /// handler's partitions: the audit's cost is bounded by it.
    #[serde(default = "default_records_per_second")]
    pub records_per_second: u32,
}

impl Default for HandlerAudit {
    fn default() -> Self {
        Self { enabled: default_enabled(), every: default_every(), records_per_second: default_records_per_second() }
    }
}

fn default_enabled() -> bool {
    true
}

fn default_every() -> Span {
    Span(std::time::Duration::from_secs(600))
}

fn default_records_per_second() -> u32 {
    5_000
}

/// `[handler.audit]`'s ranges.
pub(super) fn check(at: &str, audit: &HandlerAudit) -> anyhow::Result<()> {
    if audit.every.0 < std::time::Duration::from_secs(1) {
        bail!("{at}: audit.every = {} is shorter than a second", audit.every);
    }
    if !(100..=1_000_000).contains(&audit.records_per_second) {
        bail!("{at}: audit.records_per_second = {} must be between 100 and 1000000", audit.records_per_second);
    }
    Ok(())
}
