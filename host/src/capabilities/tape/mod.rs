//! A tape of one invocation's exchanges with the world outside the guest:
//! each statement with what it returned, each HTTP request with its
//! answer. `[handler.capture]` records one for a sample of live events
//! (`crate::capture`); `idem test --replay` plays one back, the guest's
//! statements and requests answered from it with no database or network,
//! and notes where the guest now asks something else (a divergence).
//!
//! Played back, the tape answers by position: the third statement gets
//! the third recorded answer, whatever it says, so that one changed
//! statement does not make every later one diverge. A statement or
//! request past the recorded ones is answered with an error naming that.
//! The `db` and `http` capabilities share one tape per invocation; it is
//! never held across an await.

mod forms;

use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::wit::db::{DbError, Rows, SqlError, Value};
use crate::wit::http::{HttpError, Response};
pub use forms::{Bytes, same_json};

/// One statement as the tape keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// `execute` or `query`.
    pub call: String,
    pub sql: String,
    /// Each parameter's JSON form (`forms::value`).
    pub params: Vec<Json>,
    pub answer: DbAnswer,
}

/// What a statement came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DbAnswer {
    /// `execute`: rows affected.
    Affected(u64),
    Rows {
        columns: Vec<String>,
        rows: Vec<Vec<Json>>,
    },
    /// The error the guest got (`forms::db_error`).
    Error(Json),
    /// The host failed (the connection, say): the guest trapped.
    Fault(String),
}

/// One HTTP request as the tape keeps it: the guest's words (never the
/// host's credentials) and the answer the guest got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    pub method: String,
    pub url: String,
    /// The `Idempotency-Key` the host added, if any.
    pub key: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Option<Bytes>,
    pub answer: HttpAnswer,
}

/// What a request came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpAnswer {
    Response {
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
    /// The error the guest got (`forms::http_error`).
    Error(Json),
}

/// Everything one invocation exchanged, in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub statements: Vec<Statement>,
    pub requests: Vec<Exchange>,
}

/// The shared tape of one invocation.
#[derive(Debug)]
pub struct Tape {
    state: Mutex<State>,
}

/// The most a recording keeps, in bytes of its JSON form: a guest could
/// otherwise make one captured invocation hold millions of statements or
/// a 16 MiB result in memory. Past it the recording is abandoned (the
/// capture is dropped, and counted: `Tape::overflowed`).
pub const MAX_RECORDED_BYTES: usize = 1 << 20;

#[derive(Debug)]
enum State {
    /// What was kept, and its size so far (`None`: over the cap, abandoned).
    Recording(Recorded, Option<usize>),
    Replaying {
        recorded: Recorded,
        statement: usize,
        request: usize,
        divergences: Vec<String>,
    },
}

impl Tape {
    /// A blank tape that keeps what the invocation does.
    pub fn recording() -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(State::Recording(Recorded::default(), Some(0))) })
    }

    /// A tape that answers the invocation from `recorded`.
    pub fn replaying(recorded: Recorded) -> Arc<Self> {
        let state = State::Replaying { recorded, statement: 0, request: 0, divergences: Vec::new() };
        Arc::new(Self { state: Mutex::new(state) })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it could only leave a tape half written:
        // what it holds is still the best account there is.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn is_replaying(&self) -> bool {
        matches!(*self.state(), State::Replaying { .. })
    }

    /// Bytes a recording may still keep (0 when it is over, or replaying).
    pub fn room(&self) -> usize {
        match &*self.state() {
            State::Recording(_, Some(kept)) => MAX_RECORDED_BYTES.saturating_sub(*kept),
            _ => 0,
        }
    }

    /// Abandons a recording that would outgrow its cap (its answer is not
    /// even converted).
    pub fn abandon(&self) {
        if let State::Recording(recorded, kept) = &mut *self.state() {
            *recorded = Recorded::default();
            *kept = None;
        }
    }

    /// Whether a recording outgrew [`MAX_RECORDED_BYTES`] (and was dropped).
    pub fn overflowed(&self) -> bool {
        matches!(*self.state(), State::Recording(_, None))
    }

    /// What was recorded (recording), or what was not asked for and every
    /// divergence (replaying), once the invocation is over.
    pub fn take(&self) -> (Recorded, Vec<String>) {
        match &mut *self.state() {
            State::Recording(recorded, _) => (std::mem::take(recorded), Vec::new()),
            State::Replaying { recorded, statement, request, divergences } => {
                let mut found = std::mem::take(divergences);
                for (i, s) in recorded.statements.iter().enumerate().skip(*statement) {
                    found.push(format!("statement {} was not issued: {}", i + 1, shown_statement(s)));
                }
                for (i, r) in recorded.requests.iter().enumerate().skip(*request) {
                    found.push(format!("request {} was not sent: {}", i + 1, shown_request(r)));
                }
                (std::mem::take(recorded), found)
            }
        }
    }

    /// Keeps a statement and its answer (recording only).
    pub fn record_statement(&self, call: &str, sql: &str, params: &[Value], answer: DbAnswer) {
        let params = params.iter().map(forms::value).collect();
        let statement = Statement { call: call.to_owned(), sql: sql.to_owned(), params, answer };
        let size = serde_json::to_vec(&statement).map_or(usize::MAX, |b| b.len());
        if let State::Recording(recorded, kept @ Some(_)) = &mut *self.state() {
            recorded.statements.push(statement);
            grow(recorded, kept, size);
        }
    }

    /// Keeps a request and its answer (recording only).
    pub fn record_request(&self, exchange: Exchange) {
        let size = serde_json::to_vec(&exchange).map_or(usize::MAX, |b| b.len());
        if let State::Recording(recorded, kept @ Some(_)) = &mut *self.state() {
            recorded.requests.push(exchange);
            grow(recorded, kept, size);
        }
    }

    /// The recorded answer to the guest's next statement, noting how it
    /// differs from the recorded one (replaying only).
    pub fn answer_statement(&self, call: &str, sql: &str, params: &[Value]) -> DbAnswer {
        let State::Replaying { recorded, statement, divergences, .. } = &mut *self.state() else {
            return DbAnswer::Fault("the tape is not replaying".into());
        };
        let params: Vec<Json> = params.iter().map(forms::value).collect();
        let now = Statement { call: call.to_owned(), sql: sql.to_owned(), params, answer: DbAnswer::Affected(0) };
        *statement += 1;
        let Some(was) = recorded.statements.get(*statement - 1) else {
            divergences.push(format!("statement {statement} is not in the capture: {}", shown_statement(&now)));
            let message = "statement not in the capture: replay has no answer for it".to_owned();
            return DbAnswer::Error(forms::db_error(&DbError::Other(SqlError {
                code: String::new(),
                message,
                constraint: None,
            })));
        };
        let same_params = was.params.len() == now.params.len()
            && was.params.iter().zip(&now.params).all(|(a, b)| forms::same_value(a, b));
        if was.call != now.call || was.sql.trim() != now.sql.trim() || !same_params {
            divergences.push(format!(
                "statement {statement} differs: captured {}, now {}",
                shown_statement(was),
                shown_statement(&now)
            ));
        }
        was.answer.clone()
    }

    /// The recorded answer to the guest's next request, noting how it
    /// differs from the recorded one (replaying only).
    pub fn answer_request(&self, now: &Exchange) -> Result<Response, HttpError> {
        let State::Replaying { recorded, request, divergences, .. } = &mut *self.state() else {
            return Err(HttpError::Connection("the tape is not replaying".into()));
        };
        *request += 1;
        let Some(was) = recorded.requests.get(*request - 1) else {
            divergences.push(format!("request {request} is not in the capture: {}", shown_request(now)));
            return Err(HttpError::Connection("request not in the capture: replay has no answer for it".into()));
        };
        let same = was.method == now.method
            && was.url == now.url
            && was.key == now.key
            && same_headers(&was.headers, &now.headers)
            && same_body(was.body.as_ref(), now.body.as_ref());
        if !same {
            divergences.push(format!(
                "request {request} differs: captured {}, now {}",
                shown_request(was),
                shown_request(now)
            ));
        }
        match &was.answer {
            HttpAnswer::Response { status, headers, body } => {
                Ok(Response { status: *status, headers: headers.clone(), body: body.bytes() })
            }
            HttpAnswer::Error(e) => Err(forms::http_error_of(e)),
        }
    }
}

/// Counts `size` more bytes into a recording; past the cap its contents
/// go at once and it keeps nothing more.
fn grow(recorded: &mut Recorded, kept: &mut Option<usize>, size: usize) {
    *kept = kept.and_then(|k| k.checked_add(size)).filter(|k| *k <= MAX_RECORDED_BYTES);
    if kept.is_none() {
        *recorded = Recorded::default();
    }
}

/// Two bodies are the same: byte for byte, or as the same JSON document.
fn same_body(a: Option<&Bytes>, b: Option<&Bytes>) -> bool {
    let document = |x: Option<&Bytes>| x.and_then(|b| serde_json::from_slice::<Json>(&b.bytes()).ok());
    a == b || document(a).zip(document(b)).is_some_and(|(x, y)| same_json(&x, &y))
}

/// The captured headers and the replay's are the same: a header whose
/// value the capture redacted (`MARK`) needs only be there again.
fn same_headers(captured: &[(String, String)], now: &[(String, String)]) -> bool {
    captured.len() == now.len() && captured.iter().zip(now).all(|((n, v), (m, w))| n == m && (v == w || v == REDACTED))
}

/// What a capture's redaction leaves for a value (`capture::redact::MARK`).
const REDACTED: &str = "[redacted]";

/// A statement as a divergence names it.
fn shown_statement(s: &Statement) -> String {
    let params: Vec<String> = s.params.iter().enumerate().map(|(i, p)| format!("${}={p}", i + 1)).collect();
    let sql = crate::text::shown_whole(s.sql.trim(), 500);
    if params.is_empty() { format!("`{sql}`") } else { format!("`{sql}` [{}]", params.join(", ")) }
}

/// A request as a divergence names it.
fn shown_request(r: &Exchange) -> String {
    let body = r.body.as_ref().map_or_else(String::new, |b| {
        format!(" body={}", crate::text::shown_whole(&String::from_utf8_lossy(&b.bytes()), 500))
    });
    format!("{} {} key={}{body}", r.method, r.url, r.key.as_deref().unwrap_or("-"))
}

/// About what `values` weigh in the tape's JSON form, from above (a
/// value's own bytes and its wrapping), without converting them.
pub fn rough_size<'a>(values: impl IntoIterator<Item = &'a Value>) -> usize {
    values
        .into_iter()
        .map(|v| {
            24 + match v {
                Value::Text(s) | Value::Json(s) | Value::Uuid(s) | Value::Timestamp(s) | Value::Numeric(s) => {
                    2 * s.len()
                }
                Value::Bytes(b) => 2 * b.len(),
                _ => 24,
            }
        })
        .sum()
}

impl DbAnswer {
    /// What an `execute` got.
    pub fn of_execute(outcome: &wasmtime::Result<Result<u64, DbError>>) -> Self {
        match outcome {
            Ok(Ok(n)) => Self::Affected(*n),
            Ok(Err(e)) => Self::Error(forms::db_error(e)),
            Err(trap) => Self::Fault(trap.to_string()),
        }
    }

    /// What a `query` got.
    pub fn of_query(outcome: &wasmtime::Result<Result<Rows, DbError>>) -> Self {
        match outcome {
            Ok(Ok(rows)) => Self::Rows {
                columns: rows.columns.clone(),
                rows: rows.rows.iter().map(|r| r.iter().map(forms::value).collect()).collect(),
            },
            Ok(Err(e)) => Self::Error(forms::db_error(e)),
            Err(trap) => Self::Fault(trap.to_string()),
        }
    }

    /// The answer as an `execute`'s.
    pub fn to_execute(&self) -> wasmtime::Result<Result<u64, DbError>> {
        match self {
            Self::Affected(n) => Ok(Ok(*n)),
            Self::Rows { rows, .. } => Ok(Ok(rows.len() as u64)),
            Self::Error(e) => Ok(Err(forms::db_error_of(e))),
            Self::Fault(why) => Err(wasmtime::Error::msg(format!("captured host fault: {why}"))),
        }
    }

    /// The answer as a `query`'s (an unreadable value as the guest's
    /// `invalid-value` error).
    pub fn to_query(&self) -> wasmtime::Result<Result<Rows, DbError>> {
        match self {
            Self::Affected(_) => Ok(Ok(Rows { columns: Vec::new(), rows: Vec::new() })),
            Self::Rows { columns, rows } => {
                let rows: Result<Vec<Vec<Value>>, String> =
                    rows.iter().map(|r| r.iter().map(forms::value_of).collect()).collect();
                Ok(rows.map(|rows| Rows { columns: columns.clone(), rows }).map_err(DbError::InvalidValue))
            }
            Self::Error(e) => Ok(Err(forms::db_error_of(e))),
            Self::Fault(why) => Err(wasmtime::Error::msg(format!("captured host fault: {why}"))),
        }
    }
}

impl HttpAnswer {
    /// What a request got.
    pub fn of(outcome: &Result<Response, HttpError>) -> Self {
        match outcome {
            Ok(r) => Self::Response { status: r.status, headers: r.headers.clone(), body: Bytes::of(&r.body) },
            Err(e) => Self::Error(forms::http_error(e)),
        }
    }
}

#[cfg(test)]
mod tests;
