//! `idem deploy`, `idem handlers`, `idem rollback`, `idem status`, `idem
//! dlq search|replay|discard`, `idem token`, `idem audit`: the
//! admin API from the command line. Human-readable by default, the API's
//! JSON with `--json`. What went wrong talking to the API is an
//! [`ApiError`], which the command line turns into its exit code.

use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

mod canaries;
pub mod operators;
pub mod quarantine;
pub mod rewinds;
mod shadows;
pub mod status;
pub mod throttles;

/// The admin API could not be reached or refused the request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the admin API is unreachable at {url}: {reason} (is the host running, is `--url` its [admin] listen?)")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status}: {message}{hint}", hint = hint(*.status))]
    Refused { url: String, status: u16, message: String },
}

/// The next step after a refusal, when the status says what it is.
fn hint(status: u16) -> &'static str {
    match status {
        401 => " (give the host's token: --token, or $IDEM_ADMIN_TOKEN / $IDEM_ADMIN_READ_TOKEN)",
        403 => " (this token's scope does not allow it: an operate token does)",
        _ => "",
    }
}

impl ApiError {
    /// The command line's exit code for it (docs/commands.md lists them).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Unreachable { .. } => 3,
            Self::Refused { status: 401, .. } => 4,
            Self::Refused { status: 403, .. } => 5,
            Self::Refused { status: 404, .. } => 6,
            Self::Refused { status: 400 | 413 | 415 | 422, .. } => 7,
            Self::Refused { status: 409, .. } => 8,
            Self::Refused { .. } => 1,
        }
    }

    fn unreachable(url: &str, e: &reqwest::Error) -> Self {
        // reqwest's own text says only "error sending request": its source says why.
        let reason = std::error::Error::source(e).map_or_else(|| e.to_string(), |s| s.to_string());
        Self::Unreachable { url: url.to_owned(), reason }
    }
}

/// Where the admin API is and how to get in.
#[derive(Debug, Clone)]
pub struct Target {
    /// e.g. `http://127.0.0.1:7700`.
    pub url: String,
    pub token: Option<String>,
}

impl Target {
    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.map_err(|e| ApiError::unreachable(&self.url, &e))?;
        let (status, url) = (response.status(), response.url().to_string());
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            // A replay an outage stopped answers 503 with its report.
            let stopped = body["stopped"].as_str().map(|why| format!("the replay stopped: {why} ({body})"));
            let message = body["error"].as_str().map(str::to_owned).or(stopped).unwrap_or_else(|| "no message".into());
            return Err(ApiError::Refused { url, status: status.as_u16(), message }.into());
        }
        Ok(body)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url.trim_end_matches('/'))
    }
}

fn client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder().build().context("failed to build an HTTP client")
}

/// Uploads `path` as `handler`'s next version.
/// How an upload is deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployAs {
    /// Made active on every host.
    Active,
    /// Stored as the handler's shadow version (`crate::shadow`).
    Shadow,
    /// Stored as its canary for this percent of its keys (`modules::canary`).
    Canary(u8),
}

/// Uploads the component at `path` as `handler`'s next version, deployed
/// `as_`.
pub async fn deploy(
    target: &Target,
    handler: &str,
    path: &Path,
    note: Option<&str>,
    as_: DeployAs,
) -> anyhow::Result<Value> {
    let bytes = crate::files::read_bounded(path, crate::runtime::MAX_COMPONENT_BYTES)
        .with_context(|| format!("failed to read {}", path.display()))?;
    let by = format!(
        "{}@{} (idem deploy)",
        crate::env::get(crate::env::USER).unwrap_or_else(|| "unknown".into()),
        std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_default()
    );
    let mut request =
        client()?.put(target.url(&format!("/handlers/{handler}/module"))).header("x-uploaded-by", by).body(bytes);
    if let Some(note) = note {
        request = request.query(&[("note", note)]);
    }
    match as_ {
        DeployAs::Active => {}
        DeployAs::Shadow => request = request.query(&[("shadow", "true")]),
        DeployAs::Canary(percent) => request = request.query(&[("canary", percent.to_string())]),
    }
    target.send(request).await
}

/// `POST /handlers/{handler}/canary/promote` (`promote`), or `DELETE
/// /handlers/{handler}/canary`.
pub async fn canary(target: &Target, handler: &str, promote: bool) -> anyhow::Result<Value> {
    let client = client()?;
    let request = if promote {
        client.post(target.url(&format!("/handlers/{handler}/canary/promote")))
    } else {
        client.delete(target.url(&format!("/handlers/{handler}/canary")))
    };
    target.send(request).await
}

/// `POST /handlers/{handler}/shadow/activate` (`activate`), or `DELETE
/// /handlers/{handler}/shadow`.
pub async fn shadow(target: &Target, handler: &str, activate: bool) -> anyhow::Result<Value> {
    let client = client()?;
    let request = if activate {
        client.post(target.url(&format!("/handlers/{handler}/shadow/activate")))
    } else {
        client.delete(target.url(&format!("/handlers/{handler}/shadow")))
    };
    target.send(request).await
}

/// `POST /handlers/{handler}/{action}` (`pause` or `resume`) with `body`.
pub async fn pause(target: &Target, handler: &str, action: &str, body: &Value) -> anyhow::Result<Value> {
    target.send(client()?.post(target.url(&format!("/handlers/{handler}/{action}"))).json(body)).await
}

pub async fn handlers(target: &Target) -> anyhow::Result<Value> {
    target.send(client()?.get(target.url("/handlers"))).await
}

/// `handler`'s dead letters matching `filters` (the API's query parameters).
pub async fn dead_letters(target: &Target, handler: &str, filters: &[(&str, String)]) -> anyhow::Result<Value> {
    let url = target.url(&format!("/handlers/{handler}/dead-letters"));
    target.send(client()?.get(url).query(filters)).await
}

/// `handler`'s newest `limit` captured events (`[handler.capture]`).
pub async fn captures(target: &Target, handler: &str, limit: i64) -> anyhow::Result<Value> {
    let url = target.url(&format!("/handlers/{handler}/captures"));
    target.send(client()?.get(url).query(&[("limit", limit)])).await
}

/// Replays (or, `dry_run` in `request`, judges) `handler`'s dead letters
/// on the host; `request` is the API's body (`search`, `force`, …).
pub async fn replay_dead_letters(target: &Target, handler: &str, request: &Value) -> anyhow::Result<Value> {
    let url = target.url(&format!("/handlers/{handler}/dead-letters/replay"));
    target.send(client()?.post(url).json(request)).await
}

/// Discards (or restores) `handler`'s dead letters on the host.
pub async fn discard_dead_letters(target: &Target, handler: &str, request: &Value) -> anyhow::Result<Value> {
    let url = target.url(&format!("/handlers/{handler}/dead-letters/discard"));
    target.send(client()?.post(url).json(request)).await
}

/// The outbox's counts per producer and its failed rows (`producer`: of
/// that one only).
pub async fn outbox(target: &Target, producer: Option<&str>) -> anyhow::Result<Value> {
    let mut request = client()?.get(target.url("/outbox"));
    if let Some(producer) = producer {
        request = request.query(&[("producer", producer)]);
    }
    target.send(request).await
}

/// Makes failed outbox rows pending again: `body` names them (`ids`) or
/// says `all`.
pub async fn redrive_outbox(target: &Target, body: &Value) -> anyhow::Result<Value> {
    target.send(client()?.post(target.url("/outbox/redrive")).json(body)).await
}

/// `idem dlq search` for people: the totals, then a line per dead letter.
pub fn render_dead_letters(found: &Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let total = found["total"].as_i64().unwrap_or(0);
    let _ = writeln!(out, "{total} dead letter(s) match ({:.0} ms)", found["took_ms"].as_f64().unwrap_or(0.0));
    if let Some(classes) = found["by_class"].as_object() {
        let line: Vec<String> = classes.iter().map(|(class, n)| format!("{class} {n}")).collect();
        let _ = writeln!(out, "  by class: {}", line.join(", "));
    }
    for pattern in found["patterns"].as_array().into_iter().flatten() {
        let (class, text, n) = (&pattern[0], &pattern[1], pattern[2].as_i64().unwrap_or(0));
        let _ = writeln!(out, "  {n:>7}  {}: {}", class.as_str().unwrap_or("-"), text.as_str().unwrap_or("-"));
    }
    for row in found["rows"].as_array().into_iter().flatten() {
        let at = format!("{}/{}", row["partition"], row["offset"]);
        let _ = writeln!(
            out,
            "{at:>10}  {}  {}  key {}  event {}  {}{}",
            row["failed_at"].as_str().unwrap_or("-"),
            row["class"].as_str().or(row["authenticity"].as_str()).unwrap_or("-"),
            row["key"].as_str().unwrap_or("-"),
            row["event_id"].as_str().unwrap_or("-"),
            crate::text::shown(row["reason"].as_str().unwrap_or(""), 160),
            row["outcome"].as_str().map(|o| format!("  [replayed: {o}]")).unwrap_or_default(),
        );
    }
    if let Some(next) = found["next"].as_str() {
        let _ = writeln!(out, "more: --after {next}");
    }
    out
}

/// Activates `to`, or else the newest stored version older than the active one.
pub async fn rollback(target: &Target, handler: &str, to: Option<i32>) -> anyhow::Result<Value> {
    let version = match to {
        Some(v) => v,
        None => {
            let shown = target.send(client()?.get(target.url(&format!("/handlers/{handler}")))).await?;
            let active = shown["active_version"].as_i64().context("the handler has no active version")?;
            let older = shown["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["version"].as_i64())
                .filter(|v| *v < active)
                .max();
            let older = older.with_context(|| format!("no version older than the active {active} to roll back to"))?;
            i32::try_from(older)?
        }
    };
    let url = target.url(&format!("/handlers/{handler}/activate"));
    target.send(client()?.post(url).query(&[("version", version)])).await
}

/// `idem handlers` for people.
pub fn render_handlers(listing: &Value) -> String {
    let mut out = String::new();
    for h in listing["handlers"].as_array().into_iter().flatten() {
        let name = h["name"].as_str().unwrap_or("?");
        let active = h["active_version"].as_i64().map_or("none".to_owned(), |v| format!("v{v}"));
        let running = h["running_version"].as_i64().map_or("-".to_owned(), |v| format!("v{v}"));
        let sha = h["sha256"].as_str().map_or("", |s| s.get(..12).unwrap_or(s));
        out.push_str(&format!("{name}: active {active} ({sha}), this host runs {running}\n"));
        for v in h["versions"].as_array().into_iter().flatten() {
            let n = v["version"].as_i64().unwrap_or(0);
            let counts = &h["counts"][n.to_string()];
            let mark = match (v["active"].as_bool(), v["shadow"].as_bool()) {
                (Some(true), _) => "*",
                (_, Some(true)) => "s",
                _ => " ",
            };
            out.push_str(&format!(
                "  {mark} v{n:<4} {}  {:>9} bytes  by {}{}  processed {} duplicates {} failed {}\n",
                v["uploaded_at"].as_str().unwrap_or(""),
                v["size"].as_i64().unwrap_or(0),
                v["uploaded_by"].as_str().unwrap_or(""),
                v["note"].as_str().map(|n| format!(" ({n})")).unwrap_or_default(),
                counts["processed"].as_u64().unwrap_or(0),
                counts["duplicates"].as_u64().unwrap_or(0),
                counts["failed"].as_u64().unwrap_or(0),
            ));
        }
    }
    out
}
