//! A shadow run's way through the executor (`crate::shadow`): an event run
//! on a version inside a transaction that is always rolled back, with no
//! claim, its statements transcribed with their values, its requests
//! recorded instead of sent, its emits kept and never written, and the rows
//! it wrote per table counted before the rollback.

use std::collections::BTreeMap;
use std::sync::Arc;

use sqlx::Executor as _;

use super::{Executor, Outcome, Run, taken_back};
use crate::capabilities::Left;
use crate::capabilities::emit::Emitted;
use crate::error::ExecError;
use crate::event::Event;
use crate::transaction::{EventTx, Lent, within};

/// Rows a run inserted, updated and deleted in one table.
pub type Writes = BTreeMap<String, [i64; 3]>;

/// What one version did with one event, rolled back.
#[derive(Debug)]
pub struct Rehearsal {
    /// The transaction, for the next run; `None` when it could not go on
    /// (a statement overran or the connection failed: it was closed).
    pub tx: Option<EventTx>,
    pub result: Result<Outcome, ExecError>,
    /// Each statement with its values, and what came of it.
    pub statements: Vec<String>,
    /// Rows written per table (`schema.table`), as the transaction's own
    /// statistics count them.
    pub writes: Writes,
    /// Each request it would have sent: method, URL, key and body.
    pub requests: Vec<String>,
    pub emitted: Vec<Emitted>,
    /// It ran out of a budget shorter than its handler's timeout: what it
    /// came to says nothing of the version.
    pub cut_short: bool,
}

/// The transaction's counts of rows written per table so far
/// (`idem_api.transaction_writes`): they only grow (a rolled-back
/// savepoint's rows stay counted), so a run's writes are the difference of
/// two reads.
const WRITES: &str = "SELECT relation, inserted, updated, deleted FROM idem_api.transaction_writes()";

impl Executor {
    /// The same handler as a shadow run's: no counters, its requests
    /// recorded (never sent), its statements transcribed, no throttle of
    /// the live handler's spent, no kept instance shared with it.
    #[must_use]
    pub fn rehearsing(&self) -> Self {
        let mut shared = self.shared.clone();
        shared.recording = true;
        shared.sent_keys = None;
        shared.throttles = Arc::default();
        let handler = self.handler.with_own_shelf();
        Self { handler, shared, stats: None, transcribe: true, capture: None, tally: Arc::default(), ..self.clone() }
    }

    /// Runs `event` on this version inside `tx` under a savepoint that is
    /// rolled back whatever happens: `tx` is as it was before. Needs a
    /// [`Executor::rehearsing`] executor (else its requests would be sent).
    /// It has `budget` at most (its handler's timeout if shorter).
    pub async fn rehearse(&self, mut tx: EventTx, event: &Event, budget: std::time::Duration) -> Rehearsal {
        debug_assert!(self.shared.recording, "a rehearsal sends nothing");
        let short = budget < self.handler.settings().timeout;
        let limit = self.handler.settings().timeout.min(budget);
        let end = tokio::time::Instant::now() + limit;
        tx.renew(limit);
        let mut before = match begin(&mut tx).await {
            Ok(before) => before,
            Err(e) => return Rehearsal::lost(tx, &self.pool, Err(e)),
        };
        let run = Run::alone(1);
        let (lent, mut result, mut left) = self.invoke(Lent::Whole(tx), event, run).await;
        let Ok(mut tx) = taken_back(lent) else {
            return Rehearsal::ended(None, Err(ExecError::Infrastructure("the transaction was lent out".into())));
        };
        // A trap on a kept instance: again on a fresh one, from the
        // savepoint, as a live run would (`Executor::execute`), within the
        // same budget; the writes counted from there (the counts keep a
        // rolled-back savepoint's rows).
        if matches!(result, Err(ExecError::KeptTrapped(_))) {
            if let Err(e) = control(&mut tx, "ROLLBACK TO SAVEPOINT idem_shadow").await {
                return Rehearsal::lost(tx, &self.pool, Err(e));
            }
            before = match writes(&mut tx).await {
                Ok(before) => before,
                Err(e) => return Rehearsal::lost(tx, &self.pool, Err(e)),
            };
            tx.renew(end.saturating_duration_since(tokio::time::Instant::now()));
            let again = self.invoke(Lent::Whole(tx), event, Run { fresh: true, ..run }).await;
            let Ok(again_tx) = taken_back(again.0) else {
                return Rehearsal::ended(None, Err(ExecError::Infrastructure("the transaction was lent out".into())));
            };
            (tx, result, left) = (again_tx, again.1, again.2);
        }
        if matches!(result, Err(ExecError::TimedOut(_) | ExecError::Database(_) | ExecError::Deadline(_))) {
            // The connection may still be busy, or is broken.
            let cut_short = short && matches!(result, Err(ExecError::TimedOut(_)));
            return Rehearsal { cut_short, ..Rehearsal::lost(tx, &self.pool, result) };
        }
        let after = match writes(&mut tx).await {
            Ok(after) => after,
            Err(e) => return Rehearsal::lost(tx, &self.pool, Err(e)),
        };
        let rolled = control(&mut tx, "ROLLBACK TO SAVEPOINT idem_shadow; RELEASE SAVEPOINT idem_shadow").await;
        let Left { db, emit, http, .. } = left;
        let done = Rehearsal {
            tx: Some(tx),
            result,
            statements: db,
            writes: difference(&before, &after),
            requests: http.into_iter().map(|(line, _)| line).collect(),
            emitted: emit,
            cut_short: false,
        };
        match rolled {
            Ok(()) => done,
            Err(e) => {
                if let Some(tx) = done.tx {
                    tx.abandon(&self.pool);
                }
                Rehearsal { tx: None, result: Err(e), ..done }
            }
        }
    }
}

impl Rehearsal {
    fn ended(tx: Option<EventTx>, result: Result<Outcome, ExecError>) -> Self {
        let (statements, writes, requests, emitted) = (Vec::new(), Writes::new(), Vec::new(), Vec::new());
        Self { tx, result, statements, writes, requests, emitted, cut_short: false }
    }

    /// The transaction cannot go on: it is closed, never committed.
    fn lost(tx: EventTx, pool: &sqlx::PgPool, result: Result<Outcome, ExecError>) -> Self {
        tx.abandon(pool);
        Self::ended(None, result)
    }
}

/// Opens the run's savepoint and reads the counts before it.
async fn begin(tx: &mut EventTx) -> Result<Writes, ExecError> {
    control(tx, "SAVEPOINT idem_shadow").await?;
    writes(tx).await
}

/// The transaction's counts of rows written per table ([`WRITES`]).
async fn writes(tx: &mut EventTx) -> Result<Writes, ExecError> {
    let deadline = tx.statement_deadline();
    let rows: Vec<(String, i64, i64, i64)> =
        within(deadline, "the shadow's counts", sqlx::query_as(WRITES).fetch_all(tx.conn())).await?;
    Ok(rows.into_iter().map(|(table, i, u, d)| (table, [i, u, d])).collect())
}

/// What grew between `before` and `after`.
fn difference(before: &Writes, after: &Writes) -> Writes {
    after
        .iter()
        .filter_map(|(table, counts)| {
            let was = before.get(table).copied().unwrap_or_default();
            let grew = [counts[0] - was[0], counts[1] - was[1], counts[2] - was[2]];
            (grew != [0, 0, 0]).then(|| (table.clone(), grew))
        })
        .collect()
}

/// One control statement on `tx`, within its statement deadline.
async fn control(tx: &mut EventTx, sql: &'static str) -> Result<(), ExecError> {
    let deadline = tx.statement_deadline();
    within(deadline, "a shadow's savepoint", tx.conn().execute(sqlx::raw_sql(sql))).await.map(drop)
}
