//! A consumer's offset commits: which positions, how, and what is left
//! unconfirmed.

use super::*;

/// The positions of `states` not yet confirmed committed, as
/// `topic/partition at Offset(n)`.
pub(crate) fn unconfirmed(states: &[Arc<PartitionState>]) -> Vec<String> {
    states
        .iter()
        .filter_map(|s| {
            s.tracker().to_recommit().map(|p| format!("{}/{} at {:?}", s.topic, s.partition, Offset::Offset(p)))
        })
        .collect()
}

/// Stops `states` and waits until none is executing an event, or
/// `timeout`. Returns whether they all finished.
pub(crate) fn settle(states: &[Arc<PartitionState>], timeout: Duration) -> bool {
    for state in states {
        state.stop();
    }
    let deadline = Instant::now() + timeout;
    while states.iter().any(|s| s.is_busy()) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Which positions a commit carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Positions {
    /// Those that moved since they were last handed to a commit.
    Moved,
    /// All of them: a periodic refresh, revocation and shutdown, so that a
    /// position whose asynchronous commit failed unseen goes out again.
    All,
}

/// Commits the resolved positions of `states`. Returns whether the broker
/// accepted them (an asynchronous commit: whether it was queued; its
/// result reaches the context's `commit_callback`).
pub(crate) fn commit(
    consumer: &HandlerConsumer,
    states: &[Arc<PartitionState>],
    mode: CommitMode,
    which: Positions,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    let mut positions = Vec::new();
    for state in states {
        let position = match which {
            Positions::Moved => state.tracker().to_commit(),
            Positions::All => state.tracker().to_recommit(),
        };
        if let Some(position) = position {
            if let Err(e) = tpl.add_partition_offset(&state.topic, state.partition, Offset::Offset(position)) {
                tracing::warn!("cannot commit {}/{}: {e}", state.topic, state.partition);
                continue;
            }
            positions.push((state.clone(), position));
        }
    }
    if positions.is_empty() {
        return true;
    }
    let sent = match mode {
        CommitMode::Async => super::native::commit_async(consumer, &tpl),
        CommitMode::Sync => consumer.commit(&tpl, mode),
    };
    match sent {
        Ok(()) => {
            for (state, position) in positions {
                state.tracker().committed(position);
            }
            if matches!(mode, CommitMode::Async) {
                consumer.context().watch().sent(Instant::now());
            }
            true
        }
        Err(e) if nothing_new(&e) => true,
        // Not fatal: the next commit carries the same positions, and anything
        // redelivered meanwhile is a duplicate the claim skips.
        Err(e) => {
            tracing::warn!("offset commit failed: {e}");
            false
        }
    }
}

/// librdkafka's answer to a commit of offsets it has committed already.
pub(super) fn nothing_new(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::NoOffset)
}
