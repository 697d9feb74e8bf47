//! The `db` import: the guest's statements, run in the host's transaction.
//!
//! Design choice: every guest statement runs under its own savepoint. A
//! statement that fails is rolled back alone and the guest gets the error;
//! the transaction stays usable, so a handler may handle (say) a unique
//! violation and go on, and its other writes commit with the claim. Without
//! this, PostgreSQL would leave the transaction aborted and turn the host's
//! COMMIT into a silent ROLLBACK. If the savepoint itself cannot be rolled
//! back, the host traps: the event fails and nothing is committed.
//!
//! Every statement goes through the extended protocol (prepared and bound,
//! even without parameters), which runs exactly one statement per call.

mod guard;
mod values;

use sqlx::{Executor as _, PgConnection, Postgres, Transaction};

use super::HostFault;
use crate::runtime::HostState;
use crate::runtime::bindings::db::{self, DbError, Rows, SqlError, Value};

/// The event's transaction, lent to the guest for one invocation.
pub(crate) struct DbCapability {
    tx: Transaction<'static, Postgres>,
}

impl DbCapability {
    pub(crate) fn new(tx: Transaction<'static, Postgres>) -> Self {
        Self { tx }
    }

    /// Takes the transaction back after the invocation.
    pub(crate) fn into_transaction(self) -> Transaction<'static, Postgres> {
        self.tx
    }

    fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }
}

/// Prepares `statement` for the guest: refused statements and unbindable
/// parameters become domain errors.
fn prepare(statement: &str, params: Vec<Value>) -> Result<values::Bound, DbError> {
    guard::check(statement).map_err(DbError::Refused)?;
    values::bind(statement, params).map_err(DbError::InvalidValue)
}

/// Runs `run` under a savepoint: on a database error the statement alone is
/// undone and the error goes to the guest; on a connection error the host
/// traps.
async fn in_savepoint<T>(
    conn: &mut PgConnection,
    run: impl AsyncFnOnce(&mut PgConnection) -> Result<T, sqlx::Error>,
) -> wasmtime::Result<Result<T, DbError>> {
    let fault = |e| wasmtime::Error::new(HostFault::Database(e));
    conn.execute("SAVEPOINT idem_statement").await.map_err(fault)?;
    match run(&mut *conn).await {
        Ok(value) => {
            conn.execute("RELEASE SAVEPOINT idem_statement").await.map_err(fault)?;
            Ok(Ok(value))
        }
        Err(sqlx::Error::Database(e)) => {
            conn.execute("ROLLBACK TO SAVEPOINT idem_statement; RELEASE SAVEPOINT idem_statement")
                .await
                .map_err(fault)?;
            Ok(Err(classify(e.as_ref())))
        }
        Err(sqlx::Error::ColumnDecode { index, source }) => {
            conn.execute("ROLLBACK TO SAVEPOINT idem_statement; RELEASE SAVEPOINT idem_statement")
                .await
                .map_err(fault)?;
            Ok(Err(DbError::InvalidValue(format!("column {index}: {source}"))))
        }
        Err(e) => Err(fault(e)),
    }
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

impl db::Host for HostState {
    async fn execute(&mut self, statement: String, params: Vec<Value>) -> wasmtime::Result<Result<u64, DbError>> {
        let bound = match prepare(&statement, params) {
            Ok(bound) => bound,
            Err(e) => return Ok(Err(e)),
        };
        let conn = self.db.conn();
        in_savepoint(conn, async |c| bound.execute(c).await).await
    }

    async fn query(&mut self, statement: String, params: Vec<Value>) -> wasmtime::Result<Result<Rows, DbError>> {
        let bound = match prepare(&statement, params) {
            Ok(bound) => bound,
            Err(e) => return Ok(Err(e)),
        };
        let conn = self.db.conn();
        let fetched = in_savepoint(conn, async |c| bound.fetch_all(c).await).await?;
        Ok(fetched.and_then(|rows| values::rows(&rows).map_err(DbError::InvalidValue)))
    }
}
