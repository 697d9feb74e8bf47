//! A handler's shadow version over the API (`crate::shadow`): stored by an
//! upload with `?shadow=true` (`idem deploy --shadow`), its report at
//! `GET /handlers/{name}/shadow`, made active by
//! `POST /handlers/{name}/shadow/activate` (`idem deploy --activate-shadow`),
//! ended by `DELETE /handlers/{name}/shadow`. Every host follows the store
//! within seconds (`modules::watch`); the audit trail records each change.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde_json::json;

use super::AdminState;
use super::answer::{database, error};
use super::audit::Detail;
use crate::modules::Slot;
use crate::modules::store::{self, Shadowed, Upload};
use crate::runtime::Handler;
use crate::shadow::report;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/shadow", get(show).delete(end))
        .route("/handlers/{name}/shadow/activate", post(activate))
        .with_state(state)
}

fn unknown(name: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")).into_response()
}

/// Stores a validated upload as `slot`'s shadow version; this host runs it
/// from its next batch, the others within seconds.
pub(super) async fn store(state: &AdminState, slot: &Slot, upload: &Upload<'_>, handler: Handler) -> Response {
    let name = upload.handler;
    let (version, new) = match store::store_as_shadow(&state.pool, upload).await {
        Ok(Shadowed::Shadow { version, new }) => (version, new),
        Ok(Shadowed::Active(version)) => {
            let message = format!("identical to the active version {version}: there is nothing to compare it with");
            return error(StatusCode::CONFLICT, message).into_response();
        }
        Err(e) => return database(&e),
    };
    slot.install_shadow(&handler.with_version(version));
    let active = slot.version();
    let stored =
        if new { format!("stored as version {version}") } else { format!("version {version} (stored before)") };
    let message = match active {
        Some(active) => format!("{stored}; it runs as a shadow beside version {active}"),
        None => format!("{stored}; it runs as a shadow"),
    };
    tracing::info!(handler = %name, version, sha256 = %upload.sha256, uploaded_by = %upload.uploaded_by, "{message}");
    let detail = Detail(json!({ "version": version, "sha256": upload.sha256, "shadow": true }));
    let status = if new { StatusCode::CREATED } else { StatusCode::OK };
    let body = json!({ "handler": name, "version": version, "sha256": upload.sha256, "changed": true, "shadow": true, "message": message });
    (status, Extension(detail), Json(body)).into_response()
}

/// The shadow report: per event type agree, differ and skipped, and the
/// first differing events with both sides; `"shadow": null` when the
/// handler has no shadow version.
pub(super) async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    if state.slot(&name).is_none() {
        return unknown(&name);
    }
    match report::read(&state.pool, &name).await {
        Ok(report) => Json(json!({ "handler": name, "shadow": report })).into_response(),
        Err(e) => database(&e),
    }
}

/// Makes the shadow version active.
pub(super) async fn activate(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(slot) = state.slot(&name) else { return unknown(&name) };
    match store::shadow_version(&state.pool, &name).await {
        Ok(Some((version, _))) => super::activation::activate_version(&state, slot, &name, version).await,
        Ok(None) => no_shadow(&name),
        Err(e) => database(&e),
    }
}

/// Ends the shadow run (its report is kept until the version is shadowed
/// again).
pub(super) async fn end(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(slot) = state.slot(&name) else { return unknown(&name) };
    match store::stop_shadow(&state.pool, &name).await {
        Ok(Some(version)) => {
            slot.end_shadow();
            let message = format!("version {version} no longer runs as a shadow");
            let body = json!({ "handler": name, "version": version, "message": message });
            (Extension(Detail(json!({ "version": version }))), Json(body)).into_response()
        }
        Ok(None) => no_shadow(&name),
        Err(e) => database(&e),
    }
}

fn no_shadow(name: &str) -> Response {
    let message = format!("handler `{name}` has no shadow version (`idem deploy --shadow` stores one)");
    error(StatusCode::NOT_FOUND, message).into_response()
}
