//! What an invocation comes to: the guest's answer, its trap or overrun,
//! and a capability's veto, as the event's outcome or error.

use super::Outcome;
use crate::capabilities::{HostFault, Verdict};
use crate::error::ExecError;
use crate::runtime::Invocation;

/// The most of a guest's own text (an error message, a trap, its stderr)
/// an error carries.
const GUEST_TEXT: usize = 2_000;

/// What an invocation comes to. Whatever the guest made of it (a refused
/// request, a failed statement), a capability's veto fails the event.
pub(super) fn result(invocation: Invocation, verdict: Verdict, stderr: &str) -> Result<Outcome, ExecError> {
    match (invocation, verdict.veto) {
        (Invocation::Ok | Invocation::Failed { .. }, Some(veto)) => Err(veto),
        (Invocation::Ok, None) => Ok(Outcome::Processed),
        // A destination asked to be left alone longer than the budget:
        // the event waits, spending no attempt.
        (Invocation::Failed { retryable: true, .. }, None) if verdict.excuse.is_some() => {
            Err(verdict.excuse.unwrap_or(ExecError::Throttled(String::new())))
        }
        // The guest's words are data wherever they are shown (logs, DLQ
        // headers, `idem dlq list`): escaped and capped here, once.
        (Invocation::Failed { retryable: true, message }, None) => {
            Err(ExecError::HandlerRetryable(crate::text::shown(&message, GUEST_TEXT)))
        }
        (Invocation::Failed { retryable: false, message }, None) => {
            Err(ExecError::HandlerPermanent(crate::text::shown(&message, GUEST_TEXT)))
        }
        (Invocation::TimedOut(limit), _) => Err(ExecError::TimedOut(limit)),
        // The host's own shortage, not the event's doing (see `runtime::pool`).
        (Invocation::Trapped(trap), _) if trap.chain().any(|e| e.is::<wasmtime::PoolConcurrencyLimitError>()) => {
            Err(ExecError::Infrastructure(format!("no instance slot free: {trap}")))
        }
        (Invocation::Trapped(trap), _) => Err(match trap.downcast::<HostFault>() {
            Ok(HostFault::Database(e)) => ExecError::Database(e),
            Ok(HostFault::InBatch(statement)) => ExecError::InBatch(statement),
            // A trap's text names the guest's own functions: its words too.
            Err(trap) if stderr.is_empty() => ExecError::Trapped(crate::text::shown(&format!("{trap:#}"), GUEST_TEXT)),
            Err(trap) => ExecError::Trapped(format!(
                "{}; guest stderr: {}",
                crate::text::shown(&format!("{trap:#}"), GUEST_TEXT),
                crate::text::shown(stderr, GUEST_TEXT)
            )),
        }),
    }
}
