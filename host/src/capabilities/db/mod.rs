//! The `db` import: the guest's statements, run in the host's transaction.
//!
//! Design choice: every guest statement runs under its own savepoint. A
//! statement that fails is rolled back alone and the guest gets the error;
//! the transaction stays usable, so a handler may handle (say) a unique
//! violation and go on, and its other writes commit with the claim. Without
//! this, PostgreSQL would leave the transaction aborted and turn the host's
//! COMMIT into a silent ROLLBACK. If the savepoint itself cannot be rolled
//! back, the host traps: the event fails and nothing is committed.
//! (`DbCapability::in_savepoint` says how this costs one round trip.)
//!
//! Inside a batch (`[handler.batch]`) statements run without savepoints:
//! PostgreSQL keeps only 64 subtransaction ids per backend in its cache, and
//! a batch of events with a savepoint per statement would cross that at
//! once, slowing every snapshot on the server. There a failing statement
//! traps instead (`HostFault::InBatch`): the executor rolls the batch back,
//! commits the events before this one, and runs this one alone, with
//! savepoints, where the guest sees the error as it always does. So the
//! guest never observes the difference.
//!
//! Every statement goes through the extended protocol (prepared and bound,
//! even without parameters), which runs exactly one statement per call.

mod capability;
pub use self::capability::DbSettings;
mod guard;
#[cfg(test)]
mod tests;
mod tx;
mod values;

use std::marker::PhantomData;
use std::sync::Arc;

use tracing::Instrument as _;

pub(crate) use self::tx::{DbTx, Fetched};
use crate::traces::TARGET as TRACE;

use super::allowance::Allowance;
use super::fault::HostFault;
use super::tape::{DbAnswer, Tape};
use crate::transaction::Lent;
use crate::wit::db::{self, DbError, Rows, SqlError, Value};

/// One invocation's database state; the statements run in the event's
/// transaction, which [`DbView`] pairs with it.
pub(crate) struct DbCapability {
    /// The handler, whose long statements share one lane of the checker.
    handler: String,
    /// `idem_statement` exists: set by the previous guest statement.
    savepoint: bool,
    /// Statements this invocation may still run.
    statements: Allowance,
    /// In a batch: statements run without savepoints, and one that fails
    /// traps the guest.
    batched: bool,
    /// The first guest statement that failed for an infrastructure reason
    /// (see `error::unavailable_sqlstate`): the transaction must not
    /// commit, whatever the guest made of the error.
    infrastructure: Option<String>,
    /// Each statement and what came of it, when kept (`idem test`).
    transcript: Option<Vec<String>>,
    /// The invocation's tape (`super::tape`): each statement and its
    /// answer kept there (a captured event), or answered from it (a
    /// replay, which never reaches the transaction).
    tape: Option<Arc<Tape>>,
}

impl DbCapability {
    pub(crate) fn new(handler: String, max_statements: u32, batched: bool) -> Self {
        Self {
            handler,
            savepoint: false,
            statements: Allowance::new(max_statements, "max_db_statements"),
            batched,
            infrastructure: None,
            transcript: None,
            tape: None,
        }
    }

    /// The same, on `tape` ([`DbCapability::tape`]).
    pub(crate) fn taped(mut self, tape: Option<Arc<Tape>>) -> Self {
        self.tape = tape;
        self
    }

    /// The parameters as the tape keeps them (a copy only when taped).
    fn for_tape(&self, params: &[Value]) -> Option<Vec<Value>> {
        self.tape.as_ref().map(|_| params.to_vec())
    }

    /// The tape, when it answers instead of the transaction.
    fn replaying(&self) -> Option<&Arc<Tape>> {
        self.tape.as_ref().filter(|t| t.is_replaying())
    }

    /// Keeps `answer` on the tape, if one records and it has room for
    /// about `rows` more (else the recording is abandoned before the
    /// answer is even converted).
    fn tape_answer(
        &self,
        (call, statement): (&str, &str),
        params: Option<Vec<Value>>,
        rows: usize,
        answer: impl FnOnce() -> DbAnswer,
    ) {
        let (Some(tape), Some(params)) = (&self.tape, params) else { return };
        let rough = statement.len() + super::tape::rough_size(&params) + rows;
        if rough > tape.room() {
            tape.abandon();
            return;
        }
        tape.record_statement(call, statement, &params, answer());
    }

    /// The same, keeping a line per statement ([`DbCapability::transcript`]).
    pub(crate) fn transcribing(mut self) -> Self {
        self.transcript = Some(Vec::new());
        self
    }

    /// Each statement the guest sent and what came of it, if kept.
    pub(crate) fn transcript(&mut self) -> Vec<String> {
        self.transcript.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The transcript's words for `statement` and its `params` (nothing
    /// when no transcript is kept): the values as the guest bound them.
    fn line(&self, statement: &str, params: &[Value]) -> String {
        if self.transcript.is_none() {
            return String::new();
        }
        let shown = crate::text::shown_whole(statement.trim(), 2_000);
        if params.is_empty() {
            return shown;
        }
        let values: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(i, v)| format!("${}={}", i + 1, crate::text::shown_whole(&format!("{v:?}"), 300)))
            .collect();
        format!("{shown} [{}]", values.join(", "))
    }

    /// Notes the statement `line` ([`DbCapability::line`]) and its outcome
    /// in the transcript, if kept.
    fn note<R>(&mut self, line: &str, outcome: &wasmtime::Result<Result<R, DbError>>, rows: impl Fn(&R) -> u64) {
        let Some(transcript) = &mut self.transcript else { return };
        let what = match outcome {
            Ok(Ok(r)) => format!("{} row(s)", rows(r)),
            Ok(Err(e)) => format!("error: {}", crate::text::shown(&format!("{e:?}"), 300)),
            Err(trap) => format!("host fault: {}", crate::text::controls_escaped(&trap.to_string(), 300)),
        };
        transcript.push(format!("{line} -> {what}"));
    }

    /// Statements the guest ran (or tried to).
    pub(crate) fn statements_run(&self) -> u32 {
        self.statements.spent()
    }

    /// Why this invocation's transaction must not commit, if a guest
    /// statement hit an infrastructure failure.
    pub(crate) fn infrastructure_failure(&self) -> Option<&str> {
        self.infrastructure.as_deref()
    }

    /// Spends one statement of the invocation's allowance and prepares
    /// `statement`; a refusal is noted in the transcript.
    async fn admit(&mut self, statement: &str, line: &str, params: Vec<Value>) -> Result<values::Bound, DbError> {
        let admitted = match self.statements.spend("statements").map_err(DbError::Refused) {
            Ok(()) => prepare(&self.handler, statement, params).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &admitted {
            self.note(line, &Ok::<Result<u64, _>, wasmtime::Error>(Err(e.clone())), |n| *n);
        }
        admitted
    }
}

/// What the `db` interface is served on: the invocation's state and the
/// event's transaction (any [`DbTx`]; the store serves it on the
/// invocation's [`Lent`] hold of it).
pub(crate) struct DbView<'a, T: DbTx = Lent> {
    pub(crate) ctx: &'a mut DbCapability,
    pub(crate) tx: &'a mut T,
}

/// The `db` interface's view, for linking (`HasData`).
pub(crate) struct Db<T = Lent>(PhantomData<T>);

impl<T: DbTx + 'static> wasmtime::component::HasData for Db<T> {
    type Data<'a> = DbView<'a, T>;
}

const SET: &str = "SAVEPOINT idem_statement";
const RELEASE_AND_SET: &str = "RELEASE SAVEPOINT idem_statement; SAVEPOINT idem_statement";
const UNDO: &str = "ROLLBACK TO SAVEPOINT idem_statement";

fn fault(e: sqlx::Error) -> wasmtime::Error {
    wasmtime::Error::new(HostFault::Database(e))
}

impl<T: DbTx> DbView<'_, T> {
    /// Undoes the last statement (its savepoint stays, released by the next
    /// statement or by COMMIT).
    async fn undo_last(&mut self, why: &DbError) -> wasmtime::Result<()> {
        if self.ctx.batched {
            return Err(wasmtime::Error::new(HostFault::InBatch(format!("{why:?}"))));
        }
        self.tx.control(UNDO).await.map_err(fault)
    }

    /// Runs `run` under a savepoint: on a database error the statement alone
    /// is undone and the error goes to the guest; on a connection error the
    /// host traps.
    ///
    /// One round trip per statement: the previous statement's savepoint is
    /// released (folded into the transaction) in the same simple query that
    /// sets this one's, and the last one is released by COMMIT. Nesting never
    /// grows past one level, so a guest running many statements never
    /// overflows PostgreSQL's subtransaction cache.
    async fn in_savepoint<R>(
        &mut self,
        run: impl AsyncFnOnce(&mut T) -> Result<R, sqlx::Error>,
    ) -> wasmtime::Result<Result<R, DbError>> {
        if self.ctx.batched {
            return match run(self.tx).await {
                Ok(value) => Ok(Ok(value)),
                Err(e @ (sqlx::Error::Database(_) | sqlx::Error::ColumnDecode { .. })) => {
                    Err(wasmtime::Error::new(HostFault::InBatch(e.to_string())))
                }
                Err(e) => Err(fault(e)),
            };
        }
        self.tx.control(if self.ctx.savepoint { RELEASE_AND_SET } else { SET }).await.map_err(fault)?;
        self.ctx.savepoint = true;
        let error = match run(self.tx).await {
            Ok(value) => return Ok(Ok(value)),
            Err(sqlx::Error::Database(e)) => {
                let code = e.code().unwrap_or_default();
                if crate::error::unavailable_sqlstate(&code) && self.ctx.infrastructure.is_none() {
                    self.ctx.infrastructure = Some(format!("{} (SQLSTATE {code})", e.message()));
                }
                classify(e.as_ref())
            }
            Err(sqlx::Error::ColumnDecode { index, source }) => {
                DbError::InvalidValue(format!("column {index}: {source}"))
            }
            Err(e) => return Err(fault(e)),
        };
        // Undo the statement alone; the savepoint stays, released by the next
        // statement or by COMMIT.
        self.tx.control(UNDO).await.map_err(fault)?;
        Ok(Err(error))
    }
}

/// The longest statement text a guest may send. Parsing and walking it is
/// host work the guest causes: about 3.5 µs a byte at worst (a VALUES list
/// or an ARRAY of 60 KB took 0.2 s on this project's machine), and its parse
/// tree is many times the text; at 1 MiB one statement took 2.6 s. A
/// handler's data goes in parameters, which are not parsed.
const MAX_STATEMENT_BYTES: usize = 64 << 10;

/// The most a `query`'s rows may weigh together, as the server sends them.
const MAX_RESULT_BYTES: usize = 16 << 20;

/// Prepares `statement` for `handler`'s guest: refused statements and
/// unbindable parameters become domain errors.
async fn prepare(handler: &str, statement: &str, params: Vec<Value>) -> Result<values::Bound, DbError> {
    if statement.len() > MAX_STATEMENT_BYTES {
        return Err(DbError::Refused(format!("a statement of more than {MAX_STATEMENT_BYTES} bytes")));
    }
    guard::checker::check_for(handler, statement).await.map_err(DbError::Refused)?;
    values::bind(statement, params).map_err(DbError::InvalidValue)
}

fn classify(e: &dyn sqlx::error::DatabaseError) -> DbError {
    let code = e.code().map(|c| c.into_owned()).unwrap_or_default();
    let error = SqlError { message: e.message().to_owned(), constraint: e.constraint().map(str::to_owned), code };
    match error.code.as_str() {
        "23505" => DbError::UniqueViolation(error),
        // serialization failure, deadlock, lock not available, query canceled
        // (statement_timeout): the same event may well succeed next time.
        "40001" | "40P01" | "55P03" | "57014" => DbError::Transient(error),
        _ => DbError::Other(error),
    }
}

impl<T: DbTx> db::Host for DbView<'_, T> {
    async fn execute(&mut self, statement: String, params: Vec<Value>) -> wasmtime::Result<Result<u64, DbError>> {
        let line = self.ctx.line(&statement, &params);
        let taped = self.ctx.for_tape(&params);
        let bound = match self.ctx.admit(&statement, &line, params).await {
            Ok(bound) => bound,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(tape) = self.ctx.replaying() {
            let done = tape.answer_statement("execute", &statement, taped.as_deref().unwrap_or_default()).to_execute();
            self.ctx.note(&line, &done, |n| *n);
            return done;
        }
        let span =
            tracing::trace_span!(target: TRACE, "idem.db", db.statement = %crate::text::Shown(&statement, 2_000));
        let done = self.in_savepoint(async |tx: &mut T| tx.execute(bound).await).instrument(span).await;
        self.ctx.note(&line, &done, |n| *n);
        self.ctx.tape_answer(("execute", &statement), taped, 0, || DbAnswer::of_execute(&done));
        done
    }

    async fn query(&mut self, statement: String, params: Vec<Value>) -> wasmtime::Result<Result<Rows, DbError>> {
        let line = self.ctx.line(&statement, &params);
        let taped = self.ctx.for_tape(&params);
        let bound = match self.ctx.admit(&statement, &line, params).await {
            Ok(bound) => bound,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(tape) = self.ctx.replaying() {
            let done = tape.answer_statement("query", &statement, taped.as_deref().unwrap_or_default()).to_query();
            self.ctx.note(&line, &done, |r: &Rows| r.rows.len() as u64);
            return done;
        }
        let done = self.fetch(&statement, bound).await;
        self.ctx.note(&line, &done, |r: &Rows| r.rows.len() as u64);
        let rows = match &done {
            Ok(Ok(rows)) => super::tape::rough_size(rows.rows.iter().flatten()),
            _ => 0,
        };
        self.ctx.tape_answer(("query", &statement), taped, rows, || DbAnswer::of_query(&done));
        done
    }
}

impl<T: DbTx> DbView<'_, T> {
    /// A `query` run on the transaction: its rows, or its error (a result
    /// the guest does not get undone first).
    async fn fetch(&mut self, statement: &str, bound: values::Bound) -> wasmtime::Result<Result<Rows, DbError>> {
        let span = tracing::trace_span!(target: TRACE, "idem.db", db.statement = %crate::text::Shown(statement, 2_000));
        let fetched =
            self.in_savepoint(async |tx: &mut T| tx.fetch(bound, MAX_RESULT_BYTES).await).instrument(span).await?;
        // A result the guest does not get must not leave the statement's
        // effect behind either: a guest that retries differently would
        // apply it twice.
        let refusal = match fetched {
            Err(e) => return Ok(Err(e)),
            Ok(Fetched::Rows(rows)) => return Ok(Ok(rows)),
            Ok(Fetched::TooLarge) => DbError::Refused(format!("the result is larger than {MAX_RESULT_BYTES} bytes")),
            Ok(Fetched::Unreadable(e)) => DbError::InvalidValue(e),
        };
        self.undo_last(&refusal).await?;
        Ok(Err(refusal))
    }
}
