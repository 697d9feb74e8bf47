//! Whether a handler's consumer is stalled: it was in its group, and for
//! [`STALLED_AFTER`] nothing has shown it still is — no statistics with
//! its group state `up`, no commit the broker confirmed — while a broker
//! answers. Seen in CI after a broker restart: a KIP-848 member whose
//! librdkafka waited for its group coordinator for minutes, every commit
//! failing "waiting for coordinator", while the other consumers of the
//! same host on the same broker went on. A stalled consumer is made again
//! (`IncidentKind::ConsumerStalled`): a new one finds its coordinator.
//!
//! The watch keeps its own clock rather than librdkafka's: the group state
//! may flip between querying for the coordinator and waiting for its
//! answer every second (its `stateage` never grows), and neither commit
//! results nor statistics may be delivered at all; the absence of any
//! sign of health is what counts. A broker outage alone is never a stall:
//! before it says so, the polling thread asks a broker for metadata
//! ([`Probe`]), and only an answer makes the incident.

use std::time::{Duration, Instant};

/// How long a consumer that was in its group may show no sign of it while
/// a broker answers before it is made again.
pub(crate) const STALLED_AFTER: Duration = Duration::from_secs(60);

/// How often a suspected consumer's broker is asked whether it answers.
const PROBE_EVERY: Duration = Duration::from_secs(10);

/// One consumer's signs of health, and what the polling thread does with
/// their absence.
#[derive(Debug)]
pub(crate) struct StallWatch {
    /// The consumer was assigned partitions since it was made: before
    /// that, it is joining (a join that never completes is librdkafka's
    /// to report).
    joined: bool,
    /// The last sign of health: the consumer made or assigned, statistics
    /// with its group state `up`, a commit confirmed.
    healthy_at: Instant,
    /// When a broker was last asked ([`PROBE_EVERY`]).
    probed_at: Option<Instant>,
}

/// What the polling thread should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing: healthy, joining, or asked a broker a moment ago.
    No,
    /// Ask a broker for metadata; if one answers, the consumer is stalled
    /// since this long.
    AskBroker(Duration),
}

impl StallWatch {
    pub(crate) fn new(now: Instant) -> Self {
        Self { joined: false, healthy_at: now, probed_at: None }
    }

    /// A consumer made (again): joining, nothing suspected.
    pub(crate) fn made(&mut self, now: Instant) {
        *self = Self::new(now);
    }

    /// Partitions assigned: in the group, healthy now.
    pub(crate) fn assigned(&mut self, now: Instant) {
        self.joined = true;
        self.healthy(now);
    }

    /// A sign of health: the group state `up`, a commit confirmed.
    pub(crate) fn healthy(&mut self, now: Instant) {
        self.healthy_at = now;
        self.probed_at = None;
    }

    /// Whether to ask a broker now (at most every [`PROBE_EVERY`]).
    pub(crate) fn probe(&mut self, now: Instant) -> Probe {
        let quiet = now.saturating_duration_since(self.healthy_at);
        if !self.joined || quiet < STALLED_AFTER {
            return Probe::No;
        }
        if self.probed_at.is_some_and(|at| now.saturating_duration_since(at) < PROBE_EVERY) {
            return Probe::No;
        }
        self.probed_at = Some(now);
        Probe::AskBroker(quiet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn a_consumer_in_its_group_with_no_sign_of_health_for_a_minute_is_suspected() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        assert_eq!(watch.probe(at(t, 59)), Probe::No);
        assert_eq!(watch.probe(at(t, 60)), Probe::AskBroker(Duration::from_secs(60)));
    }

    #[test]
    fn any_sign_of_health_puts_the_suspicion_off_by_a_whole_minute() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        watch.healthy(at(t, 50));
        assert_eq!(watch.probe(at(t, 100)), Probe::No);
        assert_eq!(watch.probe(at(t, 110)), Probe::AskBroker(Duration::from_secs(60)));
    }

    #[test]
    fn a_consumer_still_joining_is_never_suspected() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        assert_eq!(watch.probe(at(t, 600)), Probe::No);
        watch.assigned(at(t, 600));
        watch.made(at(t, 601));
        assert_eq!(watch.probe(at(t, 1_000)), Probe::No, "made again: joining again");
    }

    #[test]
    fn while_no_broker_answers_a_broker_is_asked_every_ten_seconds() {
        // A broker outage: the probe finds none, and the watch asks again
        // later, not on every poll.
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        assert!(matches!(watch.probe(at(t, 60)), Probe::AskBroker(_)));
        assert_eq!(watch.probe(at(t, 61)), Probe::No);
        assert_eq!(watch.probe(at(t, 69)), Probe::No);
        assert_eq!(watch.probe(at(t, 70)), Probe::AskBroker(Duration::from_secs(70)));
    }
}
