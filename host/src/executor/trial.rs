//! `idem test`'s way through the executor: a file of events in one
//! transaction, each run as `execute` runs it (claim, handler, its emits
//! written), but none committed; the caller rolls the whole back at the end
//! or commits it.

use sqlx::Executor as _;

use super::{Executor, Outcome, Run, taken_back};
use crate::capabilities::Left;
use crate::capabilities::emit::Emitted;
use crate::error::ExecError;
use crate::event::Event;
use crate::transaction::{EventTx, within};

/// What one event came to inside the trial's transaction.
#[derive(Debug)]
pub struct Trial {
    /// The transaction, for the next event; `None` when it could not go on
    /// (a statement overran or the connection failed: it was closed).
    pub tx: Option<EventTx>,
    pub result: Result<Outcome, ExecError>,
    /// Each statement the guest sent and what came of it.
    pub statements: Vec<String>,
    /// The events it emitted (written to the outbox in the transaction).
    pub emitted: Vec<Emitted>,
    /// Its HTTP requests: host, and status (`None`: no answer).
    pub requests: Vec<(String, Option<u16>)>,
}

impl Executor {
    /// Runs `event` in `tx` as [`Executor::execute`] does, without ending
    /// the transaction: under a savepoint of its own, released when it
    /// succeeded and rolled back to when it failed, so that the next event
    /// sees what committed events would have left. Its statements are in
    /// the answer when the executor is [`Executor::transcribing`].
    pub async fn execute_within(&self, mut tx: EventTx, event: &Event) -> Trial {
        tx.renew(self.handler.settings().timeout);
        if let Err(e) = control(&mut tx, "SAVEPOINT idem_trial").await {
            tx.abandon(&self.pool);
            return Trial::ended(None, Err(e), Left::default());
        }
        let (lent, mut result, mut left) = self.run_in(tx, event, Run::alone(1)).await;
        let mut tx = match taken_back(lent) {
            Ok(tx) => tx,
            Err(e) => return Trial::ended(None, Err(e), left),
        };
        // A trap on a kept instance: again on a fresh one, from the
        // savepoint, as `execute` does in a new transaction.
        if matches!(result, Err(ExecError::KeptTrapped(_))) {
            if let Err(e) = control(&mut tx, "ROLLBACK TO SAVEPOINT idem_trial").await {
                tx.abandon(&self.pool);
                return Trial::ended(None, Err(e), left);
            }
            tx.renew(self.handler.settings().timeout);
            let (lent, again, mut again_left) = self.run_in(tx, event, Run { fresh: true, ..Run::alone(1) }).await;
            // The trapped run's requests were sent: they are listed too.
            let mut sent = std::mem::take(&mut left.http);
            sent.append(&mut again_left.http);
            again_left.http = sent;
            tx = match taken_back(lent) {
                Ok(tx) => tx,
                Err(e) => return Trial::ended(None, Err(e), again_left),
            };
            (result, left) = (again, again_left);
        }
        if matches!(result, Ok(Outcome::Processed))
            && let Err(e) = crate::capabilities::before_commit(&mut tx, &[(event.id, &left)]).await
        {
            result = Err(e);
        }
        let end = match &result {
            Ok(_) => "RELEASE SAVEPOINT idem_trial",
            // The connection may still be busy, or is broken: no going on.
            Err(ExecError::TimedOut(_) | ExecError::Database(_) | ExecError::Deadline(_)) => {
                tx.abandon(&self.pool);
                return Trial::ended(None, result, left);
            }
            Err(_) => "ROLLBACK TO SAVEPOINT idem_trial; RELEASE SAVEPOINT idem_trial",
        };
        match control(&mut tx, end).await {
            Ok(()) => Trial::ended(Some(tx), result, left),
            Err(e) => {
                tx.abandon(&self.pool);
                Trial::ended(None, result.and(Err(e)), left)
            }
        }
    }
}

impl Trial {
    /// What the event came to, with what its capabilities left.
    fn ended(tx: Option<EventTx>, result: Result<Outcome, ExecError>, left: Left) -> Self {
        let Left { db: statements, emit: emitted, http: requests, .. } = left;
        Self { tx, result, statements, emitted, requests }
    }
}

/// One control statement on `tx`, within its statement deadline.
async fn control(tx: &mut EventTx, sql: &'static str) -> Result<(), ExecError> {
    let deadline = tx.statement_deadline();
    within(deadline, "a savepoint", tx.conn().execute(sqlx::raw_sql(sql))).await.map(drop)
}
