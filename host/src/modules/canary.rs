//! Canaries: a stored version that runs a stable share of a handler's keys
//! while the rest stay on the active version (`idem deploy --canary 10%`,
//! docs/canaries.md). A key's share is fixed by a hash of the key (of the
//! event id for an event without one), the same on every host, so a key
//! never moves between versions while the canary lasts, and its events
//! keep their order.
//!
//! Each host compares the two versions' failure rates on the events it ran
//! since it loaded the canary ([`Slot::judge_canary`]); when the canary's
//! is worse by more than [`MARGIN`] over at least [`MIN_EVENTS`] of its
//! executions, the host rolls it back (`canaries::end`, under the module
//! gate) and says why in the log and in `idem.canary_verdict`. Claims of
//! the canary's version are refused from then on (ID001): its events in
//! flight run again on the active version.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use sqlx::PgPool;

use super::{Failed, RETRY_FAILED, Slot, UploadError, VersionCounts, canaries};
use crate::event::Event;
use crate::executor::Executor;
use crate::runtime::Handler;

/// The canary's executions a host needs before it judges them.
pub const MIN_EVENTS: u64 = 20;

/// How much worse the canary's failure rate may be than the active
/// version's (an absolute difference: 0.05 is 5 points).
pub const MARGIN: f64 = 0.05;

/// A handler's canary on this host.
pub struct Canary {
    version: i32,
    sha256: String,
    percent: u8,
    executor: Executor,
    /// Every version's counts when this host loaded it: the judgement is
    /// on what ran after.
    baseline: BTreeMap<i32, VersionCounts>,
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
        let executor = self.executor().with_handler(handler.clone());
        let canary =
            Canary { version, sha256: handler.sha256().to_owned(), percent, executor, baseline: self.counts() };
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

    /// Rolls the canary back if it fails more than the active version on
    /// this host: `Some(why)` when it did.
    pub async fn judge_canary(&self, pool: &PgPool) -> anyhow::Result<Option<String>> {
        let (Some(canary), Some(active)) = (self.canary(), self.version()) else { return Ok(None) };
        let now = self.counts();
        let since = |v: i32| -> (u64, u64) {
            let (n, b) = (now.get(&v).copied().unwrap_or_default(), canary.baseline.get(&v).copied().unwrap_or_default());
            (n.processed.saturating_sub(b.processed) + n.duplicates.saturating_sub(b.duplicates), n.failed.saturating_sub(b.failed))
        };
        let (Some(why), _) = verdict(since(canary.version), since(active)) else { return Ok(None) };
        let why = format!("version {} {why} than version {active} on this host", canary.version);
        let by = "idem (automatic rollback)";
        if canaries::end(pool, &self.name, canary.version, "rolled back", &why, by).await? {
            tracing::warn!(handler = %self.name, version = canary.version, "canary rolled back: {why}");
        }
        self.end_canary();
        Ok(Some(why))
    }
}

/// Whether a canary whose executions came to `canary` (succeeded, failed)
/// is worse than the active version's `active`: why, when it is (and the
/// two rates).
fn verdict(canary: (u64, u64), active: (u64, u64)) -> (Option<String>, (f64, f64)) {
    let rate = |(ok, failed): (u64, u64)| if ok + failed == 0 { 0.0 } else { failed as f64 / (ok + failed) as f64 };
    let (c, a) = (rate(canary), rate(active));
    let judged = canary.0 + canary.1 >= MIN_EVENTS && active.0 + active.1 >= MIN_EVENTS;
    let worse = judged && c > a + MARGIN;
    let why = worse.then(|| {
        format!(
            "failed {:.0}% of {} executions, {:.0} points more ({:.0}% of {})",
            c * 100.0,
            canary.0 + canary.1,
            (c - a) * 100.0,
            a * 100.0,
            active.0 + active.1
        )
    });
    (why, (c, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canary_is_rolled_back_only_when_it_fails_more_by_the_margin_over_enough_events() {
        assert!(verdict((70, 30), (100, 0)).0.is_some(), "30% against none");
        assert!(verdict((14, 5), (100, 0)).0.is_none(), "19 executions are too few to judge");
        assert!(verdict((70, 30), (19, 0)).0.is_none(), "19 of the active version's too");
        assert!(verdict((96, 4), (100, 0)).0.is_none(), "4 points is within the margin");
        assert!(verdict((70, 30), (70, 30)).0.is_none(), "as bad as the active version is no worse");
        let why = verdict((70, 30), (100, 0)).0.unwrap_or_default();
        assert!(why.contains("failed 30% of 100 executions, 30 points more (0% of 100)"), "{why}");
    }

    #[test]
    fn a_key_keeps_its_bucket_and_the_buckets_spread() {
        assert_eq!(bucket(b"customer-7"), bucket(b"customer-7"));
        let under_20 = (0..10_000).filter(|i| bucket(format!("customer-{i}").as_bytes()) < 20).count();
        assert!((1_800..2_200).contains(&under_20), "{under_20} of 10,000 keys under 20%");
    }
}
