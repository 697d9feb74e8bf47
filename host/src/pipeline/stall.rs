//! Whether a handler's consumer is stalled: it was in its group, and for
//! [`STALLED_AFTER`] nothing has shown it still is, while its brokers
//! answer. Seen in CI after a broker restart: a member whose librdkafka
//! waited for its group coordinator for minutes, every commit failing
//! "waiting for coordinator" or a request stuck unsent on the coordinator's
//! connection, while the other consumers of the same host on the same
//! broker went on. A stalled consumer is made again
//! (`IncidentKind::ConsumerStalled`): a new one finds its coordinator.
//!
//! The signs of health: a commit the broker confirmed (one goes out every
//! few seconds while the consumer holds positions, and its answer comes
//! back through `consumer::native`), and statistics with the group state
//! `up` — but only while commits are answered and do not fail, and while
//! the member is not waiting on the coordinator for a step of a join
//! (`wait-join`, `wait-metadata`, `wait-sync`): in the stalls seen in CI
//! librdkafka went on reporting `up`, once with its commits failing, once
//! with nothing to commit and a JoinGroup never sent. A join can also be
//! long and sound (the broker holds it until every member has rejoined),
//! so a member waiting on one is excused while the broker says its group
//! is rebalancing ([`StallWatch::excused`]). The watch keeps its
//! own clock rather than librdkafka's: the group state may flip between
//! querying for the coordinator and waiting for its answer every second
//! (its `stateage` never grows); the absence of any sign of health is what
//! counts.
//!
//! A broker outage alone is never a stall: once the consumer has been
//! silent for [`SUSPECT_AFTER`], a thread of the handler's own
//! (`polling::watch_stall`, so that the polling thread never waits on it)
//! asks a broker for metadata every [`PROBE_EVERY`] through a new client
//! (the stuck consumer's own client was seen failing such requests while
//! another reached the broker), and only a consumer silent for
//! [`STALLED_AFTER`] while brokers have answered for [`BROKER_BACK_FOR`]
//! is stalled (after an outage, a healthy consumer finds its coordinator
//! within seconds).

use std::time::{Duration, Instant};

/// How long a consumer that was in its group may show no sign of it
/// before a broker is asked whether it answers.
const SUSPECT_AFTER: Duration = Duration::from_secs(30);

/// How long a consumer must have been silent to be stalled.
const STALLED_AFTER: Duration = Duration::from_secs(60);

/// How often a suspected consumer's broker is asked whether it answers.
const PROBE_EVERY: Duration = Duration::from_secs(10);

/// How long brokers must have answered a suspected consumer before its
/// silence is a stall.
const BROKER_BACK_FOR: Duration = Duration::from_secs(30);

/// How long a commit may wait for the broker's answer before the group
/// state `up` stops counting as a sign of health. A commit goes out every
/// few seconds while the consumer holds positions (`RECOMMIT_INTERVAL`),
/// and its coordinator answers within milliseconds when it answers at all.
const COMMIT_ANSWERED_WITHIN: Duration = Duration::from_secs(15);

/// One consumer's signs of health, and what the polling thread does with
/// their absence.
#[derive(Debug)]
pub(crate) struct StallWatch {
    /// The consumer was assigned partitions since it was made: before
    /// that, it is joining (a join that never completes is librdkafka's
    /// to report).
    joined: bool,
    /// The last sign of health: the consumer made or assigned, a commit
    /// confirmed, statistics with its group state `up` while commits are
    /// answered and no join waits on the broker, the broker saying the
    /// group rebalances while one does.
    healthy_at: Instant,
    /// The last statistics found the member waiting on a step of a join.
    joining: bool,
    /// When a broker was last asked ([`PROBE_EVERY`]).
    probed_at: Option<Instant>,
    /// Since when every probe has found a broker answering.
    answering_since: Option<Instant>,
    /// When the oldest commit the broker has not answered yet was sent.
    unanswered_since: Option<Instant>,
    /// The last commit the broker answered failed.
    commits_failing: bool,
}

impl StallWatch {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            joined: false,
            healthy_at: now,
            joining: false,
            probed_at: None,
            answering_since: None,
            unanswered_since: None,
            commits_failing: false,
        }
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

    /// A sign of health.
    fn healthy(&mut self, now: Instant) {
        self.healthy_at = now;
        (self.probed_at, self.answering_since) = (None, None);
    }

    /// An asynchronous commit went out.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.unanswered_since.get_or_insert(now);
    }

    /// The broker answered a commit: a confirmation is a sign of health, a
    /// failure takes the weight from the group state until one is confirmed.
    pub(crate) fn answered_commit(&mut self, now: Instant, confirmed: bool) {
        self.commits_failing = !confirmed;
        if confirmed {
            self.unanswered_since = None;
            self.healthy(now);
        }
    }

    /// Statistics say the group state is `up`, its join state
    /// `join_state`: a sign of health unless the member waits on its
    /// coordinator for a step of a join, or commits fail or go unanswered
    /// — what a consumer stuck on its coordinator looks like while
    /// librdkafka still reports `up`.
    pub(crate) fn up(&mut self, now: Instant, join_state: &str) {
        let joining = matches!(join_state, "wait-join" | "wait-metadata" | "wait-sync");
        self.joining = joining;
        let unanswered = self.unanswered_since.is_some_and(|at| now.saturating_duration_since(at) >= COMMIT_ANSWERED_WITHIN);
        if !self.commits_failing && !unanswered && !joining {
            self.healthy(now);
        }
    }

    /// Whether the member waits on a step of a join (the probe then asks
    /// whether its group is rebalancing).
    pub(crate) fn joining(&self) -> bool {
        self.joining
    }

    /// The broker says the member's group is rebalancing: its wait on a
    /// join is sound, a sign of health.
    pub(crate) fn excused(&mut self, now: Instant) {
        self.healthy(now);
    }

    /// Whether to ask a broker now: the consumer is suspected (in its
    /// group, silent for [`SUSPECT_AFTER`]) and was not asked about for
    /// [`PROBE_EVERY`].
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        let suspected = self.joined && now.saturating_duration_since(self.healthy_at) >= SUSPECT_AFTER;
        let asked = self.probed_at.is_some_and(|at| now.saturating_duration_since(at) < PROBE_EVERY);
        if suspected && !asked {
            self.probed_at = Some(now);
        }
        suspected && !asked
    }

    /// What the probe found. `Some(silence)`: the consumer is stalled —
    /// silent that long (at least [`STALLED_AFTER`]), brokers answering
    /// for [`BROKER_BACK_FOR`].
    pub(crate) fn answered(&mut self, now: Instant, broker_answers: bool) -> Option<Duration> {
        if !broker_answers {
            self.answering_since = None;
            return None;
        }
        let since = *self.answering_since.get_or_insert(now);
        let silence = now.saturating_duration_since(self.healthy_at);
        (now.saturating_duration_since(since) >= BROKER_BACK_FOR && silence >= STALLED_AFTER).then_some(silence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    /// Probes at `secs` with the brokers answering or not; the stall
    /// found, if any.
    fn probe(watch: &mut StallWatch, start: Instant, secs: u64, answers: bool) -> Option<Duration> {
        let now = at(start, secs);
        if watch.due(now) { watch.answered(now, answers) } else { None }
    }

    #[test]
    fn a_silent_consumer_is_stalled_after_a_minute_of_brokers_answering() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        assert!(!watch.due(at(t, 29)), "half a minute of silence first");
        for secs in [30, 40, 50] {
            assert_eq!(probe(&mut watch, t, secs, true), None, "{secs} s");
        }
        assert_eq!(probe(&mut watch, t, 60, true), Some(Duration::from_secs(60)));
    }

    #[test]
    fn silence_through_an_outage_is_no_stall_until_the_brokers_have_been_back_thirty_seconds() {
        // A 60 s outage: no broker answers the probes; then one does, and
        // the consumer has its time to find its coordinator again.
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        for secs in [30, 40, 50, 60] {
            assert_eq!(probe(&mut watch, t, secs, false), None);
        }
        assert_eq!(probe(&mut watch, t, 70, true), None, "the broker just came back");
        assert_eq!(probe(&mut watch, t, 90, true), None);
        watch.answered_commit(at(t, 95), true);
        assert!(!watch.due(at(t, 124)), "it found its coordinator");
        assert_eq!(probe(&mut watch, t, 125, true), None, "silent again: the clock starts over");
        assert_eq!(probe(&mut watch, t, 145, true), None, "brokers answering 20 s, silent 50 s");
        assert_eq!(probe(&mut watch, t, 155, true), Some(Duration::from_secs(60)));
    }

    #[test]
    fn a_consumer_stuck_after_the_brokers_came_back_is_stalled_thirty_seconds_after_the_first_probe() {
        // Brokers back at 20 s; the consumer never rejoins.
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        watch.up(at(t, 25), "wait-join");
        assert_eq!(probe(&mut watch, t, 30, true), None);
        assert_eq!(probe(&mut watch, t, 50, true), None);
        assert_eq!(probe(&mut watch, t, 60, true), Some(Duration::from_secs(60)));
    }

    #[test]
    fn any_sign_of_health_puts_the_suspicion_off_by_half_a_minute() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        assert_eq!(probe(&mut watch, t, 30, true), None);
        watch.answered_commit(at(t, 35), true);
        assert!(!watch.due(at(t, 64)));
        assert!(watch.due(at(t, 65)));
    }

    #[test]
    fn the_group_state_up_is_health_only_while_commits_are_answered_and_confirmed() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        watch.sent(at(t, 1));
        watch.up(at(t, 10), "steady");
        assert!(!watch.due(at(t, 39)), "a commit 9 s unanswered: up still counts");
        watch.up(at(t, 20), "steady");
        assert!(watch.due(at(t, 40)), "a commit 19 s unanswered: up no longer counts");
        watch.answered_commit(at(t, 41), true);
        watch.up(at(t, 100), "steady");
        assert!(!watch.due(at(t, 129)), "confirmed: up counts again");
    }

    #[test]
    fn the_group_state_up_is_no_health_while_the_member_waits_on_a_join() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        for secs in (5..=60).step_by(5) {
            watch.up(at(t, secs), "wait-join");
            let stalled = if watch.due(at(t, secs)) { watch.answered(at(t, secs), true) } else { None };
            assert_eq!(stalled.is_some(), secs == 60, "{secs} s");
        }
        // Any other join state is health: the member is in its group, or
        // waits on this host (an assignment to apply), not the broker.
        for state in ["wait-assign-call", "steady", "init"] {
            let mut watch = StallWatch::new(t);
            watch.assigned(t);
            watch.up(at(t, 25), state);
            assert!(!watch.due(at(t, 54)), "{state}");
        }
    }

    #[test]
    fn a_consumer_whose_commits_fail_is_stalled_although_librdkafka_reports_up() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        for secs in (5..=90).step_by(5) {
            watch.sent(at(t, secs));
            watch.answered_commit(at(t, secs), false);
            watch.up(at(t, secs), "steady");
            if secs >= 30 {
                let stalled = if watch.due(at(t, secs)) { watch.answered(at(t, secs), true) } else { None };
                assert_eq!(stalled.is_some(), secs >= 60 && secs % 10 == 0, "{secs} s");
            }
        }
    }

    #[test]
    fn a_consumer_with_nothing_to_commit_is_healthy_while_its_group_is_up() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        for secs in (10..=300).step_by(10) {
            watch.up(at(t, secs), "steady");
            assert!(!watch.due(at(t, secs)), "{secs} s");
        }
    }

    #[test]
    fn a_consumer_still_joining_is_never_suspected() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        assert!(!watch.due(at(t, 600)));
        watch.assigned(at(t, 600));
        watch.made(at(t, 601));
        assert!(!watch.due(at(t, 1_000)), "made again: joining again");
    }

    #[test]
    fn a_suspected_consumer_asks_a_broker_every_ten_seconds_not_on_every_poll() {
        let t = Instant::now();
        let mut watch = StallWatch::new(t);
        watch.assigned(t);
        assert!(watch.due(at(t, 30)));
        assert!(!watch.due(at(t, 31)));
        assert!(!watch.due(at(t, 39)));
        assert!(watch.due(at(t, 40)));
    }
}
