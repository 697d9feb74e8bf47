//! Transient failures of a request, re-sent where they happen.
//!
//! Every request idem lets a guest send may be sent again: the unsafe ones
//! (POST, PUT, PATCH, DELETE) carry their `Idempotency-Key`, so the provider
//! applies a re-sent one once, and the others (GET, HEAD, OPTIONS) are safe
//! by HTTP's definition. A transient failure — a connection refused or
//! reset (the design notes' charge-then-reset), a timeout, `429`, `502`,
//! `503`, `504` — is therefore re-sent at once, after a short jittered
//! backoff, instead of failing the event, rolling back its batch and making
//! the partition wait out the pipeline's backoff. Stripe's own clients do
//! the same with the same key.
//!
//! Bounds: at most `max_attempts` sends per request (`[handler.http.retry]`,
//! `1` turns it off), never past the invocation's budget: a wait that would
//! leave less than [`MIN_ATTEMPT`] of it is not started, and the guest gets
//! the last answer (or error) as it is. `Retry-After` (seconds or an HTTP
//! date) on a `429`/`503` replaces the backoff when it is longer; one too
//! long for the budget is not waited for, and garbage is ignored.

use std::time::Duration;

use tokio::time::Instant;

/// The least time an attempt is worth starting with.
pub(crate) const MIN_ATTEMPT: Duration = Duration::from_millis(100);

/// `[handler.http.retry]` as the capability uses it.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Sends per request, the first included; 1: no re-send.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// What `[handler.http.retry]` says.
    pub(crate) fn of(retry: &crate::config::HttpRetry) -> Self {
        Self {
            max_attempts: retry.max_attempts,
            initial_backoff: Duration::from_millis(retry.initial_backoff_ms),
            max_backoff: Duration::from_millis(retry.max_backoff_ms),
        }
    }
}

/// The config's defaults: written once, in `config/handler.rs`.
impl Default for RetryPolicy {
    fn default() -> Self {
        Self::of(&crate::config::HttpRetry::default())
    }
}

/// Why an attempt is worth re-sending: the `reason` label of
/// `idem_http_retries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transient {
    /// Refused, reset, closed before the answer was read.
    Connection,
    Timeout,
    /// 429, 502, 503 or 504, with the wait its `Retry-After` asks for.
    Status(u16, Option<Duration>),
}

impl Transient {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::Timeout => "timeout",
            Self::Status(429, _) => "429",
            Self::Status(502, _) => "502",
            Self::Status(503, _) => "503",
            Self::Status(..) => "504",
        }
    }
}

/// Whether an answer with `status` is transient, and the wait its
/// `Retry-After` asks for (only `429` and `503` define one).
pub(crate) fn transient_status(status: u16, retry_after: Option<&str>) -> Option<Transient> {
    match status {
        code @ (429 | 503) => Some(Transient::Status(code, retry_after.and_then(parse_retry_after))),
        code @ (502 | 504) => Some(Transient::Status(code, None)),
        _ => None,
    }
}

/// `Retry-After`: delta-seconds or an HTTP date (RFC 9110 §10.2.3); a date
/// in the past is no wait, more digits than fit are a very long wait.
/// Anything else is `None`.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is a very long wait, not garbage.
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(seconds.min(u64::from(u32::MAX))));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(std::time::SystemTime::now()).unwrap_or_default())
}

impl RetryPolicy {
    /// How long to wait before attempt `attempt + 1` after `why`, or `None`
    /// when no further attempt may be made (the cap, or the budget ending
    /// at `deadline`).
    pub(crate) fn wait(&self, attempt: u32, why: Transient, deadline: Instant) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let mut wait = self.backoff(attempt);
        if let Transient::Status(_, Some(asked)) = why {
            wait = wait.max(asked);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        (wait + MIN_ATTEMPT <= left).then_some(wait)
    }

    /// Full jitter over an exponential ceiling: between 0 and
    /// `initial × 2^(attempt−1)`, at most `max_backoff`.
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self.initial_backoff.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(self.max_backoff);
        // A v7 id's last byte is random.
        let random = u32::from(uuid::Uuid::now_v7().as_bytes()[15]);
        ceiling * random / 255
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn only_transient_statuses_are_re_sent() {
        for code in [429, 502, 503, 504] {
            assert!(transient_status(code, None).is_some(), "{code}");
        }
        for code in [200, 400, 401, 404, 409, 422, 500, 501] {
            assert!(transient_status(code, None).is_none(), "{code}");
        }
    }

    #[test]
    fn retry_after_is_seconds_or_a_date_and_garbage_is_ignored() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO), "in the past");
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        assert!(parse_retry_after(&later).is_some_and(|d| d > Duration::from_secs(25)));
        assert_eq!(parse_retry_after("99999999999999999999999"), Some(Duration::from_secs(u64::from(u32::MAX))));
        for garbage in ["", "soon", "-1", "1.5", "+3", "0x10"] {
            assert_eq!(parse_retry_after(garbage), None, "{garbage:?}");
        }
        // 502 and 504 define no Retry-After.
        let why = transient_status(502, Some("5"));
        assert_eq!(why, Some(Transient::Status(502, None)));
    }

    #[test]
    fn the_cap_and_the_budget_end_the_retries() {
        let far = Instant::now() + Duration::from_secs(60);
        assert!(policy().wait(1, Transient::Connection, far).is_some());
        assert!(policy().wait(2, Transient::Connection, far).is_some());
        assert_eq!(policy().wait(3, Transient::Connection, far), None, "three sends at most");
        let off = RetryPolicy { max_attempts: 1, ..policy() };
        assert_eq!(off.wait(1, Transient::Connection, far), None, "max_attempts = 1 turns it off");
        let near = Instant::now() + Duration::from_millis(50);
        assert_eq!(policy().wait(1, Transient::Timeout, near), None, "too little budget left");
    }

    #[test]
    fn a_retry_after_longer_than_the_budget_is_not_waited_for() {
        let budget = Instant::now() + Duration::from_secs(5);
        let asked = |s| Transient::Status(503, Some(Duration::from_secs(s)));
        assert_eq!(policy().wait(1, asked(3), budget), Some(Duration::from_secs(3)), "honoured when it fits");
        assert_eq!(policy().wait(1, asked(30), budget), None);
        assert_eq!(policy().wait(1, asked(u64::from(u32::MAX)), budget), None, "huge");
    }

    #[test]
    fn backoff_is_jittered_under_its_ceiling() {
        let p = policy();
        for attempt in 1..10 {
            let ceiling = (p.initial_backoff * (1 << (attempt - 1))).min(p.max_backoff);
            assert!(p.backoff(attempt) <= ceiling);
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| p.backoff(3)).collect();
        assert!(spread.len() > 5, "jittered: {spread:?}");
    }
}
