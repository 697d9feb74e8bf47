//! The quarantine (`[handler.failure] on_exhausted = "quarantine"`): a key
//! whose event keeps failing is parked in PostgreSQL, with that event and
//! every later event of the key, in order, while the partition's other
//! keys flow and its offsets move on.
//!
//! - **Parking** is the partition worker's (`worker::parking`): a
//!   retryable failure parks the event's key with a due time (its backoff,
//!   waited out here rather than in the lane: nothing behind it waits), a
//!   failure whose attempts are spent parks it *held*; every later record
//!   of a parked key is stored behind it. The record is resolved once its
//!   row committed, so its offset commits and a crash loses nothing.
//! - **Running** parked events is [`drain`]'s: on every host, a task per
//!   handler leases a due key (one host at a time runs a key) and runs its
//!   events in order through the handler's executor — the dedup ledger
//!   makes each take effect once, whatever crash comes between its commit
//!   and its row's removal. A failure stops the key again (retrying, then
//!   held); when none is left, the key is let go and its new records run
//!   the normal way.
//! - **Operators** list held keys, release one (its events due at once,
//!   the first one's attempts afresh) or dead-letter it (`operate`).
//!
//! Which keys are parked, as a host knows it ([`Quarantine`]): read from
//! the table when a partition is assigned (before its first record runs),
//! then kept by the host's own parks. A key let go elsewhere stays in the
//! set until the next read, harmlessly: the next record's append finds the
//! key gone and runs normally. A key is forgotten only as of when the
//! forgetting task learnt it was gone ([`Quarantine::stamp`]): a park this
//! host noted since (the key's lane parking its next record while the
//! drain was letting the key go) is kept, so later records queue behind it. A key is parked in the partition its
//! records come from, which one host owns at a time, so no other host adds
//! one meanwhile (a host that lost the partition while parking is the one
//! exception; it may leave a record parked twice — run once — or parked
//! behind a later one that already ran).
//!
//! Records without a key cannot be parked: their failures go to the
//! dead-letter topic as before, as do failures retrying cannot mend
//! (permanent, invalid).

mod drain;
pub mod lease;
pub mod operate;
pub mod store;

use std::collections::HashMap;
use std::sync::Mutex;

pub(crate) use drain::spawn;

/// How long a host holds a key whose events it runs, renewed after each
/// event; a host that dies leaves the key to another after this.
const LEASE_SECONDS: f64 = 60.0;

/// One handler's quarantine, as this host knows it.
pub(crate) struct Quarantine {
    on: bool,
    pub max_parked: u64,
    /// This host's name, on the keys it leases.
    pub host: String,
    keys: Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    /// Each key with the count of this host's park that last noted it
    /// (a key from a read: the count when the read began).
    parked: HashMap<Vec<u8>, u64>,
    /// Keys this host parked since the reads in flight began: (count, key);
    /// kept only while a read is in flight, so it does not grow between them.
    since: Vec<(u64, Vec<u8>)>,
    count: u64,
    /// Reads in flight.
    reading: usize,
}

/// A read in flight, counted until it ends or is dropped.
struct Reading<'a>(&'a Quarantine);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut keys = self.0.keys();
        keys.reading -= 1;
        if keys.reading == 0 {
            keys.since.clear();
        }
    }
}

impl Quarantine {
    pub(crate) fn new(config: &crate::config::HandlerConfig, host: String) -> Self {
        Self { on: config.quarantines(), max_parked: config.failure.max_parked, host, keys: Mutex::default() }
    }

    /// Whether the handler parks keys at all.
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key` is parked, as far as this host knows.
    pub(crate) fn holds(&self, key: Option<&[u8]>) -> bool {
        self.on && key.is_some_and(|k| self.keys().parked.contains_key(k))
    }

    /// Where this host's parks stand now: taken before asking the table
    /// whether a key is gone, and handed to [`forget`](Self::forget).
    pub(crate) fn stamp(&self) -> u64 {
        self.keys().count
    }

    /// This host parked `key`.
    pub(crate) fn noted(&self, key: &[u8]) {
        let mut keys = self.keys();
        keys.count += 1;
        let n = keys.count;
        if keys.reading > 0 {
            keys.since.push((n, key.to_vec()));
        }
        keys.parked.insert(key.to_vec(), n);
    }

    /// `key` was parked no more as of `stamp` ([`stamp`](Self::stamp)):
    /// forgotten unless this host parked it again since.
    pub(crate) fn forget(&self, key: &[u8], stamp: u64) {
        let mut keys = self.keys();
        if keys.parked.get(key).is_some_and(|noted| *noted <= stamp) {
            keys.parked.remove(key);
        }
    }

    /// Reads the handler's parked keys: this host's parks since the read
    /// began are kept over it (the read may have missed them).
    pub(crate) async fn read(&self, pool: &sqlx::PgPool, handler: &str) -> sqlx::Result<()> {
        let began = {
            let mut keys = self.keys();
            keys.reading += 1;
            keys.count
        };
        let _reading = Reading(self);
        let read = store::keys(pool, handler).await?;
        self.keys().replace(read, began);
        Ok(())
    }
}

impl Keys {
    /// The keys `read` after this host's `began`-th park, and the parks
    /// since then.
    ///
    /// `since` is not pruned here: another read begun earlier may still be
    /// in flight and need the parks since its own start (partitions
    /// assigned together read at once); it is emptied when none is.
    fn replace(&mut self, read: Vec<Vec<u8>>, began: u64) {
        let since = self.since.iter().filter(|(n, _)| *n > began).map(|(n, k)| (k.clone(), *n));
        self.parked = read.into_iter().map(|k| (k, began)).chain(since).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quarantining() -> Quarantine {
        let mut config = crate::config::HandlerConfig::named("h".into());
        config.failure.on_exhausted = crate::config::OnExhausted::Quarantine;
        Quarantine::new(&config, "host".into())
    }

    #[test]
    fn a_park_during_a_read_survives_it_and_a_key_let_go_elsewhere_leaves_with_the_next_read() {
        let q = quarantining();
        q.noted(b"early");
        let began = q.keys().count;
        let reading = Reading(&q);
        q.keys().reading += 1;
        // Parked while the read was on its way, and not in what it read.
        q.noted(b"during");
        q.keys().replace(vec![b"other-host".to_vec()], began);
        drop(reading);
        assert!(q.keys().since.is_empty(), "no read in flight: nothing kept for one");
        assert!(q.holds(Some(b"during")), "a park the read missed is kept");
        assert!(q.holds(Some(b"other-host")));
        assert!(!q.holds(Some(b"early")), "a park before the read that the read does not hold was let go");
        // The next read holds what the table holds, nothing older.
        let began = q.keys().count;
        q.keys().replace(Vec::new(), began);
        assert!(!q.holds(Some(b"during")) && !q.holds(Some(b"other-host")));
    }

    #[test]
    fn a_forgotten_key_is_free_and_a_handler_without_quarantine_holds_nothing() {
        let q = quarantining();
        q.noted(b"k");
        assert!(q.holds(Some(b"k")) && !q.holds(Some(b"j")) && !q.holds(None));
        q.forget(b"k", q.stamp());
        assert!(!q.holds(Some(b"k")));
        let off = Quarantine::new(&crate::config::HandlerConfig::named("h".into()), "host".into());
        off.noted(b"k");
        assert!(!off.holds(Some(b"k")), "a handler that does not quarantine parks nothing");
    }

    #[test]
    fn reads_in_flight_at_once_each_keep_the_parks_since_their_own_start() {
        let q = quarantining();
        q.keys().reading += 2;
        let (_a, _b) = (Reading(&q), Reading(&q));
        let a = q.stamp();
        q.noted(b"k");
        let b = q.stamp();
        // B began after the park and saw it; A read the table before the
        // park committed, and ends last.
        q.keys().replace(vec![b"k".to_vec()], b);
        q.keys().replace(Vec::new(), a);
        assert!(q.holds(Some(b"k")), "the park survives the older read");
    }

    #[test]
    fn a_key_parked_again_while_another_task_let_it_go_stays_parked() {
        let q = quarantining();
        q.noted(b"k");
        // The drain takes its stamp, lets the key go in the table; meanwhile
        // the key's lane finds it gone, runs its next record, parks it.
        let drained = q.stamp();
        let lane = q.stamp();
        q.forget(b"k", lane);
        q.noted(b"k");
        q.forget(b"k", drained);
        assert!(q.holds(Some(b"k")), "the lane's park survives the drain's late forget");
        q.forget(b"k", q.stamp());
        assert!(!q.holds(Some(b"k")));
    }
}
