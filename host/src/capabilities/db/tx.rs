//! What the `db` capability needs of the event's transaction, and its
//! implementation on [`EventTx`] and on the invocation's [`Lent`] hold of
//! it (a share takes the transaction for one statement at a time).
//!
//! The capability decides (savepoints, the allowance, which failure the
//! guest sees and which traps); the transaction only runs what it is given.
//! Keeping that line a trait lets the decisions be unit-tested against a
//! scripted transaction (`tests.rs`), with no database.

use std::future::Future;

use sqlx::Executor as _;

use super::values::{self, Bound};
use crate::transaction::{EventTx, Lent};
use crate::wit::db::Rows;

/// A `query`'s rows as the capability gets them.
#[derive(Debug)]
pub(crate) enum Fetched {
    Rows(Rows),
    /// Together larger than the cap: the rest was never buffered.
    TooLarge,
    /// A column the host cannot hand to the guest (the reason names it).
    Unreadable(String),
}

/// The transaction a guest's statements run in.
pub(crate) trait DbTx: Send {
    /// Runs a statement the host wrote (savepoint control) as one simple
    /// query.
    fn control(&mut self, sql: &'static str) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Runs a guest statement; returns the rows it affected.
    fn execute(&mut self, statement: Bound) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Runs a guest statement and reads its rows, up to `max_bytes` of them.
    fn fetch(
        &mut self,
        statement: Bound,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Fetched, sqlx::Error>> + Send;
}

impl DbTx for EventTx {
    async fn control(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        self.conn().execute(sql).await.map(drop)
    }

    async fn execute(&mut self, statement: Bound) -> Result<u64, sqlx::Error> {
        statement.execute(self.conn()).await
    }

    async fn fetch(&mut self, statement: Bound, max_bytes: usize) -> Result<Fetched, sqlx::Error> {
        Ok(match statement.fetch_capped(self.conn(), max_bytes).await? {
            None => Fetched::TooLarge,
            Some(rows) => match values::rows(&rows) {
                Ok(rows) => Fetched::Rows(rows),
                Err(e) => Fetched::Unreadable(e),
            },
        })
    }
}

impl DbTx for Lent {
    async fn control(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        match self {
            Self::Whole(tx) => tx.control(sql).await,
            Self::Shared(share) => share.lock().await.control(sql).await,
            Self::Returned => Err(returned()),
        }
    }

    async fn execute(&mut self, statement: Bound) -> Result<u64, sqlx::Error> {
        match self {
            Self::Whole(tx) => DbTx::execute(tx, statement).await,
            Self::Shared(share) => DbTx::execute(&mut *share.lock().await, statement).await,
            Self::Returned => Err(returned()),
        }
    }

    async fn fetch(&mut self, statement: Bound, max_bytes: usize) -> Result<Fetched, sqlx::Error> {
        match self {
            Self::Whole(tx) => tx.fetch(statement, max_bytes).await,
            Self::Shared(share) => share.lock().await.fetch(statement, max_bytes).await,
            Self::Returned => Err(returned()),
        }
    }
}

/// A statement with no transaction to run in (see [`Lent::Returned`]).
fn returned() -> sqlx::Error {
    sqlx::Error::Protocol("no transaction: the invocation is over".into())
}
