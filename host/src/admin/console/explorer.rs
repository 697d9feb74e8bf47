//! The dead-letter explorer's routes: the index searched for the page
//! (each search a turn of the session's reading share, as a topic page
//! is).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::session::Session;
use super::shares;
use crate::admin::{AdminState, routes};
use crate::pipeline::dlq::search::{self, Search, SearchError};

/// `GET /console/api/handlers/{name}/dead-letters/search`.
pub(super) async fn search(
    State(state): State<AdminState>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    query: Result<Query<Search>, QueryRejection>,
) -> Response {
    if state.dead_letters.desk(&name).is_none() {
        return unknown(&name);
    }
    let Query(wanted) = match query {
        Ok(query) => query,
        Err(e) => return routes::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    // A looping session waits its turn; another session's page does not.
    let _turn = match state.console.reading.take(session.scope, session.id).await {
        Ok(share) => share,
        Err(refused) => return no_turn(refused),
    };
    let started = std::time::Instant::now();
    match search::search(&state.pool, &name, &wanted).await {
        Ok(found) => {
            let took_ms = started.elapsed().as_secs_f64() * 1e3;
            let mut answer = serde_json::to_value(found).unwrap_or_default();
            answer["took_ms"] = took_ms.into();
            Json(answer).into_response()
        }
        Err(e) => refused(e),
    }
}

/// A session's read of dead letters (a topic page or a search) refused
/// its turn of the reading share.
pub(super) fn no_turn(refused: shares::Refused) -> Response {
    match refused {
        shares::Refused::Pending => {
            let message = "this session has a dead-letter read running and another waiting: wait for them";
            routes::error(StatusCode::TOO_MANY_REQUESTS, message).into_response()
        }
        shares::Refused::Busy => {
            let message = format!(
                "other dead-letter reads were running for {} s (each session reads in turn): try again",
                shares::LONGEST_WAIT.as_secs()
            );
            routes::error(StatusCode::SERVICE_UNAVAILABLE, message).into_response()
        }
    }
}

fn refused(e: SearchError) -> Response {
    match e {
        SearchError::Invalid(message) => routes::error(StatusCode::BAD_REQUEST, message).into_response(),
        SearchError::Database(e) => {
            tracing::error!("console: the database failed searching dead letters: {e}");
            routes::error(StatusCode::SERVICE_UNAVAILABLE, format!("the database failed: {e}")).into_response()
        }
    }
}

fn unknown(name: &str) -> Response {
    let message = format!("no handler `{}` runs on this host", crate::text::shown(name, 100));
    routes::error(StatusCode::NOT_FOUND, message).into_response()
}
