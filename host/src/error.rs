//! How an event's execution failed, and what the pipeline should do about it.

use std::time::Duration;

/// What to do with a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Execute the event again later; it may pass.
    Retryable,
    /// Executing it again will fail the same way: give up on this event.
    Permanent,
    /// The host cannot work at all (its tables are missing, say): stop.
    Fatal,
}

/// Why an event was not processed. Whatever the variant, its transaction
/// was rolled back: neither the claim nor anything the handler wrote remains.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("handler failed (retryable): {0}")]
    HandlerRetryable(String),
    #[error("handler failed (permanent): {0}")]
    HandlerPermanent(String),
    #[error("handler trapped: {0}")]
    Trapped(String),
    #[error("handler did not finish within {0:?}")]
    TimedOut(Duration),
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// A host statement overran its deadline; its connection was closed.
    #[error("the database did not answer in time ({0}); the connection was closed")]
    Deadline(&'static str),
    #[error("idem's tables are missing or unusable ({0}); run `idem migrate`")]
    Schema(#[source] sqlx::Error),
}

impl ExecError {
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::HandlerRetryable(_) | Self::TimedOut(_) | Self::Database(_) | Self::Deadline(_) => {
                ErrorClass::Retryable
            }
            Self::HandlerPermanent(_) | Self::Trapped(_) => ErrorClass::Permanent,
            Self::Schema(_) => ErrorClass::Fatal,
        }
    }

    /// Classifies an error from the host's own SQL.
    pub(crate) fn from_host_sql(e: sqlx::Error) -> Self {
        let code = e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned());
        match code.as_deref() {
            // undefined table / schema / column, insufficient privilege
            Some("42P01" | "3F000" | "42703" | "42501") => Self::Schema(e),
            _ => Self::Database(e),
        }
    }
}
