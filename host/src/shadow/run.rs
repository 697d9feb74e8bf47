//! One shadow run: a batch's events on both versions in one transaction
//! that is rolled back, each version under a savepoint of its own.

use std::collections::BTreeMap;

use sqlx::Executor as _;

use super::compare::Side;
use crate::event::Event;
use crate::executor::{Executor, Rehearsal};
use crate::transaction::EventTx;

/// How long a shadow's statement waits for a row a live transaction holds:
/// the shadow gives way (its event is skipped), never the live one.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '200ms'";

/// Event types one version's report holds; the rest are counted here.
pub const OTHER: &str = "(other)";

/// An event type as the report names it (types come from payloads).
pub fn type_name(event_type: &str) -> String {
    crate::text::shown(event_type, 200)
}

/// Differing events one run keeps with both sides, at most.
const MAX_KEPT: usize = 5;

/// What a run counted: per event type, agree, differ and skipped, and the
/// first differing events.
#[derive(Debug, Default)]
pub struct Tally {
    pub counts: BTreeMap<String, [i64; 3]>,
    pub differences: Vec<Difference>,
}

/// A differing event, with what both versions did.
#[derive(Debug)]
pub struct Difference {
    pub event: Event,
    pub differs: Vec<&'static str>,
    pub active: Side,
    pub shadow: Side,
}

impl Tally {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    fn count(&mut self, event: &Event, column: usize) {
        self.counts.entry(type_name(&event.event_type)).or_default()[column] += 1;
    }

    /// Adds skips counted apart from a run.
    pub fn add_skipped(&mut self, skipped: BTreeMap<String, i64>) {
        for (kind, n) in skipped {
            self.counts.entry(kind).or_default()[2] += n;
        }
    }
}

/// Runs each of `events` on `active` and on `shadow` (both rehearsing) and
/// compares them; nothing of it remains.
pub async fn run(active: &Executor, shadow: &Executor, events: &[Event]) -> Tally {
    let mut tally = Tally::default();
    let mut tx = match active.begin().await {
        Ok(mut tx) => match tx.conn().execute(LOCK_TIMEOUT).await {
            Ok(_) => Some(tx),
            Err(_) => {
                tx.abandon(active.pool());
                None
            }
        },
        Err(_) => None,
    };
    for event in events {
        let Some(live) = tx.take() else {
            tally.count(event, 2);
            continue;
        };
        let (mut a, mut b) = both(active, shadow, live, event).await;
        tx = b.as_mut().and_then(|b| b.tx.take()).or_else(|| a.tx.take());
        match (Side::of(&a), b.as_ref().and_then(Side::of)) {
            (Some(a), Some(b)) => {
                let differs = a.differences(&b);
                if differs.is_empty() {
                    tally.count(event, 0);
                } else {
                    tally.count(event, 1);
                    if tally.differences.len() < MAX_KEPT {
                        tally.differences.push(Difference { event: event.clone(), differs, active: a, shadow: b });
                    }
                }
            }
            _ => {
                let why = |r: Option<&Rehearsal>| r.map(|r| format!("{:?} {:?}", r.result, r.statements));
                tracing::debug!(event_id = %event.id, active = ?why(Some(&a)), shadow = ?why(b.as_ref()), "not shadowed: a run says nothing");
                tally.count(event, 2);
            }
        }
    }
    if let Some(tx) = tx {
        tx.rollback().await;
    }
    tally
}

/// `event` on the active version, then on the shadow (if the transaction
/// went on).
async fn both(active: &Executor, shadow: &Executor, tx: EventTx, event: &Event) -> (Rehearsal, Option<Rehearsal>) {
    let mut a = active.rehearse(tx, event).await;
    let b = match a.tx.take() {
        Some(tx) => Some(shadow.rehearse(tx, event).await),
        None => None,
    };
    (a, b)
}
