//! What a handler can reach, one module per import of the world. Each
//! implements its interface's `Host` trait on the store state.

pub(crate) mod db;
mod host_info;
pub(crate) mod http;

/// A failure of the host itself while serving a guest call. It traps the
/// guest; the executor finds it in the trap and classifies the event's
/// failure by it (a lost database connection is worth a retry, a guest bug
/// is not).
#[derive(Debug, thiserror::Error)]
pub enum HostFault {
    #[error("the database failed while running a handler statement: {0}")]
    Database(#[source] sqlx::Error),
    /// A statement failed in a batch, where statements run without a
    /// savepoint of their own: the transaction is aborted, so the guest
    /// cannot be told and go on. The executor runs the event again alone,
    /// where the guest gets the error as usual.
    #[error("a handler statement failed inside a batch: {0}")]
    InBatch(String),
}

/// How many calls of one kind an invocation may still make
/// (`[handler.limits]`).
#[derive(Debug)]
pub(crate) struct Allowance {
    left: u32,
    limit: u32,
    /// The setting that sets it, for the refusal's message.
    setting: &'static str,
}

impl Allowance {
    pub(crate) fn new(limit: u32, setting: &'static str) -> Self {
        Self { left: limit, limit, setting }
    }

    /// Calls spent so far.
    pub(crate) fn spent(&self) -> u32 {
        self.limit - self.left
    }

    /// Spends one call, or says why there is none left.
    pub(crate) fn spend(&mut self, what: &str) -> Result<(), String> {
        if self.left == 0 {
            return Err(format!("more than {} {what} in one invocation (limits.{})", self.limit, self.setting));
        }
        self.left -= 1;
        Ok(())
    }
}
