//! The worker's two choices about its pending records, as pure functions
//! of what it knows, so that they are tested without Kafka or PostgreSQL:
//! which path the first record takes ([`route`]), and which records form
//! the next batch ([`compose`]). Waiting, running and resolving stay the
//! worker's (`mod.rs`, `batch.rs`, `parking.rs`, `process.rs`).

use std::collections::HashSet;
use std::sync::Arc;

use super::Taken;
use crate::event::Event;
use crate::validate::{Invalid, Record};

/// What the worker knows when its first pending record is to run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Known {
    /// `[handler.batch] max_events` is over 1.
    pub batched: bool,
    /// An event of this assignment was processed past the crash range.
    pub proven: bool,
    /// The partition's crash marks were read for this assignment.
    pub crash_checked: bool,
    /// The first pending record's offset.
    pub front: i64,
    /// Records up to this offset run alone (a crashed or wholly failed batch).
    pub alone_through: i64,
    /// The first pending record's key is parked.
    pub behind_parked: bool,
}

/// The path of the first pending record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Parked behind its key's events, not run.
    ParkBehind,
    /// In a batch with the records after it.
    Batch,
    /// Alone, through the whole failure path.
    Alone,
}

/// A parked key comes first (its records never run before the parked
/// ones); then a batch only once the partition has proven a record in
/// this assignment, its crash marks are known and the record lies past
/// every range that must run alone; else alone.
pub(super) fn route(k: &Known) -> Route {
    if k.behind_parked {
        Route::ParkBehind
    } else if k.batched && k.proven && k.crash_checked && k.front > k.alone_through {
        Route::Batch
    } else {
        Route::Alone
    }
}

/// The longest run of `pending`'s first records (at most `cap`) that are
/// valid, have distinct event ids and whose key is not parked: an invalid
/// record, an id already in the batch (redelivered within it) or a parked
/// key ends the batch, and the next one starts with it. Each record is
/// validated at most once (`check`, kept in its `Taken`), and only as far
/// as the batch reaches.
pub(super) fn compose<'a>(
    pending: impl IntoIterator<Item = &'a mut Taken>,
    cap: usize,
    parked: impl Fn(&Record) -> bool,
    check: impl Fn(&Record) -> Result<Arc<Event>, Invalid>,
) -> Vec<Arc<Event>> {
    let (mut ids, mut events) = (HashSet::new(), Vec::new());
    for taken in pending {
        if events.len() >= cap || parked(&taken.record) {
            break;
        }
        let record = &taken.record;
        match taken.event.get_or_insert_with(|| check(record)) {
            Ok(event) if ids.insert(event.id) => events.push(event.clone()),
            _ => break,
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use uuid::Uuid;

    use super::*;

    fn known() -> Known {
        Known { batched: true, proven: true, crash_checked: true, front: 10, alone_through: -1, behind_parked: false }
    }

    #[test]
    fn a_record_batches_only_when_everything_allows_it() {
        assert_eq!(route(&known()), Route::Batch);
        assert_eq!(route(&Known { batched: false, ..known() }), Route::Alone, "max_events = 1");
        assert_eq!(route(&Known { proven: false, ..known() }), Route::Alone, "nothing proven yet");
        assert_eq!(route(&Known { crash_checked: false, ..known() }), Route::Alone, "marks unread");
    }

    #[test]
    fn a_crash_range_runs_alone_through_its_last_offset() {
        assert_eq!(route(&Known { alone_through: 10, ..known() }), Route::Alone);
        assert_eq!(route(&Known { alone_through: 12, ..known() }), Route::Alone);
        assert_eq!(route(&Known { alone_through: 9, ..known() }), Route::Batch, "past the range");
    }

    #[test]
    fn a_parked_key_parks_before_anything_else() {
        for k in [known(), Known { proven: false, ..known() }, Known { alone_through: 99, ..known() }] {
            assert_eq!(route(&Known { behind_parked: true, ..k }), Route::ParkBehind);
        }
    }

    /// A record at `offset`, keyed `key`, whose payload names its event id.
    fn taken(offset: i64, key: &str, id: &str) -> Taken {
        Taken::new(Record {
            topic: "t".into(),
            partition: 0,
            offset,
            key: Some(key.as_bytes().to_vec()),
            payload: Some(id.as_bytes().to_vec()),
            headers: vec![],
            timestamp: None,
        })
    }

    /// The payload is the event id; "bad" is invalid.
    fn check(record: &Record) -> Result<Arc<Event>, Invalid> {
        let text = String::from_utf8(record.payload.clone().unwrap_or_default()).unwrap();
        let id = Uuid::parse_str(&text).map_err(|_| Invalid::NotObject)?;
        Ok(Arc::new(Event {
            id,
            event_type: "t".into(),
            occurred_at: String::new(),
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            key: record.key.clone(),
            headers: vec![],
            payload: text,
            payload_sha256: [0; 32],
            origin: None,
        }))
    }

    const A: &str = "0190a000-0000-7000-8000-000000000001";
    const B: &str = "0190a000-0000-7000-8000-000000000002";
    const C: &str = "0190a000-0000-7000-8000-000000000003";

    fn offsets(events: &[Arc<Event>]) -> Vec<i64> {
        events.iter().map(|e| e.offset).collect()
    }

    #[test]
    fn a_batch_ends_at_an_invalid_record_a_repeated_id_a_parked_key_or_the_cap() {
        let none = |_: &Record| false;
        let mut p = vec![taken(0, "k", A), taken(1, "k", B), taken(2, "k", "bad"), taken(3, "k", C)];
        assert_eq!(offsets(&compose(&mut p, 10, none, check)), [0, 1], "invalid");
        let mut p = vec![taken(0, "k", A), taken(1, "k", B), taken(2, "k", A), taken(3, "k", C)];
        assert_eq!(offsets(&compose(&mut p, 10, none, check)), [0, 1], "redelivered within the batch");
        let mut p = vec![taken(0, "k", A), taken(1, "parked", B), taken(2, "k", C)];
        assert_eq!(offsets(&compose(&mut p, 10, |r: &Record| r.key.as_deref() == Some(b"parked"), check)), [0]);
        let mut p = vec![taken(0, "k", A), taken(1, "k", B), taken(2, "k", C)];
        assert_eq!(offsets(&compose(&mut p, 2, none, check)), [0, 1], "the cap");
        let mut p = vec![taken(0, "k", "bad"), taken(1, "k", A)];
        assert!(compose(&mut p, 10, none, check).is_empty(), "an invalid first record runs alone");
    }

    #[test]
    fn each_record_is_validated_once_and_only_as_far_as_the_batch_reaches() {
        let calls = Cell::new(0);
        let counted = |r: &Record| {
            calls.set(calls.get() + 1);
            check(r)
        };
        let mut p = vec![taken(0, "k", A), taken(1, "k", B), taken(2, "k", C)];
        compose(&mut p, 2, |_: &Record| false, counted);
        assert_eq!(calls.get(), 2, "the third record is past the cap");
        // Formed again after a split: the two read their kept results.
        assert_eq!(offsets(&compose(&mut p, 3, |_: &Record| false, counted)), [0, 1, 2]);
        assert_eq!(calls.get(), 3);
    }
}
