//! A lane's crash marks (`idem.batch_in_flight`, see `pipeline::attempts`):
//! what the lane knows of them and when it reads, writes, replaces and
//! removes them, behind [`Ledger`], so that these decisions are
//! unit-tested against a scripted ledger. The worker holds a [`Marks`]
//! and hands it its ledger (`PgLedger`, over idem's marks pool).
//!
//! The rules: the partition's marks are read once per assignment, before
//! the lane runs its first batch (a crash left records through the last
//! marked offset to run alone); a batch is marked before it runs (no mark,
//! no batch: its first record goes alone), replacing the lane's previous
//! mark; the lane's mark goes when it runs out of records or stops; the
//! crashed host's marks go once every record they cover is resolved.

use std::future::Future;
use std::time::Duration;

use crate::pipeline::attempts::{self, BatchPlace};
use crate::pipeline::partition::PartitionState;

/// How long a mark's statement may take. The marks pool does not ping a
/// connection before using it (`attempts::marks_pool`): one whose peer
/// vanished without a word (a failover, a dropped NAT entry) would hold the
/// lane until the kernel gave the socket up, many minutes later.
const MARK_WAIT: Duration = Duration::from_secs(10);

/// `statement`, failed as an I/O error past [`MARK_WAIT`].
async fn bounded<T>(what: &str, statement: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, sqlx::Error> {
    tokio::time::timeout(MARK_WAIT, statement).await.unwrap_or_else(|_| {
        let why = format!("{what}: no answer from PostgreSQL in {} s", MARK_WAIT.as_secs());
        Err(sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))
    })
}

/// `cleanup` (which logs its own failure), given up past [`MARK_WAIT`].
async fn bounded_cleanup(what: &str, cleanup: impl Future<Output = ()>) {
    if tokio::time::timeout(MARK_WAIT, cleanup).await.is_err() {
        tracing::warn!("{what}: no answer from PostgreSQL in {} s; left for later", MARK_WAIT.as_secs());
    }
}

/// Where a lane's marks are kept.
pub(super) trait Ledger {
    /// The last offset of this partition's batches that a crash
    /// interrupted, if any (read once per assignment for every lane).
    fn crashed(&self) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send;
    /// Marks the lane's batch of `first..=last`, replacing its previous mark.
    fn start(&self, range: (i64, i64)) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    /// Removes the lane's mark of the batch that started at `first`.
    fn end(&self, first: i64) -> impl Future<Output = ()> + Send;
    /// Where the partition's resolved records end, once past the crashed
    /// batches' last offset and not yet cleared for: their marks go then.
    fn clear_crashed(&self) -> impl Future<Output = ()> + Send;
}

/// What a lane knows of its marks.
#[derive(Debug, Default)]
pub(super) struct Marks {
    /// The partition's marks were read for this assignment.
    pub checked: bool,
    /// The first offset of the lane's own mark, while it has one: its last
    /// batch's, kept until the next batch replaces it or the lane runs out
    /// of records or stops.
    marked: Option<i64>,
}

impl Marks {
    /// Reads the partition's crash marks, once: the last offset that must
    /// run alone, if a crash interrupted a batch. A failure leaves them
    /// unread (read again before the next batch) and is returned.
    pub(super) async fn check(&mut self, ledger: &impl Ledger) -> Result<Option<i64>, sqlx::Error> {
        if self.checked {
            return Ok(None);
        }
        let last = ledger.crashed().await?;
        self.checked = true;
        Ok(last)
    }

    /// Marks the batch `range` before it runs; a failure leaves the lane's
    /// previous mark as it was (the batch must not run).
    pub(super) async fn start(&mut self, ledger: &impl Ledger, range: (i64, i64)) -> Result<(), sqlx::Error> {
        ledger.start(range).await?;
        self.marked = Some(range.0);
        Ok(())
    }

    /// The lane ran out of records or stops: its mark goes, if it has one,
    /// and the crashed host's once they are behind the resolved records.
    pub(super) async fn end(&mut self, ledger: &impl Ledger) {
        if let Some(first) = self.marked.take() {
            ledger.end(first).await;
        }
        ledger.clear_crashed().await;
    }
}

/// The ledger in PostgreSQL: idem's marks pool, for one lane.
pub(super) struct PgLedger<'a> {
    pub pool: &'a sqlx::PgPool,
    pub state: &'a PartitionState,
    pub at: BatchPlace<'a>,
}

impl Ledger for PgLedger<'_> {
    /// Read once for every lane of the assignment
    /// (`PartitionState::crash_mark`): a lane's first batch replaces its
    /// own mark, and a lane that read later could miss the crash another
    /// lane's mark recorded.
    async fn crashed(&self) -> Result<Option<i64>, sqlx::Error> {
        let (pool, at) = (self.pool, self.at);
        let read = || bounded("reading the crash marks", attempts::crashed_batch(pool, at.handler, at.topic, at.partition));
        self.state.crash_mark.get_or_try_init(read).await.copied()
    }

    async fn start(&self, range: (i64, i64)) -> Result<(), sqlx::Error> {
        bounded("marking a batch", attempts::batch_started(self.pool, self.at, range)).await
    }

    async fn end(&self, first: i64) {
        bounded_cleanup("clearing a batch's mark", attempts::batch_ended(self.pool, self.at, first)).await;
    }

    /// A lane whose records all fall in the range a crash left to run
    /// alone never batches: the crashed host's mark would stay for good,
    /// and make a later replay of those offsets run alone. Once the
    /// partition's resolved prefix is past it, every mark behind that
    /// prefix goes (a live batch's records are all unresolved, so never
    /// behind it), by one lane of the assignment.
    async fn clear_crashed(&self) {
        let Some(Some(last)) = self.state.crash_mark.get().copied() else { return };
        let Some(position) = self.state.tracker().position() else { return };
        if position <= last || self.state.crash_cleared.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        bounded_cleanup("clearing a crashed batch's marks", attempts::behind(self.pool, self.at, position)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_mark_postgresql_never_answers_fails_after_its_wait() {
        let started = tokio::time::Instant::now();
        let failed = super::bounded("marking a batch", std::future::pending::<Result<(), sqlx::Error>>()).await;
        let Err(sqlx::Error::Io(e)) = failed else { panic!("not an I/O error: {failed:?}") };
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("marking a batch"), "{e}");
        assert_eq!(started.elapsed(), super::MARK_WAIT);
    }

    /// A ledger whose answers are scripted, recording what was asked.
    #[derive(Default)]
    struct Scripted {
        crashed: Mutex<Vec<Result<Option<i64>, sqlx::Error>>>,
        refuse_start: bool,
        asked: Mutex<Vec<String>>,
    }

    impl Scripted {
        fn said(&self) -> Vec<String> {
            std::mem::take(&mut *self.asked.lock().unwrap())
        }
    }

    impl Ledger for Scripted {
        async fn crashed(&self) -> Result<Option<i64>, sqlx::Error> {
            self.asked.lock().unwrap().push("read".into());
            self.crashed.lock().unwrap().remove(0)
        }
        async fn start(&self, (first, last): (i64, i64)) -> Result<(), sqlx::Error> {
            self.asked.lock().unwrap().push(format!("mark {first}..={last}"));
            if self.refuse_start { Err(sqlx::Error::PoolTimedOut) } else { Ok(()) }
        }
        async fn end(&self, first: i64) {
            self.asked.lock().unwrap().push(format!("unmark {first}"));
        }
        async fn clear_crashed(&self) {
            self.asked.lock().unwrap().push("clear crashed".into());
        }
    }

    #[tokio::test]
    async fn the_marks_are_read_once_and_a_failed_read_is_read_again() {
        let ledger = Scripted {
            crashed: Mutex::new(vec![Err(sqlx::Error::PoolTimedOut), Ok(Some(41))]),
            ..Scripted::default()
        };
        let mut marks = Marks::default();
        assert!(marks.check(&ledger).await.is_err());
        assert!(!marks.checked, "unread after a failure");
        assert_eq!(marks.check(&ledger).await.unwrap(), Some(41), "a crash: through 41 alone");
        assert!(marks.checked);
        assert_eq!(marks.check(&ledger).await.unwrap(), None, "not read again in this assignment");
        assert_eq!(ledger.said(), ["read", "read"]);
    }

    #[tokio::test]
    async fn a_batch_replaces_the_lanes_mark_and_the_last_goes_when_the_lane_ends() {
        let ledger = Scripted::default();
        let mut marks = Marks::default();
        marks.start(&ledger, (10, 19)).await.unwrap();
        marks.start(&ledger, (20, 29)).await.unwrap();
        marks.end(&ledger).await;
        marks.end(&ledger).await;
        assert_eq!(
            ledger.said(),
            ["mark 10..=19", "mark 20..=29", "unmark 20", "clear crashed", "clear crashed"],
            "the last batch's mark goes once; the crashed host's are looked at each time"
        );
    }

    #[tokio::test]
    async fn a_batch_that_could_not_be_marked_leaves_no_mark_of_its_own() {
        let ledger = Scripted { refuse_start: true, ..Scripted::default() };
        let mut marks = Marks::default();
        assert!(marks.start(&ledger, (10, 19)).await.is_err(), "the batch must not run");
        marks.end(&ledger).await;
        assert_eq!(ledger.said(), ["mark 10..=19", "clear crashed"], "nothing of its own to remove");
    }
}
