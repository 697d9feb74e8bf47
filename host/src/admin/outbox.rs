//! `GET /outbox` and `POST /outbox/redrive` (the console mounts both): the
//! transactional outbox as the group's hosts share it in PostgreSQL, per
//! producer — rows pending and the oldest one's age, published, failed,
//! which host's relay holds the lease — with the failed rows, which an
//! operator makes pending again once the cause is fixed. `idem outbox`
//! reads the same tables with a config instead of a host.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::{AdminState, audit, body, routes};
use crate::outbox::store;

/// Failed rows an answer lists at most (the counts cover them all).
const FAILED_LISTED: i64 = 100;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new().route("/outbox", get(show)).route("/outbox/redrive", post(redrive)).with_state(state)
}

/// `?producer=`: one producer only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Only {
    producer: Option<String>,
}

/// Every producer's counts (this host's, and any other with rows), the
/// failed rows oldest first; of one producer with `?producer=`.
pub(super) async fn show(State(state): State<AdminState>, only: Result<Query<Only>, QueryRejection>) -> Response {
    let Query(only) = match only {
        Ok(only) => only,
        Err(e) => return routes::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    if let Some(refusal) = super::nul::refused_in("producer", only.producer.as_deref()) {
        return refusal;
    }
    let producer = only.producer.as_deref().filter(|p| !p.is_empty());
    let mut summary = match store::summary(&state.pool, &state.producers).await {
        Ok(summary) => summary,
        Err(e) => return routes::database(&e),
    };
    summary.retain(|s| producer.is_none_or(|p| p == s.producer));
    let failed = match store::failed(&state.pool, producer, FAILED_LISTED).await {
        Ok(failed) => failed,
        Err(e) => return routes::database(&e),
    };
    Json(json!({ "producers": summary, "failed": failed })).into_response()
}

/// Which failed rows to make pending again: `ids`, or every failed row
/// (of `producer`, when named).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Redrive {
    producer: Option<String>,
    #[serde(default)]
    ids: Vec<i64>,
    /// Every failed row (of `producer`): said outright, never by an
    /// empty `ids` alone.
    #[serde(default)]
    all: bool,
}

pub(super) async fn redrive(State(state): State<AdminState>, body: Body) -> Response {
    let asked: Redrive = match body::json(body, state.body_timeout).await {
        Ok(asked) => asked,
        Err(refusal) => return refusal,
    };
    if asked.ids.is_empty() != asked.all {
        let message = "give the failed rows' ids, or all: true (every failed row, of producer when named)";
        return routes::error(StatusCode::BAD_REQUEST, message).into_response();
    }
    match store::redrive(&state.pool, asked.producer.as_deref(), &asked.ids).await {
        Ok(n) => {
            tracing::info!(redriven = n, producer = ?asked.producer, "outbox: failed rows made pending again");
            let detail = audit::Detail(json!({ "redriven": n, "producer": asked.producer }));
            (axum::Extension(detail), Json(json!({ "redriven": n }))).into_response()
        }
        Err(e) => routes::database(&e),
    }
}
