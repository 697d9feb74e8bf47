//! Making a stored version active on this host after checking it here
//! (`POST /handlers/{name}/activate`, `POST /handlers/{name}/shadow/activate`),
//! and the answer to a module this host refuses.

use axum::Extension;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AdminState;
use super::answer::{database, error};
use super::audit::Detail;
use crate::modules::store;
use crate::modules::{Slot, UploadError};

/// Checks `name`'s stored `version` on this host and makes it active (a
/// shadow version stops being one); this host switches at once.
pub(super) async fn activate_version(state: &AdminState, slot: &Slot, name: &str, version: i32) -> Response {
    // Checked again before it is made active: this host's limits may differ
    // from those of the host it was uploaded to.
    let bytes: Option<Vec<u8>> =
        match sqlx::query_scalar("SELECT bytes FROM idem.handler_module WHERE handler = $1 AND version = $2")
            .bind(name)
            .bind(version)
            .fetch_optional(&state.pool)
            .await
        {
            Ok(bytes) => bytes,
            Err(e) => return database(&e),
        };
    let Some(bytes) = bytes else {
        return error(StatusCode::NOT_FOUND, format!("handler `{name}` has no version {version}")).into_response();
    };
    let handler = match slot.validate(&bytes, &format!("{name} version {version}")).await {
        Ok(handler) => handler,
        Err(e) => return refused(&e),
    };
    match store::activate(&state.pool, name, version).await {
        Ok(true) => {}
        Ok(false) => {
            return error(StatusCode::NOT_FOUND, format!("handler `{name}` has no version {version}")).into_response();
        }
        Err(e) => return database(&e),
    }
    slot.install(handler.with_version(version)).await;
    if slot.shadow().is_some_and(|s| s.version() == version) {
        slot.end_shadow();
    }
    // An activation ends the canary (`store::switch`).
    slot.end_canary();
    tracing::info!(handler = %name, version, "module version activated");
    let body = json!({ "handler": name, "version": version, "message": format!("version {version} is active") });
    (Extension(Detail(json!({ "version": version }))), Json(body)).into_response()
}

/// A refused module, with the status that says whose problem it is.
pub(super) fn refused(e: &UploadError) -> Response {
    let status = match e {
        UploadError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        UploadError::Native(_) => StatusCode::CONFLICT,
        UploadError::Invalid(_) | UploadError::Instantiation(_) => StatusCode::UNPROCESSABLE_ENTITY,
        UploadError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string()).into_response()
}
