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

/// The most one run takes, both versions and every event of it: the live
/// batch waits for its run, and a live transaction may wait for a row a
/// shadow's statement holds; what is left when it is spent is skipped.
pub const BUDGET: std::time::Duration = std::time::Duration::from_secs(1);

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
    let deadline = tokio::time::Instant::now() + BUDGET;
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
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(live) = tx.take().filter(|_| !left.is_zero()) else {
            tally.count(event, 2);
            continue;
        };
        let (mut a, mut b) = both(active, shadow, live, event, deadline).await;
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
                not_compared(event, &a, b.as_ref());
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
/// went on), each within what is left until `deadline`.
async fn both(
    active: &Executor,
    shadow: &Executor,
    tx: EventTx,
    event: &Event,
    deadline: tokio::time::Instant,
) -> (Rehearsal, Option<Rehearsal>) {
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let mut a = active.rehearse(tx, event, left()).await;
    let b = match a.tx.take() {
        Some(tx) if !left().is_zero() => Some(shadow.rehearse(tx, event, left()).await),
        Some(tx) => {
            a.tx = Some(tx);
            None
        }
        None => None,
    };
    (a, b)
}

/// Says why `event` was not compared: at WARN when the host's own rights
/// are at fault (`idem migrate --config` grants them), else at DEBUG.
fn not_compared(event: &Event, a: &Rehearsal, b: Option<&Rehearsal>) {
    let refused = |r: &Rehearsal| matches!(r.result, Err(crate::error::ExecError::Schema(_)));
    let why = |r: Option<&Rehearsal>| r.map(|r| format!("{:?} {:?}", r.result, r.statements));
    if refused(a) || b.is_some_and(refused) {
        tracing::warn!(event_id = %event.id, active = ?why(Some(a)), shadow = ?why(b), "shadow run refused: {}", "run `idem migrate --config`");
    } else {
        tracing::debug!(event_id = %event.id, active = ?why(Some(a)), shadow = ?why(b), "not shadowed: a run says nothing");
    }
}
