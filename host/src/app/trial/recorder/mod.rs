//! `idem test --http record`: the guest's requests go to this local
//! recorder instead of their hosts (it is the HTTP client's proxy), which
//! answers `200 {}` and keeps a line per request: method, URL, its
//! `Idempotency-Key` and body.
//!
//! An `https` URL reaches it as a CONNECT. The recorder accepts the tunnel
//! and answers TLS inside it under a certificate for the requested host,
//! issued by a certificate authority made for this run ([`tls`]); the
//! handler's client trusts that authority under `idem test` only
//! ([`Recorder::ca`]), so a config naming the real provider's `https` URL is
//! tested unchanged and nothing leaves the machine.
//!
//! It listens on loopback, where any local user could reach it: the
//! handler's client names a credential made for the run in its proxy URL,
//! and anything without it is answered 407, unrecorded. The recorder stops
//! when the last [`Recorder`] of it is dropped (each `--watch` run has its
//! own).

mod tls;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

/// A running recorder; it stops when the last clone is dropped.
#[derive(Clone)]
pub struct Recorder {
    /// The proxy URL the handler's client uses, its credential in it.
    pub url: String,
    lines: Lines,
    tls: Arc<tls::Issuer>,
    _serving: Arc<Serving>,
}

/// The recorder's server task, aborted on drop.
struct Serving(tokio::task::AbortHandle);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type Lines = Arc<Mutex<Vec<String>>>;

/// The most of a request's body the recorder reads.
const MAX_BODY: usize = 16 << 20;

/// What a request handler of the recorder shares: the lines, the issuer of
/// tunnels' certificates, and (inside a tunnel) the origin it was opened to.
#[derive(Clone)]
struct Shared {
    lines: Lines,
    tls: Arc<tls::Issuer>,
    /// `Proxy-Authorization`'s expected value.
    credential: Arc<str>,
    origin: Option<String>,
}

impl Recorder {
    pub async fn start() -> anyhow::Result<Self> {
        let tls = Arc::new(tls::Issuer::new()?);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let mut secret = [0u8; 16];
        getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness for the recorder: {e}"))?;
        let token = hex::encode(secret);
        let url = format!("http://idem:{token}@{}", listener.local_addr()?);
        let credential = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("idem:{token}")));
        let lines = Lines::default();
        let shared = Shared { lines: lines.clone(), tls: tls.clone(), credential: credential.into(), origin: None };
        let app = axum::Router::new().fallback(record).with_state(shared);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("the HTTP recorder stopped: {e}");
            }
        });
        Ok(Self { url, lines, tls, _serving: Arc::new(Serving(task.abort_handle())) })
    }

    /// The certificate of this run's authority, for the handler's client
    /// to trust (and nothing else to).
    pub fn ca(&self) -> &[u8] {
        self.tls.ca_der()
    }

    /// The requests recorded since the last call.
    pub fn take(&self) -> Vec<String> {
        self.lines.lock().map(|mut lines| std::mem::take(&mut *lines)).unwrap_or_default()
    }
}

async fn record(State(shared): State<Shared>, request: Request) -> Response {
    // Inside a tunnel, the CONNECT that opened it was the one checked.
    let allowed = shared.origin.is_some()
        || request.headers().get("proxy-authorization").is_some_and(|v| v.as_bytes() == shared.credential.as_bytes());
    if !allowed {
        return (StatusCode::PROXY_AUTHENTICATION_REQUIRED, "this recorder serves one idem test's handler")
            .into_response();
    }
    if request.method() == Method::CONNECT {
        return tls::tunnel(shared, request);
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => Bytes::from(format!("(a body over {} MiB, not kept)", MAX_BODY >> 20)),
    };
    let url = match &shared.origin {
        Some(origin) => format!("{origin}{}", parts.uri.path_and_query().map_or("/", |p| p.as_str())),
        None => parts.uri.to_string(),
    };
    push(&shared.lines, line(&parts.method, &url, &parts.headers, &body));
    (StatusCode::OK, [("content-type", "application/json")], "{}").into_response()
}

fn line(method: &Method, url: &str, headers: &HeaderMap, body: &Bytes) -> String {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("none");
    let body = crate::text::shown(&String::from_utf8_lossy(body), 1_000);
    format!("{method} {url} Idempotency-Key: {key} body: {body}")
}

fn push(lines: &Lines, line: String) {
    if let Ok(mut lines) = lines.lock() {
        lines.push(line);
    }
}

/// `https://host` for a CONNECT's `host:443`, `https://host:port` else.
fn origin(authority: &Uri) -> String {
    let host = authority.host().unwrap_or_default();
    match authority.port_u16() {
        None | Some(443) => format!("https://{host}"),
        Some(port) => format!("https://{host}:{port}"),
    }
}
