//! Rewinds applied to the partitions this consumer owns
//! ([`crate::pipeline::rewinds`]), on the polling thread, which owns the
//! consumer: each partition is sent back and started afresh, as if it had
//! been revoked and assigned again at the rewind's offset.
//!
//! A rewind is recorded applied only once its offset is committed (the
//! synchronous commit here, or a later commit of the new state confirmed
//! by the broker): a partition whose consumer loses it, or a host that
//! stops, before then leaves the rewind pending for the partition's next
//! owner. A rewind whose offset is past where the partition stands now (a
//! later request applied after an earlier one sent it further back) would
//! skip records: it is recorded applied without moving the partition.

use anyhow::Context as _;

use super::*;
use crate::pipeline::rewinds::Pending;

/// How long librdkafka may take to seek a partition.
const SEEK_WAIT: Duration = Duration::from_secs(5);

/// A rewind applied here whose offset's commit is not confirmed yet.
pub(crate) struct Unconfirmed {
    pending: Pending,
    from: Option<i64>,
    /// The offset sought.
    to: i64,
    state: Arc<PartitionState>,
    at: Instant,
}

impl IdemContext {
    /// Applies the rewinds pending for the partitions this consumer owns,
    /// each once: all of this pass's together (one grace for their events
    /// in flight, one commit).
    pub(crate) fn apply_rewinds(&self, consumer: &HandlerConsumer) {
        let (rewinds, handler) = (&self.shared.rewinds, &self.shared.name);
        self.forget_lost_rewinds();
        if !rewinds.any_for(handler) {
            return;
        }
        let due: Vec<(Arc<PartitionState>, Pending)> = self
            .states()
            .into_iter()
            .filter_map(|s| rewinds.first_for(handler, &s.topic, s.partition).map(|p| (s, p)))
            .filter(|(_, p)| self.rewound().insert((p.id, p.partition)))
            .collect();
        if due.is_empty() {
            return;
        }
        let mut moved = Vec::new();
        for (old, pending) in due {
            let stands = old.tracker().position().or(old.start().committed.flatten());
            if stands.is_some_and(|at| at <= pending.to_offset) {
                // Already at or behind the rewind's offset: nothing to re-run.
                rewinds.applied(&self.runtime, &pending, stands, Instant::now());
                continue;
            }
            match self.seek(consumer, &old, pending.to_offset) {
                Ok(to) => moved.push((old, pending, to, stands)),
                Err(e) => {
                    // The next pass tries again.
                    self.rewound().remove(&(pending.id, pending.partition));
                    let key = format!("rewind {}/{}", old.topic, old.partition);
                    let line = format_args!("rewind {} not applied yet: {e:#}", pending.id);
                    if let Some(line) = self.repeats.line(&key, line) {
                        tracing::warn!(%handler, "{line}");
                    }
                }
            }
        }
        if !moved.is_empty() {
            self.restart_rewound(consumer, moved);
        }
    }

    /// Seeks `old`'s partition to `to`, or to the earliest offset kept if
    /// retention deleted `to` since the rewind was asked (librdkafka would
    /// otherwise reset it to `auto.offset.reset`, possibly the end).
    /// Returns the offset sought.
    fn seek(&self, consumer: &HandlerConsumer, old: &PartitionState, to: i64) -> anyhow::Result<i64> {
        let (topic, partition) = (old.topic.as_str(), old.partition);
        let low = self.lows.lock().unwrap_or_else(|e| e.into_inner()).get(&(topic.to_owned(), partition)).copied();
        let low = low.filter(|low| *low > to);
        if let Some(low) = low {
            tracing::warn!(
                handler = %self.shared.name, topic, partition, to, low,
                "the rewind's offset was deleted by the topic's retention: rewound to the earliest record kept"
            );
        }
        let to = low.unwrap_or(to);
        consumer
            .seek(topic, partition, Offset::Offset(to), SEEK_WAIT)
            .with_context(|| format!("librdkafka refused to seek {topic}/{partition} to {to}"))?;
        Ok(to)
    }

    /// Starts the sought partitions afresh: the old states leave the map
    /// (from here no record of the old positions is routed, and librdkafka
    /// dropped what it had fetched before the seek), their events in flight
    /// get the revocation's grace, new states start at the offsets, and
    /// the offsets are committed.
    fn restart_rewound(&self, consumer: &HandlerConsumer, moved: Vec<(Arc<PartitionState>, Pending, i64, Option<i64>)>) {
        let old: Vec<Arc<PartitionState>> = moved.iter().map(|(old, ..)| old.clone()).collect();
        {
            let mut map = self.partitions();
            for state in &old {
                map.remove(&(state.topic.clone(), state.partition));
            }
        }
        if !settle(&old, self.revoke_grace) {
            tracing::info!(
                handler = %self.shared.name,
                "an event of a rewound partition is still in flight: it ends on its own, and when it runs again \
                 its claim waits for that outcome"
            );
        }
        let mut tpl = TopicPartitionList::new();
        let mut started = Vec::new();
        for (old, pending, to, from) in moved {
            let state = self.start_partition(&old.topic, old.partition);
            // Its position is `to` until a record moves it: the periodic
            // commits carry it until one is confirmed.
            state.rewound(to);
            self.partitions().insert((old.topic.clone(), old.partition), state.clone());
            if let Err(e) = tpl.add_partition_offset(&old.topic, old.partition, Offset::Offset(to)) {
                tracing::warn!("rewind {}: {e}", pending.id);
            }
            tracing::info!(
                handler = %self.shared.name, topic = %old.topic, partition = old.partition, rewind = pending.id,
                from = ?from, to, "rewound: the partition runs again from the rewind's offset (events applied before \
                are skipped as duplicates)"
            );
            started.push(Unconfirmed { pending, from, to, state, at: Instant::now() });
        }
        match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                for u in started {
                    self.shared.rewinds.applied(&self.runtime, &u.pending, u.from, u.at);
                }
            }
            Err(e) => {
                tracing::warn!(
                    handler = %self.shared.name,
                    "the rewind's offsets are not committed yet ({e}): the periodic commits carry them, and each \
                     rewind is recorded applied once one is confirmed (should the partition change owner first, \
                     its next owner applies the rewind)"
                );
                self.unconfirmed().extend(started);
            }
        }
    }

    /// A commit the broker confirmed: the rewinds waiting for one of their
    /// partitions are recorded applied.
    pub(super) fn confirm_rewinds(&self, offsets: &TopicPartitionList) {
        let mut waiting = self.unconfirmed();
        if waiting.is_empty() {
            return;
        }
        // Only a commit of the new state's positions: an earlier commit of
        // the old position, answered late, confirms nothing.
        let confirmed = |u: &Unconfirmed| {
            let stands = u.state.tracker().position().unwrap_or(u.to);
            offsets.find_partition(&u.state.topic, u.state.partition).is_some_and(|e| {
                e.error().is_ok() && matches!(e.offset(), Offset::Offset(n) if (u.to..=stands).contains(&n))
            })
        };
        let (done, left): (Vec<_>, Vec<_>) = waiting.drain(..).partition(confirmed);
        *waiting = left;
        drop(waiting);
        for u in done {
            self.shared.rewinds.applied(&self.runtime, &u.pending, u.from, u.at);
        }
    }

    /// Rewinds waiting for a commit whose partition this consumer no longer
    /// owns (its state is not the map's): left pending for the next owner,
    /// and applied again here should the partition come back.
    fn forget_lost_rewinds(&self) {
        let mut waiting = self.unconfirmed();
        if waiting.is_empty() {
            return;
        }
        let map = self.partitions();
        let owned = |u: &Unconfirmed| {
            map.get(&(u.state.topic.clone(), u.state.partition)).is_some_and(|s| Arc::ptr_eq(s, &u.state))
        };
        let (kept, lost): (Vec<_>, Vec<_>) = waiting.drain(..).partition(owned);
        *waiting = kept;
        drop((waiting, map));
        let mut rewound = self.rewound();
        for u in lost {
            rewound.remove(&(u.pending.id, u.pending.partition));
        }
    }

    /// The rewinds this consumer applied, by (rewind, partition).
    fn rewound(&self) -> MutexGuard<'_, std::collections::HashSet<(i64, i32)>> {
        self.rewound.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unconfirmed(&self) -> MutexGuard<'_, Vec<Unconfirmed>> {
        self.unconfirmed.lock().unwrap_or_else(|e| e.into_inner())
    }
}
