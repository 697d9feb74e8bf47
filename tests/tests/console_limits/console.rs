//! The console as a browser reaches it: a login for a cookie and a CSRF
//! token, pages read with the cookie, changes sent with the cookie, this
//! console's `Origin` and a CSRF token; and wrong logins from a chosen
//! loopback address over a raw connection.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpSocket;

use super::{Host, client};

/// One logged-in browser: its cookie (`idem_console=…`) and CSRF token.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub cookie: String,
    pub csrf: String,
    /// The `Set-Cookie` header of the login, as sent.
    pub set_cookie: String,
}

/// What the console answered: status, JSON body, how long it took.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Value,
    pub took: Duration,
}

impl Answer {
    /// The `error` the console gave (empty if none).
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }
}

/// The console of `host`, reached by its loopback address.
#[derive(Clone)]
pub(crate) struct Console {
    url: String,
    origin: String,
    http: reqwest::Client,
}

impl Console {
    pub fn of(host: &Host) -> Self {
        Self { url: host.url(), origin: host.url(), http: client() }
    }

    async fn answer(request: reqwest::RequestBuilder) -> Answer {
        let started = Instant::now();
        let response = request.send().await.expect("the console answered within 60 s");
        let status = response.status();
        let text = response.text().await.expect("answer body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer { status, body, took: started.elapsed() }
    }

    /// A login with `token`, as the page sends it.
    pub async fn login(&self, token: &str) -> (Answer, Option<String>) {
        let request = self
            .http
            .post(format!("{}/console/api/login", self.url))
            .header("origin", &self.origin)
            .json(&serde_json::json!({ "token": token }));
        let started = Instant::now();
        let response = request.send().await.expect("the login answered within 60 s");
        let set_cookie = response.headers().get("set-cookie").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        (Answer { status, body, took: started.elapsed() }, set_cookie)
    }

    /// A session for `token` (which must be let in).
    pub async fn session(&self, token: &str) -> Session {
        let (answer, set_cookie) = self.login(token).await;
        assert_eq!(answer.status, StatusCode::OK, "login: {:?}", answer.body);
        let set_cookie = set_cookie.expect("a login sets the session cookie");
        let cookie = set_cookie.split(';').next().expect("cookie").trim().to_owned();
        assert!(cookie.starts_with("idem_console="), "{set_cookie}");
        let csrf = answer.body["csrf"].as_str().expect("the login's CSRF token").to_owned();
        Session { cookie, csrf, set_cookie }
    }

    /// `GET path` with the session's cookie.
    pub async fn get(&self, session: &Session, path: &str) -> Answer {
        Self::answer(self.http.get(format!("{}{path}", self.url)).header("cookie", &session.cookie)).await
    }

    /// `POST path` with `json`, the cookie of `session`, this console's
    /// `Origin` and `csrf` in `X-CSRF-Token`.
    pub async fn post(&self, session: &Session, csrf: &str, path: &str, json: &Value) -> Answer {
        let request = self
            .http
            .post(format!("{}{path}", self.url))
            .header("cookie", &session.cookie)
            .header("origin", &self.origin)
            .header("x-csrf-token", csrf)
            .json(json);
        Self::answer(request).await
    }
}

/// A wrong login over a connection of its own from the loopback address
/// `from`; the status answered.
pub(crate) async fn login_from(from: IpAddr, to: SocketAddr, token: &str) -> u16 {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from, 0)).expect("bind a loopback source address");
    let mut stream = socket.connect(to).await.expect("connect");
    let body = serde_json::json!({ "token": token }).to_string();
    let request = format!(
        "POST /console/api/login HTTP/1.1\r\nhost: {to}\r\norigin: http://{to}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send the login");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("a login answered and closed within 30 s")
        .expect("read the answer");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"))
}
