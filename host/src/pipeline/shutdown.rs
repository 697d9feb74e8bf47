//! The end of a handler's consumer, bounded by `[shutdown] timeout` (10 s
//! by default) whatever the group is doing.
//!
//! Fetching stops first (the partitions are stopped and records routed no
//! more); in-flight events get half the time to finish; then the resolved
//! positions are committed *asynchronously*, with the consumer polled
//! meanwhile, so the group protocol (heartbeats, a rebalance in progress)
//! is served while the answer is awaited, and the commit is sent again
//! while the group refuses it (`RebalanceInProgress`, `IllegalGeneration`)
//! until the deadline. A synchronous commit here once blocked ~42 s in one
//! call, past any limit checked between calls. Then the consumer closes:
//! it leaves the group only when asked (`leave`: scale-in, a drained run),
//! since a static member that stays keeps its partitions for its restart.
//!
//! What does not finish in time is said at error level, with the positions
//! whose commit is not confirmed; nothing is lost: records after the last
//! confirmed commit are redelivered and the claim skips those that
//! committed. An event still running when the process exits is rolled back
//! by PostgreSQL when its connection closes.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};

use super::consumer::{self, HandlerConsumer, Positions};

/// How the consumer ends.
pub(super) struct Ending {
    pub deadline: Instant,
    /// Leave the group (classic protocol: a LeaveGroup even as a static
    /// member; KIP-848: the broker keeps a static member's partitions for
    /// its session timeout whatever the client sends).
    pub leave: bool,
}

pub(super) fn finish(consumer: HandlerConsumer, ending: &Ending) {
    let ctx = consumer.context().0.clone();
    ctx.closing.store(true, Ordering::SeqCst);
    let states = ctx.states();
    let left = ending.deadline.saturating_duration_since(Instant::now());
    if !consumer::settle(&states, left / 2) {
        tracing::warn!(
            "in-flight events did not finish within {:?}: not committed (rolled back as the process exits) \
             and redelivered",
            left / 2
        );
    }
    // The close needs a moment too.
    let commit_by = ending.deadline.checked_sub(left / 5).unwrap_or(ending.deadline);
    final_commit(&consumer, &states, commit_by);
    ctx.release_all();
    if ending.leave {
        let by = ending.deadline.checked_sub(left / 10).unwrap_or(ending.deadline);
        leave(&consumer, by);
    }
    close(consumer, ending.deadline);
}

/// Unsubscribes, and serves the consumer until its partitions are given up
/// and a moment more (or `by`). librdkafka sends a static member's
/// LeaveGroup only when its unassignment completes before the close begins
/// (KIP-345: a static member that closes stays in the group): closed at
/// once, the host would keep its partitions from the rest of the group for
/// the whole session timeout, which is what scale-in must not do.
fn leave(consumer: &HandlerConsumer, by: Instant) {
    consumer.unsubscribe();
    while Instant::now() < by && consumer.assignment().is_ok_and(|a| a.count() > 0) {
        let _ = consumer.poll(Duration::from_millis(50));
    }
    // The LeaveGroup goes out from librdkafka's own thread once the
    // unassignment is done: serve it a moment before the close.
    let sent_by = (Instant::now() + Duration::from_millis(300)).min(by);
    while let Some(left) = sent_by.checked_duration_since(Instant::now()).filter(|l| !l.is_zero()) {
        let _ = consumer.poll(left.min(Duration::from_millis(50)));
    }
}

/// Commits every resolved position before `by`; true once the broker
/// confirmed it (its committed offsets, read back under a timeout, are
/// the positions: rust-rdkafka reports no asynchronous commit's answer
/// here, and a synchronous commit has no bound).
fn final_commit(
    consumer: &HandlerConsumer,
    states: &[std::sync::Arc<super::partition::PartitionState>],
    by: Instant,
) -> bool {
    let mut wanted = TopicPartitionList::new();
    for state in states {
        if let Some(position) = state.tracker().to_recommit() {
            let _ = wanted.add_partition_offset(&state.topic, state.partition, Offset::Offset(position));
        }
    }
    if wanted.count() == 0 {
        return true;
    }
    loop {
        if consumer::commit(consumer, states, CommitMode::Async, Positions::All) {
            // Serve the group protocol and the commit's request a moment.
            let _ = consumer.poll(Duration::from_millis(20));
            let left = by.saturating_duration_since(Instant::now());
            let read = consumer.committed_offsets(wanted.clone(), left.min(Duration::from_secs(1)));
            if read.is_ok_and(|read| read.to_topic_map() == wanted.to_topic_map()) {
                return true;
            }
        }
        let now = Instant::now();
        if now >= by {
            let positions: Vec<String> = wanted
                .elements()
                .iter()
                .map(|e| format!("{}/{} at {:?}", e.topic(), e.partition(), e.offset()))
                .collect();
            tracing::error!(
                ?positions,
                "the final offset commit was not confirmed before the shutdown deadline: the records before these \
                 positions since the last confirmed commit will be redelivered (and skipped as duplicates)"
            );
            return false;
        }
        // The group refused it (a rebalance): serve the protocol, then again.
        let _ = consumer.poll(Duration::from_millis(100).min(by - now));
    }
}

/// Closes the consumer, serving its queue until closed or `deadline`; one
/// that cannot close in time is abandoned to the process's exit.
pub(super) fn close(consumer: HandlerConsumer, deadline: Instant) {
    if let Err(e) = consumer.close_queue() {
        tracing::warn!("closing the consumer failed: {e}");
        std::mem::forget(consumer);
        return;
    }
    loop {
        if consumer.closed() {
            // Its drop closes the queue a second time and logs the refusal
            // (`BrokerDestroy`), which `cli` silences: it says nothing here.
            return;
        }
        let now = Instant::now();
        if now >= deadline {
            tracing::error!("the consumer did not close before the shutdown deadline: abandoned to the process's exit");
            // Its drop would wait for the close without a bound.
            std::mem::forget(consumer);
            return;
        }
        let _ = consumer.poll(Duration::from_millis(50).min(deadline - now));
    }
}
