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
//! that the next invocation can still write as much as on a fresh one.
//! An instance serves one event at a time; the shelf holds the idle ones,
//! for a minute at most. Host memory a guest holds through WASI handles is
//! bounded per store (`state.rs`), kept instance or not.

use std::sync::Mutex;
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
}

impl Shelf {
    pub(super) fn new(quota: u32) -> Self {
        Self { quota: quota.max(1), idle: Mutex::new(Vec::new()) }
    }

    /// Whether instances are kept at all.
    pub(super) fn keeps(&self) -> bool {
        self.quota > 1
    }

    /// An idle instance, the most recently used (its pages are the most
    /// likely still cached).
    pub(super) fn take(&self) -> Option<Kept> {
        let mut idle = self.idle.lock().ok()?;
        idle.retain(|kept| kept.since.elapsed() < IDLE_FOR);
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
