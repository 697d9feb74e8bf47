//! The console's logins: a token exchanged for a session held in this
//! process, named by an HttpOnly, SameSite=Strict cookie, with its own CSRF
//! token that every change must carry in a header.
//!
//! Sessions live in memory: a restart logs everyone out, and each host of a
//! fleet has its own. They end [`LIFETIME`] after login; at most
//! [`MAX_SESSIONS`] of each actor are kept (the oldest of that actor goes
//! first, so no one's logins end anyone else's sessions: a shared `read`
//! token's never end an operator's).
//!
//! The right token is always let in. Wrong ones are slowed: past
//! [`MAX_FAILURES`] a minute from an address (an IPv4 address, an IPv6 /64)
//! a wrong try is answered 429 instead of 401. No one can lock anyone out
//! by failing, neither from their address nor from a proxy's every browser
//! shares; what makes guessing hopeless is the token's length
//! (`access::MIN_TOKEN_CHARS`).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::super::access::{Actor, Scope, secret, sha256 as digest};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "idem_console";
/// How long a session lasts.
pub(crate) const LIFETIME: Duration = Duration::from_secs(8 * 3600);
const MAX_SESSIONS: usize = 128;
const MAX_FAILURES: usize = 10;
/// Addresses whose failures are remembered; past it, those quiet for a
/// minute are forgotten, and newcomers share one count while it stays full.
const MAX_PEERS: usize = 4096;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// One logged-in browser.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub scope: Scope,
    /// Who logged in (the audit trail's actor for what this session does).
    pub actor: Actor,
    /// A named operator's token digest: the session ends when that token is
    /// revoked (`operators`).
    pub named: Option<[u8; 32]>,
    /// This session's number on this host (never a secret).
    pub id: u64,
    /// What the page sends back in `X-CSRF-Token` on every change.
    pub csrf: String,
    started: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// By the SHA-256 of the cookie's value, so that the map's keys are not
    /// themselves the secrets.
    live: Mutex<HashMap<[u8; 32], Session>>,
    /// Failed logins in the last minute, per address.
    failures: Mutex<HashMap<Option<IpAddr>, VecDeque<Instant>>>,
    /// Numbers sessions (their fair share of reads: `shares`).
    next_id: std::sync::atomic::AtomicU64,
}

impl Sessions {
    /// Starts a session for `actor` (`named`: its operator token's digest);
    /// returns the cookie's value and the session.
    pub(crate) fn start(&self, actor: Actor, named: Option<[u8; 32]>) -> (String, Session) {
        let number = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scope = actor.scope;
        let session = Session { scope, actor, named, id: number, csrf: secret(), started: Instant::now() };
        let id = secret();
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, s| s.started.elapsed() < LIFETIME);
        let same_actor = || live.iter().filter(|(_, s)| s.actor.name == session.actor.name);
        if same_actor().count() >= MAX_SESSIONS
            && let Some(oldest) = same_actor().min_by_key(|(_, s)| s.started).map(|(k, _)| *k)
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

    /// Counts a wrong login from `peer`; true when the address is past
    /// [`MAX_FAILURES`] this minute (the answer is then 429).
    pub(crate) fn failed(&self, peer: Option<IpAddr>) -> bool {
        let peer = peer.map(network);
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_PEERS {
            failures.retain(|_, times| times.back().is_some_and(|t| t.elapsed() < FAILURE_WINDOW));
        }
        // Still full: a new address shares one count with every other
        // newcomer (it slows only wrong tries, so sharing locks no one out).
        let peer = if failures.len() >= MAX_PEERS && !failures.contains_key(&peer) { None } else { peer };
        let times = failures.entry(peer).or_default();
        while times.front().is_some_and(|t| t.elapsed() >= FAILURE_WINDOW) {
            times.pop_front();
        }
        if times.len() < MAX_FAILURES {
            times.push_back(Instant::now());
            return false;
        }
        true
    }
}

/// What failed logins are counted by: an IPv4 address, or an IPv6 /64 (one
/// host can hold a whole /64 and try from each of its addresses).
fn network(ip: IpAddr) -> IpAddr {
    // An IPv4 client of a dual-stack listener (`[::]`) arrives as
    // ::ffff:a.b.c.d, whose /64 is `::`: every IPv4 address would share one
    // count. Canonical first, it is counted as the IPv4 address it is.
    let ip = ip.to_canonical();
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

    use super::{Actor, Scope, Sessions, cookie};

    fn actor(scope: Scope) -> Actor {
        Actor { name: format!("${}", scope.as_str()).into(), scope, named: false }
    }

    #[test]
    fn a_session_is_found_by_its_cookie_only() {
        let sessions = Sessions::default();
        let (id, session) = sessions.start(actor(Scope::Read), None);
        assert_eq!(id.len(), 64);
        assert_ne!(id, session.csrf);
        assert_eq!(sessions.get(&id).map(|s| s.scope), Some(Scope::Read));
        assert!(sessions.get(&session.csrf).is_none());
        sessions.end(&id);
        assert!(sessions.get(&id).is_none());
    }

    #[test]
    fn wrong_logins_are_slowed_per_address() {
        let sessions = Sessions::default();
        let (one, two) = (Some([10, 0, 0, 1].into()), Some([10, 0, 0, 2].into()));
        for _ in 0..super::MAX_FAILURES {
            assert!(!sessions.failed(one), "under the limit");
        }
        assert!(sessions.failed(one), "past the limit");
        assert!(!sessions.failed(two), "another address is not slowed");
        let v6 = |last: u16| Some(std::net::IpAddr::V6([0x2001, 0xdb8, 0, 1, 0, 0, 0, last].into()));
        for last in 0..super::MAX_FAILURES as u16 {
            assert!(!sessions.failed(v6(last)));
        }
        assert!(sessions.failed(v6(999)), "a /64 is one address");
    }

    #[test]
    fn ipv4_clients_of_a_dual_stack_listener_are_counted_apart() {
        let sessions = Sessions::default();
        let mapped = |last: u8| Some(std::net::IpAddr::V6(std::net::Ipv4Addr::new(127, 0, 0, last).to_ipv6_mapped()));
        for _ in 0..super::MAX_FAILURES {
            assert!(!sessions.failed(mapped(2)));
        }
        assert!(sessions.failed(mapped(2)), "past the limit");
        assert!(!sessions.failed(mapped(3)), "::ffff:127.0.0.3 is not ::ffff:127.0.0.2");
        assert!(sessions.failed(Some([127, 0, 0, 2].into())), "and is the IPv4 address it maps");
    }

    #[test]
    fn no_ones_logins_end_anyone_elses_sessions() {
        let sessions = Sessions::default();
        let (operate, _) = sessions.start(actor(Scope::Operate), None);
        let bob = Actor { name: "bob".into(), scope: Scope::Operate, named: true };
        let (first_of_bob, _) = sessions.start(bob.clone(), None);
        for _ in 0..super::MAX_SESSIONS * 2 {
            sessions.start(actor(Scope::Read), None);
            sessions.start(bob.clone(), None);
        }
        assert!(sessions.get(&operate).is_some(), "neither a read token's logins nor bob's end it");
        assert!(sessions.get(&first_of_bob).is_none(), "bob's own oldest went");
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
