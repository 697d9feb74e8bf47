//! Fair shares of the console's bounded work (reading a dead-letter page
//! holds a Kafka client and a blocking thread for seconds).
//!
//! Each scope has slots of its own, so `read` sessions can never take what
//! an `operate` session needs; within a scope, each session holds at most
//! one slot, and the queue is first come, first served (tokio's semaphore
//! is fair). A session's newer request (a reload, a filter changed while a
//! page loads) waits behind its older one, whose read goes on on the host
//! even when the browser has left it; a third at once is refused (429). A
//! session that reads in a loop thus waits its turn like everyone else and
//! never gets more than its share. A turn that does not come within
//! [`LONGEST_WAIT`] is answered 503, naming the wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::super::access::Scope;

/// DLQ pages read at once, per scope.
const SLOTS_PER_SCOPE: usize = 2;
/// Requests of one session at once: one reading, one waiting behind it.
const PER_SESSION: usize = 2;
/// The longest a request waits in the queue for its turn.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(20);

/// Why a request got no share.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The session has [`PER_SESSION`] requests pending already.
    Pending,
    /// No turn within [`LONGEST_WAIT`].
    Busy,
}

#[derive(Debug)]
pub(crate) struct Shares {
    read: Arc<Semaphore>,
    operate: Arc<Semaphore>,
    /// Sessions with a request holding a slot or waiting for one.
    pending: Arc<Mutex<HashMap<u64, Turns>>>,
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
    _slot: OwnedSemaphorePermit,
    _turn: OwnedSemaphorePermit,
    _pending: Pending,
}

/// One session's requests: its turn (one at a time) and how many hold or
/// wait for it.
#[derive(Debug)]
struct Turns {
    turn: Arc<Semaphore>,
    requests: usize,
}

/// A request counted in its session's [`Turns`] until dropped.
#[derive(Debug)]
struct Pending {
    session: u64,
    sessions: Arc<Mutex<HashMap<u64, Turns>>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(turns) = sessions.get_mut(&self.session) {
            turns.requests -= 1;
            if turns.requests == 0 {
                sessions.remove(&self.session);
            }
        }
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
        let (turn, pending) = {
            let mut sessions = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let turns =
                sessions.entry(session).or_insert_with(|| Turns { turn: Arc::new(Semaphore::new(1)), requests: 0 });
            if turns.requests >= PER_SESSION {
                return Err(Refused::Pending);
            }
            turns.requests += 1;
            (turns.turn.clone(), Pending { session, sessions: self.pending.clone() })
        };
        let slots = match scope {
            Scope::Read => self.read.clone(),
            Scope::Operate => self.operate.clone(),
        };
        // The session's own turn first, so that it never holds two slots.
        let both =
            async { Ok::<_, tokio::sync::AcquireError>((turn.acquire_owned().await?, slots.acquire_owned().await?)) };
        match tokio::time::timeout(self.wait, both).await {
            Ok(Ok((turn, slot))) => Ok(Share { _slot: slot, _turn: turn, _pending: pending }),
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
        let shares = Arc::new(shares);
        let first = shares.take(Scope::Read, 1).await.expect("a slot");
        // The session's next request waits behind its first (a reload);
        // a third at once is refused.
        let behind = tokio::spawn({
            let shares = shares.clone();
            async move { shares.take(Scope::Read, 1).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(shares.take(Scope::Read, 1).await.err(), Some(Refused::Pending), "two per session");
        assert!(!behind.is_finished(), "one slot per session");
        drop(first);
        assert_eq!(behind.await.expect("task"), Ok(()), "the waiting request has its turn");
        let first = shares.take(Scope::Read, 1).await.expect("a slot");
        // Another read session queues; operate has slots of its own.
        let operate = shares.take(Scope::Operate, 3).await.expect("operate is not behind read");
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
