//! What a handler whose events run side by side in one transaction
//! (`max_concurrent > 1`) has sent under each `Idempotency-Key`.
//!
//! Events of such a batch see each other's uncommitted rows. An event that
//! read a batch-mate's write and sent a request built from it may run again
//! after that batch-mate failed (its write rolled back), or in another
//! order; its request then differs, under the same key. A provider that
//! keeps the first request per key would keep data that never existed, and
//! answer the second with the first's result. So each keyed request's
//! fingerprint is kept here (per host, for [`KEPT_FOR`]); a later run of
//! the event that would send a *different* request under the key does not
//! send it: the event fails as `conflicting` (dead-lettered, naming the
//! key), for an operator to reconcile with the provider. Handlers run one
//! event at a time are not checked: there an event never reads a write
//! that a re-run does not make again the same way.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a key's fingerprint is kept: longer than any re-run of a
/// failed batch takes on this host.
const KEPT_FOR: Duration = Duration::from_secs(600);
/// Keys kept at most; past it the oldest go first.
const MAX_KEYS: usize = 200_000;

#[derive(Debug, Default)]
pub(crate) struct SentKeys(Mutex<HashMap<String, (u64, Instant)>>);

impl SentKeys {
    /// Records `print` as sent under `key`; `false` when another request
    /// was sent under it already (the new one must not be).
    pub(crate) fn admit(&self, key: &str, print: u64) -> bool {
        let mut keys = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, at)) = keys.get(key)
            && at.elapsed() < KEPT_FOR
        {
            return *seen == print;
        }
        if keys.len() >= MAX_KEYS {
            keys.retain(|_, (_, at)| at.elapsed() < KEPT_FOR);
            if keys.len() >= MAX_KEYS
                && let Some(oldest) = keys.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
            {
                keys.remove(&oldest);
            }
        }
        keys.insert(key.to_owned(), (print, Instant::now()));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::SentKeys;

    #[test]
    fn the_same_request_again_passes_and_another_under_its_key_does_not() {
        let sent = SentKeys::default();
        assert!(sent.admit("e1", 7));
        assert!(sent.admit("e1", 7), "a re-run that sends the same request");
        assert!(!sent.admit("e1", 8), "a different request under a key already sent");
        assert!(sent.admit("e2", 8), "another key");
    }
}
