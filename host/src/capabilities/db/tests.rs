//! The `db` capability's decisions against a scripted transaction: what it
//! sends around a guest statement, what the guest sees, and what traps.

use std::borrow::Cow;
use std::collections::VecDeque;

use super::{DbCapability, DbTx, DbView, Fetched, HostFault, MAX_STATEMENT_BYTES, values::Bound};
use crate::wit::db::{DbError, Host as _, Rows, Value};

/// A transaction that records what it is sent and answers guest statements
/// from a script, in order.
#[derive(Default)]
struct Scripted {
    sent: Vec<String>,
    answers: VecDeque<Answer>,
}

enum Answer {
    Affected(u64),
    Fetched(Fetched),
    Fails(sqlx::Error),
}

impl Scripted {
    fn answering(answers: impl IntoIterator<Item = Answer>) -> Self {
        Self { sent: Vec::new(), answers: answers.into_iter().collect() }
    }

    fn next(&mut self, statement: &Bound) -> Answer {
        // The guest's text, without the comment the host appends naming
        // the parameters' types.
        let text = statement.sql().split("\n/* idem params").next().unwrap_or_default();
        self.sent.push(text.to_owned());
        self.answers.pop_front().expect("a statement the script did not expect")
    }
}

impl DbTx for Scripted {
    async fn control(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        self.sent.push(sql.to_owned());
        Ok(())
    }

    async fn execute(&mut self, statement: Bound) -> Result<u64, sqlx::Error> {
        match self.next(&statement) {
            Answer::Affected(n) => Ok(n),
            Answer::Fails(e) => Err(e),
            Answer::Fetched(_) => panic!("rows scripted for an execute"),
        }
    }

    async fn fetch(&mut self, statement: Bound, _max_bytes: usize) -> Result<Fetched, sqlx::Error> {
        match self.next(&statement) {
            Answer::Fetched(fetched) => Ok(fetched),
            Answer::Fails(e) => Err(e),
            Answer::Affected(_) => panic!("a count scripted for a query"),
        }
    }
}

/// An error as PostgreSQL would raise it.
#[derive(Debug)]
struct Raised {
    code: &'static str,
    message: &'static str,
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for Raised {}

impl sqlx::error::DatabaseError for Raised {
    fn message(&self) -> &str {
        self.message
    }
    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.code))
    }
    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }
    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

fn raised(code: &'static str, message: &'static str) -> Answer {
    Answer::Fails(sqlx::Error::Database(Box::new(Raised { code, message })))
}

const INSERT: &str = "INSERT INTO orders (id) VALUES ($1)";
const SET: &str = "SAVEPOINT idem_statement";
const RELEASE_AND_SET: &str = "RELEASE SAVEPOINT idem_statement; SAVEPOINT idem_statement";
const UNDO: &str = "ROLLBACK TO SAVEPOINT idem_statement";

fn alone(max_statements: u32) -> DbCapability {
    DbCapability::new("billing".into(), max_statements, false)
}

fn batched() -> DbCapability {
    DbCapability::new("billing".into(), 100, true)
}

async fn insert(ctx: &mut DbCapability, tx: &mut Scripted) -> wasmtime::Result<Result<u64, DbError>> {
    DbView { ctx, tx }.execute(INSERT.into(), vec![Value::Int64(1)]).await
}

#[tokio::test]
async fn a_failed_statement_is_undone_alone_and_the_guest_sees_why() {
    let mut tx = Scripted::answering([raised("23505", "duplicate key"), Answer::Affected(1)]);
    let mut ctx = alone(10);
    let first = insert(&mut ctx, &mut tx).await.expect("no trap");
    assert!(matches!(&first, Err(DbError::UniqueViolation(e)) if e.code == "23505"), "{first:?}");
    let second = insert(&mut ctx, &mut tx).await.expect("no trap");
    assert!(matches!(second, Ok(1)), "{second:?}");
    // One savepoint level at a time: the second statement releases the
    // first one's savepoint as it sets its own.
    assert_eq!(tx.sent, [SET, INSERT, UNDO, RELEASE_AND_SET, INSERT]);
    assert_eq!(ctx.infrastructure_failure(), None);
}

#[tokio::test]
async fn transient_errors_are_told_apart() {
    let mut tx = Scripted::answering([raised("40P01", "deadlock detected"), raised("22P02", "bad input")]);
    let mut ctx = alone(10);
    assert!(matches!(insert(&mut ctx, &mut tx).await.expect("no trap"), Err(DbError::Transient(_))));
    assert!(matches!(insert(&mut ctx, &mut tx).await.expect("no trap"), Err(DbError::Other(_))));
}

#[tokio::test]
async fn an_infrastructure_failure_forbids_the_commit_whatever_the_guest_does() {
    let mut tx = Scripted::answering([raised("57P01", "terminating connection"), Answer::Affected(1)]);
    let mut ctx = alone(10);
    assert!(insert(&mut ctx, &mut tx).await.expect("no trap").is_err());
    // The guest ignores the error and goes on; the transaction still must
    // not commit.
    assert!(insert(&mut ctx, &mut tx).await.expect("no trap").is_ok());
    let why = ctx.infrastructure_failure().expect("recorded");
    assert!(why.contains("57P01") && why.contains("terminating connection"), "{why}");
}

#[tokio::test]
async fn in_a_batch_a_failed_statement_traps_and_no_savepoint_is_sent() {
    let mut tx = Scripted::answering([Answer::Affected(1), raised("23505", "duplicate key")]);
    let mut ctx = batched();
    assert!(matches!(insert(&mut ctx, &mut tx).await.expect("no trap"), Ok(1)));
    let trap = insert(&mut ctx, &mut tx).await.expect_err("a trap");
    assert!(matches!(trap.downcast_ref::<HostFault>(), Some(HostFault::InBatch(_))), "{trap:?}");
    assert_eq!(tx.sent, [INSERT, INSERT]);
}

#[tokio::test]
async fn a_lost_connection_traps() {
    let mut tx = Scripted::answering([Answer::Fails(sqlx::Error::PoolClosed)]);
    let trap = insert(&mut alone(10), &mut tx).await.expect_err("a trap");
    assert!(matches!(trap.downcast_ref::<HostFault>(), Some(HostFault::Database(_))), "{trap:?}");
}

#[tokio::test]
async fn past_the_allowance_nothing_reaches_the_transaction() {
    let mut tx = Scripted::answering([Answer::Affected(1), Answer::Affected(1)]);
    let mut ctx = alone(2);
    for _ in 0..2 {
        assert!(insert(&mut ctx, &mut tx).await.expect("no trap").is_ok());
    }
    let third = insert(&mut ctx, &mut tx).await.expect("no trap");
    assert!(matches!(&third, Err(DbError::Refused(why)) if why.contains("max_db_statements")), "{third:?}");
    assert_eq!(tx.sent.iter().filter(|s| *s == INSERT).count(), 2);
}

#[tokio::test]
async fn refused_statements_are_never_sent() {
    let mut tx = Scripted::default();
    let mut ctx = alone(10);
    let long = format!("SELECT '{}'", "x".repeat(MAX_STATEMENT_BYTES));
    for statement in [long.as_str(), "COMMIT", "SET search_path = public", "SELECT 1; SELECT 2"] {
        let answer = DbView { ctx: &mut ctx, tx: &mut tx }.execute(statement.into(), vec![]).await.expect("no trap");
        assert!(matches!(answer, Err(DbError::Refused(_))), "{statement:.40}: {answer:?}");
    }
    let bad = DbView { ctx: &mut ctx, tx: &mut tx }.execute(INSERT.into(), vec![Value::Uuid("x".into())]).await;
    assert!(matches!(bad.expect("no trap"), Err(DbError::InvalidValue(_))));
    assert!(tx.sent.is_empty(), "{:?}", tx.sent);
}

#[tokio::test]
async fn a_result_the_guest_does_not_get_leaves_no_effect() {
    let rows = Rows { columns: vec!["id".into()], rows: vec![vec![Value::Int64(7)]] };
    let mut tx = Scripted::answering([
        Answer::Fetched(Fetched::TooLarge),
        Answer::Fetched(Fetched::Unreadable("column 0: type point".into())),
        Answer::Fetched(Fetched::Rows(rows)),
    ]);
    let mut ctx = alone(10);
    let statement = "UPDATE orders SET n = n + 1 RETURNING id";
    let query =
        async |ctx: &mut DbCapability, tx: &mut Scripted| DbView { ctx, tx }.query(statement.into(), vec![]).await;
    assert!(matches!(query(&mut ctx, &mut tx).await.expect("no trap"), Err(DbError::Refused(_))));
    assert!(matches!(query(&mut ctx, &mut tx).await.expect("no trap"), Err(DbError::InvalidValue(_))));
    let got = query(&mut ctx, &mut tx).await.expect("no trap").expect("rows");
    assert!(matches!(got.rows.as_slice(), [row] if matches!(row.as_slice(), [Value::Int64(7)])), "{got:?}");
    assert_eq!(tx.sent, [SET, statement, UNDO, RELEASE_AND_SET, statement, UNDO, RELEASE_AND_SET, statement]);

    // In a batch the same refusal traps: the batch's transaction cannot
    // undo one statement alone.
    let mut tx = Scripted::answering([Answer::Fetched(Fetched::TooLarge)]);
    let trap = query(&mut batched(), &mut tx).await.expect_err("a trap");
    assert!(matches!(trap.downcast_ref::<HostFault>(), Some(HostFault::InBatch(_))), "{trap:?}");
}
