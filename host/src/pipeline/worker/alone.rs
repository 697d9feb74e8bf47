//! The failure path's loop, behind a seam: one event executed until it is
//! resolved. A failure of another module version than the active one runs
//! the event again on the active one at once; any other failure takes
//! `decide`'s decision (wait and execute again, give the record up, or a
//! final failure). [`AloneLane`] is what the loop needs of a worker
//! (`process.rs` implements it), so the loop's decisions are unit-tested
//! here against a scripted lane, with no database and no broker.

use std::future::Future;
use std::time::Duration;

use super::decide::Tries;
use crate::error::ExecError;
use crate::executor::Outcome;
use crate::pipeline::dlq::Failure;

/// What became of one execution of the event.
#[derive(Debug)]
pub(super) enum Execution {
    /// It ran on the module version `on` (`None`: a native handler).
    Done { on: Option<i32>, result: Result<Outcome, ExecError> },
    /// The partition stopped (or the handler must): abandon the record.
    Abandoned,
    /// Counting the execution failed for a moment: wait, no attempt spent.
    Outage(Duration),
    /// Counted executions show the event ends the host process.
    KillsTheHost(Failure),
}

/// What comes after a failed execution (`decide`'s step, applied).
#[derive(Debug)]
pub(super) enum Next {
    /// Wait this long, then execute again.
    Wait(Duration),
    /// Give the record up (the handler stops): it is redelivered.
    Abandon,
    /// The failure is final.
    Final(Failure),
    /// Park the event's key, to retry after this wait (the quarantine's
    /// non-blocking retry): the lane goes on meanwhile.
    Park(Failure, Duration),
}

/// How the loop ended.
#[derive(Debug)]
pub(super) enum Resolution {
    /// An execution did not fail (processed, a duplicate, skipped).
    Succeeded(Outcome),
    /// The record was given up: it is redelivered.
    Abandoned,
    /// The event's failure is final.
    Final(Failure),
    /// The event's key is to be parked, retrying after this wait.
    Park(Failure, Duration),
}

/// What the loop needs of a worker.
pub(super) trait AloneLane {
    /// One execution of the event, spending `tries.attempt`.
    fn execute(&mut self, tries: &mut Tries) -> impl Future<Output = Execution> + Send;
    /// Switches to the module version now active, if another than
    /// `version` is: whether it did.
    fn switch_module(&mut self, version: Option<i32>) -> impl Future<Output = bool> + Send;
    /// Takes the decision after `error` (`stale`: of a version no longer
    /// active, which this host could not switch from), logs and counts it.
    fn after_failure(&mut self, tries: &mut Tries, error: ExecError, stale: bool)
    -> impl Future<Output = Next> + Send;
    /// Waits `wait`: `false` when the partition stopped meanwhile.
    fn sleep(&mut self, wait: Duration) -> impl Future<Output = bool> + Send;
}

/// Executes the event until it is resolved; `from_batch`: the failure of
/// the execution it already had in a batch, its first.
pub(super) async fn until_resolved<L: AloneLane>(lane: &mut L, from_batch: Option<(Option<i32>, ExecError)>) -> Resolution {
    let mut tries = Tries::new();
    let mut from_batch = from_batch;
    loop {
        let ran = match from_batch.take() {
            Some((on, error)) => Execution::Done { on, result: Err(error) },
            None => lane.execute(&mut tries).await,
        };
        let (on, error) = match ran {
            Execution::Done { result: Ok(outcome), .. } => return Resolution::Succeeded(outcome),
            Execution::Done { on, result: Err(error) } => (on, error),
            Execution::Abandoned => return Resolution::Abandoned,
            Execution::Outage(wait) if lane.sleep(wait).await => continue,
            Execution::Outage(_) => return Resolution::Abandoned,
            Execution::KillsTheHost(failure) => return Resolution::Final(failure),
        };
        // Another version was activated: the same event, on it, at once. If
        // this host cannot load it, the event waits as in an outage: it
        // never spends an attempt on a version it may not run.
        let stale = matches!(error, ExecError::StaleModule(_));
        if stale && lane.switch_module(on).await {
            continue;
        }
        match lane.after_failure(&mut tries, error, stale).await {
            Next::Wait(wait) if lane.sleep(wait).await => continue,
            Next::Wait(_) | Next::Abandon => return Resolution::Abandoned,
            Next::Final(failure) => return Resolution::Final(Failure { version: on, ..failure }),
            Next::Park(failure, wait) => return Resolution::Park(failure, wait),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::error::ErrorClass;

    /// A lane whose executions and decisions are scripted, recording what
    /// the loop asked of it.
    #[derive(Default)]
    struct Scripted {
        executions: VecDeque<Execution>,
        decisions: VecDeque<Next>,
        switches: bool,
        stops_while_waiting: bool,
        /// The attempt each execution was asked to spend.
        executed: Vec<u32>,
        /// Each failure decided on: whether it was stale.
        decided: Vec<bool>,
        switched_from: Vec<Option<i32>>,
        slept: Vec<Duration>,
    }

    impl AloneLane for Scripted {
        async fn execute(&mut self, tries: &mut Tries) -> Execution {
            self.executed.push(tries.attempt);
            self.executions.pop_front().expect("an execution scripted")
        }
        async fn switch_module(&mut self, version: Option<i32>) -> bool {
            self.switched_from.push(version);
            self.switches
        }
        async fn after_failure(&mut self, tries: &mut Tries, _error: ExecError, stale: bool) -> Next {
            self.decided.push(stale);
            let next = self.decisions.pop_front().expect("a decision scripted");
            if matches!(next, Next::Wait(_)) && !stale {
                tries.attempt += 1;
            }
            next
        }
        async fn sleep(&mut self, wait: Duration) -> bool {
            self.slept.push(wait);
            !self.stops_while_waiting
        }
    }

    fn failed(on: i32, error: ExecError) -> Execution {
        Execution::Done { on: Some(on), result: Err(error) }
    }

    fn ok(on: i32) -> Execution {
        Execution::Done { on: Some(on), result: Ok(Outcome::Processed) }
    }

    fn retryable() -> ExecError {
        ExecError::HandlerRetryable("provider busy".into())
    }

    fn final_failure(attempts: u32) -> Failure {
        Failure::first(ErrorClass::Permanent, "no".into(), attempts)
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_failure_in_a_batch_counts_as_the_first_execution() {
        let mut lane = Scripted { executions: [ok(1)].into(), decisions: [Next::Wait(SECOND)].into(), ..Scripted::default() };
        let resolved = until_resolved(&mut lane, Some((Some(1), retryable()))).await;
        assert!(matches!(resolved, Resolution::Succeeded(Outcome::Processed)), "{resolved:?}");
        assert_eq!(lane.executed, [2], "the batch's execution spent attempt 1");
        assert_eq!(lane.decided, [false]);
    }

    #[tokio::test]
    async fn a_stale_version_runs_the_event_again_on_the_active_one_without_a_decision() {
        let stale = ExecError::StaleModule("v1 was replaced".into());
        let mut lane =
            Scripted { executions: [failed(1, stale), ok(2)].into(), switches: true, ..Scripted::default() };
        let resolved = until_resolved(&mut lane, None).await;
        assert!(matches!(resolved, Resolution::Succeeded(_)), "{resolved:?}");
        assert_eq!(lane.switched_from, [Some(1)], "switched from the version the execution ran on");
        assert_eq!(lane.executed, [1, 1], "no attempt spent on the stale version");
        assert!(lane.decided.is_empty() && lane.slept.is_empty());
    }

    #[tokio::test]
    async fn a_stale_version_this_host_cannot_leave_is_decided_as_stale() {
        let stale = ExecError::StaleModule("v2 will not load".into());
        let mut lane = Scripted {
            executions: [failed(1, stale), ok(1)].into(),
            decisions: [Next::Wait(SECOND)].into(),
            switches: false,
            ..Scripted::default()
        };
        until_resolved(&mut lane, None).await;
        assert_eq!(lane.decided, [true]);
        assert_eq!(lane.slept, [SECOND]);
    }

    #[tokio::test]
    async fn an_outage_counting_the_execution_waits_and_spends_no_decision() {
        let mut lane = Scripted { executions: [Execution::Outage(SECOND), ok(1)].into(), ..Scripted::default() };
        assert!(matches!(until_resolved(&mut lane, None).await, Resolution::Succeeded(_)));
        assert_eq!((lane.executed.as_slice(), lane.slept.as_slice()), (&[1, 1][..], &[SECOND][..]));
        assert!(lane.decided.is_empty());
    }

    #[tokio::test]
    async fn a_partition_stopped_during_a_wait_abandons_the_record() {
        for first in [Execution::Outage(SECOND), failed(1, retryable())] {
            let mut lane = Scripted {
                executions: [first].into(),
                decisions: [Next::Wait(SECOND)].into(),
                stops_while_waiting: true,
                ..Scripted::default()
            };
            assert!(matches!(until_resolved(&mut lane, None).await, Resolution::Abandoned));
            assert_eq!(lane.executed, [1], "nothing runs after the stop");
        }
    }

    #[tokio::test]
    async fn an_event_that_ends_the_host_is_final_without_running() {
        let mut lane = Scripted { executions: [Execution::KillsTheHost(final_failure(3))].into(), ..Scripted::default() };
        let resolved = until_resolved(&mut lane, None).await;
        assert!(matches!(resolved, Resolution::Final(Failure { attempts: 3, .. })), "{resolved:?}");
        assert!(lane.decided.is_empty());
    }

    #[tokio::test]
    async fn retries_until_the_decision_is_final_or_abandons() {
        let mut lane = Scripted {
            executions: [failed(1, retryable()), failed(1, retryable())].into(),
            decisions: [Next::Wait(SECOND), Next::Final(final_failure(2))].into(),
            ..Scripted::default()
        };
        assert!(matches!(until_resolved(&mut lane, None).await, Resolution::Final(Failure { attempts: 2, .. })));
        assert_eq!(lane.executed, [1, 2]);
        let mut lane = Scripted {
            executions: [failed(1, retryable())].into(),
            decisions: [Next::Abandon].into(),
            ..Scripted::default()
        };
        assert!(matches!(until_resolved(&mut lane, None).await, Resolution::Abandoned));
    }
}
