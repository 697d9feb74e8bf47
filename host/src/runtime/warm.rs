//! Instances kept between events: `events_per_instance` above 1.
//!
//! By default every event gets a fresh instance, so nothing of one event's
//! run (a static, an interpreter's heap) reaches the next, not even from
//! an event whose transaction rolled back. That costs an instantiation per
//! event: about 8 µs for a Rust component, but some milliseconds for an
//! interpreter (componentize-py's CPython re-fills tables of tens of
//! thousands of functions at every instantiation; measured, it is nine
//! tenths of a Python handler's CPU per event). A handler that keeps no
//! state of its own in memory loses nothing by reusing an instance, so an
//! operator may let one serve up to `events_per_instance` events.
//!
//! What stays fresh per event: the capabilities (the transaction, the
//! allowances, the event id behind the idempotency keys and the log), the
//! invocation's budget, and its share of the output pipes. What carries
//! over: the guest's memory and globals, and its WASI handles. An instance
//! is retired (dropped, never shelved again) once it has served its
//! quota, when an invocation trapped, overran its budget or failed in the
//! host, and when its output pipes hold a whole invocation's worth, so
//! that the next invocation can still write as much as on a fresh one. An
//! event that trapped on a kept instance runs again on a fresh one
//! (`Returned::kept`, `ExecError::KeptTrapped`). An instance serves one
//! event at a time; the shelf holds the idle ones, for a minute at most: a
//! sweep every half minute drops those idle longer, so a handler that goes
//! quiet gives its instances' memory back. Host memory a guest holds
//! through WASI handles is bounded per store (`state.rs`), kept instance or
//! not.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::state::{HostState, OUTPUT_CAPACITY};
use crate::wit;

/// Idle kept instances at most per handler version. Idle ones are never
/// more than were in use at once (each was shelved after its event), so
/// they fit the pool; this bounds what a version keeps after a burst.
const MOST_IDLE: usize = 32;

/// How long an idle instance is kept: after a burst, the instances it
/// needed give back their memory and pool slots once the load is gone.
const IDLE_FOR: Duration = Duration::from_secs(60);

/// How often a shelf that keeps instances drops those idle past [`IDLE_FOR`].
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Traps on kept instances after which a version keeps no more: each costs
/// its event a second run (on a fresh instance), so a handler whose memory
/// does not stay the same from event to event, or one trapping there on
/// purpose, gets a fresh instance per event from then on.
pub(super) const MOST_KEPT_TRAPS: u32 = 3;

/// An instance between two of its events.
pub(super) struct Kept {
    pub(super) store: Store<HostState>,
    pub(super) instance: wit::Handler,
    /// Events it has served.
    pub(super) served: u32,
    /// When it was shelved.
    pub(super) since: Instant,
}

/// The idle kept instances of one handler version.
pub(super) struct Shelf {
    /// Events one instance may serve (`events_per_instance`); 1: none is kept.
    quota: u32,
    idle: Mutex<Vec<Kept>>,
    /// Events that trapped on a kept instance (see [`MOST_KEPT_TRAPS`]).
    kept_traps: AtomicU32,
}

impl Shelf {
    pub(super) fn new(quota: u32) -> Self {
        Self { quota: quota.max(1), idle: Mutex::new(Vec::new()), kept_traps: AtomicU32::new(0) }
    }

    /// A shelf for a handler version; one that keeps instances is swept
    /// every [`SWEEP_EVERY`] for as long as the version is in use (outside
    /// a runtime, as in `idem check`, only its own use expires them).
    pub(super) fn shared(quota: u32) -> Arc<Self> {
        let shelf = Arc::new(Self::new(quota));
        if shelf.keeps()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let swept = Arc::downgrade(&shelf);
            runtime.spawn(async move {
                let mut every = tokio::time::interval_at(tokio::time::Instant::now() + SWEEP_EVERY, SWEEP_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let Some(shelf) = swept.upgrade() else { break };
                    // Dropped here, outside the lock: a store's drop unmaps.
                    drop(shelf.expired());
                }
            });
        }
        shelf
    }

    /// Takes the instances idle past [`IDLE_FOR`] off the shelf.
    fn expired(&self) -> Vec<Kept> {
        let Ok(mut idle) = self.idle.lock() else { return Vec::new() };
        expire(&mut idle, |kept| kept.since, Instant::now())
    }

    /// Whether instances are kept: a quota above 1, and fewer than
    /// [`MOST_KEPT_TRAPS`] traps on kept instances so far.
    pub(super) fn keeps(&self) -> bool {
        self.quota > 1 && self.kept_traps.load(Ordering::Relaxed) < MOST_KEPT_TRAPS
    }

    /// An event trapped on a kept instance: the idle ones, which served the
    /// same kind of events, are dropped too. Whether the version stops
    /// keeping instances with this trap.
    pub(super) fn kept_trapped(&self) -> bool {
        let idle = self.idle.lock().map(|mut idle| std::mem::take(&mut *idle)).unwrap_or_default();
        drop(idle);
        self.kept_traps.fetch_add(1, Ordering::Relaxed) + 1 == MOST_KEPT_TRAPS
    }

    /// An idle instance, the most recently used (its pages are the most
    /// likely still cached).
    pub(super) fn take(&self) -> Option<Kept> {
        let mut idle = self.idle.lock().ok()?;
        let now = Instant::now();
        idle.retain(|kept| now.saturating_duration_since(kept.since) < IDLE_FOR);
        idle.pop()
    }

    /// Shelves `kept` after an invocation that returned normally, unless it
    /// is due to retire.
    pub(super) fn put(&self, kept: Kept) {
        let spent = kept.served >= self.quota || kept.store.data().output_used() >= OUTPUT_CAPACITY;
        if spent {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|kept| kept.since.elapsed() < IDLE_FOR);
            if idle.len() < MOST_IDLE {
                idle.push(Kept { since: Instant::now(), ..kept });
            }
        }
    }
}

/// The items of `idle` shelved (`since`) [`IDLE_FOR`] or more before `now`,
/// taken out; the others stay, in their order.
fn expire<T>(idle: &mut Vec<T>, since: impl Fn(&T) -> Instant, now: Instant) -> Vec<T> {
    let (old, young): (Vec<T>, Vec<T>) =
        std::mem::take(idle).into_iter().partition(|item| now.saturating_duration_since(since(item)) >= IDLE_FOR);
    *idle = young;
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_takes_out_what_idled_a_minute_and_keeps_the_rest_in_order() {
        let now = Instant::now() + Duration::from_secs(600);
        let ago = |s: u64| now - Duration::from_secs(s);
        let mut idle = vec![ago(90), ago(5), ago(60), ago(59), ago(0)];
        let old = expire(&mut idle, |at| *at, now);
        assert_eq!(old, [ago(90), ago(60)]);
        assert_eq!(idle, [ago(5), ago(59), ago(0)], "the most recent stays last: take() pops it");
        assert!(expire(&mut idle, |at| *at, now).is_empty(), "nothing more to take");
    }

    #[test]
    fn a_version_keeps_no_more_instances_after_its_third_trap_on_a_kept_one() {
        let shelf = Shelf::new(1000);
        assert!(shelf.keeps());
        assert_eq!((shelf.kept_trapped(), shelf.kept_trapped()), (false, false));
        assert!(shelf.keeps(), "two traps: still kept");
        assert!(shelf.kept_trapped(), "the third stops it, said once");
        assert!(!shelf.keeps());
        assert!(!shelf.kept_trapped());
        assert!(!Shelf::new(1).keeps(), "a quota of 1 keeps none");
    }
}
