use std::fmt;

use crate::bindings::idem::handler::types::HandlerError;

/// What a handler returns.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// A handler failure, classified: the host rolls back either way, then
/// retries a retryable failure and gives up on a permanent one.
///
/// Every SDK error converts with `?` (each module converts its own): database
/// and HTTP errors that can pass (deadlocks, timeouts, resets, 5xx) become
/// retryable, the rest permanent, and a payload that does not fit its type is
/// permanent.
///
/// ```
/// use idem_guest::Error;
///
/// fn check_stock(available: u32) -> idem_guest::Result {
///     if available == 0 {
///         // The warehouse may restock: ask the host to execute the event again later.
///         return Err(Error::retryable("no stock yet"));
///     }
///     Ok(())
/// }
///
/// let e = check_stock(0).unwrap_err();
/// assert!(e.is_retryable());
/// assert_eq!(e.to_string(), "retryable: no stock yet");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    retryable: bool,
    message: String,
}

impl Error {
    /// `retryable` or permanent, as a conversion from an SDK error decides.
    pub(crate) fn classified(retryable: bool, message: String) -> Self {
        Self { retryable, message }
    }

    /// A failure that may pass if the event is executed again later.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self { retryable: true, message: message.into() }
    }

    /// A failure that executing the event again will not fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self { retryable: false, message: message.into() }
    }

    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn into_wit(self) -> HandlerError {
        if self.retryable { HandlerError::Retryable(self.message) } else { HandlerError::Permanent(self.message) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.retryable { "retryable" } else { "permanent" };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::permanent(format!("json: {e}"))
    }
}
