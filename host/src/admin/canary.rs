//! A handler's canary over the API (`modules::canary`): stored by an upload
//! with `?canary=N` (`idem deploy --canary N%`), shown at `GET
//! /handlers/{name}/canary` (with this host's counts per version and how
//! the last canaries ended), made active by `POST
//! /handlers/{name}/canary/promote`, ended by `DELETE
//! /handlers/{name}/canary`. Every host follows the store within seconds
//! (`modules::watch`); the audit trail records each change.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde_json::json;

use super::AdminState;
use super::access::Actor;
use super::answer::{database, error};
use super::audit::Detail;
use crate::modules::Slot;
use crate::modules::canaries::{self, Canaried};
use crate::modules::store::Upload;
use crate::runtime::Handler;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/canary", get(show).delete(abort))
        .route("/handlers/{name}/canary/promote", post(promote))
        .with_state(state)
}

fn unknown(name: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")).into_response()
}

/// A share that is not 1 to 99 (400), or asked with `shadow` (409): the refusal.
pub(super) fn refused_share(canary: Option<u8>, shadow: bool) -> Option<Response> {
    let (status, message) = match canary {
        Some(p) if !(1..=99).contains(&p) => {
            (StatusCode::BAD_REQUEST, format!("canary = {p}: a canary takes 1 to 99 percent of the keys"))
        }
        // Each alone is a valid ask; together they contradict each other.
        Some(_) if shadow => (StatusCode::CONFLICT, "an upload is a shadow or a canary, not both".to_owned()),
        _ => return None,
    };
    Some(error(status, message).into_response())
}

/// Stores a validated upload as `slot`'s canary for `percent` of its keys;
/// this host runs it from its next batch, the others within seconds.
pub(super) async fn store(
    state: &AdminState,
    slot: &Slot,
    upload: &Upload<'_>,
    handler: Handler,
    percent: u8,
) -> Response {
    let name = upload.handler;
    let (version, new) = match canaries::store_as_canary(&state.pool, upload, i16::from(percent)).await {
        Ok(Canaried::Canary { version, new }) => (version, new),
        Ok(Canaried::Active(version)) => {
            let message = format!("identical to the active version {version}: there is nothing to try");
            return error(StatusCode::CONFLICT, message).into_response();
        }
        Err(e) => return database(&e),
    };
    slot.install_canary(&handler.with_version(version), percent);
    let stored =
        if new { format!("stored as version {version}") } else { format!("version {version} (stored before)") };
    let active = slot.version().map_or_else(String::new, |v| format!("; the rest stay on version {v}"));
    let message = format!("{stored}; it runs {percent}% of the keys{active}");
    tracing::info!(handler = %name, version, percent, uploaded_by = %upload.uploaded_by, "{message}");
    let detail = Detail(json!({ "version": version, "sha256": upload.sha256, "canary": percent }));
    let status = if new { StatusCode::CREATED } else { StatusCode::OK };
    let body = json!({ "handler": name, "version": version, "sha256": upload.sha256, "changed": true,
        "canary": percent, "message": message });
    (status, Extension(detail), Json(body)).into_response()
}

/// The canary (`null`: none), this host's executions per version since it
/// loaded it, and how the last canaries ended.
pub(super) async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(slot) = state.slot(&name) else { return unknown(&name) };
    let (row, verdicts) =
        match (canaries::canary(&state.pool, &name).await, canaries::verdicts(&state.pool, &name).await) {
            (Ok(row), Ok(verdicts)) => (row, verdicts),
            (Err(e), _) | (_, Err(e)) => return database(&e),
        };
    let running = slot.canary().map(|c| json!({ "version": c.version(), "percent": c.percent() }));
    Json(json!({ "handler": name, "canary": row, "running_here": running, "counts": slot.counts(), "verdicts": verdicts }))
        .into_response()
}

/// Makes the canary the active version: checked on this host first, then
/// promoted only if it is still the canary (a host may have rolled it back
/// meanwhile: 409).
pub(super) async fn promote(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let (slot, row) = match current(&state, &name).await {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let version = row.version;
    let bytes = match canaries::bytes(&state.pool, &name, version).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return no_canary(&name),
        Err(e) => return database(&e),
    };
    let handler = match slot.validate(&bytes, &format!("{name} version {version}")).await {
        Ok(handler) => handler,
        Err(e) => return super::activation::refused(&e),
    };
    match canaries::promote(&state.pool, &name, version, &actor.name).await {
        Ok(true) => {}
        Ok(false) => {
            let message =
                format!("version {version} is no longer the canary (rolled back or replaced): nothing changed");
            return error(StatusCode::CONFLICT, message).into_response();
        }
        Err(e) => return database(&e),
    }
    slot.install(handler.with_version(version)).await;
    slot.end_canary();
    tracing::info!(handler = %name, version, "canary promoted");
    let body = json!({ "handler": name, "version": version, "message": format!("version {version} is active") });
    (Extension(Detail(json!({ "version": version }))), Json(body)).into_response()
}

/// Ends the canary: every key back on the active version.
pub(super) async fn abort(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let (slot, row) = match current(&state, &name).await {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let why = format!("aborted by {}", actor.name);
    match canaries::end(&state.pool, &name, row.version, "aborted", &why, &actor.name).await {
        Ok(true) => {
            slot.end_canary();
            let message =
                format!("version {} no longer runs as a canary: every key is on the active version", row.version);
            let body = json!({ "handler": name, "version": row.version, "message": message });
            (Extension(Detail(json!({ "version": row.version }))), Json(body)).into_response()
        }
        Ok(false) => no_canary(&name),
        Err(e) => database(&e),
    }
}

/// `name`'s slot on this host and its canary, or the refusal.
async fn current<'a>(state: &'a AdminState, name: &str) -> Result<(&'a Slot, canaries::CanaryRow), Response> {
    let Some(slot) = state.slot(name) else { return Err(unknown(name)) };
    match canaries::canary(&state.pool, name).await {
        Ok(Some(row)) => Ok((slot, row)),
        Ok(None) => Err(no_canary(name)),
        Err(e) => Err(database(&e)),
    }
}

fn no_canary(name: &str) -> Response {
    let message = format!("handler `{name}` has no canary (`idem deploy --canary N%` stores one)");
    error(StatusCode::NOT_FOUND, message).into_response()
}
