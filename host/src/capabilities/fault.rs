//! A host fault while serving a guest call: it traps the guest.

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
