//! The admin API's accept loop. `axum::serve` reads headers without a
//! deadline and serves any number of connections, so a client that opens
//! many and sends nothing holds file descriptors the consumers and pools
//! need. Here every connection takes a slot of `max_connections` and of its
//! IP address's `max_connections_per_peer` before it is served, or is
//! answered 503 and closed at once; hyper closes one whose headers do not
//! arrive within `header_timeout` (an idle kept-alive one too).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::peers::{Admission, Peers};
use super::stall::Stall;
use crate::telemetry::{Refused, Telemetry};

/// How long a stopping listener waits for requests in flight.
const GRACE: Duration = Duration::from_secs(10);
/// At most one log line per this interval about refused connections.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// After an accept fails (the process is out of file descriptors, say):
/// the pause before the next, so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The listener's limits, from `[admin]` and the open-files limit.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub header_timeout: Duration,
    /// Also how long a write may wait for a client to take the answer.
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub per_peer: usize,
}

/// Serves `app` on `listener` until `stop` turns true, then lets the
/// requests in flight finish (for up to [`GRACE`]).
pub(super) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    telemetry: Arc<Telemetry>,
    stop: watch::Receiver<bool>,
) {
    let mut watched = stop.clone();
    // The watch's guard is not `Send`: dropped inside this future.
    let stopped = async move {
        let _ = watched.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    let peers = Peers::new(limits.max_connections, limits.per_peer);
    let mut connections = JoinSet::new();
    let mut refusals = RefusalLog::default();
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    refusals.accept_failed(&e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            // Finished connections are reaped as they end, not at shutdown.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        match peers.admit(peer.ip(), telemetry.clone()) {
            Admission::Admitted(slot) => {
                let (app, stop) = (app.clone(), stop.clone());
                let telemetry = telemetry.clone();
                connections.spawn(async move {
                    connection(stream, peer, app, limits, &telemetry, stop).await;
                    drop(slot);
                });
            }
            Admission::Refused(why) => {
                telemetry.listener().refused(why);
                refusals.note(why, peer, &limits);
                refuse(&stream, why, &limits);
            }
        }
    }
    // New connections are refused by the kernel from now on, not queued.
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(GRACE, drained).await.is_err() {
        tracing::warn!("admin API: {} connection(s) still open {GRACE:?} after the stop; closed", connections.len());
    }
}

/// One connection, HTTP/1.1, until the client or the stop closes it.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: Limits,
    telemetry: &Telemetry,
    mut stop: watch::Receiver<bool>,
) {
    let header_timeout = limits.header_timeout;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let io = TokioIo::new(Stall::new(stream, limits.body_timeout));
    // The peer's address, for what is limited per address (console logins).
    let ip = peer.ip();
    let app = tower::ServiceExt::map_request(app, move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(super::Peer(ip));
        request
    });
    let conn = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(conn);
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stopped => {
            // Idle connections close now; a request in flight finishes.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    match result {
        Ok(()) => {}
        Err(e) if e.is_timeout() => {
            telemetry.listener().header_timeout();
            tracing::debug!(%peer, "admin API: no complete request headers within {header_timeout:?}; closed");
        }
        Err(e) => tracing::debug!(%peer, "admin API: connection ended: {e}"),
    }
}

/// Answers 503 without waiting (the socket's buffer takes it or it is
/// lost), then closes: a refused connection never holds a descriptor.
fn refuse(stream: &TcpStream, why: Refused, limits: &Limits) {
    let message = match why {
        Refused::Total => format!(
            "{{\"error\":\"the admin API serves {} connections at once ([admin] max_connections); try again\"}}",
            limits.max_connections
        ),
        Refused::Peer => format!(
            "{{\"error\":\"the admin API serves {} connections at once from one address \
             ([admin] max_connections_per_peer); try again\"}}",
            limits.per_peer
        ),
    };
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{message}",
        message.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// Refused connections and failed accepts, logged at most once per
/// [`LOG_EVERY`] each: a flood must not become a flood of log lines.
#[derive(Default)]
struct RefusalLog {
    since: Option<Instant>,
    total: u64,
    peer: u64,
    failed_since: Option<Instant>,
    failed: u64,
}

impl RefusalLog {
    fn note(&mut self, why: Refused, from: SocketAddr, limits: &Limits) {
        match why {
            Refused::Total => self.total += 1,
            Refused::Peer => self.peer += 1,
        }
        if self.since.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        tracing::warn!(
            latest = %from.ip(),
            "admin API: refused {} connection(s) at max_connections = {} and {} at max_connections_per_peer = {} \
             (since the last such line, at most one per {LOG_EVERY:?})",
            self.total,
            limits.max_connections,
            self.peer,
            limits.per_peer
        );
        (self.since, self.total, self.peer) = (Some(Instant::now()), 0, 0);
    }

    fn accept_failed(&mut self, e: &std::io::Error) {
        self.failed += 1;
        if self.failed_since.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        tracing::warn!(
            "admin API: accepting a connection failed {} time(s) (since the last such line, at most one per \
             {LOG_EVERY:?}): {e}",
            self.failed
        );
        (self.failed_since, self.failed) = (Some(Instant::now()), 0);
    }
}
