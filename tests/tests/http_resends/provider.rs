//! A payment provider of this binary's own, over raw HTTP/1.1 on loopback,
//! that answers each request from a script: the shared one
//! (`idem_tests::provider`) cannot cut an answer mid-body nor answer one
//! request 429 and the next 502. Like a real provider it applies the
//! operation of an `Idempotency-Key` once: the first request that gets
//! past its script charges, later ones with that key are answered alike
//! and charge nothing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// How one request is answered.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// This status, with these header lines (`name: value\r\n` each), and
    /// no charge.
    Status(u16, &'static str),
    /// Charge, answer `200` with the head and 10 of the body's 64 bytes,
    /// then close the connection (FIN), or reset it (RST) when `reset`.
    CutMidBody { reset: bool },
    /// Charge, then reset the connection before a byte of the answer.
    ResetBeforeAnswer,
}

/// One request as the provider saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub key: Option<String>,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Steps still to play, by the request's key (or path, for a request
    /// without one); a request with none left is answered `200`.
    script: HashMap<String, VecDeque<Step>>,
    charged: HashSet<String>,
}

/// A running provider; it stops when dropped.
pub struct ScriptedProvider {
    pub base_url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedProvider {
    /// On a free port.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// On `port` of 127.0.0.1 (0: a free one).
    pub async fn start_on(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("the scripted provider could not listen on port {port}: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("no local address: {e}"));
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Self { base_url: format!("http://{addr}"), state, task }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers the next requests with key (or path) `tag` by `steps`, in
    /// order, then `200`.
    pub fn script(&self, tag: impl Into<String>, steps: &[Step]) {
        self.state().script.insert(tag.into(), steps.iter().copied().collect());
    }

    /// Every request, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// The requests with key (or path) `tag`, in arrival order.
    pub fn seen_as(&self, tag: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.key.as_deref().unwrap_or(&s.path) == tag).collect()
    }

    /// The keys the provider charged (each once, however often it came).
    pub fn charged(&self) -> HashSet<String> {
        self.state().charged.clone()
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(seen) = read_request(&mut stream).await else { return };
    let step = {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        let tag = seen.key.clone().unwrap_or_else(|| seen.path.clone());
        let step = s.script.get_mut(&tag).and_then(VecDeque::pop_front);
        let charges = !matches!(step, Some(Step::Status(..)));
        if charges && let Some(key) = &seen.key {
            s.charged.insert(key.clone());
        }
        s.seen.push(seen);
        step
    };
    let body = format!("{{\"status\":\"charged\",\"padding\":\"{}\"}}", "x".repeat(31));
    let _ = match step {
        None => respond(&mut stream, 200, "", &body).await,
        Some(Step::Status(status, headers)) => respond(&mut stream, status, headers, "{}").await,
        Some(Step::CutMidBody { reset }) => {
            let head =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
            let sent = async {
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&body.as_bytes()[..10]).await?;
                stream.flush().await
            };
            let _ = sent.await;
            if reset {
                // Let the head and the first bytes reach the client before the RST.
                tokio::time::sleep(Duration::from_millis(50)).await;
                reset_now(stream);
                Ok(())
            } else {
                stream.shutdown().await
            }
        }
        Some(Step::ResetBeforeAnswer) => {
            reset_now(stream);
            Ok(())
        }
    };
}

/// Closes `stream` with an RST (linger 0), not a FIN.
fn reset_now(stream: TcpStream) {
    #[expect(deprecated, reason = "SO_LINGER 0 is how a test server resets a connection")]
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn respond(stream: &mut TcpStream, status: u16, headers: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}\
         connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
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
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(Seen { method, path, key: headers.remove("idempotency-key"), at: Instant::now() })
}
