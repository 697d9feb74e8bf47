//! The worker's side of the quarantine (`pipeline::quarantine`): a record
//! whose key is parked is stored behind the key's events instead of run; a
//! failing event parks its key (retrying when its backoff is over, or held
//! once its attempts are spent). Either way the record is resolved once
//! its row committed: its offset may be committed, and the lane goes on
//! with the next record.

use super::{Taken, Worker};
use crate::error::ErrorClass;
use crate::pipeline::dlq::Failure;
use crate::pipeline::quarantine::store::{self, Parked, State};
use crate::stats::Stats;
use crate::validate::Record;

impl Worker {
    /// Reads the handler's parked keys once for this assignment, before
    /// any of its records runs: `false` when the partition stopped first.
    pub(super) async fn parked_known(&mut self) -> bool {
        let shared = self.shared.clone();
        let mut outages = 0;
        loop {
            let read = self.state.parked_read.get_or_try_init(|| shared.quarantine.read(&shared.idem_pool, &shared.name));
            match read.await {
                Ok(()) => return true,
                Err(e) => {
                    outages += 1;
                    tracing::warn!(handler = %shared.name, "failed to read the parked keys (the partition waits): {e}");
                    Stats::add(&shared.stats.unavailable);
                    if !self.state.sleep(shared.config.backoff(outages).min(super::decide::MAX_OUTAGE_BACKOFF)).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Whether the first pending record's key is parked.
    pub(super) fn behind_parked(&self) -> bool {
        self.pending.front().is_some_and(|t| self.shared.quarantine.holds(t.record.key.as_deref()))
    }

    /// Parks the first pending record behind its key's events. If the key
    /// was let go meanwhile, the record stays first, to run the normal way.
    pub(super) async fn park_behind(&mut self) {
        let Some(Taken { record, event }) = self.pending.pop_front() else { return };
        let stamp = self.shared.quarantine.stamp();
        match self.parked(&record, None).await {
            Some(Parked::Stored) => {
                self.state.taken(&record);
                self.completed(&record);
            }
            Some(Parked::KeyGone) => {
                if let Some(key) = &record.key {
                    self.shared.quarantine.forget(key, stamp);
                }
                self.pending.push_front(Taken { record, event });
            }
            Some(Parked::Full) => {
                self.state.taken(&record);
                let reason = "its key is parked, and the quarantine is full: dead-lettered instead".to_owned();
                let failure = Failure::first(ErrorClass::Retryable, reason, 0);
                if self.overflow(&record, failure).await {
                    self.completed(&record);
                }
            }
            // Stopped: the record is redelivered to the next owner.
            None => self.state.taken(&record),
        }
    }

    /// Parks `record`'s key after `failure`: retrying after `due`, or held
    /// (`None`). `true`: resolved (parked, or dead-lettered at the cap).
    pub(super) async fn park_failed(&mut self, record: &Record, failure: Failure, due: Option<std::time::Duration>) -> bool {
        let state = due.map_or(State::Held, |d| State::Retrying(d.as_millis() as u64));
        let head = (state, failure.reason.as_str(), failure.class.as_str());
        match self.parked(record, Some((head, failure.attempts))).await {
            Some(Parked::Stored) => {
                if let Some(key) = &record.key {
                    self.shared.quarantine.noted(key);
                }
                let (name, topic, partition, offset) = (&self.shared.name, &record.topic, record.partition, record.offset);
                match state {
                    State::Held => tracing::error!(
                        handler = %name, %topic, partition, offset, attempts = failure.attempts,
                        "the event's attempts are spent: its key is parked until an operator releases or dead-letters it \
                         (idem quarantine); its other keys go on"
                    ),
                    State::Retrying(ms) => tracing::warn!(
                        handler = %name, %topic, partition, offset, attempt = failure.attempts, retry_in_ms = ms,
                        "the event failed; its key is parked until it retries, and the lane goes on: {}", failure.reason
                    ),
                }
                true
            }
            Some(Parked::Full | Parked::KeyGone) => {
                let reason = format!("{} (the quarantine is full: dead-lettered instead of parked)", failure.reason);
                self.overflow(record, Failure { reason, ..failure }).await
            }
            None => false,
        }
    }

    /// Stores `record` (`head`: as its key's first event, with the attempts
    /// it spent), riding out outages: `None` when the partition stopped.
    async fn parked(&self, record: &Record, head: Option<((State, &str, &str), u32)>) -> Option<Parked> {
        let shared = &self.shared;
        let (first, attempts) = head.map_or((None, 0), |(first, n)| (Some(first), n));
        let mut outages = 0;
        loop {
            let max = shared.quarantine.max_parked;
            match store::park(&shared.idem_pool, &shared.name, record, first, attempts, max).await {
                Ok(parked) => {
                    if parked == Parked::Stored {
                        Stats::add(&shared.stats.parked);
                    }
                    return Some(parked);
                }
                Err(e) => {
                    outages += 1;
                    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
                    tracing::warn!(handler = %shared.name, %topic, partition, offset, "failed to park the record (retrying): {e}");
                    Stats::add(&shared.stats.unavailable);
                    if !self.state.sleep(shared.config.backoff(outages).min(super::decide::MAX_OUTAGE_BACKOFF)).await {
                        return None;
                    }
                }
            }
        }
    }

    /// The quarantine is full: `record` goes to the dead-letter topic
    /// (`true`: it went; the caller completes it).
    async fn overflow(&mut self, record: &Record, failure: Failure) -> bool {
        let (name, topic, partition, offset) = (&self.shared.name, &record.topic, record.partition, record.offset);
        tracing::error!(
            handler = %name, %topic, partition, offset, max_parked = self.shared.quarantine.max_parked,
            "the quarantine is full: the record is dead-lettered instead of parked"
        );
        Stats::add(&self.shared.stats.quarantine_overflow);
        super::final_failure::resolve(&self.shared, &self.state, record, failure).await
    }
}
