//! `[handler.canary]`: when a host rolls a canary back by itself
//! (`modules::canary`, docs/canaries.md): how much worse than the active
//! version it may fail, or take, over how many executions of each.

use anyhow::bail;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerCanary {
    /// How much higher the canary's failure rate may be than the active
    /// version's, in points of a share (0.05: 5 points).
    #[serde(default = "default_failure_margin")]
    pub failure_margin: f64,
    /// How much longer the canary may take per execution on average than
    /// the active version, as a share of the active version's (0.5: half
    /// as long again); it is also rolled back only when it takes at least
    /// 2 ms more, so a fast handler's noise is no verdict.
    #[serde(default = "default_latency_margin")]
    pub latency_margin: f64,
    /// Executions of each version a host needs before it judges.
    #[serde(default = "default_min_events")]
    pub min_events: u64,
}

impl Default for HandlerCanary {
    fn default() -> Self {
        Self {
            failure_margin: default_failure_margin(),
            latency_margin: default_latency_margin(),
            min_events: default_min_events(),
        }
    }
}

fn default_failure_margin() -> f64 {
    0.05
}

fn default_latency_margin() -> f64 {
    0.5
}

fn default_min_events() -> u64 {
    20
}

/// `[handler.canary]`'s ranges.
pub(super) fn check(at: &str, canary: &HandlerCanary) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&canary.failure_margin) {
        bail!("{at}: canary.failure_margin = {} must be between 0 and 1 (0.05: 5 points)", canary.failure_margin);
    }
    if !(0.0..=100.0).contains(&canary.latency_margin) {
        bail!(
            "{at}: canary.latency_margin = {} must be between 0 and 100 (0.5: half as long again)",
            canary.latency_margin
        );
    }
    if !(1..=1_000_000).contains(&canary.min_events) {
        bail!("{at}: canary.min_events = {} must be between 1 and 1000000", canary.min_events);
    }
    Ok(())
}
