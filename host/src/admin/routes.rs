//! The admin API's routes (documented in `docs/admin-api.json`).

use std::collections::BTreeMap;
use std::num::IntErrorKind;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::access::Actor;
pub(super) use super::answer::{database, error};
use super::audit::Detail;
use super::{AdminState, body};
use crate::modules::store::{self, Stored, Version};
use crate::modules::{Slot, VersionCounts};

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers", get(list))
        .route("/handlers/{name}", get(show))
        // The upload reads its body against its own handler's limit.
        .route("/handlers/{name}/module", put(upload).layer(DefaultBodyLimit::disable()))
        .route("/handlers/{name}/activate", post(activate))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// The Prometheus text exposition of every metric.
async fn metrics(State(state): State<AdminState>) -> Response {
    let body = state.telemetry.render();
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

/// Alive: the process serves requests.
async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// Ready: the database answers, migrations are applied, every handler's
/// consumer joined its group; otherwise 503 with the reasons.
async fn readyz(State(state): State<AdminState>) -> Response {
    let reasons = state.telemetry.not_ready().await;
    if reasons.is_empty() {
        Json(json!({ "status": "ready" })).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "not ready", "reasons": reasons }))).into_response()
    }
}

fn unknown(name: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")).into_response()
}

/// One handler, as `GET /handlers/{name}` shows it.
#[derive(Debug, Serialize)]
struct HandlerView {
    name: String,
    /// The store's active version (`null`: a native handler).
    active_version: Option<i32>,
    sha256: Option<String>,
    uploaded_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The version this host runs now.
    running_version: Option<i32>,
    /// The shadow version this host runs beside it (`crate::shadow`).
    running_shadow: Option<i32>,
    /// Every stored version, newest first.
    versions: Vec<Version>,
    /// Events this host resolved per version since it started.
    counts: BTreeMap<i32, VersionCounts>,
}

async fn view(state: &AdminState, slot: &Slot) -> Result<HandlerView, sqlx::Error> {
    let versions = store::versions(&state.pool, slot.name()).await?;
    let active = versions.iter().find(|v| v.active);
    Ok(HandlerView {
        name: slot.name().to_owned(),
        active_version: active.map(|v| v.version),
        sha256: active.map(|v| v.sha256.clone()),
        uploaded_at: active.map(|v| v.uploaded_at),
        running_version: slot.version(),
        running_shadow: slot.shadow().map(|s| s.version()),
        counts: slot.counts(),
        versions,
    })
}

async fn list(State(state): State<AdminState>) -> Response {
    let mut views = Vec::new();
    for slot in state.slots.iter() {
        match view(&state, slot).await {
            Ok(v) => views.push(v),
            Err(e) => return database(&e),
        }
    }
    Json(json!({ "handlers": views })).into_response()
}

pub(super) async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(slot) = state.slot(&name) else { return unknown(&name) };
    match view(&state, slot).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => database(&e),
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct UploadQuery {
    note: Option<String>,
    /// Store it as the handler's shadow version (`crate::shadow`) instead
    /// of activating it.
    #[serde(default)]
    shadow: bool,
    /// Store it as the handler's canary for this share of its keys, in
    /// percent (1 to 99), instead of activating it (`modules::canary`).
    canary: Option<u8>,
}

/// The contract check before a version of a registry-format handler is
/// stored (docs/formats.md): a reader schema that cannot read a version of
/// its subject, or an id met on its topic, refuses the upload (409), as
/// does a registry that cannot answer (503: nothing is known).
async fn contract_refusal(state: &AdminState, name: &str) -> Option<Response> {
    let (_, handler) = state.dead_letters.desk(name)?.parts();
    let reading = handler.validator.reading()?;
    match crate::pipeline::schemas_seen::unreadable(&handler.idem_pool, &handler.config, reading).await {
        Ok(found) if found.is_empty() => None,
        Ok(found) => {
            let message = format!("the contract check failed: {}", found.join("; "));
            Some(error(StatusCode::CONFLICT, message).into_response())
        }
        Err(e) => {
            let message = format!("{e:#}: the upload waits until the registry answers");
            Some(error(StatusCode::SERVICE_UNAVAILABLE, message).into_response())
        }
    }
}

/// Validates, stores and activates a module; this host switches at once,
/// the others within seconds (`modules::watch`).
pub(super) async fn upload(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    query: Result<Query<UploadQuery>, QueryRejection>,
    headers: HeaderMap,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Response {
    let Some(slot) = state.slot(&name) else { return unknown(&name) };
    // A repeated `note`, say: named in JSON like every other refusal.
    let query = match query {
        Ok(Query(query)) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    if let Some(refusal) = super::nul::refused_in("note", query.note.as_deref())
        .or_else(|| super::canary::refused_share(query.canary, query.shadow))
    {
        return refusal;
    }
    let limit = slot.max_module_bytes();
    let limit_of = format!("`{name}` (`max_module_mib`)");
    // Before a slot is taken or a byte read: a declared length over the
    // limit is refused at once.
    if let Err(e) = body::check_declared(&headers, limit, &limit_of) {
        return error(e.status(), e.to_string()).into_response();
    }
    // Holders give their slot back within `body_timeout` plus validation,
    // so waiting here is bounded by the host, not by any client.
    let Ok(_upload) = state.uploads.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the host is stopping").into_response();
    };
    let _counted = UploadCount::new(&state.telemetry);
    let body = match body::read(body, limit, state.body_timeout, &limit_of).await {
        Ok(body) => body,
        Err(e) => {
            if matches!(e, body::BodyError::TimedOut(_)) {
                state.telemetry.listener().body_timeout();
                tracing::info!(handler = %name, "module upload: {e}");
            }
            return error(e.status(), e.to_string()).into_response();
        }
    };
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    let what = format!("the upload for `{name}`");
    let handler = match slot.validate(&body, &what).await {
        Ok(handler) => handler,
        Err(e) => return super::activation::refused(&e),
    };
    if let Some(refusal) = contract_refusal(&state, &name).await {
        return refusal;
    }
    let by = uploader(&actor.name, &headers);
    let upload =
        store::Upload { handler: &name, bytes: &body, sha256: &sha256, uploaded_by: &by, note: query.note.as_deref() };
    match (query.shadow, query.canary) {
        (true, _) => return super::shadow::store(&state, slot, &upload, handler).await,
        (false, Some(percent)) => return super::canary::store(&state, slot, &upload, handler, percent).await,
        (false, None) => {}
    }
    activated(&state, slot, &upload, handler).await
}

/// Stores a validated upload and activates it; this host runs it from its
/// next batch, the others within seconds.
async fn activated(
    state: &AdminState,
    slot: &Slot,
    upload: &store::Upload<'_>,
    handler: crate::runtime::Handler,
) -> Response {
    let (name, sha256) = (upload.handler, upload.sha256);
    let stored = store::store_and_activate(&state.pool, upload).await;
    let (version, stored) = match stored {
        Ok(stored) => stored,
        Err(e) => return database(&e),
    };
    // This host runs it from its next batch; the others within seconds.
    slot.install(handler.with_version(version)).await;
    if slot.shadow().is_some_and(|s| s.version() == version) {
        slot.end_shadow();
    }
    // An activation ends the canary (`store::switch`).
    if stored != (Stored::Existing { was_active: true }) {
        slot.end_canary();
    }
    let (status, message) = match stored {
        Stored::New => (StatusCode::CREATED, format!("stored as version {version} and activated")),
        Stored::Existing { was_active: true } => {
            (StatusCode::OK, format!("identical to the active version {version}: nothing changed"))
        }
        Stored::Existing { was_active: false } => {
            (StatusCode::OK, format!("identical to stored version {version}, which is now active again"))
        }
    };
    tracing::info!(handler = %name, version, %sha256, uploaded_by = %upload.uploaded_by, "module upload: {message}");
    let changed = stored != (Stored::Existing { was_active: true });
    let detail = Detail(json!({ "version": version, "sha256": sha256, "changed": changed }));
    (
        status,
        Extension(detail),
        Json(json!({ "handler": name, "version": version, "sha256": sha256, "changed": changed, "message": message })),
    )
        .into_response()
}

/// Who a stored version was uploaded by: the actor the request was
/// authenticated as, and what the client says (`X-Uploaded-By`, e.g. a CI
/// job) after it, never instead of it.
fn uploader(actor: &str, headers: &HeaderMap) -> String {
    let says = headers.get("x-uploaded-by").and_then(|v| v.to_str().ok()).filter(|s| !s.is_empty() && *s != actor);
    match says {
        Some(says) => format!("{actor} (as {})", crate::text::shown(says, 100)),
        None => actor.to_owned(),
    }
}

/// `?version=N`, read by hand so that every wrong value is answered 400
/// with what was wrong (the OpenAPI document's range: 1 to 2³¹ − 1).
fn version(query: &[(String, String)]) -> Result<i32, String> {
    let mut given = query.iter().filter(|(k, _)| k == "version").map(|(_, v)| v.as_str());
    let (Some(text), None) = (given.next(), given.next()) else {
        return Err("name the version to activate once: `?version=N`".into());
    };
    match text.parse::<i64>() {
        Ok(v) if (1..=i64::from(i32::MAX)).contains(&v) => i32::try_from(v).map_err(|e| e.to_string()),
        Ok(v) => Err(format!("version {v} is out of range: versions are 1 to {}", i32::MAX)),
        Err(e) if matches!(e.kind(), IntErrorKind::PosOverflow | IntErrorKind::NegOverflow) => {
            Err(format!("version {text} is out of range: versions are 1 to {}", i32::MAX))
        }
        Err(_) => Err(format!("version `{text}` is not a whole number (versions are 1 to {})", i32::MAX)),
    }
}

/// Activates a stored version (a rollback activates an older one).
pub(super) async fn activate(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let Some(slot) = state.slot(&name) else { return unknown(&name) };
    let version = match version(&query) {
        Ok(version) => version,
        Err(message) => return error(StatusCode::BAD_REQUEST, message).into_response(),
    };
    super::activation::activate_version(&state, slot, &name, version).await
}

/// `idem_admin_uploads` while an upload holds its slot.
struct UploadCount<'a>(&'a crate::telemetry::Telemetry);

impl<'a> UploadCount<'a> {
    fn new(telemetry: &'a crate::telemetry::Telemetry) -> Self {
        telemetry.listener().uploads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(telemetry)
    }
}

impl Drop for UploadCount<'_> {
    fn drop(&mut self) {
        self.0.listener().uploads.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::version;

    #[test]
    fn a_version_is_one_whole_number_from_1_to_i32_max() {
        let query = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        assert_eq!(version(&query(&[("version", "1")])), Ok(1));
        assert_eq!(version(&query(&[("note", "x"), ("version", "2147483647")])), Ok(i32::MAX));
        for (value, says) in [
            ("0", "version 0 is out of range: versions are 1 to 2147483647"),
            ("-1", "version -1 is out of range"),
            ("2147483648", "version 2147483648 is out of range"),
            ("99999999999999999999", "version 99999999999999999999 is out of range"),
            ("1.5", "`1.5` is not a whole number"),
            ("", "`` is not a whole number"),
        ] {
            let err = version(&query(&[("version", value)])).expect_err(value);
            assert!(err.contains(says), "{value}: {err}");
        }
        assert!(version(&query(&[])).is_err_and(|e| e.contains("`?version=N`")));
        assert!(version(&query(&[("version", "1"), ("version", "2")])).is_err_and(|e| e.contains("once")));
    }
}
