//! The ranges of `[handler.http]` (and `limits.max_http_requests`), owned
//! here with the rest of the capability: each value that would fail every
//! request, leak a header or be refused later in words that do not name
//! its key is refused when the config loads, naming the key.

use anyhow::{Context as _, bail};

use crate::config::{HandlerConfig, MAX_TIMEOUT_MS};

/// Requests one invocation may send, at most.
const MAX_REQUESTS: u32 = 1_000_000;

/// Headers a credential may not set: they frame the request, route it, or
/// are idem's own (the idempotency key, the trace context).
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "expect",
    "idempotency-key",
    "traceparent",
    "tracestate",
];

/// `h`'s HTTP settings, in range.
pub(super) fn check(h: &HandlerConfig) -> anyhow::Result<()> {
    let (at, http) = (format!("handler `{}`", h.name), &h.http);
    if http.timeout_ms == 0 || http.timeout_ms > MAX_TIMEOUT_MS {
        bail!("{at}: http.timeout_ms = {} must be between 1 and {MAX_TIMEOUT_MS} (24 hours)", http.timeout_ms);
    }
    if h.limits.max_http_requests > MAX_REQUESTS {
        bail!("{at}: limits.max_http_requests = {} must be at most {MAX_REQUESTS}", h.limits.max_http_requests);
    }
    if let Some(prefix) = &http.key_prefix
        && (prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_graphic()))
    {
        bail!("{at}: http.key_prefix `{prefix}` must be printable ASCII without spaces (it goes into a header)");
    }
    let retry = &http.retry;
    if !(1..=10).contains(&retry.max_attempts) {
        bail!("{at}: http.retry.max_attempts = {} must be 1 (no re-send) to 10", retry.max_attempts);
    }
    if retry.initial_backoff_ms > retry.max_backoff_ms || retry.max_backoff_ms > 60_000 {
        bail!(
            "{at}: http.retry needs initial_backoff_ms ≤ max_backoff_ms ≤ 60000 (got {} and {})",
            retry.initial_backoff_ms,
            retry.max_backoff_ms
        );
    }
    allowed(&at, h)?;
    credentials(&at, h)
}

/// The allowlist's entries, and its private ones.
fn allowed(at: &str, h: &HandlerConfig) -> anyhow::Result<()> {
    for base in &h.http.allow {
        let url = reqwest::Url::parse(base).with_context(|| format!("{at}: http.allow `{base}` is not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            bail!("{at}: http.allow `{base}` must be an http(s) URL with a host");
        }
    }
    for base in &h.http.allow_private {
        if !h.http.allow.contains(base) {
            bail!("{at}: http.allow_private `{base}` is not an entry of http.allow");
        }
    }
    Ok(())
}

/// Each credential: for an allowed base, a header of its own, a value set.
fn credentials(at: &str, h: &HandlerConfig) -> anyhow::Result<()> {
    for c in &h.http.credentials {
        if !h.http.allow.contains(&c.base) {
            bail!("{at}: http.credential base `{}` is not an entry of http.allow", c.base);
        }
        if reqwest::header::HeaderName::from_bytes(c.header.as_bytes()).is_err() {
            bail!("{at}: http.credential header `{}` is not a header name", c.header);
        }
        let name = c.header.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&name.as_str()) || name.starts_with("proxy-") {
            bail!(
                "{at}: http.credential header `{}` is reserved (it frames or routes the request, or is idem's)",
                c.header
            );
        }
        if crate::env::get(&c.value_env).is_none() {
            bail!(
                "{at}: http.credential value_env {:?} (for `{}`) names a variable that is not set",
                c.value_env,
                c.base
            );
        }
    }
    Ok(())
}
