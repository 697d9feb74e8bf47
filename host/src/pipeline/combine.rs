//! Batches of several partitions in one transaction. A lane's batch waits
//! for one of the handler's `concurrency` connections; while it waits, the
//! batches of other lanes and partitions queue behind it. Whoever gets a
//! connection takes every batch queued then, up to `max_events` events in
//! all, and runs them as one transaction: one BEGIN, one claim, one COMMIT
//! for all of them. With connections to spare nothing waits, and every batch
//! runs alone as before; with more busy partitions than connections (many
//! partitions, each with a few records) transactions grow instead of
//! queueing.
//!
//! Each lane's order holds: a partition's events (a key's, under
//! `ordering = "key"`) are one chain of the merged batch (see
//! `executor::chains`). Each lane keeps its own offsets, crash mark and
//! failure path: when an event fails, the merged transaction rolls back,
//! its lane gets the failure as from a batch of its own, and every other
//! lane gets [`BatchEnd::Again`] and runs its batch again (its HTTP calls with
//! the same keys). A partition stopped (revoked, the host stopping) rolls
//! the merged transaction back at once, like its own; its batch is dropped,
//! the others run again. Two batches carrying the same event id (an event
//! redelivered on two partitions) never share a transaction: the claim takes
//! distinct ids. Under a canary, batches on it and batches on the active
//! version never share a transaction (each runs on one version).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::HandlerContext;
use super::partition::PartitionState;
use crate::event::Event;
use crate::executor::{BatchFailure, Outcome};
use crate::stats::Stats;

/// What became of a lane's batch.
#[derive(Debug)]
pub(crate) enum BatchEnd {
    /// Committed, with one outcome per event.
    Committed(Vec<Outcome>),
    /// It failed, as a batch of its own would have (an index is into it).
    Failed(BatchFailure),
    /// Rolled back for another lane's sake: run it again.
    Again,
}

/// A lane's batch waiting for a connection.
struct Submission {
    id: u64,
    events: Vec<Arc<Event>>,
    /// Its events run on the canary (`modules::canary`): merged only with
    /// others that do.
    canary: bool,
    state: Arc<PartitionState>,
    reply: oneshot::Sender<(Option<i32>, BatchEnd)>,
}

/// One handler's queue of batches waiting for a connection.
#[derive(Default)]
pub(crate) struct Combiner {
    queue: Mutex<VecDeque<Submission>>,
    next_id: AtomicU64,
}

impl Combiner {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Submission>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `events` of the lane of `state`, alone or with other lanes'
    /// batches; returns the module version it ran on and what became of it.
    pub(crate) async fn submit(
        shared: &Arc<HandlerContext>,
        events: Vec<Arc<Event>>,
        state: &Arc<PartitionState>,
        canary: bool,
    ) -> (Option<i32>, BatchEnd) {
        let combiner = &shared.combiner;
        let id = combiner.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, mut answer) = oneshot::channel();
        combiner.queue().push_back(Submission { id, events, canary, state: state.clone(), reply });
        // An execution that died (a panic) answers nothing: the lane's
        // records then run alone, where such a failure is handled.
        let lost = || (None, BatchEnd::Failed(BatchFailure::Whole(None)));
        loop {
            let queued = combiner.is_queued(id);
            tokio::select! {
                biased;
                answer = &mut answer => return answer.unwrap_or_else(|_| lost()),
                _ = state.until_stopped(std::future::pending::<()>()) => {
                    // Still queued: it never ran. Else a merged batch has
                    // it, and its stop check ends that batch soon.
                    if combiner.withdraw(id) {
                        return (None, BatchEnd::Failed(BatchFailure::Stopped));
                    }
                    return answer.await.unwrap_or_else(|_| lost());
                }
                // Only while its own batch waits: once another took it,
                // this lane waits for the answer, not for a connection.
                permit = shared.permits.clone().acquire_owned(), if queued => {
                    let Ok(permit) = permit else { return (None, BatchEnd::Failed(BatchFailure::Stopped)) };
                    // Merged up to what one batch may hold under an events' rate.
                    let cap = shared.slot.executor().throttles().batch_cap(shared.config.batch.max_events);
                    let taken = combiner.take(cap);
                    if !taken.is_empty() {
                        // Its own task: this lane answers its own partition's
                        // stop meanwhile, whichever batches it runs.
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            let execution = std::panic::AssertUnwindSafe(execute(&shared, taken));
                            if futures::FutureExt::catch_unwind(execution).await.is_err() {
                                tracing::error!(
                                    handler = %shared.name,
                                    "a batch's execution panicked (a bug in idem): its lanes run their records alone"
                                );
                            }
                            drop(permit);
                        });
                    }
                }
            }
        }
    }

    fn is_queued(&self, id: u64) -> bool {
        self.queue().iter().any(|s| s.id == id)
    }

    /// Takes the submission `id` out of the queue, if it is still there.
    fn withdraw(&self, id: u64) -> bool {
        let mut queue = self.queue();
        let before = queue.len();
        queue.retain(|s| s.id != id);
        queue.len() < before
    }

    /// The queued batches, oldest first, up to `max_events` events in all
    /// (the first whatever its size), skipping any that shares an event id
    /// with those taken; a stopped or paused partition's are answered at once.
    fn take(&self, max_events: usize) -> Vec<Submission> {
        let mut queue = self.queue();
        let (mut taken, mut kept) = (Vec::new(), VecDeque::new());
        let (mut events, mut ids) = (0, HashSet::new());
        while let Some(submission) = queue.pop_front() {
            if submission.state.is_stopped() {
                let _ = submission.reply.send((None, BatchEnd::Failed(BatchFailure::Stopped)));
                continue;
            }
            // Paused by an operator while it waited: its lane submits it
            // again once the pause is lifted.
            if submission.state.is_held() {
                let _ = submission.reply.send((None, BatchEnd::Again));
                continue;
            }
            let fits = taken.is_empty() || events + submission.events.len() <= max_events;
            let same_side = taken.first().is_none_or(|t: &Submission| t.canary == submission.canary);
            if fits && same_side && submission.events.iter().all(|e| !ids.contains(&e.id)) {
                events += submission.events.len();
                ids.extend(submission.events.iter().map(|e| e.id));
                taken.push(submission);
            } else {
                kept.push_back(submission);
            }
        }
        *queue = kept;
        taken
    }
}

/// Runs `taken` in one transaction and answers each.
async fn execute(shared: &HandlerContext, mut taken: Vec<Submission>) {
    let executor = shared.slot.executor_on(taken.first().is_some_and(|s| s.canary));
    let version = executor.handler().version();
    let sizes: Vec<usize> = taken.iter().map(|s| s.events.len()).collect();
    // Moved out, not copied: a submission is answered by its sizes alone.
    let events: Vec<Arc<Event>> = taken.iter_mut().flat_map(|s| std::mem::take(&mut s.events)).collect();
    // Before each event after the first: the one started last ran (or runs).
    let between = |next: usize| {
        shared.mid_batch_point(&events[next - 1].payload);
        taken.iter().any(|s| s.state.is_stopped())
    };
    let result = executor.execute_batch(&events, between).await;
    if result.is_ok() {
        Stats::add(&shared.stats.transactions);
    }
    let stopped: Vec<bool> = taken.iter().map(|s| s.state.is_stopped()).collect();
    for (submission, ran) in taken.into_iter().zip(split(&sizes, &stopped, result)) {
        let _ = submission.reply.send((version, ran));
    }
}

/// What each of the batches merged in one transaction gets of its result:
/// `sizes` are their numbers of events, in the order they were merged;
/// `stopped`, whether each one's partition is stopped.
fn split(sizes: &[usize], stopped: &[bool], result: Result<Vec<Outcome>, BatchFailure>) -> Vec<BatchEnd> {
    let starts: Vec<usize> = sizes.iter().scan(0, |at, n| Some(std::mem::replace(at, *at + n))).collect();
    match result {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            sizes.iter().map(|n| BatchEnd::Committed(outcomes.by_ref().take(*n).collect())).collect()
        }
        Err(BatchFailure::Stopped) => {
            stopped.iter().map(|s| if *s { BatchEnd::Failed(BatchFailure::Stopped) } else { BatchEnd::Again }).collect()
        }
        Err(BatchFailure::StaleModule) => sizes.iter().map(|_| BatchEnd::Failed(BatchFailure::StaleModule)).collect(),
        // Nothing names an event: every lane runs its records alone. A
        // fatal error is met by the first as its own, by the others anew.
        Err(BatchFailure::Whole(own)) => {
            let mut own = Some(own);
            sizes.iter().map(|_| BatchEnd::Failed(BatchFailure::Whole(own.take().flatten()))).collect()
        }
        Err(BatchFailure::At { index, own }) => {
            let mut own = Some(own);
            starts
                .iter()
                .zip(sizes)
                .map(|(start, n)| match index.checked_sub(*start) {
                    Some(local) if local < *n => {
                        BatchEnd::Failed(BatchFailure::At { index: local, own: own.take().flatten() })
                    }
                    _ => BatchEnd::Again,
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BatchEnd, split};
    use crate::error::ExecError;
    use crate::executor::{BatchFailure, Outcome};

    fn shown(ran: &[BatchEnd]) -> Vec<String> {
        ran.iter()
            .map(|r| match r {
                BatchEnd::Committed(o) => format!("committed {}", o.len()),
                BatchEnd::Again => "again".into(),
                BatchEnd::Failed(BatchFailure::Stopped) => "stopped".into(),
                BatchEnd::Failed(BatchFailure::StaleModule) => "stale".into(),
                BatchEnd::Failed(BatchFailure::Whole(own)) => format!("whole {}", own.is_some()),
                BatchEnd::Failed(BatchFailure::At { index, own }) => format!("at {index} {}", own.is_some()),
            })
            .collect()
    }

    #[test]
    fn a_commit_gives_each_batch_its_own_outcomes_in_order() {
        let outcomes = vec![Outcome::Processed, Outcome::Duplicate, Outcome::Processed, Outcome::Skipped];
        let ran = split(&[1, 2, 1], &[false; 3], Ok(outcomes));
        let BatchEnd::Committed(middle) = &ran[1] else { panic!("{:?}", shown(&ran)) };
        assert_eq!(middle, &[Outcome::Duplicate, Outcome::Processed]);
        assert_eq!(shown(&ran), ["committed 1", "committed 2", "committed 1"]);
    }

    #[test]
    fn a_failure_is_its_own_batchs_at_its_own_index_and_the_others_run_again() {
        let own = Some(ExecError::HandlerRetryable("no".into()));
        let ran = split(&[2, 3, 1], &[false; 3], Err(BatchFailure::At { index: 3, own }));
        assert_eq!(shown(&ran), ["again", "at 1 true", "again"]);
        let ran = split(&[2, 3, 1], &[false; 3], Err(BatchFailure::At { index: 5, own: None }));
        assert_eq!(shown(&ran), ["again", "again", "at 0 false"]);
    }

    #[test]
    fn a_stop_drops_the_stopped_partitions_batches_and_the_others_run_again() {
        let ran = split(&[1, 1, 1], &[false, true, false], Err(BatchFailure::Stopped));
        assert_eq!(shown(&ran), ["again", "stopped", "again"]);
    }

    #[test]
    fn failures_naming_no_event_reach_every_batch() {
        let fatal = Some(ExecError::Infrastructure("gone".into()));
        assert_eq!(shown(&split(&[1, 2], &[false; 2], Err(BatchFailure::Whole(fatal)))), ["whole true", "whole false"]);
        assert_eq!(shown(&split(&[1, 2], &[false; 2], Err(BatchFailure::StaleModule))), ["stale", "stale"]);
    }
}
