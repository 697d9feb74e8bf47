//! The operators' lookups, remembered for `FRESH`: a console refreshing
//! every second asks the database once per `FRESH`, not per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::FRESH;
use crate::admin::access::Actor;

/// Answers kept at most. Past it the stale ones go, then those that named
/// no one (a client trying random tokens), so the answers of real operators
/// stay.
const CACHED: usize = 4096;

/// A lookup's answer (`None`: no live operator) and when it was had.
type Answer = (Option<Actor>, Instant);

#[derive(Debug, Default)]
pub(super) struct Cache {
    answers: Mutex<HashMap<[u8; 32], Answer>>,
    /// Bumped by every revocation: a lookup that began before one does not
    /// put its (possibly revoked) answer back.
    generation: AtomicU64,
}

impl Cache {
    pub(super) fn get(&self, digest: &[u8; 32]) -> Option<Option<Actor>> {
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers.get(digest).filter(|(_, at)| at.elapsed() < FRESH).map(|(named, _)| named.clone())
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Keeps `named` for `digest`, unless a revocation came after
    /// `generation` was read.
    pub(super) fn put(&self, digest: [u8; 32], named: Option<Actor>, generation: u64) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() != generation {
            return;
        }
        if answers.len() >= CACHED {
            answers.retain(|_, (_, at)| at.elapsed() < FRESH);
        }
        if answers.len() >= CACHED {
            answers.retain(|_, (named, _)| named.is_some());
        }
        if answers.len() >= CACHED {
            answers.clear();
        }
        answers.insert(digest, (named, Instant::now()));
    }

    pub(super) fn forget_all(&self) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        answers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::{CACHED, Cache};
    use crate::admin::access::{Actor, Scope};

    #[test]
    fn a_revocation_wins_over_a_lookup_under_way_and_operators_outlast_random_tokens() {
        let cache = Cache::default();
        let alice = Some(Actor { name: "alice".into(), scope: Scope::Operate, named: true });
        let before = cache.generation();
        cache.forget_all();
        cache.put([1; 32], alice.clone(), before);
        assert_eq!(cache.get(&[1; 32]), None, "an answer read before the revocation is not kept");
        cache.put([1; 32], alice.clone(), cache.generation());
        for i in 0..(CACHED as u32 * 2) {
            let mut digest = [0; 32];
            digest[..4].copy_from_slice(&i.to_be_bytes());
            digest[31] = 9;
            cache.put(digest, None, cache.generation());
        }
        assert_eq!(cache.get(&[1; 32]), Some(alice), "random tokens never push a real operator out");
    }
}
