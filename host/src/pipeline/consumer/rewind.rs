//! A rewind applied to a partition this consumer owns
//! ([`crate::pipeline::rewinds`]), on the polling thread, which owns the
//! consumer: the partition is sent back and started afresh, as if it had
//! been revoked and assigned again at the rewind's offset.

use anyhow::Context as _;

use super::*;

/// How long librdkafka may take to seek a partition.
const SEEK_WAIT: Duration = Duration::from_secs(5);

impl IdemContext {
    /// Applies the rewinds pending for the partitions this consumer owns,
    /// each once (recording it in PostgreSQL may lag a pass or two).
    pub(crate) fn apply_rewinds(&self, consumer: &HandlerConsumer) {
        let (rewinds, handler) = (&self.shared.rewinds, &self.shared.name);
        if !rewinds.any_for(handler) {
            return;
        }
        for state in self.states() {
            let Some(pending) = rewinds.first_for(handler, &state.topic, state.partition) else { continue };
            if !self.rewound().insert((pending.id, pending.partition)) {
                continue;
            }
            match self.rewind(consumer, &state, pending.to_offset) {
                Ok(from) => {
                    tracing::info!(
                        %handler, topic = %state.topic, partition = state.partition, rewind = pending.id,
                        from = ?from, to = pending.to_offset,
                        "rewound: the partition runs again from the rewind's offset (events applied before are skipped \
                         as duplicates)"
                    );
                    rewinds.applied(&self.runtime, &pending, from);
                }
                Err(e) => {
                    // The next pass tries again.
                    self.rewound().remove(&(pending.id, pending.partition));
                    let key = format!("rewind {}/{}", state.topic, state.partition);
                    if let Some(line) = self.repeats.line(&key, format_args!("rewind {} not applied yet: {e:#}", pending.id)) {
                        tracing::warn!(%handler, "{line}");
                    }
                }
            }
        }
    }

    /// The rewinds this consumer applied, by (rewind, partition).
    fn rewound(&self) -> MutexGuard<'_, std::collections::HashSet<(i64, i32)>> {
        self.rewound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `old`'s partition back to `to`: librdkafka seeks it (or
    /// refuses, and nothing changed); the partition's event in flight is
    /// given the revocation's grace and its queue dropped; `to` is
    /// committed; a new state starts from there. Returns where the
    /// partition stood: the window's end.
    fn rewind(&self, consumer: &HandlerConsumer, old: &Arc<PartitionState>, to: i64) -> anyhow::Result<Option<i64>> {
        let (topic, partition) = (old.topic.as_str(), old.partition);
        consumer
            .seek(topic, partition, Offset::Offset(to), SEEK_WAIT)
            .with_context(|| format!("librdkafka refused to seek {topic}/{partition} to {to}"))?;
        // From here no record of the old position is routed: the old state
        // leaves the map, and librdkafka drops what it fetched before the seek.
        self.partitions().remove(&(topic.to_owned(), partition));
        if !settle(std::slice::from_ref(old), self.revoke_grace) {
            tracing::info!(
                handler = %self.shared.name, topic, partition,
                "an event of the rewound partition is still in flight: it ends on its own, and when it runs again \
                 its claim waits for that outcome"
            );
        }
        let from = old.tracker().position().or(old.start().committed.flatten());
        let state = self.start_partition(topic, partition);
        // Its position is `to` until a record moves it: the periodic
        // commits carry it until one is confirmed.
        state.rewound(to);
        self.partitions().insert((topic.to_owned(), partition), state);
        // Committed now too, so that a restart resumes at the rewind.
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(to))?;
        if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
            tracing::warn!(
                handler = %self.shared.name, topic, partition,
                "the rewind's offset is not committed yet ({e}): the periodic commits carry it; should the host stop \
                 before one is confirmed, the partition resumes where it stood and the rewind's report shows its \
                 window not applied"
            );
        }
        Ok(from)
    }
}
