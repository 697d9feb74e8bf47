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
}
