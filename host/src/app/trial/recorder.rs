//! `idem test --http record`: the guest's requests go to this local
//! recorder instead of their hosts (it is the HTTP client's proxy), which
//! answers `200 {}` and keeps a line per request: method, URL, its
//! `Idempotency-Key` and body. An `https` URL reaches it as a CONNECT,
//! which it refuses (it cannot see inside TLS).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};

/// A running recorder; it stops when the process ends.
#[derive(Clone)]
pub struct Recorder {
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new().fallback(record).with_state(lines.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("the HTTP recorder stopped: {e}");
            }
        });
        Ok(Self { url, lines })
    }

    /// The requests recorded since the last call.
    pub fn take(&self) -> Vec<String> {
        self.lines.lock().map(|mut lines| std::mem::take(&mut *lines)).unwrap_or_default()
    }
}

async fn record(
    State(lines): State<Arc<Mutex<Vec<String>>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, [(&'static str, &'static str); 1], &'static str) {
    let line = if method == Method::CONNECT {
        format!("{method} {uri}: an https request, not recorded (use --http allowlist to send it)")
    } else {
        let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("none");
        let body = crate::text::shown(&String::from_utf8_lossy(&body), 1_000);
        format!("{method} {uri} Idempotency-Key: {key} body: {body}")
    };
    if let Ok(mut lines) = lines.lock() {
        lines.push(line);
    }
    if method == Method::CONNECT {
        return (StatusCode::BAD_GATEWAY, [("content-type", "text/plain")], "not recorded");
    }
    (StatusCode::OK, [("content-type", "application/json")], "{}")
}
