//! The console's logins: a token exchanged for a session held in this
//! process, named by an HttpOnly, SameSite=Strict cookie, with its own CSRF
//! token that every change must carry in a header.
//!
//! Sessions live in memory: a restart logs everyone out, and each host of a
//! fleet has its own. They end [`LIFETIME`] after login; at most
//! [`MAX_SESSIONS`] of each scope are kept (the oldest of that scope goes
//! first, so `read` logins never end `operate` sessions). Failed logins are
//! limited to [`MAX_FAILURES`] a minute per IP address, so guessing a token
//! is as slow as it is hopeless, and one address cannot lock out another.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::super::access::Scope;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "idem_console";
/// How long a session lasts.
pub(crate) const LIFETIME: Duration = Duration::from_secs(8 * 3600);
const MAX_SESSIONS: usize = 128;
const MAX_FAILURES: usize = 10;
/// Addresses whose failures are remembered; past it the quietest go.
const MAX_PEERS: usize = 4096;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// One logged-in browser.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub scope: Scope,
    /// What the page sends back in `X-CSRF-Token` on every change.
    pub csrf: String,
    started: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// By the SHA-256 of the cookie's value, so that the map's keys are not
    /// themselves the secrets.
    live: Mutex<HashMap<[u8; 32], Session>>,
    /// Failed (and pending) logins in the last minute, per address.
    failures: Mutex<HashMap<Option<IpAddr>, VecDeque<Instant>>>,
}

/// A login being tried: counted as failed unless [`Sessions::succeeded`].
#[derive(Debug)]
pub(crate) struct Attempt {
    peer: Option<IpAddr>,
    at: Instant,
}

/// 32 random bytes, hex.
fn secret() -> String {
    let mut bytes = [0u8; 32];
    // The OS's generator failing is not something to serve on.
    if let Err(e) = getrandom::fill(&mut bytes) {
        tracing::error!("console: no random bytes from the OS: {e}");
        std::process::abort();
    }
    hex::encode(bytes)
}

fn digest(id: &str) -> [u8; 32] {
    <sha2::Sha256 as sha2::Digest>::digest(id.as_bytes()).into()
}

impl Sessions {
    /// Starts a session of `scope`; returns the cookie's value and the session.
    pub(crate) fn start(&self, scope: Scope) -> (String, Session) {
        let (id, session) = (secret(), Session { scope, csrf: secret(), started: Instant::now() });
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, s| s.started.elapsed() < LIFETIME);
        let same_scope = || live.iter().filter(|(_, s)| s.scope == scope);
        if same_scope().count() >= MAX_SESSIONS
            && let Some(oldest) = same_scope().min_by_key(|(_, s)| s.started).map(|(k, _)| *k)
        {
            live.remove(&oldest);
        }
        live.insert(digest(&id), session.clone());
        (id, session)
    }

    /// The live session a cookie names.
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.get(&digest(id)).filter(|s| s.started.elapsed() < LIFETIME).cloned()
    }

    pub(crate) fn end(&self, id: &str) {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&digest(id));
    }

    /// Starts a login from `peer`, counted as failed until it succeeds;
    /// `None`: [`MAX_FAILURES`] this minute already (refused without
    /// looking at the token).
    pub(crate) fn attempt(&self, peer: Option<IpAddr>) -> Option<Attempt> {
        let peer = peer.map(network);
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_PEERS {
            failures.retain(|_, times| times.back().is_some_and(|t| t.elapsed() < FAILURE_WINDOW));
        }
        // Still full: a new address shares one bucket with every other
        // newcomer, so no address's count is ever forgotten early.
        let peer = if failures.len() >= MAX_PEERS && !failures.contains_key(&peer) { None } else { peer };
        let times = failures.entry(peer).or_default();
        while times.front().is_some_and(|t| t.elapsed() >= FAILURE_WINDOW) {
            times.pop_front();
        }
        if times.len() >= MAX_FAILURES {
            return None;
        }
        let at = Instant::now();
        times.push_back(at);
        Some(Attempt { peer, at })
    }

    /// The login succeeded: it does not count as a failure.
    pub(crate) fn succeeded(&self, attempt: Attempt) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(times) = failures.get_mut(&attempt.peer)
            && let Some(i) = times.iter().position(|t| *t == attempt.at)
        {
            times.remove(i);
        }
    }
}

/// What failed logins are counted by: an IPv4 address, or an IPv6 /64 (one
/// host can hold a whole /64 and try from each of its addresses).
fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(segments.into())
        }
    }
}

/// The session cookie's value in `Cookie`, if any.
pub(crate) fn cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::{Scope, Sessions, cookie};

    #[test]
    fn a_session_is_found_by_its_cookie_only() {
        let sessions = Sessions::default();
        let (id, session) = sessions.start(Scope::Read);
        assert_eq!(id.len(), 64);
        assert_ne!(id, session.csrf);
        assert_eq!(sessions.get(&id).map(|s| s.scope), Some(Scope::Read));
        assert!(sessions.get(&session.csrf).is_none());
        sessions.end(&id);
        assert!(sessions.get(&id).is_none());
    }

    #[test]
    fn failed_logins_are_limited_per_address_and_successes_do_not_count() {
        let sessions = Sessions::default();
        let (one, two) = (Some([10, 0, 0, 1].into()), Some([10, 0, 0, 2].into()));
        for _ in 0..5 {
            let ok = sessions.attempt(one).expect("under the limit");
            sessions.succeeded(ok);
        }
        let pending: Vec<_> =
            (0..super::MAX_FAILURES).map(|_| sessions.attempt(one).expect("under the limit")).collect();
        assert!(sessions.attempt(one).is_none(), "tries at once count before they fail");
        assert!(sessions.attempt(two).is_some(), "another address is not locked out");
        drop(pending);
        let v6 = |last: u16| Some(std::net::IpAddr::V6([0x2001, 0xdb8, 0, 1, 0, 0, 0, last].into()));
        for last in 0..super::MAX_FAILURES as u16 {
            assert!(sessions.attempt(v6(last)).is_some());
        }
        assert!(sessions.attempt(v6(999)).is_none(), "a /64 is one address");
    }

    #[test]
    fn read_logins_never_end_operate_sessions() {
        let sessions = Sessions::default();
        let (operate, _) = sessions.start(Scope::Operate);
        for _ in 0..super::MAX_SESSIONS * 2 {
            sessions.start(Scope::Read);
        }
        assert!(sessions.get(&operate).is_some());
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; idem_console=abc ; b=2"));
        assert_eq!(cookie(&headers), Some("abc"));
        headers.clear();
        headers.append(header::COOKIE, HeaderValue::from_static("idem_consolex=1"));
        assert_eq!(cookie(&headers), None);
    }
}
