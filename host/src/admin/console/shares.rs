//! Fair shares of the console's bounded work (reading a dead-letter page
//! holds a Kafka client and a blocking thread for seconds).
//!
//! Each scope has slots of its own, so `read` sessions can never take what
//! an `operate` session needs; within a scope, each session holds at most
//! one slot or one place in the queue, and the queue is first come, first
//! served (tokio's semaphore is fair). A session that reads in a loop thus
//! waits its turn like everyone else: it never gets more than its share,
//! and a second request of it while one is pending is refused at once
//! (429). A turn that does not come within [`LONGEST_WAIT`] is answered
//! 503, naming the wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::super::access::Scope;

/// DLQ pages read at once, per scope.
const SLOTS_PER_SCOPE: usize = 2;
/// The longest a request waits in the queue for its turn.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(20);

/// Why a request got no share.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The session has a request of its own pending.
    Pending,
    /// No turn within [`LONGEST_WAIT`].
    Busy,
}

#[derive(Debug)]
pub(crate) struct Shares {
    read: Arc<Semaphore>,
    operate: Arc<Semaphore>,
    /// Sessions with a request holding a slot or waiting for one.
    pending: Arc<Mutex<HashMap<u64, ()>>>,
    wait: Duration,
}

impl Default for Shares {
    fn default() -> Self {
        Self::new(SLOTS_PER_SCOPE, LONGEST_WAIT)
    }
}

/// A slot, held by the work it allows (dropping it frees the slot and
/// the session's place).
#[derive(Debug)]
pub(crate) struct Share {
    _permit: OwnedSemaphorePermit,
    _pending: Pending,
}

#[derive(Debug)]
struct Pending {
    session: u64,
    sessions: Arc<Mutex<HashMap<u64, ()>>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.session);
    }
}

impl Shares {
    pub(crate) fn new(slots: usize, wait: Duration) -> Self {
        Self {
            read: Arc::new(Semaphore::new(slots)),
            operate: Arc::new(Semaphore::new(slots)),
            pending: Arc::default(),
            wait,
        }
    }

    /// Waits for a slot of `scope` for `session`, in turn.
    pub(crate) async fn take(&self, scope: Scope, session: u64) -> Result<Share, Refused> {
        let pending = {
            let mut sessions = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if sessions.insert(session, ()).is_some() {
                return Err(Refused::Pending);
            }
            Pending { session, sessions: self.pending.clone() }
        };
        let slots = match scope {
            Scope::Read => self.read.clone(),
            Scope::Operate => self.operate.clone(),
        };
        match tokio::time::timeout(self.wait, slots.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Share { _permit: permit, _pending: pending }),
            // Never closed; a timeout is the busy case.
            Ok(Err(_)) | Err(_) => Err(Refused::Busy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_holds_one_share_and_waits_its_turn() {
        let shares = Shares::new(1, Duration::from_secs(5));
        let first = shares.take(Scope::Read, 1).await.expect("a slot");
        assert_eq!(shares.take(Scope::Read, 1).await.err(), Some(Refused::Pending), "one per session");
        // Another read session queues; operate has slots of its own.
        let operate = shares.take(Scope::Operate, 3).await.expect("operate is not behind read");
        let shares = Arc::new(shares);
        let queued = tokio::spawn({
            let shares = shares.clone();
            async move { shares.take(Scope::Read, 2).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The looping session comes back while the other waits: the freed
        // slot is the waiting one's, and the looper waits behind it.
        drop(first);
        let again = tokio::spawn({
            let shares = shares.clone();
            async move { shares.take(Scope::Read, 1).await.map(|_| ()) }
        });
        let turn = queued.await.expect("task").expect("the waiting session gets the freed slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!again.is_finished(), "the looping session waits its turn");
        drop(turn);
        assert_eq!(again.await.expect("task"), Ok(()));
        drop(operate);
    }

    #[tokio::test]
    async fn a_turn_that_does_not_come_is_refused_as_busy() {
        let shares = Shares::new(1, Duration::from_millis(50));
        let _held = shares.take(Scope::Read, 1).await.expect("a slot");
        assert_eq!(shares.take(Scope::Read, 2).await.err(), Some(Refused::Busy));
        assert!(shares.take(Scope::Read, 2).await.is_err(), "its place was given back");
    }
}
