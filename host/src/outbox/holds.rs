//! The topics a relay holds back after an outage hit their rows: each
//! waits its own backoff, doubling from [`MIN_BACKOFF`] to [`MAX_BACKOFF`],
//! while the producer's other topics go on. Kept apart from the relay so
//! that the clock is a parameter: the rules below are tested without a
//! broker.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

/// Backoff after an outage: from this, doubling, up to [`MAX_BACKOFF`].
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Held-back topics: until when each waits, and its next backoff.
#[derive(Default)]
pub(super) struct Holds(HashMap<String, (Instant, Duration)>);

impl Holds {
    /// The topics still waiting at `now`: a round reads none of their rows.
    pub fn waiting(&self, now: Instant) -> Vec<String> {
        self.0.iter().filter(|(_, (until, _))| *until > now).map(|(t, _)| t.clone()).collect()
    }

    /// How long from `now` until the first held topic may be tried again
    /// (zero for a wait already over: its rows are due).
    pub fn next(&self, now: Instant) -> Option<Duration> {
        self.0.values().map(|(until, _)| until.saturating_duration_since(now)).min()
    }

    /// A round read no rows at `now`: a topic whose wait is over has none
    /// left, and is forgotten.
    pub fn forget_over(&mut self, now: Instant) {
        self.0.retain(|_, (until, _)| *until > now);
    }

    /// After a round that read rows of the topics `tried` at `read`: the
    /// topics in `held` wait their next backoff from `now` (returned, to be
    /// announced); a topic tried whose wait was over at `read` and that held
    /// nothing back went through, and is free again. A topic not tried
    /// keeps its backoff: its wait ran out while the round was sending, or
    /// the round's row limit left its rows for the next; forgetting it would
    /// start its backoff again from the shortest.
    pub fn hold_back(
        &mut self,
        tried: &HashSet<String>,
        held: &[String],
        read: Instant,
        now: Instant,
    ) -> Vec<(String, Duration)> {
        self.0.retain(|topic, (until, _)| held.contains(topic) || *until > read || !tried.contains(topic));
        held.iter()
            .map(|topic| {
                let mut backoff = self.0.get(topic).map_or(MIN_BACKOFF, |(_, next)| *next);
                let wait = next_backoff(&mut backoff);
                self.0.insert(topic.clone(), (now + wait, backoff));
                (topic.clone(), wait)
            })
            .collect()
    }
}

/// The backoff to wait now; the next one doubles, up to [`MAX_BACKOFF`].
pub(super) fn next_backoff(backoff: &mut Duration) -> Duration {
    let now = *backoff;
    *backoff = (now * 2).min(MAX_BACKOFF);
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// The topics a round read rows of.
    fn read(topics: &[&str]) -> HashSet<String> {
        topics.iter().map(|t| (*t).to_owned()).collect()
    }

    /// One outage round after another, each read right as the last wait ran
    /// out: the waits announced.
    fn outage(holds: &mut Holds, start: Instant, rounds: usize) -> Vec<Duration> {
        let mut at = start;
        (0..rounds)
            .map(|_| {
                let waits = holds.hold_back(&read(&["t"]), &["t".into()], at, at + MS(5));
                at += MS(5) + waits[0].1;
                waits[0].1
            })
            .collect()
    }

    #[test]
    fn a_topic_held_round_after_round_waits_from_100_ms_doubling_to_5_s() {
        let mut holds = Holds::default();
        let waits = outage(&mut holds, Instant::now(), 8);
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000].map(MS));
    }

    #[test]
    fn a_wait_that_runs_out_while_another_topic_is_sent_keeps_its_backoff() {
        let mut holds = Holds::default();
        let start = Instant::now();
        assert_eq!(outage(&mut holds, start, 3), [100, 200, 400].map(MS));
        let until = start + MS(5 + 100 + 5 + 200 + 5) + MS(400);
        // A round of the other topic read before the wait ran out and
        // settled after it: the held topic was not tried.
        holds.hold_back(&read(&["u"]), &[], until - MS(1), until + MS(50));
        assert!(holds.waiting(until + MS(50)).is_empty(), "its wait is over");
        assert_eq!(holds.next(until + MS(50)), Some(Duration::ZERO), "its rows are due at once");
        // A round after it whose row limit left no room for its rows.
        holds.hold_back(&read(&["u"]), &[], until + MS(55), until + MS(58));
        let waits = holds.hold_back(&read(&["t"]), &["t".into()], until + MS(60), until + MS(70));
        assert_eq!(waits, [("t".into(), MS(800))], "the backoff goes on doubling");
    }

    #[test]
    fn a_topic_that_went_through_after_its_wait_starts_from_100_ms_again() {
        let mut holds = Holds::default();
        let start = Instant::now();
        outage(&mut holds, start, 4);
        let later = start + Duration::from_secs(10);
        holds.hold_back(&read(&["t"]), &[], later, later + MS(5));
        let waits = holds.hold_back(&read(&["t"]), &["t".into()], later + MS(10), later + MS(15));
        assert_eq!(waits, [("t".into(), MS(100))]);
    }

    #[test]
    fn the_next_round_comes_when_the_first_wait_is_over_and_a_round_without_rows_forgets_it() {
        let mut holds = Holds::default();
        let start = Instant::now();
        holds.hold_back(&read(&["a"]), &["a".into()], start, start);
        assert_eq!(holds.next(start + MS(30)), Some(MS(70)));
        assert_eq!(holds.waiting(start + MS(30)), ["a"]);
        assert_eq!(holds.next(start + MS(100)), Some(Duration::ZERO), "due at once");
        assert!(holds.waiting(start + MS(100)).is_empty());
        holds.forget_over(start + MS(100));
        assert!(holds.0.is_empty());
        assert_eq!(holds.next(start + MS(100)), None);
    }
}
