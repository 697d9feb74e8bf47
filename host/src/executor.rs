//! Executes one event: claim, handler, commit, all in one transaction.

use std::sync::Arc;

use sqlx::{PgPool, Postgres, Transaction};

use crate::capabilities::HostFault;
use crate::capabilities::db::DbCapability;
use crate::capabilities::http::HttpCapability;
use crate::dedup;
use crate::error::ExecError;
use crate::event::Event;
use crate::runtime::{Handler, HostState, Invocation};

/// What became of an event that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler ran and its effect committed with the claim.
    Processed,
    /// The event was already processed by this handler: skipped.
    Duplicate,
}

/// Runs events through one handler against one database.
#[derive(Debug, Clone)]
pub struct Executor {
    handler: Handler,
    pool: PgPool,
    http: reqwest::Client,
}

impl Executor {
    pub fn new(handler: Handler, pool: PgPool, http: reqwest::Client) -> Self {
        Self { handler, pool, http }
    }

    pub fn handler(&self) -> &Handler {
        &self.handler
    }

    /// Executes `event` in a transaction of its own. `attempt` is 1 for the
    /// first execution in this process, then 2, 3, …
    ///
    /// `Ok(Processed)` is returned only after COMMIT succeeded. Every guest
    /// statement ran under a savepoint, so the transaction cannot be in the
    /// aborted state that would make PostgreSQL turn COMMIT into ROLLBACK.
    pub async fn execute(&self, event: &Event, attempt: u32) -> Result<Outcome, ExecError> {
        // READ COMMITTED whatever the server's default: see `dedup::claim`.
        // The statement timeout bounds every statement by the invocation's
        // limit: a guest's `pg_sleep(3600)` is cancelled by the server, so
        // the rollback after a timed-out invocation never waits on it.
        let timeout_ms = self.handler.settings().timeout.as_millis().max(1);
        let begin = format!("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = {timeout_ms}");
        let tx = self.pool.begin_with(begin).await.map_err(ExecError::from_host_sql)?;
        let (tx, result) = self.run_in(tx, event, attempt).await;
        match result {
            Ok(Outcome::Processed) => {
                tx.commit().await.map_err(ExecError::from_host_sql)?;
                Ok(Outcome::Processed)
            }
            other => {
                // A duplicate wrote nothing; a failure must leave nothing.
                if let Err(e) = tx.rollback().await {
                    tracing::warn!(event_id = %event.id, "rollback failed (the connection is discarded): {e}");
                }
                other
            }
        }
    }

    /// Instantiates the handler once, in a transaction rolled back at once.
    /// A start-up check: a component that cannot be instantiated under its
    /// limits would fail every event.
    pub async fn check_instantiation(&self) -> anyhow::Result<()> {
        let tx = self.pool.begin().await.map_err(anyhow::Error::from)?;
        let (state, result) = self.handler.try_instantiate(self.state(tx, uuid::Uuid::nil().to_string())).await;
        let _ = state.db.into_transaction().rollback().await;
        result.map_err(|e| anyhow::anyhow!("cannot be instantiated under its limits: {e:#}"))
    }

    /// A store's state for one event of this handler, holding `tx`.
    fn state(&self, tx: Transaction<'static, Postgres>, event_id: String) -> HostState {
        let settings = self.handler.settings();
        let http = HttpCapability::new(self.http.clone(), Arc::new(settings.http.clone()), event_id.clone());
        HostState::new(self.handler.new_state(), event_id, DbCapability::new(tx), http)
    }

    /// Claims `event` and runs the handler inside `tx`, which the caller
    /// commits or rolls back. The unit a batch of events will repeat, each
    /// under its own savepoint.
    pub async fn run_in(
        &self,
        mut tx: Transaction<'static, Postgres>,
        event: &Event,
        attempt: u32,
    ) -> (Transaction<'static, Postgres>, Result<Outcome, ExecError>) {
        match dedup::claim(&mut tx, event, &self.handler.settings().name).await {
            Ok(true) => {}
            Ok(false) => return (tx, Ok(Outcome::Duplicate)),
            Err(e) => return (tx, Err(ExecError::from_host_sql(e))),
        }
        let state = self.state(tx, event.id.hyphenated().to_string());
        let (state, invocation) = self.handler.invoke(state, &event.to_wit(attempt)).await;
        let stderr = state.stderr_tail();
        let tx = state.db.into_transaction();
        let result = match invocation {
            Invocation::Ok => Ok(Outcome::Processed),
            Invocation::Failed { retryable: true, message } => Err(ExecError::HandlerRetryable(message)),
            Invocation::Failed { retryable: false, message } => Err(ExecError::HandlerPermanent(message)),
            Invocation::TimedOut(limit) => Err(ExecError::TimedOut(limit)),
            Invocation::Trapped(trap) => Err(match trap.downcast::<HostFault>() {
                Ok(HostFault::Database(e)) => ExecError::Database(e),
                Err(trap) if stderr.is_empty() => ExecError::Trapped(format!("{trap:#}")),
                Err(trap) => ExecError::Trapped(format!("{trap:#}; guest stderr: {stderr}")),
            }),
        };
        (tx, result)
    }
}
