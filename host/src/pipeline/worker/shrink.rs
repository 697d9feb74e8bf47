//! The fast path's loop, behind a seam: a batch runs in one transaction;
//! while it fails, the events before the failing one run again in one
//! transaction, and the failing one is handed back to be resolved alone.
//! [`BatchLane`] is what the loop needs of a lane (the worker implements
//! it in `batch.rs`), so its decisions are unit-tested here against a
//! scripted lane, with no database and no broker.

use std::future::Future;
use std::sync::Arc;

use crate::error::ExecError;
use crate::event::Event;
use crate::executor::{BatchFailure, Outcome};
use crate::pipeline::combine::BatchEnd;

/// What the loop needs of a lane.
pub(super) trait BatchLane {
    /// Runs `events` in one transaction (alone, or with other lanes'
    /// batches): the module version it ran on and what became of it.
    fn submit(&mut self, events: Vec<Arc<Event>>) -> impl Future<Output = (Option<i32>, BatchEnd)> + Send;
    /// Switches to the module version now active, if another than
    /// `version` is: whether it did.
    fn switch_module(&mut self, version: Option<i32>) -> impl Future<Output = bool> + Send;
    /// The partition was stopped (revoked, the host stopping).
    fn stopped(&self) -> bool;
    /// The batch's events committed on `version`, with these outcomes.
    fn committed(&mut self, version: Option<i32>, outcomes: Vec<Outcome>);
    /// A batch of `size` events failed on `version` at `at`; `whole`: the
    /// last offset of a batch whose failure named no event (its records
    /// then run alone); `counted`: a failure of the version's (not of a
    /// version no longer active).
    fn failed(&mut self, version: Option<i32>, size: usize, at: usize, whole: Option<i64>, counted: bool);
}

/// What follows a failed batch.
#[derive(Debug)]
enum AfterBatch {
    /// The partition stopped: nothing more runs.
    Stop,
    /// The same batch again (on the version now active).
    Again,
    /// The events before `at` again, in one transaction; the one at `at`
    /// failed, with `own` as its own error if it has one; `whole`: nothing
    /// named an event; `counted`: the version's failure.
    Shrink { at: usize, own: Option<ExecError>, whole: bool, counted: bool },
}

/// Runs `events` until what remains of them commits. Returns the version
/// the failing event ran on and its own error (`None` when it has none),
/// or `None` when every event committed or the partition stopped.
pub(super) async fn until_committed<L: BatchLane>(
    lane: &mut L,
    events: &[Arc<Event>],
) -> Option<(Option<i32>, Option<ExecError>)> {
    // The events `..end` run; the one at `end` failed.
    let (mut end, mut failed) = (events.len(), None);
    while end > 0 && !lane.stopped() {
        let (version, failure) = match lane.submit(events[..end].to_vec()).await {
            (version, BatchEnd::Committed(outcomes)) => {
                lane.committed(version, outcomes);
                break;
            }
            (_, BatchEnd::Again) => continue,
            (version, BatchEnd::Failed(failure)) => (version, failure),
        };
        let switched = matches!(failure, BatchFailure::StaleModule) && lane.switch_module(version).await;
        match after(failure, switched) {
            AfterBatch::Stop => break,
            AfterBatch::Again => continue,
            AfterBatch::Shrink { at, own, whole, counted } => {
                lane.failed(version, end, at, whole.then(|| events[end - 1].offset), counted);
                (end, failed) = (at, Some((version, own)));
            }
        }
    }
    failed
}

/// What a batch's `failure` means (`switched`: another module version was
/// activated and the lane switched to it).
fn after(failure: BatchFailure, switched: bool) -> AfterBatch {
    match failure {
        BatchFailure::Stopped => AfterBatch::Stop,
        // Another version was activated: the same batch, on it.
        BatchFailure::StaleModule if switched => AfterBatch::Again,
        BatchFailure::StaleModule => AfterBatch::Shrink { at: 0, own: None, whole: false, counted: false },
        // Nothing names an event (BEGIN, the claim, COMMIT): the batch's
        // records run alone, so that a deterministic failure at COMMIT is
        // found in one pass, not by re-running the batch once per record.
        BatchFailure::Whole(own) => AfterBatch::Shrink { at: 0, own, whole: true, counted: false },
        BatchFailure::At { index, own } => {
            let counted = own.is_some();
            AfterBatch::Shrink { at: index, own, whole: false, counted }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A lane whose batches end as scripted, recording what it was asked.
    #[derive(Default)]
    struct Scripted {
        ends: VecDeque<BatchEnd>,
        switches: bool,
        stop_after: Option<usize>,
        submitted: Vec<usize>,
        committed: Vec<usize>,
        failed: Vec<(usize, usize, Option<i64>, bool)>,
    }

    impl BatchLane for Scripted {
        async fn submit(&mut self, events: Vec<Arc<Event>>) -> (Option<i32>, BatchEnd) {
            self.submitted.push(events.len());
            let end = self.ends.pop_front().unwrap_or_else(|| BatchEnd::Committed(vec![Outcome::Processed; 0]));
            let end = match end {
                BatchEnd::Committed(_) => BatchEnd::Committed(vec![Outcome::Processed; events.len()]),
                other => other,
            };
            (Some(1), end)
        }
        async fn switch_module(&mut self, _version: Option<i32>) -> bool {
            self.switches
        }
        fn stopped(&self) -> bool {
            self.stop_after.is_some_and(|n| self.submitted.len() >= n)
        }
        fn committed(&mut self, _version: Option<i32>, outcomes: Vec<Outcome>) {
            self.committed.push(outcomes.len());
        }
        fn failed(&mut self, _version: Option<i32>, size: usize, at: usize, whole: Option<i64>, counted: bool) {
            self.failed.push((size, at, whole, counted));
        }
    }

    fn events(n: i64) -> Vec<Arc<Event>> {
        (0..n)
            .map(|offset| {
                Arc::new(Event {
                    id: uuid::Uuid::now_v7(),
                    event_type: "order.created.v1".into(),
                    occurred_at: String::new(),
                    topic: "orders".into(),
                    partition: 0,
                    offset: 100 + offset,
                    key: None,
                    headers: Vec::new(),
                    payload: "{}".into(),
                    payload_sha256: [0; 32],
                    origin: None,
                })
            })
            .collect()
    }

    fn run(lane: &mut Scripted, n: i64) -> Option<(Option<i32>, Option<ExecError>)> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        runtime.block_on(until_committed(lane, &events(n)))
    }

    fn at(index: usize, own: Option<ExecError>) -> BatchEnd {
        BatchEnd::Failed(BatchFailure::At { index, own })
    }

    #[test]
    fn a_batch_that_commits_runs_once() {
        let mut lane = Scripted::default();
        assert!(run(&mut lane, 5).is_none());
        assert_eq!((lane.submitted, lane.committed), (vec![5], vec![5]));
    }

    #[test]
    fn a_failure_at_an_event_runs_those_before_it_again_and_hands_it_back_with_its_own_error() {
        let own = ExecError::HandlerPermanent("no such customer".into());
        let mut lane = Scripted { ends: [at(3, Some(own))].into(), ..Scripted::default() };
        let failed = run(&mut lane, 5);
        assert!(matches!(failed, Some((_, Some(ExecError::HandlerPermanent(_))))), "{failed:?}");
        assert_eq!(lane.submitted, vec![5, 3], "the three before it, again");
        assert_eq!(lane.committed, vec![3]);
        assert_eq!(lane.failed, vec![(5, 3, None, true)]);
    }

    #[test]
    fn failures_shrink_the_batch_until_a_prefix_commits() {
        let mut lane = Scripted { ends: [at(4, None), at(2, None)].into(), ..Scripted::default() };
        assert!(matches!(run(&mut lane, 6), Some((_, None))), "the last failing event has no error of its own");
        assert_eq!(lane.submitted, vec![6, 4, 2]);
        assert_eq!(lane.committed, vec![2]);
    }

    #[test]
    fn a_failure_at_the_first_event_runs_nothing_again() {
        let mut lane = Scripted { ends: [at(0, None)].into(), ..Scripted::default() };
        assert!(matches!(run(&mut lane, 4), Some((_, None))));
        assert_eq!(lane.submitted, vec![4]);
        assert!(lane.committed.is_empty());
    }

    #[test]
    fn a_failure_that_names_no_event_sends_every_record_alone_through_the_batchs_last() {
        let mut lane = Scripted { ends: [BatchEnd::Failed(BatchFailure::Whole(None))].into(), ..Scripted::default() };
        assert!(matches!(run(&mut lane, 4), Some((_, None))));
        assert_eq!(lane.failed, vec![(4, 0, Some(103), false)], "alone through offset 103; not the version's failure");
        assert_eq!(lane.submitted, vec![4]);
    }

    #[test]
    fn a_stale_module_runs_the_same_batch_on_the_active_one_or_goes_alone_without_one() {
        let stale = || BatchEnd::Failed(BatchFailure::StaleModule);
        let mut lane = Scripted { ends: [stale()].into(), switches: true, ..Scripted::default() };
        assert!(run(&mut lane, 3).is_none());
        assert_eq!(lane.submitted, vec![3, 3], "the same batch, on the new version");
        let mut lane = Scripted { ends: [stale()].into(), switches: false, ..Scripted::default() };
        assert!(matches!(run(&mut lane, 3), Some((_, None))));
        assert_eq!(lane.submitted, vec![3]);
        assert_eq!(lane.failed, vec![(3, 0, None, false)], "not the version's failure");
    }

    #[test]
    fn a_batch_rolled_back_for_another_lane_runs_again_and_a_stop_ends_the_loop() {
        let mut lane = Scripted { ends: [BatchEnd::Again].into(), ..Scripted::default() };
        assert!(run(&mut lane, 2).is_none());
        assert_eq!(lane.submitted, vec![2, 2]);
        let mut lane = Scripted { ends: [at(1, None)].into(), stop_after: Some(1), ..Scripted::default() };
        assert!(matches!(run(&mut lane, 2), Some((_, None))), "stopped: nothing more runs");
        assert_eq!(lane.submitted, vec![2]);
        let mut lane = Scripted { ends: [BatchEnd::Failed(BatchFailure::Stopped)].into(), ..Scripted::default() };
        assert!(run(&mut lane, 2).is_none());
    }
}
