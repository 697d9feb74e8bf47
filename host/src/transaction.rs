//! The event's transaction on one of its handler's connections: what is
//! pinned at BEGIN, and a deadline on every statement the host sends.
//!
//! The partition never waits on the database longer than the handler's
//! budget plus [`GRACE`]: every host statement runs under a client-side
//! deadline as well as the server's `statement_timeout`, and a connection
//! whose statement overran (or whose state is unknown) is closed, never
//! waited on or returned to the pool, and its backend is terminated from
//! another connection of the pool ([`EventTx::abandon`]).

use std::future::Future;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Executor as _, PgConnection, PgPool, Postgres};
use tokio::time::Instant;

use crate::error::ExecError;
use crate::sandbox::ident;

/// What a host statement may take beyond the invocation's budget: COMMIT
/// after a guest that used its whole budget still gets this long.
pub const GRACE: Duration = Duration::from_secs(2);

/// What every event's transaction pins at BEGIN, whatever the role's or the
/// server's defaults, and whatever the previous event did.
#[derive(Debug, Clone)]
pub struct Pins {
    /// The handler's schema: `search_path` is it, then `pg_catalog`.
    pub schema: String,
    /// The operator's `synchronous_commit` (checked: never `off`).
    pub synchronous_commit: String,
}

/// An open transaction. Its connection goes back to the pool only once the
/// transaction has ended and the session was reset in the same round trip
/// ([`CLEANUP`]); dropped in any other state, it is closed.
pub struct EventTx {
    conn: PoolConnection<Postgres>,
    /// The backend's process id, to end it when the connection is abandoned.
    pid: i32,
    /// The transaction has ended and the session is reset: nothing a guest
    /// did on it outlives the event.
    clean: bool,
    deadline: Instant,
    synchronous_commit: String,
}

impl std::fmt::Debug for EventTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventTx").field("clean", &self.clean).finish_non_exhaustive()
    }
}

/// Runs `fut` until `deadline`; an overrun is [`ExecError::Deadline`].
pub(crate) async fn within<T>(
    deadline: Instant,
    what: &'static str,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, ExecError> {
    match tokio::time::timeout_at(deadline, fut).await {
        Ok(result) => result.map_err(ExecError::from_host_sql),
        Err(_) => Err(ExecError::Deadline(what)),
    }
}

impl EventTx {
    /// Begins a transaction with `budget` for the whole invocation.
    pub async fn begin(pool: &PgPool, pins: &Pins, budget: Duration) -> Result<Self, ExecError> {
        let deadline = Instant::now() + budget;
        let conn = within(deadline, "acquiring a connection", pool.acquire()).await?;
        let ms = budget.as_millis().max(1);
        let idle_ms = (budget + GRACE * 2).as_millis();
        let sc = &pins.synchronous_commit;
        let begin = format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; \
             SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}; \
             SET LOCAL idle_in_transaction_session_timeout = {idle_ms}; \
             SET LOCAL synchronous_commit = {sc}; SET LOCAL standard_conforming_strings = on; \
             SET LOCAL search_path = {}, pg_catalog; SELECT pg_backend_pid()",
            ident(&pins.schema)
        );
        let mut tx = Self { conn, pid: 0, clean: false, deadline, synchronous_commit: sc.clone() };
        let rows = within(deadline + GRACE, "BEGIN", tx.conn.fetch_all(sqlx::raw_sql(&begin))).await?;
        tx.pid = rows.last().and_then(|row| sqlx::Row::try_get::<i32, _>(row, 0).ok()).unwrap_or(0);
        Ok(tx)
    }

    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// The end of the invocation's budget.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// A whole budget again, for the next invocation in the same
    /// transaction (`idem test` runs a file of events in one).
    pub(crate) fn renew(&mut self, budget: Duration) {
        self.deadline = Instant::now() + budget;
    }

    /// A deadline for one host statement: the budget's end plus [`GRACE`].
    pub fn statement_deadline(&self) -> Instant {
        self.deadline.max(Instant::now()) + GRACE
    }

    /// Commits. `synchronous_commit` is pinned again in the same round trip,
    /// so nothing the guest did can make this commit asynchronous, and the
    /// session is reset in it too ([`CLEANUP`]). An error or an overrun
    /// before COMMIT's answer leaves the outcome unknown: the connection is
    /// closed and the caller retries (the claim tells whether it
    /// committed). One after it only closes the connection: the event
    /// committed.
    pub async fn commit(mut self) -> Result<(), ExecError> {
        let deadline = self.statement_deadline();
        let commit = format!("SET LOCAL synchronous_commit = {}; COMMIT; {CLEANUP}", self.synchronous_commit);
        let (outcome, ended) = self.end(&commit, deadline, "COMMIT").await;
        self.clean = committed(outcome, ended)?;
        Ok(())
    }

    /// Rolls back and resets the session within [`GRACE`]; otherwise
    /// closes the connection.
    pub async fn rollback(mut self) {
        let deadline = Instant::now() + GRACE;
        match self.end(ROLLBACK, deadline, "ROLLBACK").await {
            (Ok(()), ended) => self.clean = clean_after(ended.prepared),
            (Err(e), _) => tracing::warn!("rollback or the reset after it failed, closing the connection instead: {e}"),
        }
    }

    /// Sends `sql`, statements that end the transaction followed by
    /// [`CLEANUP`], until `deadline`: how it went, and how far it got.
    async fn end(&mut self, sql: &str, deadline: Instant, what: &'static str) -> (Result<(), ExecError>, Ended) {
        use futures::TryStreamExt as _;
        let mut ended = Ended::default();
        let run = async {
            let mut results = self.conn.fetch_many(sqlx::raw_sql(sql));
            while let Some(result) = results.try_next().await? {
                match result {
                    sqlx::Either::Left(_) => ended.answered += 1,
                    sqlx::Either::Right(row) => ended.prepared = sqlx::Row::try_get::<i64, _>(&row, 0).ok(),
                }
            }
            Ok(())
        };
        (within(deadline, what, run).await, ended)
    }

    /// Closes the connection without waiting on it: for a connection with a
    /// statement still running (the invocation overran mid-statement) or in
    /// an unknown state. Another connection of the same role (a role may end
    /// its own backends) terminates the backend, so its transaction, and the
    /// claim's row lock with it, end now, whatever the guest set.
    pub fn abandon(self, pool: &PgPool) {
        let (pool, pid) = (pool.clone(), self.pid);
        drop(self);
        if pid == 0 {
            return;
        }
        tokio::spawn(async move {
            let ended =
                tokio::time::timeout(GRACE, sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&pool))
                    .await;
            if !matches!(ended, Ok(Ok(_))) {
                tracing::warn!(pid, "failed to end an abandoned backend; the server will when it notices");
            }
        });
    }
}

impl Drop for EventTx {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

/// The statements of [`CLEANUP`], as a literal to build others with.
macro_rules! cleanup {
    () => {
        "RESET ALL; RESET ROLE; UNLISTEN *; CLOSE ALL; DISCARD SEQUENCES; \
         SELECT (SELECT count(*) FROM pg_prepared_statements WHERE from_sql)"
    };
}

/// Run after the transaction ends, in the same round trip, on every
/// connection a guest has used. `RESET ALL` does not reset the role, hence
/// `RESET ROLE` (the role is a member of nothing, so only itself could
/// have been set). Temporary objects cannot exist: the role has no
/// TEMPORARY right. SQL-level prepared statements (`PREPARE`, which the
/// guard refuses) cannot be dropped without dropping the driver's own
/// (`DEALLOCATE ALL`), so a connection holding one is closed instead; the
/// last statement counts them.
pub const CLEANUP: &str = cleanup!();

/// A rollback and the session's reset, in one round trip.
const ROLLBACK: &str = concat!("ROLLBACK; ", cleanup!());

/// How far the round trip ending a transaction got: the statements
/// answered, and [`CLEANUP`]'s count of prepared statements if it came.
#[derive(Debug, Default, Clone, Copy)]
struct Ended {
    answered: usize,
    prepared: Option<i64>,
}

/// What COMMIT's round trip came to, given how far it got: the commit's
/// error while COMMIT itself is unanswered (the outcome is unknown), else
/// whether the connection is clean. The reset's failure after COMMIT's
/// answer only closes the connection.
fn committed(outcome: Result<(), ExecError>, ended: Ended) -> Result<bool, ExecError> {
    // `SET LOCAL`'s answer, then COMMIT's.
    const COMMIT_ANSWERED: usize = 2;
    match outcome {
        Ok(()) => Ok(clean_after(ended.prepared)),
        Err(e) if ended.answered >= COMMIT_ANSWERED => {
            tracing::warn!("closing a handler connection whose reset failed after COMMIT: {e}");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Whether [`CLEANUP`], whose last statement counted `prepared`
/// statements, left the session clean; warns when it did not.
fn clean_after(prepared: Option<i64>) -> bool {
    match prepared {
        Some(0) => true,
        Some(_) => {
            tracing::warn!("closing a handler connection that holds a prepared statement");
            false
        }
        None => {
            tracing::warn!("closing a handler connection whose reset returned no count");
            false
        }
    }
}

/// The event's transaction as one invocation holds it.
///
/// Alone (one event, or a batch run in order) the invocation holds the
/// transaction itself. In a batch whose events run at the same time
/// (`[handler.batch] max_concurrent`), each holds a share: a statement
/// takes the transaction for as long as it runs, so the statements of the
/// invocations interleave, one at a time, in the one transaction. A share
/// has the invocation's own deadline (each event has the handler's whole
/// budget). Savepoints need the transaction to themselves between two
/// statements, so only a whole one ever gets them (a batch runs without).
#[derive(Debug)]
pub enum Lent {
    Whole(EventTx),
    Shared(SharedTx),
    /// None: the invocation is over and its transaction went back to the
    /// executor. What a kept instance's store holds between two events
    /// (`runtime::warm`); no guest code runs then, and a statement would
    /// be refused.
    Returned,
}

impl Lent {
    /// The end of the invocation's budget.
    pub fn deadline(&self) -> Instant {
        match self {
            Self::Whole(tx) => tx.deadline(),
            Self::Shared(share) => share.deadline,
            Self::Returned => Instant::now(),
        }
    }

    /// The transaction itself, once no other share of it is left;
    /// `None` if one still is (it then closes when the last share goes).
    pub fn into_whole(self) -> Option<EventTx> {
        match self {
            Self::Whole(tx) => Some(tx),
            Self::Shared(share) => share.into_whole(),
            Self::Returned => None,
        }
    }
}

/// A share of a batch's transaction (see [`Lent`]).
#[derive(Debug, Clone)]
pub struct SharedTx {
    tx: std::sync::Arc<tokio::sync::Mutex<EventTx>>,
    deadline: Instant,
}

impl SharedTx {
    pub fn new(tx: EventTx) -> Self {
        let deadline = tx.deadline();
        Self { tx: std::sync::Arc::new(tokio::sync::Mutex::new(tx)), deadline }
    }

    /// Another share, for an invocation with `budget` from now.
    pub fn lend(&self, budget: Duration) -> Lent {
        Lent::Shared(Self { tx: self.tx.clone(), deadline: Instant::now() + budget })
    }

    /// The transaction for one statement: other shares wait meanwhile.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, EventTx> {
        self.tx.lock().await
    }

    /// A statement is on the connection now (a share holds it).
    pub fn in_use(&self) -> bool {
        self.tx.try_lock().is_err()
    }

    /// The transaction itself, if this is the last share.
    pub fn into_whole(self) -> Option<EventTx> {
        std::sync::Arc::try_unwrap(self.tx).ok().map(tokio::sync::Mutex::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_is_known_once_commit_is_answered_and_the_connection_kept_only_when_reset() {
        let failed = || Err(ExecError::Deadline("COMMIT"));
        // Unanswered COMMIT: the outcome is unknown, the caller checks.
        assert!(matches!(committed(failed(), Ended { answered: 0, prepared: None }), Err(ExecError::Deadline(_))));
        assert!(matches!(committed(failed(), Ended { answered: 1, prepared: None }), Err(ExecError::Deadline(_))));
        // Answered, then the reset failed: committed, the connection closed.
        assert!(matches!(committed(failed(), Ended { answered: 2, prepared: None }), Ok(false)));
        assert!(matches!(committed(failed(), Ended { answered: 5, prepared: None }), Ok(false)));
        // All answered: kept only with no prepared statement left.
        assert!(matches!(committed(Ok(()), Ended { answered: 8, prepared: Some(0) }), Ok(true)));
        assert!(matches!(committed(Ok(()), Ended { answered: 8, prepared: Some(1) }), Ok(false)));
        assert!(matches!(committed(Ok(()), Ended { answered: 8, prepared: None }), Ok(false)));
    }
}
