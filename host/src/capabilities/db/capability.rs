//! The `db` import as a [`Capability`]: its setting (statements per
//! invocation), its state per invocation, what it says after the call.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasmtime::component::Linker;

use super::{Db, DbCapability};
use crate::capabilities::{After, Call, Capability, HasCapabilities};
use crate::config::HandlerConfig;
use crate::error::ExecError;

/// Statements one invocation may run, at most.
const MAX_STATEMENTS: u32 = 1_000_000;

/// What an operator configures of a handler's statements.
#[derive(Debug, Clone)]
pub struct DbSettings {
    /// Statements one invocation may run (`[handler.limits] max_db_statements`).
    pub max_statements: u32,
}

impl Default for DbSettings {
    fn default() -> Self {
        Self { max_statements: crate::config::HandlerLimits::default().max_db_statements }
    }
}

impl Capability for DbCapability {
    const INTERFACE: &'static str = "db";
    type Settings = DbSettings;
    /// Its statements and what came of each, when kept (`idem test`).
    type Left = Vec<String>;

    fn check(handler: &HandlerConfig) -> anyhow::Result<()> {
        let n = handler.limits.max_db_statements;
        if n == 0 {
            anyhow::bail!(
                "handler `{}`: limits.max_db_statements = 0 would refuse every statement; a handler that needs \
                 none runs none",
                handler.name
            );
        }
        if n > MAX_STATEMENTS {
            anyhow::bail!(
                "handler `{}`: limits.max_db_statements = {n} must be at most {MAX_STATEMENTS}",
                handler.name
            );
        }
        Ok(())
    }

    fn settings(handler: &HandlerConfig) -> anyhow::Result<DbSettings> {
        Ok(DbSettings { max_statements: handler.limits.max_db_statements })
    }

    fn prepare(settings: &Arc<DbSettings>, call: &Call<'_>) -> Self {
        let db = Self::new(call.handler.to_owned(), settings.max_statements, call.batched).taped(call.tape.clone());
        if call.transcript { db.transcribing() } else { db }
    }

    fn husk(&self) -> Self {
        Self::new(String::new(), 0, false)
    }

    /// Whatever the guest made of it, a transaction in which the
    /// infrastructure failed is not committed.
    fn finish(&mut self, after: &mut After<'_>) -> Vec<String> {
        if let Some(stats) = after.stats {
            stats.db_statements.fetch_add(u64::from(self.statements_run()), Ordering::Relaxed);
        }
        if let Some(failure) = self.infrastructure_failure() {
            after.veto(ExecError::Infrastructure(failure.to_owned()));
        }
        self.transcript()
    }

    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::db::add_to_linker::<T, Db>(linker, |t| t.capabilities().db())
    }
}
