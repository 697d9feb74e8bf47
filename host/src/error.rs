//! How a record failed, and so what the pipeline does with it: the one
//! classification of failures (the failure table in docs/guarantees.md says the same).
//!
//! | class | examples | what happens |
//! |---|---|---|
//! | invalid | not JSON, bad eventId, unknown type, schema violation | dead-lettered at once |
//! | permanent | the handler's permanent error, a trap, an event older than the dedup retention or too far in the future (`stale_events = "dlq"`) | dead-lettered at once |
//! | retryable | the handler's retryable error, its deadline overrun, a deterministic failure at COMMIT | retried with backoff up to `max_attempts`, then dead-lettered |
//! | unavailable | database unreachable or overloaded, serialization failure, deadlock, lock timeout, pool timeout, DLQ unwritable | retried without limit, attempts not spent |
//! | conflicting | an event id already processed with another payload | dead-lettered at once |
//! | fatal | idem's tables missing or unusable | the handler stops; nothing is committed past the record |
//!
//! SQLSTATEs that make a failure *unavailable* (see [`unavailable_sqlstate`]):
//! class 08 (connection exception), 53 (insufficient resources), 57P
//! (operator intervention: admin or crash shutdown, cannot connect now), 58
//! (system error), XX (internal error), 40001 (serialization failure),
//! 40P01 (deadlock), 55P03 (lock not available), and idem's own ID002 (an
//! event's dedup window not created yet: maintenance is behind). Whether the guest's
//! statement or the host's own hit it, it is not the event's fault; and a
//! transaction in which one happened is never committed, even if the guest
//! caught the error and returned ok.

use std::time::Duration;

/// What a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// The record is not a valid event for this handler.
    Invalid,
    /// Executing it again will fail the same way.
    Permanent,
    /// Executing it again may pass: it spends one of the event's attempts.
    Retryable,
    /// The infrastructure failed, not the event: retry for as long as it
    /// lasts without spending attempts.
    Unavailable,
    /// The event id was already processed with a different payload.
    Conflicting,
    /// The host cannot work for this handler (idem's own tables refuse
    /// it): the handler's incident (`pipeline::incident`), no one else's.
    Fatal,
}

impl ErrorClass {
    /// The class's name in logs, counters and DLQ headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Permanent => "permanent",
            Self::Retryable => "retryable",
            Self::Unavailable => "unavailable",
            Self::Conflicting => "conflicting",
            Self::Fatal => "fatal",
        }
    }
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
    /// The handler trapped on an instance kept from its earlier events
    /// (`events_per_instance`): the trap may be theirs (memory they left),
    /// so the event runs again on a fresh instance, where a trap is its own
    /// (`executor`). Never final; were it to reach a caller, it is a trap.
    #[error("handler trapped on an instance kept from earlier events: {0}")]
    KeptTrapped(String),
    #[error("handler did not finish within {0:?}")]
    TimedOut(Duration),
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// A guest statement failed for a reason that is not the event's (the
    /// guest may have caught it): the transaction was not committed.
    #[error("a handler statement hit an infrastructure failure: {0}")]
    Infrastructure(String),
    /// A host statement overran its deadline; its connection was closed.
    #[error("the database did not answer in time ({0}); the connection was closed")]
    Deadline(&'static str),
    #[error("idem's tables are missing or unusable ({0}); run `idem migrate`")]
    Schema(#[source] sqlx::Error),
    #[error("eventId reused with a different payload (this handler processed the id before)")]
    Conflict,
    /// A run of the event would have sent a different request under an
    /// `Idempotency-Key` sent before (`capabilities::http::SentKeys`).
    #[error(
        "a different request was sent under Idempotency-Key `{0}` before (events run side by side saw a \
         batch-mate's write that was rolled back, or not yet made): not sent; the provider holds the first"
    )]
    RequestChanged(String),
    /// A guest statement failed inside a batch (see `DbCapability`): the
    /// event runs again alone, where the guest sees the error. Never final.
    #[error("a handler statement failed inside a batch: {0}")]
    InBatch(String),
    /// The claim named a module version that is no longer the handler's
    /// active one: the host switches to the active one and runs the event
    /// again. Never final.
    #[error("{0}")]
    StaleModule(String),
    /// The event is older than the handler's dedup retention and has no
    /// dedup row: it may have been processed, its row dropped since
    /// (`stale_events = "dlq"`).
    #[error("older than dedup retention: {0}")]
    StaleEvent(String),
    /// The event id's time lies further ahead than `future_skew`.
    #[error("event id in the future: {0}")]
    FutureEvent(String),
    /// A destination of the handler's requests asked to be left alone
    /// (`Retry-After`), or its rate, longer than the invocation could
    /// wait: the event waits too, spending no attempt.
    #[error("throttled: {0}")]
    Throttled(String),
}

impl ExecError {
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::HandlerRetryable(_) | Self::TimedOut(_) => ErrorClass::Retryable,
            Self::HandlerPermanent(_)
            | Self::Trapped(_)
            | Self::KeptTrapped(_)
            | Self::StaleEvent(_)
            | Self::FutureEvent(_) => ErrorClass::Permanent,
            Self::Database(e) => sql_class(e),
            Self::Infrastructure(_)
            | Self::Deadline(_)
            | Self::InBatch(_)
            | Self::StaleModule(_)
            | Self::Throttled(_) => ErrorClass::Unavailable,
            Self::Schema(_) => ErrorClass::Fatal,
            Self::Conflict | Self::RequestChanged(_) => ErrorClass::Conflicting,
        }
    }

    /// Classifies an error from the host's own SQL.
    pub(crate) fn from_host_sql(e: sqlx::Error) -> Self {
        let code = e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned());
        match code.as_deref() {
            // idem_api.claim_events: not the active module version.
            Some("ID001") => {
                Self::StaleModule(e.as_database_error().map(|d| d.message().to_owned()).unwrap_or_default())
            }
            // idem_api.claim_events: an event's window was not created yet.
            // Maintenance is behind: wait as in an outage (the statement
            // failed cleanly, so the transaction is rolled back, not cut).
            Some("ID002") => {
                Self::Infrastructure(e.as_database_error().map(|d| d.message().to_owned()).unwrap_or_default())
            }
            // The outbox refused what the event emitted (not claimed in
            // this transaction, a topic not allowed, malformed): the
            // event's own failure, for good.
            Some("ID004") => {
                Self::HandlerPermanent(e.as_database_error().map(|d| d.message().to_owned()).unwrap_or_default())
            }
            // undefined table / schema / column / function, insufficient privilege
            Some("42P01" | "3F000" | "42703" | "42883" | "42501") => Self::Schema(e),
            _ => Self::Database(e),
        }
    }
}

/// A database error's class: an SQLSTATE of the infrastructure, or no
/// answer from the server at all (I/O, pool timeout, TLS, protocol), is
/// *unavailable*; any other error the server gave (a constraint checked at
/// COMMIT, say) is the event's, *retryable*.
pub fn sql_class(e: &sqlx::Error) -> ErrorClass {
    match e {
        sqlx::Error::Database(d) => match d.code() {
            Some(code) if unavailable_sqlstate(&code) => ErrorClass::Unavailable,
            _ => ErrorClass::Retryable,
        },
        _ => ErrorClass::Unavailable,
    }
}

/// The SQLSTATEs that say the infrastructure failed, not the statement.
pub fn unavailable_sqlstate(code: &str) -> bool {
    ["08", "53", "57P", "58", "XX"].iter().any(|class| code.starts_with(class))
        || matches!(code, "40001" | "40P01" | "55P03" | "ID002")
}

#[cfg(test)]
mod tests {
    use super::unavailable_sqlstate;

    #[test]
    fn the_sqlstate_table() {
        for code in
            ["08006", "08001", "53300", "53100", "57P01", "57P03", "58030", "XX000", "40001", "40P01", "55P03", "ID002"]
        {
            assert!(unavailable_sqlstate(code), "{code}");
        }
        for code in ["23505", "23503", "22003", "42601", "57014", "P0001", "40002"] {
            assert!(!unavailable_sqlstate(code), "{code}");
        }
    }
}
