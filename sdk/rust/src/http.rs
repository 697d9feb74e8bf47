//! Outbound HTTP with idempotency keys the host adds.
//!
//! Every unsafe request (POST, PUT, PATCH, DELETE) carries
//! `Idempotency-Key`: the event id for the invocation's main operation, and
//! `<eventId>:<label>` for any other one, named with [`RequestBuilder::label`].
//! Re-sending the same request (after a timeout, say) reuses its key, so the
//! provider applies it once. The key never depends on call order, data read
//! or the attempt number, so a re-execution of the event sends the same keys.
//!
//! ```no_run
//! # fn f() -> idem_guest::Result {
//! use idem_guest::http;
//! let charge = http::post("https://pay.example/v1/charges").json(&serde_json::json!({"amount": 10})).send()?;
//! http::post("https://mail.example/v1/receipts").label("receipt").json(&serde_json::json!({})).send()?;
//! # Ok(()) }
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::idem::handler::http as wit;
use crate::error::Error;

pub use wit::HttpError;

pub fn get(url: impl Into<String>) -> RequestBuilder {
    RequestBuilder::new("GET", url)
}

pub fn post(url: impl Into<String>) -> RequestBuilder {
    RequestBuilder::new("POST", url)
}

pub fn put(url: impl Into<String>) -> RequestBuilder {
    RequestBuilder::new("PUT", url)
}

pub fn patch(url: impl Into<String>) -> RequestBuilder {
    RequestBuilder::new("PATCH", url)
}

pub fn delete(url: impl Into<String>) -> RequestBuilder {
    RequestBuilder::new("DELETE", url)
}

/// A request being built; nothing is sent before [`RequestBuilder::send`].
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until `send` is called"]
pub struct RequestBuilder {
    request: wit::Request,
    error: Option<String>,
}

impl RequestBuilder {
    pub fn new(method: &str, url: impl Into<String>) -> Self {
        let request =
            wit::Request { method: method.to_owned(), url: url.into(), headers: Vec::new(), body: None, label: None };
        Self { request, error: None }
    }

    /// Names this operation, for an invocation that makes more than one
    /// unsafe request: its key becomes `<eventId>:<label>`. Letters, digits,
    /// `.`, `_` and `-`, at most 64.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.request.label = Some(label.into());
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.request.body = Some(body.into());
        self
    }

    /// Serializes `body` as the JSON body and sets `Content-Type`.
    pub fn json<T: Serialize + ?Sized>(mut self, body: &T) -> Self {
        match serde_json::to_vec(body) {
            Ok(bytes) => {
                self.request.body = Some(bytes);
                self.header("content-type", "application/json")
            }
            Err(e) => {
                self.error = Some(format!("request body is not serializable: {e}"));
                self
            }
        }
    }

    pub fn send(self) -> Result<Response, HttpError> {
        if let Some(why) = self.error {
            return Err(HttpError::InvalidRequest(why));
        }
        wit::send(&self.request).map(|raw| Response { raw })
    }
}

/// An HTTP response, whatever its status.
#[derive(Debug, Clone)]
pub struct Response {
    raw: wit::Response,
}

impl Response {
    pub fn status(&self) -> u16 {
        self.raw.status
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.raw.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn body(&self) -> &[u8] {
        &self.raw.body
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw.body).into_owned()
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.raw.body)
            .map_err(|e| Error::permanent(format!("response body is not the expected JSON: {e}")))
    }

    /// Turns a non-2xx status into an error: 408, 425, 429 and 5xx are
    /// retryable, other statuses permanent.
    pub fn error_for_status(self) -> Result<Self, Error> {
        let status = self.raw.status;
        if (200..300).contains(&status) {
            return Ok(self);
        }
        let message = format!("HTTP {status}: {}", self.text().chars().take(200).collect::<String>());
        if matches!(status, 408 | 425 | 429) || status >= 500 {
            Err(Error::retryable(message))
        } else {
            Err(Error::permanent(message))
        }
    }
}

impl From<HttpError> for Error {
    fn from(e: HttpError) -> Self {
        let retryable = matches!(e, HttpError::Timeout(_) | HttpError::Connection(_));
        Error::classified(retryable, format!("http: {}", describe(&e)))
    }
}

/// A one-line account of `e` (the generated `Display` is only `Debug`).
pub(crate) fn describe(e: &HttpError) -> String {
    match e {
        HttpError::Denied(why) => format!("denied: {why}"),
        HttpError::InvalidRequest(why) => format!("invalid request: {why}"),
        HttpError::Timeout(why) => format!("timeout: {why}"),
        HttpError::Connection(why) => format!("connection: {why}"),
    }
}
