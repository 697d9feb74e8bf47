//! How the admin API and the console answer a refusal: `{"error": …}`
//! with the status, the message naming what was wrong.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// `{"error": message}` with `status`.
pub(super) fn error(status: StatusCode, message: impl Into<String>) -> (StatusCode, Json<serde_json::Value>) {
    (status, Json(json!({ "error": message.into() })))
}

/// A database failure: 503 (the request may be tried again), logged.
pub(super) fn database(e: &sqlx::Error) -> Response {
    tracing::error!("admin API: the database failed: {e}");
    error(StatusCode::SERVICE_UNAVAILABLE, format!("the database failed: {e}")).into_response()
}
