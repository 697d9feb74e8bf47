//! What the worker does after an execution of an event failed: the one
//! decision of the failure path, as a pure function of where the event's
//! executions stand and what the failure was. Logging, counting, waiting
//! and dead-lettering are the worker's (`process`).

use std::time::Duration;

use crate::error::ErrorClass;

/// Failures of the infrastructure are retried at least this often, however
/// long they last, so that processing resumes soon after it comes back.
pub(super) const MAX_OUTAGE_BACKOFF: Duration = Duration::from_secs(5);

/// Consecutive infrastructure failures of one event after which the host
/// asks the database whether it is really down.
const SUSPECT_AFTER: u32 = 3;

/// Where one event's executions stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tries {
    /// The attempt the next execution spends (from 1).
    pub attempt: u32,
    /// Consecutive failures of the infrastructure since the last attempt.
    pub outages: u32,
    /// The database answered a probe during an outage: the next failure of
    /// the infrastructure is the event's own.
    pub suspect: bool,
}

impl Tries {
    pub(super) fn new() -> Self {
        Self { attempt: 1, outages: 0, suspect: false }
    }

    /// An outage outside an execution (counting it failed): how long to
    /// wait before trying again, no attempt spent.
    pub(super) fn outage(&mut self, backoff: impl Fn(u32) -> Duration) -> Duration {
        self.outages += 1;
        backoff(self.outages).min(MAX_OUTAGE_BACKOFF)
    }
}

/// The next step after a failed execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// The infrastructure failed: wait, and execute again without spending
    /// an attempt.
    Outage(Duration),
    /// The event's own retryable failure: wait, and spend the next attempt.
    Retry(Duration),
    /// Stop the handler: idem itself cannot go on.
    Fatal,
    /// The failure is final, of this class: the DLQ, or block.
    Final(ErrorClass),
}

/// A [`Step`], and what else the worker must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decision {
    pub step: Step,
    /// Ask the database whether it answers; the answer sets
    /// [`Tries::suspect`] for the next failure.
    pub probe: bool,
    /// This failure of the infrastructure was counted as the event's own
    /// (it persists while the database answers).
    pub blamed: bool,
}

/// Decides after a failure of `class` (`stale`: the module version was no
/// longer active, and switching to the active one failed).
///
/// A failure of the infrastructure that persists while the database answers
/// is the event's own (a guest raising XX000 or using NOWAIT, a slow
/// deferred trigger at COMMIT): after the database answered a probe, the
/// next such failure spends an attempt, so the event reaches the DLQ instead
/// of stalling the partition for ever. (Not the failure right before the
/// probe: an outage that just ended must not cost one.) A stale module is
/// never blamed: the event never spends an attempt on a version it may not
/// run.
pub(super) fn after_failure(
    tries: &mut Tries,
    class: ErrorClass,
    stale: bool,
    max_attempts: u32,
    backoff: impl Fn(u32) -> Duration,
) -> Decision {
    let (mut class, mut probe, mut blamed) = (class, false, false);
    if class == ErrorClass::Unavailable {
        tries.outages += 1;
        if tries.suspect && !stale {
            class = ErrorClass::Retryable;
            tries.suspect = false;
            blamed = true;
        } else if tries.outages.is_multiple_of(SUSPECT_AFTER) {
            probe = true;
        }
    }
    let step = match class {
        ErrorClass::Unavailable => Step::Outage(backoff(tries.outages).min(MAX_OUTAGE_BACKOFF)),
        ErrorClass::Retryable if tries.attempt < max_attempts => {
            let wait = backoff(tries.attempt);
            (tries.attempt, tries.outages) = (tries.attempt + 1, 0);
            Step::Retry(wait)
        }
        ErrorClass::Fatal => Step::Fatal,
        other => Step::Final(other),
    };
    Decision { step, probe, blamed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(n: u32) -> Duration {
        Duration::from_secs(u64::from(n))
    }

    fn decide(tries: &mut Tries, class: ErrorClass) -> Decision {
        after_failure(tries, class, false, 3, backoff)
    }

    #[test]
    fn retryable_failures_spend_attempts_until_the_last_is_final() {
        let mut tries = Tries::new();
        assert_eq!(decide(&mut tries, ErrorClass::Retryable).step, Step::Retry(backoff(1)));
        assert_eq!(decide(&mut tries, ErrorClass::Retryable).step, Step::Retry(backoff(2)));
        assert_eq!(tries.attempt, 3);
        assert_eq!(decide(&mut tries, ErrorClass::Retryable).step, Step::Final(ErrorClass::Retryable));
    }

    #[test]
    fn outages_spend_no_attempt_and_wait_at_most_the_outage_backoff() {
        let mut tries = Tries::new();
        for n in 1..=10 {
            let decision = decide(&mut tries, ErrorClass::Unavailable);
            assert_eq!(decision.step, Step::Outage(backoff(n).min(MAX_OUTAGE_BACKOFF)), "outage {n}");
            assert_eq!(decision.probe, n.is_multiple_of(SUSPECT_AFTER), "a probe every {SUSPECT_AFTER} outages");
        }
        assert_eq!(tries.attempt, 1, "no attempt spent");
        // A retry after them starts the outage count again.
        decide(&mut tries, ErrorClass::Retryable);
        assert_eq!((tries.attempt, tries.outages), (2, 0));
    }

    #[test]
    fn an_outage_while_the_database_answers_is_the_events_own_but_never_on_a_stale_module() {
        let mut tries = Tries { suspect: true, ..Tries::new() };
        let stale = after_failure(&mut tries, ErrorClass::Unavailable, true, 3, backoff);
        assert!(matches!(stale.step, Step::Outage(_)) && !stale.blamed, "{stale:?}");
        let blamed = decide(&mut tries, ErrorClass::Unavailable);
        assert!(blamed.blamed, "{blamed:?}");
        assert_eq!(blamed.step, Step::Retry(backoff(1)), "it spends an attempt");
        assert!(!tries.suspect, "once per probe");
        let at_last = Tries { attempt: 3, suspect: true, ..Tries::new() };
        assert_eq!(decide(&mut { at_last }, ErrorClass::Unavailable).step, Step::Final(ErrorClass::Retryable));
    }

    #[test]
    fn fatal_stops_and_the_others_are_final_at_once() {
        assert_eq!(decide(&mut Tries::new(), ErrorClass::Fatal).step, Step::Fatal);
        for class in [ErrorClass::Permanent, ErrorClass::Conflicting, ErrorClass::Invalid] {
            assert_eq!(decide(&mut Tries::new(), class).step, Step::Final(class), "{class:?}");
        }
    }
}
