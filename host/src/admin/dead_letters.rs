//! `GET /handlers/{name}/dead-letters`: a handler's dead letters searched
//! in the dead-letter index (`pipeline::dlq::search`), with totals by
//! class and reason pattern, a page of rows and the cursors around it.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AdminState;
use super::routes::error;
use crate::pipeline::dlq::search::{self, Found, Search, SearchError};

/// The answer: the search's result, and how long the database took.
#[derive(Serialize)]
struct Answer {
    handler: String,
    took_ms: f64,
    #[serde(flatten)]
    found: Found,
}

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new().route("/handlers/{name}/dead-letters", axum::routing::get(search)).with_state(state)
}

async fn search(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    query: Result<Query<Search>, QueryRejection>,
) -> Response {
    if state.slot(&name).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")).into_response();
    }
    let Query(wanted) = match query {
        Ok(query) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    let started = std::time::Instant::now();
    match search::search(&state.pool, &name, &wanted).await {
        Ok(found) => {
            let took_ms = started.elapsed().as_secs_f64() * 1e3;
            Json(Answer { handler: name, took_ms, found }).into_response()
        }
        Err(SearchError::Invalid(message)) => error(StatusCode::BAD_REQUEST, message).into_response(),
        Err(SearchError::Database(e)) => {
            tracing::error!("admin API: the database failed searching dead letters: {e}");
            error(StatusCode::SERVICE_UNAVAILABLE, format!("the database failed: {e}")).into_response()
        }
    }
}
