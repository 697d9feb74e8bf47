//! `GET /handlers/{name}/captures?limit=N`: the handler's newest captured
//! events (`crate::capture`, `[handler.capture]`), redacted as stored,
//! oldest first: what `idem test --from-capture` replays. Readable with
//! the `read` scope, as dead letters are: what must not be shown to a
//! reader is redacted when it is captured.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use super::AdminState;
use super::answer::{database, error};

/// Captures one answer holds at most.
pub(crate) const MAX_LIMIT: i64 = 1_000;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new().route("/handlers/{name}/captures", get(show)).with_state(state)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Asked {
    limit: Option<i64>,
}

pub(super) async fn show(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    asked: Result<Query<Asked>, QueryRejection>,
) -> Response {
    let Query(asked) = match asked {
        Ok(asked) => asked,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    if !state.telemetry.handlers().iter().any(|h| h.name == name) {
        return error(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")).into_response();
    }
    let limit = asked.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return error(StatusCode::BAD_REQUEST, format!("limit = {limit}: ask for 1 to {MAX_LIMIT} captures"))
            .into_response();
    }
    match crate::capture::latest(&state.pool, &name, limit).await {
        Ok(captures) => Json(json!({ "handler": name, "captures": captures })).into_response(),
        Err(e) => database(&e),
    }
}
