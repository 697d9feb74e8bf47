//! Which events of a batch may run at the same time: an event waits for
//! the one before it in its chain. Under `ordering = "partition"` a
//! partition's events are one chain (one after another, as they came);
//! under `"key"` each key of a partition is a chain (keyless events share
//! one, as they share a lane); under `"none"` every event is a chain of
//! its own.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};

use crate::config::Ordering;
use crate::event::Event;

/// The order a batch's events may start in, as they complete.
#[derive(Debug)]
pub(super) struct Schedule {
    /// The event after each one in its chain.
    next: Vec<Option<usize>>,
    /// Events whose chain has nothing before them left: ready to start,
    /// lowest index first.
    ready: BTreeSet<usize>,
}

impl Schedule {
    pub(super) fn new<E: Borrow<Event>>(events: &[E], ordering: Ordering) -> Self {
        let mut next = vec![None; events.len()];
        let mut ready = BTreeSet::new();
        let mut last: HashMap<(&str, i32, Option<&[u8]>), usize> = HashMap::new();
        for (i, event) in events.iter().map(Borrow::borrow).enumerate() {
            let chain = match ordering {
                Ordering::Partition => (event.topic.as_str(), event.partition, None),
                Ordering::Key => {
                    (event.topic.as_str(), event.partition, Some(event.key.as_deref().unwrap_or_default()))
                }
                Ordering::None => {
                    ready.insert(i);
                    continue;
                }
            };
            match last.insert(chain, i) {
                Some(before) => next[before] = Some(i),
                None => {
                    ready.insert(i);
                }
            }
        }
        Self { next, ready }
    }

    /// One event after another in the batch's order: what every ordering
    /// allows when one runs at a time (no chain to work out).
    pub(super) fn in_order(len: usize) -> Self {
        let next = (1..=len).map(|i| (i < len).then_some(i)).collect();
        let ready = (0..len.min(1)).collect();
        Self { next, ready }
    }

    /// The lowest-indexed event ready to start, taken.
    pub(super) fn take_ready(&mut self) -> Option<usize> {
        self.ready.pop_first()
    }

    /// The event at `index` completed: the next of its chain may start.
    pub(super) fn done(&mut self, index: usize) {
        if let Some(next) = self.next.get(index).copied().flatten() {
            self.ready.insert(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;
    use crate::config::Ordering;
    use crate::event::Event;

    fn event(partition: i32, key: Option<&str>) -> Event {
        Event {
            id: uuid::Uuid::now_v7(),
            event_type: "t".into(),
            occurred_at: "2026-12-01T00:00:00Z".into(),
            topic: "orders".into(),
            partition,
            offset: 0,
            key: key.map(|k| k.as_bytes().to_vec()),
            headers: Vec::new(),
            payload: "{}".into(),
            payload_sha256: [0; 32],
            origin: None,
        }
    }

    /// Everything ready now, taken.
    fn drain(schedule: &mut Schedule) -> Vec<usize> {
        std::iter::from_fn(|| schedule.take_ready()).collect()
    }

    #[test]
    fn a_partitions_events_run_one_after_another_under_partition_ordering() {
        let events = [event(0, Some("a")), event(0, Some("b")), event(1, None), event(0, None)];
        let mut s = Schedule::new(&events, Ordering::Partition);
        assert_eq!(drain(&mut s), vec![0, 2], "the first of each partition");
        s.done(0);
        assert_eq!(drain(&mut s), vec![1]);
        s.done(2);
        assert_eq!(drain(&mut s), Vec::<usize>::new(), "partition 1 has nothing after");
        s.done(1);
        assert_eq!(drain(&mut s), vec![3]);
    }

    #[test]
    fn under_key_ordering_only_a_keys_own_events_wait_and_keyless_ones_share_a_chain() {
        let events = [event(0, Some("a")), event(0, Some("b")), event(0, Some("a")), event(0, None), event(0, None)];
        let mut s = Schedule::new(&events, Ordering::Key);
        assert_eq!(drain(&mut s), vec![0, 1, 3]);
        s.done(1);
        assert_eq!(drain(&mut s), Vec::<usize>::new(), "b's completion frees nothing");
        s.done(3);
        assert_eq!(drain(&mut s), vec![4], "keyless records keep their order among themselves");
        s.done(0);
        assert_eq!(drain(&mut s), vec![2]);
    }

    #[test]
    fn the_same_key_on_two_partitions_is_two_chains() {
        let events = [event(0, Some("a")), event(1, Some("a"))];
        assert_eq!(drain(&mut Schedule::new(&events, Ordering::Key)), vec![0, 1]);
    }

    #[test]
    fn in_order_runs_each_event_after_the_one_before() {
        let mut s = Schedule::in_order(3);
        for i in 0..3 {
            assert_eq!(drain(&mut s), vec![i]);
            s.done(i);
        }
        assert_eq!(drain(&mut s), Vec::<usize>::new());
        assert_eq!(drain(&mut Schedule::in_order(0)), Vec::<usize>::new(), "an empty batch has nothing to run");
    }

    #[test]
    fn under_no_ordering_everything_is_ready_at_once() {
        let events = [event(0, Some("a")), event(0, Some("a")), event(0, None)];
        assert_eq!(drain(&mut Schedule::new(&events, Ordering::None)), vec![0, 1, 2]);
    }
}
