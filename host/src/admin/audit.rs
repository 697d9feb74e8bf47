//! The audit trail (`idem.audit`): every change made through the admin API
//! or the console — deploys, activations, rollbacks, replays, logins,
//! tokens issued and revoked — with who made it (`access::Actor`), from
//! where, on which host, and the status it was answered with. Reads are not
//! recorded, and neither are requests refused before anyone was known
//! (those are logged): nobody can fill the table without a token.
//!
//! The middleware records every change, so a route added later is in the
//! trail without a line of its own; a route adds what only it knows (the
//! version it stored, the records it replayed) as a [`Detail`] on its
//! answer. The row is written after the change and before the answer is
//! sent; when the database refuses it, the host logs the entry at ERROR
//! with the same fields.

use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::get};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::access::{Actor, Scope};
use super::{AdminState, Peer, answer};

/// What a route adds to its entry (as a response extension).
#[derive(Debug, Clone)]
pub(crate) struct Detail(pub serde_json::Value);

/// How a change arrived.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Via {
    Api,
    Console,
    /// A command that changed something without a host (`idem dlq replay
    /// --config`), with the database access its config gives.
    Cli,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Console => "console",
            Self::Cli => "cli",
        }
    }
}

/// One change, as recorded.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub actor: &'a Actor,
    pub via: Via,
    pub peer: Option<String>,
    /// Method, path and query: `POST /handlers/billing/activate?version=3`.
    pub action: String,
    pub handler: Option<String>,
    pub status: StatusCode,
    pub detail: Option<serde_json::Value>,
}

/// How often a host trims the trail (also at start-up).
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
/// Rows one DELETE removes: each a short transaction.
const TRIM_CHUNK: i64 = 10_000;

/// Deletes entries older than `keep` (`[admin] audit_retention`) now and
/// every hour until `stop`. Every host does it: a second host's pass finds
/// nothing left, and the trail never depends on one host staying up.
pub(crate) async fn trim(pool: PgPool, keep: std::time::Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Ok(keep) = chrono::Duration::from_std(keep) else { return };
    loop {
        match trim_once(&pool, keep).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "audit trail: entries older than [admin] audit_retention deleted"),
            Err(e) => tracing::warn!("audit trail: old entries not deleted now (tried again in an hour): {e}"),
        }
        tokio::select! {
            () = tokio::time::sleep(TRIM_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn trim_once(pool: &PgPool, keep: chrono::Duration) -> Result<u64, sqlx::Error> {
    let before = chrono::Utc::now() - keep;
    let mut deleted = 0;
    loop {
        let done = sqlx::query(
            "DELETE FROM idem.audit WHERE id IN (SELECT id FROM idem.audit WHERE at < $1 ORDER BY id LIMIT $2)",
        )
        .bind(before)
        .bind(TRIM_CHUNK)
        .execute(pool)
        .await?
        .rows_affected();
        deleted += done;
        if done < TRIM_CHUNK.unsigned_abs() {
            return Ok(deleted);
        }
    }
}

/// Characters of an action kept (its query can be anything a client sent).
const ACTION_KEPT: usize = 500;

/// Runs `request` for `actor` and records it when it changes something.
/// The change and its record run as one task of their own: a client that
/// hangs up mid-change stops neither, so nothing is done unrecorded.
pub(crate) async fn recorded(state: &AdminState, actor: &Actor, via: Via, request: Request, next: Next) -> Response {
    if Scope::needed_for(request.method()) == Scope::Read {
        return next.run(request).await;
    }
    let peer = request.extensions().get::<Peer>().map(|p| p.0.to_string());
    // The path and query as sent (never an absolute URI's authority).
    let target = request.uri().path_and_query().map_or("", |p| p.as_str());
    let action = crate::text::shown(&format!("{} {target}", request.method()), ACTION_KEPT);
    let handler = handler_of(request.uri().path());
    let (state, actor) = (state.clone(), actor.clone());
    let change = tokio::spawn(async move {
        let response = next.run(request).await;
        let detail = response.extensions().get::<Detail>().map(|d| d.0.clone());
        let entry = Entry { actor: &actor, via, peer, action, handler, status: response.status(), detail };
        write(&state.pool, &state.host(), &entry).await;
        response
    });
    match change.await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!("admin: a change failed: {e}");
            answer::error(StatusCode::INTERNAL_SERVER_ERROR, format!("the change failed: {e}")).into_response()
        }
    }
}

/// The handler a path names (`/handlers/{name}/…`, as the console's too),
/// decoded as the router decodes it: `bil%6Cing` is `billing`.
fn handler_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/console/api").unwrap_or(path);
    let name = rest.strip_prefix("/handlers/")?.split('/').next()?;
    let decoded = percent_decoded(name);
    (!decoded.is_empty()).then(|| crate::text::shown(&decoded, 200))
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// How long a record may take to write: a database that stopped answering
/// delays a change's answer by this much at most (the entry is then logged).
const WRITE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Records `entry` as served by `host`; logs it when the database refuses.
pub(crate) async fn write(pool: &PgPool, host: &str, entry: &Entry<'_>) {
    let written = sqlx::query(
        "INSERT INTO idem.audit (actor, scope, via, peer, host, action, handler, status, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&*entry.actor.name)
    .bind(entry.actor.scope.as_str())
    .bind(entry.via.as_str())
    .bind(&entry.peer)
    .bind(host)
    .bind(&entry.action)
    .bind(&entry.handler)
    .bind(i16::try_from(entry.status.as_u16()).unwrap_or(i16::MAX))
    .bind(&entry.detail)
    .execute(pool);
    let written = match tokio::time::timeout(WRITE_WITHIN, written).await {
        Ok(written) => written.map(|_| ()).map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {WRITE_WITHIN:?}")),
    };
    if let Err(e) = written {
        tracing::error!(
            actor = %entry.actor.name, via = entry.via.as_str(), action = %entry.action, status = entry.status.as_u16(),
            detail = ?entry.detail, "audit: this change is not in idem.audit ({e})"
        );
    }
}

/// Records a change a command made in its own process, as no host served
/// it: the actor is the operating system's user who ran it (`local:<user>`,
/// as `$USER` says, else `local:uid <n>`: whoever holds the config's
/// database credentials could claim another), the host this machine, and
/// `status` what the change came to (202: begun).
pub(crate) async fn write_local(
    pool: &PgPool,
    handler: &str,
    action: String,
    status: StatusCode,
    detail: serde_json::Value,
) {
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self").map_or_else(|_| "unknown".into(), |m| format!("uid {}", m.uid()))
    });
    let actor =
        Actor { name: format!("local:{}", crate::text::shown(&user, 100)).into(), scope: Scope::Operate, named: false };
    let action = crate::text::shown(&action, ACTION_KEPT);
    let entry = Entry {
        actor: &actor,
        via: Via::Cli,
        peer: None,
        action,
        handler: Some(handler.to_owned()),
        status,
        detail: Some(detail),
    };
    write(pool, &crate::identity::hostname().unwrap_or_default(), &entry).await;
}

/// `GET /audit`'s filters: newest first, `before` an entry's id to page.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Filter {
    handler: Option<String>,
    actor: Option<String>,
    before: Option<i64>,
    limit: Option<i64>,
}

/// One entry as `GET /audit` answers it.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub(crate) struct Row {
    pub id: i64,
    pub at: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub scope: String,
    pub via: String,
    pub peer: Option<String>,
    pub host: String,
    pub action: String,
    pub handler: Option<String>,
    pub status: i16,
    pub detail: Option<serde_json::Value>,
}

/// Entries at most in one answer, and when not asked.
const MAX_LISTED: i64 = 500;
const DEFAULT_LISTED: i64 = 100;

pub(crate) async fn list(pool: &PgPool, filter: &Filter) -> Result<Vec<Row>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, at, actor, scope, via, peer, host, action, handler, status, detail FROM idem.audit \
         WHERE ($1::text IS NULL OR handler = $1) AND ($2::text IS NULL OR actor = $2) \
         AND ($3::bigint IS NULL OR id < $3) ORDER BY id DESC LIMIT $4",
    )
    .bind(filter.handler.as_deref().filter(|h| !h.is_empty()))
    .bind(filter.actor.as_deref().filter(|a| !a.is_empty()))
    .bind(filter.before)
    .bind(filter.limit.unwrap_or(DEFAULT_LISTED).clamp(1, MAX_LISTED))
    .fetch_all(pool)
    .await
}

/// `GET /audit` (and the console's `/console/api/audit`).
pub(crate) async fn show(
    State(state): State<AdminState>,
    query: Result<Query<Filter>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let filter = match query {
        Ok(Query(filter)) if filter.limit.is_none_or(|n| (1..=MAX_LISTED).contains(&n)) => filter,
        Ok(_) => {
            let message = format!("limit: an answer lists 1 to {MAX_LISTED} entries");
            return answer::error(StatusCode::BAD_REQUEST, message).into_response();
        }
        Err(e) => return answer::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    for (name, value) in [("handler", &filter.handler), ("actor", &filter.actor)] {
        if let Some(refusal) = super::nul::refused_in(name, value.as_deref()) {
            return refusal;
        }
    }
    match list(&state.pool, &filter).await {
        Ok(rows) => {
            let full = i64::try_from(rows.len()).is_ok_and(|n| n == filter.limit.unwrap_or(DEFAULT_LISTED));
            let next = rows.last().filter(|_| full).map(|r| r.id);
            Json(serde_json::json!({ "entries": rows, "next": next })).into_response()
        }
        Err(e) => answer::database(&e),
    }
}

pub(super) fn router(state: AdminState) -> Router {
    Router::new().route("/audit", get(show)).with_state(state)
}

#[cfg(test)]
mod tests {
    use super::handler_of;

    #[test]
    fn the_handler_is_read_from_the_api_and_console_paths() {
        assert_eq!(handler_of("/handlers/billing/activate").as_deref(), Some("billing"));
        assert_eq!(handler_of("/console/api/handlers/payments/dead-letters/replay").as_deref(), Some("payments"));
        assert_eq!(handler_of("/operators"), None);
        assert_eq!(handler_of("/handlers/"), None);
    }
}
