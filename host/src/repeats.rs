//! Log lines a broker outage repeats: while every broker is away librdkafka
//! reports it on each poll (several times a second, per handler), and a
//! 30 s outage would bury the log under hundreds of identical lines. Each
//! kind of line is said once, then at most every [`EVERY`] with how many
//! were held back since.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub(crate) const EVERY: Duration = Duration::from_secs(10);

/// Kinds remembered at once: errors are few kinds, but their texts come
/// from the broker, so the map is bounded; a kind that finds it full of
/// recent ones is logged every time.
const KINDS: usize = 32;

#[derive(Default)]
pub(crate) struct Repeats {
    seen: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Repeats {
    /// `Some(held back)` when a line of `kind` is to be logged now.
    fn admit(&self, kind: &str) -> Option<u64> {
        self.admit_at(kind, Instant::now())
    }

    /// The line to log now for `text`, of `kind`, with how many like it
    /// were held back since the last; `None` while it is held back.
    pub(crate) fn line(&self, kind: &str, text: impl std::fmt::Display) -> Option<String> {
        self.admit(kind).map(|held| format!("{text}{}", held_note(held)))
    }

    /// [`Repeats::line`] for a librdkafka client error (its [`kind`]).
    pub(crate) fn client_error(&self, error: &impl std::fmt::Display, reason: &str) -> Option<String> {
        self.line(&kind(error, reason), format_args!("{error}: {reason}"))
    }

    fn admit_at(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, held)) = seen.get_mut(kind) {
            if now.saturating_duration_since(*at) < EVERY {
                *held += 1;
                return None;
            }
            let held_back = std::mem::take(held);
            *at = now;
            return Some(held_back);
        }
        if seen.len() >= KINDS {
            seen.retain(|_, (at, _)| now.saturating_duration_since(*at) < EVERY);
        }
        if seen.len() < KINDS {
            seen.insert(kind.to_owned(), (now, 0));
        }
        Some(0)
    }
}

/// The kind of a client error: its code and its reason with the digits
/// left out (librdkafka's reasons carry counts, times and ports that change
/// from one repetition to the next; the cause in words does not).
fn kind(error: &impl std::fmt::Display, reason: &str) -> String {
    let reason: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
    format!("{error}: {reason}")
}

/// " (and N more like it)" for a line admitted after `held` were held back.
fn held_note(held: u64) -> String {
    if held == 0 { String::new() } else { format!(" (and {held} more like it)") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_said_once_then_once_per_window_with_what_was_held_back() {
        let r = Repeats::default();
        let t0 = Instant::now();
        assert_eq!(r.admit_at("all brokers down", t0), Some(0));
        for ms in [100, 200, 9_000] {
            assert_eq!(r.admit_at("all brokers down", t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(r.admit_at("another", t0 + Duration::from_millis(300)), Some(0), "kinds are apart");
        assert_eq!(r.admit_at("all brokers down", t0 + EVERY), Some(3));
        assert_eq!(r.admit_at("all brokers down", t0 + EVERY + Duration::from_secs(1)), None);
    }

    #[test]
    fn a_kind_is_the_cause_in_words_not_its_counts() {
        let refused = |port: u32, n: u32| {
            format!(
                "127.0.0.1:{port}/bootstrap: Connect failed: Connection refused ({n} identical error(s) suppressed)"
            )
        };
        assert_eq!(
            kind(&"BrokerTransportFailure", &refused(9092, 5)),
            kind(&"BrokerTransportFailure", &refused(9093, 580))
        );
        let tls = "127.0.0.1:9093/bootstrap: SSL handshake failed: certificate verify failed";
        assert_ne!(kind(&"BrokerTransportFailure", &refused(9093, 5)), kind(&"BrokerTransportFailure", tls));
    }

    #[test]
    fn many_kinds_are_bounded_and_never_silenced() {
        let r = Repeats::default();
        let t0 = Instant::now();
        for i in 0..1_000 {
            assert_eq!(r.admit_at(&format!("kind {i}"), t0), Some(0), "a new kind is always said");
        }
        assert!(r.seen.lock().map(|s| s.len()).unwrap_or_default() <= KINDS);
        assert_eq!(r.admit_at("kind 0", t0 + EVERY), Some(0), "old kinds made room once their window passed");
    }
}
