//! What an operator allows one handler's HTTP requests (`[handler.http]`).

use std::time::Duration;

use crate::config::HandlerHttp;

/// Where a handler may send HTTP requests, and how.
#[derive(Debug, Clone)]
pub struct HttpPolicy {
    /// Base URLs a request's URL must start with (scheme, host, port and a
    /// path prefix ending at a segment boundary). Empty: nothing is allowed.
    pub allow: Vec<String>,
    pub timeout: Duration,
    /// Prepended to every `Idempotency-Key` as `<prefix>:`, so that two
    /// handlers calling one provider for the same event do not collide.
    pub key_prefix: Option<String>,
    /// Entries of `allow` that may reach private addresses (loopback,
    /// RFC 1918, link-local, …); every other entry reaches public ones only.
    pub allow_private: Vec<String>,
    /// Headers the host adds to requests under a base URL; the guest never
    /// sees their values and cannot set those headers.
    pub credentials: Vec<Credential>,
    /// Re-sending transient failures (`capabilities::http::retry`).
    pub retry: super::retry::RetryPolicy,
    /// Requests one invocation may send (`[handler.limits] max_http_requests`).
    pub max_requests: u32,
}

impl HttpPolicy {
    /// What `[handler.http]` says, with the credentials' values read from
    /// the environment now.
    pub(crate) fn of(http: &HandlerHttp, max_requests: u32) -> Self {
        Self {
            allow: http.allow.clone(),
            timeout: Duration::from_millis(http.timeout_ms),
            key_prefix: http.key_prefix.clone(),
            allow_private: http.allow_private.clone(),
            credentials: http
                .credentials
                .iter()
                .map(|c| Credential {
                    base: c.base.clone(),
                    header: c.header.clone(),
                    value: crate::env::get(&c.value_env).unwrap_or_default(),
                })
                .collect(),
            retry: super::retry::RetryPolicy::of(&http.retry),
            max_requests,
        }
    }
}

/// The config's defaults: written once, in `config/handler.rs`.
impl Default for HttpPolicy {
    fn default() -> Self {
        Self::of(&HandlerHttp::default(), crate::config::HandlerLimits::default().max_http_requests)
    }
}

/// A header the host injects into requests under `base`.
#[derive(Clone)]
pub struct Credential {
    pub base: String,
    pub header: String,
    /// The secret (read from the environment); never printed.
    pub value: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("base", &self.base).field("header", &self.header).finish_non_exhaustive()
    }
}
