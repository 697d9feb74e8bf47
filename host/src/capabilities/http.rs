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
//! timeout.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Url};

use crate::runtime::bindings::http::{self, HttpError, Request, Response};
use crate::runtime::{HostState, HttpPolicy};

/// Largest response body handed to a guest.
const MAX_RESPONSE_BYTES: usize = 8 << 20;

/// Headers the host owns.
const RESERVED_HEADERS: &[&str] = &["idempotency-key", "host", "content-length", "transfer-encoding", "connection"];

/// One invocation's HTTP state.
pub(crate) struct HttpCapability {
    client: reqwest::Client,
    policy: Arc<HttpPolicy>,
    event_id: String,
    /// Keys sent in this invocation, with a fingerprint of their request.
    used: HashMap<String, u64>,
}

impl HttpCapability {
    pub(crate) fn new(client: reqwest::Client, policy: Arc<HttpPolicy>, event_id: String) -> Self {
        Self { client, policy, event_id, used: HashMap::new() }
    }

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

/// A client shared by every handler: one connection pool per host.
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()
}

/// Whether `url` lies under one of the allowlist's base URLs.
pub(crate) fn allowed(allow: &[String], url: &Url) -> bool {
    allow.iter().filter_map(|base| Url::parse(base).ok()).any(|base| {
        let path_ok = {
            let prefix = base.path().trim_end_matches('/');
            let path = url.path();
            path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        base.scheme() == url.scheme()
            && base.host_str().map(str::to_ascii_lowercase) == url.host_str().map(str::to_ascii_lowercase)
            && base.port_or_known_default() == url.port_or_known_default()
            && path_ok
    })
}

fn fingerprint(method: &Method, url: &Url, body: Option<&[u8]>) -> u64 {
    let mut h = DefaultHasher::new();
    method.as_str().hash(&mut h);
    url.as_str().hash(&mut h);
    body.hash(&mut h);
    h.finish()
}

impl HostState {
    async fn send_checked(&mut self, request: Request) -> Result<Response, HttpError> {
        let method = Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("method `{}`", request.method)))?;
        let url =
            Url::parse(&request.url).map_err(|e| HttpError::InvalidRequest(format!("URL `{}`: {e}", request.url)))?;
        if !matches!(url.scheme(), "http" | "https") || !url.username().is_empty() || url.password().is_some() {
            return Err(HttpError::InvalidRequest(format!("URL `{url}`: only http(s) URLs without credentials")));
        }
        if !allowed(&self.http.policy.allow, &url) {
            return Err(HttpError::Denied(format!(
                "`{url}` is not under this handler's allowlist ({})",
                if self.http.policy.allow.is_empty() { "empty".to_owned() } else { self.http.policy.allow.join(", ") }
            )));
        }
        let mut builder = self.http.client.request(method.clone(), url.clone()).timeout(self.http.policy.timeout);
        for (name, value) in &request.headers {
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(HttpError::InvalidRequest(format!("header `{name}` is set by the host")));
            }
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HttpError::InvalidRequest(format!("`{name}` is not a valid header name")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| HttpError::InvalidRequest(format!("the value of header `{name}` is not valid")))?;
            builder = builder.header(name, value);
        }
        let unsafe_method = matches!(method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
        if unsafe_method {
            let key = self.http.key(request.label.as_deref())?;
            let print = fingerprint(&method, &url, request.body.as_deref());
            if self.http.used.get(&key).is_some_and(|&seen| seen != print) {
                return Err(HttpError::InvalidRequest(format!(
                    "Idempotency-Key `{key}` was already used in this invocation for a different request; \
                     give each unsafe operation its own label"
                )));
            }
            self.http.used.insert(key.clone(), print);
            builder = builder.header("Idempotency-Key", key);
        } else if request.label.is_some() {
            return Err(HttpError::InvalidRequest(format!("a label only names unsafe requests, not {method}")));
        }
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let response = builder.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = read_body(response).await?;
        Ok(Response { status, headers, body })
    }
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(HttpError::Connection(format!("response body larger than {MAX_RESPONSE_BYTES} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn transport_error(e: reqwest::Error) -> HttpError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() {
        HttpError::Timeout(message)
    } else if e.is_builder() {
        // The request could not be built: retrying would not change that.
        HttpError::InvalidRequest(message)
    } else {
        HttpError::Connection(message)
    }
}

impl http::Host for HostState {
    async fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, HttpError>> {
        Ok(self.send_checked(request).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_matches_scheme_host_port_and_path_prefix() {
        let allow = vec!["http://127.0.0.1:18080".to_owned(), "https://pay.example/v1/".to_owned()];
        let ok = |u: &str| allowed(&allow, &Url::parse(u).expect("test URL"));
        assert!(ok("http://127.0.0.1:18080/v1/charges"));
        assert!(ok("https://pay.example/v1/charges"));
        assert!(ok("https://PAY.example:443/v1"));
        assert!(!ok("http://127.0.0.1:18081/v1/charges"));
        assert!(!ok("https://127.0.0.1:18080/"));
        assert!(!ok("https://pay.example/v10/charges"));
        assert!(!ok("https://pay.example.evil.test/v1/charges"));
        assert!(!ok("http://localhost:18080/"));
        assert!(!allowed(&[], &Url::parse("http://127.0.0.1:18080/").expect("test URL")));
    }
}
