//! The `http` import: a real HTTP client that adds `Idempotency-Key`.
//!
//! Keys: an unsafe request (POST, PUT, PATCH, DELETE) without a label is the
//! invocation's main operation and carries `[<prefix>:]<eventId>`; one with a
//! label carries `[<prefix>:]<eventId>:<label>`. They depend on nothing but
//! the event and the guest's own words, so a re-execution of the event (after
//! a rollback, a crash, a redelivery) sends the same keys, and the provider
//! applies each operation once. Within one invocation, re-sending the same
//! request reuses its key; sending a *different* request under a key already
//! used is refused, because the provider would answer it with the first
//! request's result.
//!
//! Only URLs under the handler's allowlist are reached, redirects are not
//! followed (a redirect could leave the allowlist), and every request has a
//! timeout. A transient failure is re-sent here, with the same key, inside
//! the invocation's budget (see `retry`): the guest sees the final answer.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Url};
use tracing::Instrument as _;

mod capability;
mod check;
mod policy;
mod retry;
mod sent;
mod target;

use super::allowance::Allowance;
use super::tape::{Bytes, Exchange, HttpAnswer, Tape};
use crate::traces::TARGET as TRACE;
use crate::wit::http::{self, HttpError, Request, Response};
pub use policy::{Credential, HttpPolicy};
use retry::Transient;
pub(crate) use sent::SentKeys;

/// Times one request goes again after a `Retry-After` (each waits it out).
const MAX_HELD: u32 = 20;

/// Largest response body handed to a guest.
const MAX_RESPONSE_BYTES: usize = 8 << 20;

/// Headers the host owns.
const RESERVED_HEADERS: &[&str] =
    &["idempotency-key", "host", "content-length", "transfer-encoding", "connection", "traceparent", "tracestate"];

/// One invocation's HTTP state.
pub(crate) struct HttpCapability {
    client: reqwest::Client,
    policy: Arc<HttpPolicy>,
    event_id: String,
    /// Keys sent in this invocation, with a fingerprint of their request.
    used: HashMap<String, u64>,
    /// Requests this invocation may still send.
    requests: Allowance,
    /// Requests sent: host, and status (`None`: no response); a re-sent
    /// request once per send.
    sent: Vec<(String, Option<u16>)>,
    /// Re-sends: host, and why (a `Transient` label).
    resent: Vec<(String, &'static str)>,
    /// The end of the invocation's budget: no re-send waits past it.
    deadline: tokio::time::Instant,
    /// What the handler sent under each key, when its events run side by
    /// side in a transaction (see `sent`).
    sent_keys: Option<Arc<SentKeys>>,
    /// A key under which a different request was sent before: the
    /// executor fails the event as conflicting, whatever the guest did.
    changed_key: Option<String>,
    /// Keep `sent` for `idem test` to show.
    keep: bool,
    /// A shadow run's (`crate::shadow`): every request that passes the
    /// checks is answered `200 {}` here and kept as a line in `sent`
    /// (method, URL, key, body); nothing is sent, whatever the guest does.
    recording: bool,
    /// The handler's rates and its destinations' `Retry-After`s.
    throttles: Arc<crate::throttle::Throttles>,
    /// A destination held this invocation's request past its budget: why.
    throttled: Option<String>,
    /// The invocation's tape (`super::tape`): each request and its answer
    /// kept there (a captured event), or answered from it (a replay:
    /// nothing is sent).
    tape: Option<Arc<Tape>>,
}

impl HttpCapability {
    /// The key for an unsafe request with `label`.
    fn key(&self, label: Option<&str>) -> Result<String, HttpError> {
        let mut key = match &self.policy.key_prefix {
            Some(prefix) => format!("{prefix}:{}", self.event_id),
            None => self.event_id.clone(),
        };
        if let Some(label) = label {
            let valid = !label.is_empty()
                && label.len() <= 64
                && label.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !valid {
                return Err(HttpError::InvalidRequest(format!(
                    "label `{label}`: use 1 to 64 letters, digits, `.`, `_` or `-`"
                )));
            }
            key.push(':');
            key.push_str(label);
        }
        Ok(key)
    }
}

pub use target::{client, client_via};

/// The guest's `headers` on `builder`, refusing those the host sets (its
/// own and the `injected` credentials').
fn guest_headers(
    mut builder: reqwest::RequestBuilder,
    headers: &[(String, String)],
    injected: &[&Credential],
) -> Result<reqwest::RequestBuilder, HttpError> {
    for (name, value) in headers {
        let reserved = RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            || injected.iter().any(|c| c.header.eq_ignore_ascii_case(name));
        if reserved {
            return Err(HttpError::InvalidRequest(format!("header `{name}` is set by the host")));
        }
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("`{name}` is not a valid header name")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| HttpError::InvalidRequest(format!("the value of header `{name}` is not valid")))?;
        builder = builder.header(name, value);
    }
    Ok(builder)
}

/// What a shadow run's request is answered: `200 {}`.
fn recorded_answer() -> Response {
    let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    Response { status: 200, headers, body: b"{}".to_vec() }
}

/// A shadow run's request as its line: method, URL, key, the guest's own
/// headers (never the host's credentials), body; past their caps, long
/// values end with a digest of the whole (so that two differ visibly).
fn recorded_line(
    method: &Method,
    url: &Url,
    key: Option<&str>,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> String {
    let body = body.map_or_else(String::new, |b| crate::text::shown_whole(&String::from_utf8_lossy(b), 2_000));
    let headers: Vec<String> = headers
        .iter()
        .map(|(n, v)| format!("{}: {}", n.to_ascii_lowercase(), crate::text::shown_whole(v, 300)))
        .collect();
    let url = crate::text::shown_whole(url.as_str(), 2_000);
    format!("{method} {url} key={} headers=[{}] body={body}", key.unwrap_or("-"), headers.join(", "))
}

/// A request as the tape keeps it (its answer still to come): the guest's
/// words and the key, never the host's credentials.
fn taped(method: &Method, url: &Url, key: Option<String>, request: &Request) -> Exchange {
    Exchange {
        method: method.to_string(),
        url: url.to_string(),
        key,
        headers: request.headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.clone())).collect(),
        body: request.body.as_deref().map(Bytes::of),
        answer: HttpAnswer::Error(serde_json::Value::Null),
    }
}

fn fingerprint(method: &Method, url: &Url, body: Option<&[u8]>) -> u64 {
    let mut h = DefaultHasher::new();
    method.as_str().hash(&mut h);
    url.as_str().hash(&mut h);
    body.hash(&mut h);
    h.finish()
}

impl HttpCapability {
    async fn send_checked(&mut self, request: Request) -> Result<Response, HttpError> {
        // Only the last request's throttle excuses a failure: the guest may
        // have gone on without the throttled call's answer.
        self.throttled = None;
        self.requests.spend("requests").map_err(HttpError::Denied)?;
        let method = Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("method `{}`", request.method)))?;
        // TRACE (and CONNECT, and anything unknown) could echo or tunnel the
        // host's injected headers back to the guest.
        if !matches!(
            method,
            Method::GET | Method::HEAD | Method::POST | Method::PUT | Method::PATCH | Method::DELETE | Method::OPTIONS
        ) {
            return Err(HttpError::InvalidRequest(format!("method `{method}` is not allowed")));
        }
        let url =
            Url::parse(&request.url).map_err(|e| HttpError::InvalidRequest(format!("URL `{}`: {e}", request.url)))?;
        if !matches!(url.scheme(), "http" | "https") || !url.username().is_empty() || url.password().is_some() {
            return Err(HttpError::InvalidRequest(format!("URL `{url}`: only http(s) URLs without credentials")));
        }
        let Some(entry) = target::matching_entry(&self.policy.allow, &url) else {
            return Err(HttpError::Denied(format!(
                "`{url}` is not under this handler's allowlist ({})",
                if self.policy.allow.is_empty() { "empty".to_owned() } else { self.policy.allow.join(", ") }
            )));
        };
        target::check_literal(&self.policy, entry, &url).map_err(HttpError::Denied)?;
        let injected: Vec<&Credential> = self
            .policy
            .credentials
            .iter()
            .filter(|c| target::matching_entry(std::slice::from_ref(&c.base), &url).is_some())
            .collect();
        let mut builder = guest_headers(self.client.request(method.clone(), url.clone()), &request.headers, &injected)?;
        let unsafe_method = matches!(method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
        let mut key_sent = None;
        if unsafe_method {
            let key = self.key(request.label.as_deref())?;
            let print = fingerprint(&method, &url, request.body.as_deref());
            if self.used.get(&key).is_some_and(|&seen| seen != print) {
                return Err(HttpError::InvalidRequest(format!(
                    "Idempotency-Key `{key}` was already used in this invocation for a different request; \
                     give each unsafe operation its own label"
                )));
            }
            if self.sent_keys.as_ref().is_some_and(|keys| !keys.admit(&key, print)) {
                self.changed_key = Some(key.clone());
                return Err(HttpError::Denied(format!(
                    "a different request was sent under Idempotency-Key `{key}` before: not sent"
                )));
            }
            self.used.insert(key.clone(), print);
            builder = builder.header("Idempotency-Key", key.clone());
            key_sent = Some(key);
        } else if request.label.is_some() {
            return Err(HttpError::InvalidRequest(format!("a label only names unsafe requests, not {method}")));
        }
        for credential in injected {
            let value = HeaderValue::from_str(&credential.value).map_err(|_| {
                HttpError::InvalidRequest(format!("credential for `{}` is not a header value", credential.base))
            })?;
            builder = builder.header(credential.header.as_str(), value);
        }
        if self.recording {
            let line = recorded_line(&method, &url, key_sent.as_deref(), &request.headers, request.body.as_deref());
            self.sent.push((line, Some(200)));
            return Ok(recorded_answer());
        }
        self.deliver(builder, method, url, key_sent, request).await
    }

    /// Sends a checked request (its answer kept on the tape, if one
    /// records), or answers it from the tape (a replay).
    async fn deliver(
        &mut self,
        mut builder: reqwest::RequestBuilder,
        method: Method,
        url: Url,
        key: Option<String>,
        request: Request,
    ) -> Result<Response, HttpError> {
        let taped = self.tape.as_ref().map(|_| taped(&method, &url, key, &request));
        if let (Some(tape), Some(now)) = (self.tape.as_ref().filter(|t| t.is_replaying()), &taped) {
            return tape.answer_request(now);
        }
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let answer = self.send_with_retries(builder, &method, host).await;
        if let (Some(tape), Some(exchange)) = (&self.tape, taped) {
            tape.record_request(Exchange { answer: HttpAnswer::of(&answer), ..exchange });
        }
        answer
    }

    /// Sends `builder` until an answer that is not transient, or the retry
    /// policy or the budget says stop; the last answer or error is the
    /// guest's.
    async fn send_with_retries(
        &mut self,
        builder: reqwest::RequestBuilder,
        method: &Method,
        host: String,
    ) -> Result<Response, HttpError> {
        let (mut attempt, mut held) = (1, 0);
        loop {
            // The destination's turn: its rate, and any `Retry-After` it asked for.
            let latest = self.deadline.checked_sub(retry::MIN_ATTEMPT).unwrap_or(self.deadline);
            if let Err(wait) = self.throttles.pass(&host, Some(latest)).await {
                let why = format!("`{host}` may be sent to again in {wait:?}, past the invocation's budget");
                self.throttled = Some(why.clone());
                return Err(HttpError::Timeout(format!("not sent: {why}")));
            }
            // A body of bytes is always cloneable; `None` would be a stream.
            let Some(mut this) = builder.try_clone() else {
                return Err(HttpError::InvalidRequest("the request body cannot be re-sent".into()));
            };
            let left = self.deadline.saturating_duration_since(tokio::time::Instant::now());
            this = this.timeout(self.policy.timeout.min(left.max(retry::MIN_ATTEMPT)));
            // The provider's trace joins this one: each send carries its own
            // `idem.http` span's context (nothing when tracing is off).
            let span = tracing::trace_span!(
                target: TRACE, "idem.http", http.method = %method, server.address = %host,
                http.request.resend_count = attempt - 1
            );
            for (name, value) in crate::traces::propagation_headers(&span) {
                this = this.header(name, value);
            }
            let (status, answer) = send_once(this).instrument(span).await;
            self.sent.push((host.clone(), status));
            let why = match &answer {
                Ok((response, retry_after)) => retry::transient_status(response.status, retry_after.as_deref()),
                Err((_, why)) => *why,
            };
            // A destination that asks to be left alone (429 or 503 with
            // `Retry-After`): every request to it waits that long, this one
            // included, and goes again without spending a re-send.
            if let Some(throttled @ Transient::Status(code, Some(asked))) = why {
                self.throttles.hold(&host, asked);
                self.resent.push((host.clone(), throttled.label()));
                held += 1;
                let left = self.deadline.saturating_duration_since(tokio::time::Instant::now());
                if held <= MAX_HELD && asked + retry::MIN_ATTEMPT <= left {
                    continue;
                }
                self.throttled = Some(format!("`{host}` answered {code} asking to wait {asked:?}"));
                return answer.map(|(response, _)| response).map_err(|(error, _)| error);
            }
            let Some((why, wait)) =
                why.and_then(|why| Some((why, self.policy.retry.wait(attempt, why, self.deadline)?)))
            else {
                return answer.map(|(response, _)| response).map_err(|(error, _)| error);
            };
            tracing::debug!(host = %host, attempt, reason = why.label(), ?wait, "a transient failure: the request is sent again");
            self.resent.push((host.clone(), why.label()));
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

/// One send: the status (`None`: no answer) and the answer with its
/// `Retry-After`, or the error and whether it is transient.
async fn send_once(
    request: reqwest::RequestBuilder,
) -> (Option<u16>, Result<(Response, Option<String>), (HttpError, Option<Transient>)>) {
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return (None, Err(transport_error(e))),
    };
    let status = response.status().as_u16();
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let retry_after = headers.iter().find(|(n, _)| n == "retry-after").map(|(_, v)| v.clone());
    match read_body(response).await {
        Ok(body) => (Some(status), Ok((Response { status, headers, body }, retry_after))),
        Err(failure) => (Some(status), Err(failure)),
    }
}

/// The body, or why not: a connection lost mid-body is transient, a body
/// over [`MAX_RESPONSE_BYTES`] is not.
async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, (HttpError, Option<Transient>)> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            let error = HttpError::Connection(format!("response body larger than {MAX_RESPONSE_BYTES} bytes"));
            return Err((error, None));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A transport failure as the guest sees it, and whether it is transient.
fn transport_error(e: reqwest::Error) -> (HttpError, Option<Transient>) {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() {
        (HttpError::Timeout(message), Some(Transient::Timeout))
    } else if e.is_builder() {
        // The request could not be built: retrying would not change that.
        (HttpError::InvalidRequest(message), None)
    } else {
        (HttpError::Connection(message), Some(Transient::Connection))
    }
}

impl http::Host for HttpCapability {
    async fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, HttpError>> {
        Ok(self.send_checked(request).await)
    }
}
