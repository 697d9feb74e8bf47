//! One event as two versions ran it: what each did ([`Side`]), and where
//! they differ.

use serde::Serialize;

use crate::error::{ErrorClass, ExecError};
use crate::executor::{Outcome, Rehearsal, Writes};

/// What one version did with one event, as the report shows it. Every
/// field but `detail` is compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    /// `ok`, or the failure's kind (`permanent error`, `trap`, …).
    pub outcome: String,
    /// The failure's words (not compared: they may name the run's own ids).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Each statement with its values, and what came of it.
    pub statements: Vec<String>,
    /// Rows inserted, updated, deleted per table.
    pub writes: Writes,
    /// Each request it would have sent: method, URL, key, body.
    pub requests: Vec<String>,
    /// Each event it would have emitted: topic, key, type, payload.
    pub emits: Vec<String>,
}

impl Side {
    /// The side of `run`, or `None` when the run says nothing of the
    /// version (the database or the host failed under it, or the shadow's
    /// budget ran out before the handler's timeout: it is skipped).
    pub fn of(run: &Rehearsal) -> Option<Self> {
        if run.cut_short {
            return None;
        }
        let (outcome, detail) = match &run.result {
            Ok(Outcome::Processed) => ("ok".to_owned(), None),
            Ok(_) => return None,
            Err(e) => (failure(e)?.to_owned(), Some(crate::text::shown(&e.to_string(), 500))),
        };
        // A statement that met a lock or an outage says nothing either.
        if run.statements.iter().any(|s| s.contains("-> error: DbError::Transient(") || s.contains("-> host fault: ")) {
            return None;
        }
        let emits = run
            .emitted
            .iter()
            .map(|e| {
                format!(
                    "{} key={} type={} {}",
                    e.topic,
                    e.key,
                    e.event_type,
                    serde_json::Value::Object(e.payload.clone())
                )
            })
            .collect();
        Some(Self {
            outcome,
            detail,
            statements: run.statements.clone(),
            writes: run.writes.clone(),
            requests: run.requests.clone(),
            emits,
        })
    }

    /// The names of the fields in which `self` and `other` differ (none:
    /// they agree).
    pub fn differences(&self, other: &Self) -> Vec<&'static str> {
        let fields = [
            ("outcome", self.outcome == other.outcome),
            ("statements", self.statements == other.statements),
            ("writes", self.writes == other.writes),
            ("requests", self.requests == other.requests),
            ("emits", self.emits == other.emits),
        ];
        fields.into_iter().filter(|(_, same)| !same).map(|(name, _)| name).collect()
    }
}

/// A failure's kind as the report compares it; `None` for one that is not
/// the version's doing.
fn failure(e: &ExecError) -> Option<&'static str> {
    Some(match e {
        ExecError::HandlerRetryable(_) => "retryable error",
        ExecError::HandlerPermanent(_) => "permanent error",
        ExecError::Trapped(_) | ExecError::KeptTrapped(_) => "trap",
        ExecError::TimedOut(_) => "timeout",
        ExecError::RequestChanged(_) | ExecError::Conflict => "conflicting",
        e => match e.class() {
            ErrorClass::Unavailable | ErrorClass::Fatal => return None,
            class => class.as_str(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(outcome: &str, statements: &[&str]) -> Side {
        Side {
            outcome: outcome.into(),
            detail: None,
            statements: statements.iter().map(|s| (*s).to_owned()).collect(),
            writes: Writes::new(),
            requests: Vec::new(),
            emits: Vec::new(),
        }
    }

    #[test]
    fn sides_that_did_the_same_agree_and_a_changed_value_is_named() {
        let a = side("ok", &["INSERT INTO t VALUES ($1) [$1=Float64(10.0)] -> 1 row(s)"]);
        assert!(a.differences(&a.clone()).is_empty());
        let b = side("ok", &["INSERT INTO t VALUES ($1) [$1=Float64(20.0)] -> 1 row(s)"]);
        assert_eq!(a.differences(&b), ["statements"]);
        let c = side("permanent error", &[]);
        assert_eq!(a.differences(&c), ["outcome", "statements"]);
    }

    #[test]
    fn a_failure_of_the_host_is_no_ones_outcome() {
        assert_eq!(failure(&ExecError::Deadline("x")), None);
        assert_eq!(failure(&ExecError::Infrastructure("x".into())), None);
        assert_eq!(failure(&ExecError::Trapped("x".into())), Some("trap"));
    }
}
