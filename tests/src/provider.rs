//! A local payment provider over real HTTP/1.1 on loopback. Like a real one
//! it deduplicates by `Idempotency-Key`: the first request with a key
//! performs the charge, later ones get the same answer and charge nothing;
//! and it keeps a connection open between requests, so a client's pool
//! reuses it (one connection per request would have the benchmark's HTTP
//! variants measure TCP set-up: a sixth of the host's CPU went to connect).
//! It can misbehave on purpose: reset the connection after charging, or
//! answer late.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// A request whose body contains this (e.g. an order in currency `SLO`)
/// is answered [`SLOW_LATENCY`] late: a slow partition on demand.
pub const SLOW_MARKER: &str = "\"SLO\"";
pub const SLOW_LATENCY: Duration = Duration::from_secs(2);

/// While [`PaymentProvider::fail_marked`] is on, a request whose body
/// contains this (an order in currency `FAI`) is answered `503` without
/// charging: a provider failing for one customer only.
pub const FAILING_MARKER: &str = "\"FAI\"";

/// One request as the provider saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub authorization: Option<String>,
    /// The W3C trace context the request carried.
    pub traceparent: Option<String>,
    pub body: String,
}

/// How the next requests are answered.
#[derive(Debug, Clone, Copy, Default)]
pub enum Fault {
    #[default]
    None,
    /// Charge, then reset the connection without answering, for the next `n` requests.
    ResetAfterCharge(u32),
    /// Charge, then answer only after this delay, for the next request.
    DelayOnce(Duration),
    /// Answer `503 Service Unavailable` without charging, until the fault
    /// is changed: an outage.
    Unavailable,
    /// Answer `503` without charging, with this `Retry-After` (if any), for
    /// the next `n` requests: a short overload.
    UnavailableTimes(u32, Option<&'static str>),
    /// Answer `429 Too Many Requests` without charging, with this
    /// `Retry-After`, for the next `n` requests: a provider asking to be
    /// called less.
    TooManyTimes(u32, &'static str),
    /// Charge, then reset the connection, for one POST in every `n`, until
    /// the fault is changed: a provider failing 1/n of its charges this way
    /// (each connection, kept alive, serves until its reset).
    ResetEvery(u32),
    /// Answer `422 Unprocessable Entity` without charging, for the next `n`
    /// requests: a charge the provider will never accept.
    RejectTimes(u32),
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Keys charged: the provider performs one charge per key.
    charges: HashSet<String>,
    fault: Fault,
    /// Added to every answer, to make a stream of events take a while.
    latency: Duration,
    /// POSTs seen, for `ResetEvery`.
    posts: u64,
    /// Requests with [`FAILING_MARKER`] are answered 503.
    fail_marked: bool,
    /// Requests being answered right now, and the most there ever were.
    in_flight: usize,
    most_in_flight: usize,
}

/// A running provider. Dropped, it accepts no more connections; those open
/// already are answered until their client closes them.
pub struct PaymentProvider {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PaymentProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PaymentProvider {
    pub async fn start() -> Self {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("failed to bind the payment provider: {e}"),
        };
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("no local address: {e}"));
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Self { addr, state, task }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_fault(&self, fault: Fault) {
        self.state().fault = fault;
    }

    /// Answers requests with [`FAILING_MARKER`] 503 (`true`) or as any other.
    pub fn fail_marked(&self, on: bool) {
        self.state().fail_marked = on;
    }

    /// The fault in force now (a counted one turns `None` once spent).
    pub fn fault(&self) -> Fault {
        self.state().fault
    }

    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// Charges performed: one per distinct key that reached the provider.
    pub fn charges(&self) -> usize {
        self.state().charges.len()
    }

    /// The most requests the provider was answering at the same time.
    pub fn most_at_once(&self) -> usize {
        self.state().most_in_flight
    }

    /// The keys of every POST, in arrival order (retries included).
    pub fn keys(&self) -> Vec<Option<String>> {
        self.state().seen.iter().filter(|s| s.method == "POST").map(|s| s.idempotency_key.clone()).collect()
    }
}

/// Answers the requests of one connection, kept open between them as a
/// real provider keeps it (a client's pool reuses it), until the client
/// closes it or an answer ends it (a reset, a redirect, the big answer).
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut read = Vec::new();
    while let Some((request, close)) = read_request(&mut stream, &mut read).await {
        if !answer(&mut stream, request, &state).await || close {
            return;
        }
    }
}

/// Answers `request`; whether the connection stays open for another.
async fn answer(stream: &mut TcpStream, request: Seen, state: &Arc<Mutex<State>>) -> bool {
    let fault = {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        s.seen.push(request.clone());
        s.in_flight += 1;
        s.most_in_flight = s.most_in_flight.max(s.in_flight);
        let mut status = "200 OK";
        if request.method == "POST" {
            s.posts += 1;
        }
        let failing_marked = s.fail_marked && request.body.contains(FAILING_MARKER);
        if failing_marked || matches!(s.fault, Fault::Unavailable | Fault::UnavailableTimes(..)) {
            status = "503 Service Unavailable";
        } else if matches!(s.fault, Fault::TooManyTimes(..)) {
            status = "429 Too Many Requests";
        } else if matches!(s.fault, Fault::RejectTimes(_)) {
            status = "422 Unprocessable Entity";
        } else if request.method == "POST" {
            match &request.idempotency_key {
                Some(key) => {
                    // Dedup: charge once per key, whatever the retries.
                    s.charges.insert(key.clone());
                }
                None => status = "400 Bad Request",
            }
        }
        let mut fault = s.fault;
        s.fault = match fault {
            Fault::ResetAfterCharge(n) if n > 1 => Fault::ResetAfterCharge(n - 1),
            Fault::UnavailableTimes(n, after) if n > 1 => Fault::UnavailableTimes(n - 1, after),
            Fault::RejectTimes(n) if n > 1 => Fault::RejectTimes(n - 1),
            Fault::TooManyTimes(n, after) if n > 1 => Fault::TooManyTimes(n - 1, after),
            Fault::Unavailable | Fault::ResetEvery(_) => fault,
            _ => Fault::None,
        };
        if let Fault::ResetEvery(n) = fault {
            let this_one = request.method == "POST" && s.posts.is_multiple_of(u64::from(n.max(1)));
            fault = if this_one { Fault::ResetAfterCharge(1) } else { Fault::None };
        }
        (fault, status, s.latency)
    };
    let (fault, status, mut latency) = fault;
    let answering = Answering(state.clone());
    // Paths that misbehave whatever the fault: a redirect back to this
    // provider (a client that followed it would be counted twice), and a
    // 100 MB answer.
    if request.path.starts_with("/redirect") {
        let head = "HTTP/1.1 302 Found\r\nlocation: /v1/redirected\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let _ = stream.write_all(head.as_bytes()).await;
        return false;
    }
    if request.path.starts_with("/big") {
        let _ = respond_big(stream, 100 << 20).await;
        return false;
    }
    if request.body.contains(SLOW_MARKER) {
        latency += SLOW_LATENCY;
    }
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    drop(answering);
    let head_only = request.method == "HEAD";
    let fault = (fault, status);
    let answered = match fault {
        (Fault::ResetAfterCharge(_) | Fault::ResetEvery(_), _) => {
            // Linger 0 makes the close an RST: the client sees a reset, not
            // an answer. (The deprecation warns of blocking on drop, which a
            // zero linger never does.)
            #[expect(deprecated, reason = "SO_LINGER 0 is how a test server resets a connection")]
            let _ = stream.set_linger(Some(Duration::ZERO));
            return false;
        }
        (Fault::DelayOnce(delay), status) => {
            tokio::time::sleep(delay).await;
            respond(stream, head_only, status, "").await
        }
        (Fault::UnavailableTimes(_, Some(after)) | Fault::TooManyTimes(_, after), status) => {
            respond(stream, head_only, status, &format!("retry-after: {after}\r\n")).await
        }
        (Fault::None | Fault::Unavailable | Fault::UnavailableTimes(..) | Fault::RejectTimes(_), status) => {
            respond(stream, head_only, status, "").await
        }
    };
    answered.is_ok()
}

/// A request being answered (counted in `in_flight` until dropped).
struct Answering(Arc<Mutex<State>>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).in_flight -= 1;
    }
}

/// Answers `status` with the provider's one body (its length only, to a
/// HEAD), the connection kept open.
async fn respond(stream: &mut TcpStream, head_only: bool, status: &str, extra_headers: &str) -> std::io::Result<()> {
    let body = r#"{"status":"charged"}"#;
    let shown = if head_only { "" } else { body };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra_headers}\r\n{shown}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await
}

/// Answers `len` bytes of JSON-ish filler, until the client hangs up.
async fn respond_big(stream: &mut TcpStream, len: usize) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let chunk = vec![b' '; 64 << 10];
    let mut sent = 0;
    while sent < len {
        let n = chunk.len().min(len - sent);
        stream.write_all(&chunk[..n]).await?;
        sent += n;
    }
    stream.shutdown().await
}

/// The next request on `stream`, and whether its client asked to close
/// the connection after it; `buf` carries what was read past the previous
/// one. `None` once the client closed the connection, or after refusing a
/// chunked body (`501`: no client of this stub sends one).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Seen, bool)> {
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let mut headers = HashMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    if headers.contains_key("transfer-encoding") {
        let refusal = "HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let _ = stream.write_all(refusal.as_bytes()).await;
        return None;
    }
    let close = headers.get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    buf.drain(..head_end + length);
    let seen = Seen {
        method,
        path,
        idempotency_key: headers.remove("idempotency-key"),
        authorization: headers.remove("authorization"),
        traceparent: headers.remove("traceparent"),
        body,
    };
    Some((seen, close))
}
