//! Canaries: a stored version that runs a stable share of a handler's keys
//! while the rest stay on the active version (`idem deploy --canary 10%`,
//! docs/canaries.md). A key's share is fixed by a hash of the key (of the
//! event id for an event without one), the same on every host, so a key
//! never moves between versions while the canary lasts, and its events
//! keep their order.
//!
//! Each host compares the two versions on the events it ran since it
//! loaded the canary ([`Slot::judge_canary`]): their failure rates, and
//! their mean time per execution. When the canary's is worse by more than
//! `[handler.canary]` allows (`failure_margin`, `latency_margin`) over at
//! least `min_events` executions of each, the host rolls it back
//! (`canaries::end`, under the module gate) and says why in the log and in
//! `idem.canary_verdict`. Claims of the canary's version are refused from
//! then on (ID001): its events in flight run again on the active version.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use sqlx::PgPool;

use super::{Failed, RETRY_FAILED, Slot, UploadError, VersionCounts, canaries};
use crate::event::Event;
use crate::executor::Executor;
use crate::runtime::Handler;

/// The least more time per execution that rolls a canary back, whatever
/// the ratio: a fast handler's noise is no verdict.
const LATENCY_FLOOR_MS: f64 = 2.0;

/// Successful executions of each version a mean time needs at least (or
/// `min_events`, if more): one slow call among 20 would decide it.
const LATENCY_MIN_RUNS: u64 = 50;

/// A handler's canary on this host.
pub struct Canary {
    version: i32,
    sha256: String,
    percent: u8,
    executor: Executor,
    /// Every version's counts when this host loaded it: the judgement is
    /// on what ran after.
    baseline: BTreeMap<i32, VersionCounts>,
    /// The active version's invocations and their time then.
    active_tally: (u64, u64),
}

impl Canary {
    pub fn version(&self) -> i32 {
        self.version
    }

    pub fn percent(&self) -> u8 {
        self.percent
    }

    /// Whether `event` is the canary's: its key's (else its id's) bucket,
    /// one of 100, is under the canary's share.
    pub fn takes(&self, event: &Event) -> bool {
        bucket(event.key.as_deref().unwrap_or(event.id.as_bytes())) < self.percent
    }
}

/// `key`'s bucket, 0 to 99: the first 8 bytes of its SHA-256, modulo 100
/// (the same on every host and every release).
pub fn bucket(key: &[u8]) -> u8 {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(key);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u8::try_from(u64::from_be_bytes(first) % 100).unwrap_or(0)
}

impl Slot {
    /// The canary this host runs, if any.
    pub fn canary(&self) -> Option<Arc<Canary>> {
        self.canary.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Whether `event` runs on the canary.
    pub fn on_canary(&self, event: &Event) -> bool {
        self.canary().is_some_and(|c| c.takes(event))
    }

    /// The executor for events on the canary (`canary`) or the active
    /// version: the active one when the canary has ended meanwhile.
    pub fn executor_on(&self, canary: bool) -> Executor {
        match self.canary() {
            Some(c) if canary => c.executor.clone(),
            _ => self.executor(),
        }
    }

    /// The executor `event` runs on.
    pub fn executor_for(&self, event: &Event) -> Executor {
        self.executor_on(self.on_canary(event))
    }

    /// Runs `handler` (validated, with its store version) on `percent` of
    /// the keys from the next batch on.
    pub fn install_canary(&self, handler: &Handler, percent: u8) {
        let Some(version) = handler.version() else { return };
        self.remember(handler);
        let executor = self.executor().with_handler(handler.clone());
        let (baseline, active_tally) = (self.counts(), self.executor().tally().read());
        let sha256 = handler.sha256().to_owned();
        let canary = Canary { version, sha256, percent, executor, baseline, active_tally };
        *self.canary.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(canary));
        tracing::info!(handler = %self.name, version, percent, "canary running on {percent}% of the keys");
    }

    /// No canary from the next batch on.
    pub fn end_canary(&self) {
        if let Some(was) = self.canary.write().unwrap_or_else(PoisonError::into_inner).take() {
            tracing::info!(handler = %self.name, version = was.version, "canary ended");
        }
    }

    /// Follows the store's canary row: loads and checks a new canary,
    /// drops one the store no longer names.
    pub async fn refresh_canary(&self, pool: &PgPool) -> anyhow::Result<()> {
        if self.executor().handler().is_native() {
            return Ok(());
        }
        // One at a time: every lane refused at its claim after a rollback
        // asks at once, and one compilation of a new canary is enough.
        let _one = self.canary_refresh.lock().await;
        let Some(row) = canaries::canary(pool, &self.name).await? else {
            self.end_canary();
            return Ok(());
        };
        let percent = u8::try_from(row.percent).unwrap_or(0);
        let running = self.canary();
        if running.as_ref().is_some_and(|c| c.version == row.version && c.sha256 == row.sha256 && c.percent == percent) {
            return Ok(());
        }
        let failed = self.canary_failed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if failed.is_some_and(|f| f.version == row.version && f.sha256 == row.sha256 && f.at.elapsed() < RETRY_FAILED) {
            return Ok(());
        }
        let Some(bytes) = canaries::bytes(pool, &self.name, row.version).await? else { return Ok(()) };
        match self.validate(&bytes, &format!("{} canary version {}", self.name, row.version)).await {
            Ok(handler) => {
                self.install_canary(&handler.with_version(row.version), percent);
                Ok(())
            }
            Err(e @ UploadError::Unavailable(_)) => Err(e.into()),
            Err(e) => {
                // It cannot run here: its share stays on the active version
                // on this host (claims name what ran).
                let reason = e.to_string();
                tracing::error!(handler = %self.name, version = row.version, "the canary cannot run on this host: {reason}");
                self.end_canary();
                let (version, sha256, at) = (row.version, row.sha256, std::time::Instant::now());
                *self.canary_failed.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(Failed { version, sha256, reason, at });
                Err(e.into())
            }
        }
    }

    /// Rolls the canary back if it fails more, or takes longer, than the
    /// active version on this host: `Some(why)` when it did.
    pub async fn judge_canary(&self, pool: &PgPool) -> anyhow::Result<Option<String>> {
        let (Some(canary), Some(active)) = (self.canary(), self.version()) else { return Ok(None) };
        let now = self.counts();
        let since = |v: i32| -> (u64, u64) {
            let (n, b) = (now.get(&v).copied().unwrap_or_default(), canary.baseline.get(&v).copied().unwrap_or_default());
            (n.processed.saturating_sub(b.processed) + n.duplicates.saturating_sub(b.duplicates), n.failed.saturating_sub(b.failed))
        };
        let (runs, micros) = self.executor().tally().read();
        let (was_runs, was_micros) = canary.active_tally;
        let active_time = (runs.saturating_sub(was_runs), micros.saturating_sub(was_micros));
        let settings = self.executor().handler().settings().clone();
        // Events of a batch run side by side share its transaction: one's
        // time includes waiting for another's statements, which says
        // nothing of its version. Latency is judged where they run alone.
        let timed = |t: (u64, u64)| if settings.max_concurrent > 1 { (0, 0) } else { t };
        let sides = (
            Side { counts: since(canary.version), time: timed(canary.executor.tally().read()) },
            Side { counts: since(active), time: timed(active_time) },
        );
        let rule = settings.canary;
        let Some(why) = verdict(&rule, sides.0, sides.1) else { return Ok(None) };
        let why = format!("version {} {why} than version {active} on this host", canary.version);
        let by = "idem (automatic rollback)";
        if canaries::end(pool, &self.name, canary.version, "rolled back", &why, by).await? {
            tracing::warn!(handler = %self.name, version = canary.version, "canary rolled back: {why}");
        }
        self.end_canary();
        Ok(Some(why))
    }
}

/// What one version came to on this host since the canary loaded:
/// (succeeded, failed) executions, and (invocations, microseconds).
#[derive(Debug, Clone, Copy)]
struct Side {
    counts: (u64, u64),
    time: (u64, u64),
}

/// Why a canary that came to `canary` is worse than the active version's
/// `active` under `rule`, when it is: it fails more by the failure margin,
/// or takes longer per execution by the latency margin (and the floor).
fn verdict(rule: &crate::config::HandlerCanary, canary: Side, active: Side) -> Option<String> {
    let rate = |(ok, failed): (u64, u64)| if ok + failed == 0 { 0.0 } else { failed as f64 / (ok + failed) as f64 };
    let runs = |s: Side| s.counts.0 + s.counts.1;
    if runs(canary) < rule.min_events || runs(active) < rule.min_events {
        return None;
    }
    let (c, a) = (rate(canary.counts), rate(active.counts));
    if c > a + rule.failure_margin {
        return Some(format!(
            "failed {:.0}% of {} executions, {:.0} points more ({:.0}% of {})",
            c * 100.0,
            runs(canary),
            (c - a) * 100.0,
            a * 100.0,
            runs(active)
        ));
    }
    let enough = rule.min_events.max(LATENCY_MIN_RUNS);
    let mean = |(n, micros): (u64, u64)| (n >= enough).then(|| micros as f64 / n as f64 / 1_000.0);
    let (Some(cm), Some(am)) = (mean(canary.time), mean(active.time)) else { return None };
    (cm > am * (1.0 + rule.latency_margin) && cm - am >= LATENCY_FLOOR_MS).then(|| {
        format!(
            "took {cm:.1} ms per execution on average over {}, {:.0}% longer ({am:.1} ms over {})",
            canary.time.0,
            (cm / am.max(0.001) - 1.0) * 100.0,
            active.time.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(ok: u64, failed: u64, ms_each: f64) -> Side {
        Side { counts: (ok, failed), time: (ok + failed, ((ok + failed) as f64 * ms_each * 1_000.0) as u64) }
    }

    #[test]
    fn a_canary_is_rolled_back_only_when_it_fails_more_by_the_margin_over_enough_events() {
        let rule = crate::config::HandlerCanary::default();
        let v = |c, a| verdict(&rule, c, a);
        assert!(v(side(70, 30, 1.0), side(100, 0, 1.0)).is_some(), "30% against none");
        assert!(v(side(14, 5, 1.0), side(100, 0, 1.0)).is_none(), "19 executions are too few to judge");
        assert!(v(side(70, 30, 1.0), side(19, 0, 1.0)).is_none(), "19 of the active version's too");
        assert!(v(side(96, 4, 1.0), side(100, 0, 1.0)).is_none(), "4 points is within the margin");
        assert!(v(side(70, 30, 1.0), side(70, 30, 1.0)).is_none(), "as bad as the active version is no worse");
        let why = v(side(70, 30, 1.0), side(100, 0, 1.0)).unwrap_or_default();
        assert!(why.contains("failed 30% of 100 executions, 30 points more (0% of 100)"), "{why}");
    }

    #[test]
    fn a_canary_is_rolled_back_when_it_takes_longer_by_the_margin_and_the_floor() {
        let rule = crate::config::HandlerCanary::default();
        let v = |c, a| verdict(&rule, c, a);
        let why = v(side(100, 0, 60.0), side(100, 0, 5.0)).unwrap_or_default();
        assert!(why.contains("took 60.0 ms per execution on average over 100, 1100% longer (5.0 ms over 100)"), "{why}");
        assert!(v(side(100, 0, 7.0), side(100, 0, 5.0)).is_none(), "40% longer is within the margin");
        assert!(v(side(100, 0, 1.8), side(100, 0, 0.5)).is_none(), "under 2 ms more is noise, whatever the ratio");
        assert!(v(side(49, 0, 60.0), side(100, 0, 5.0)).is_none(), "too few executions to time");
    }

    #[test]
    fn a_key_keeps_its_bucket_and_the_buckets_spread() {
        assert_eq!(bucket(b"customer-7"), bucket(b"customer-7"));
        let under_20 = (0..10_000).filter(|i| bucket(format!("customer-{i}").as_bytes()) < 20).count();
        assert!((1_800..2_200).contains(&under_20), "{under_20} of 10,000 keys under 20%");
    }
}
