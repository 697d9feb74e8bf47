//! A handler's dead letters, for the admin API and the console: searched
//! in the dead-letter index (`pipeline::dlq::search`), replayed through the
//! running pipeline and discarded (`act`). The console mounts the same
//! handlers behind its guard; `idem dlq search|replay|discard` call them.

mod act;

use std::sync::{Arc, OnceLock};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use tokio::sync::Semaphore;

use super::AdminState;
use super::routes::error;
use crate::pipeline::dlq::search::{self, Found, Search, SearchError};
use crate::pipeline::replay::Desk;
pub(super) use act::{discard, replay};

/// Each handler's DLQ desk, and the replay that runs on this host.
#[derive(Debug)]
pub(crate) struct Desks {
    /// Attached once the pipelines exist (after the listener is bound).
    desks: OnceLock<Vec<Desk>>,
    /// One replay at a time on a host: each holds its records in memory
    /// and runs them through the handler's executor beside live events.
    /// Held by the replay's own task, not by the request a client can drop.
    replaying: Arc<Semaphore>,
}

impl Desks {
    pub(crate) fn new() -> Self {
        Self { desks: OnceLock::new(), replaying: Arc::new(Semaphore::new(1)) }
    }

    /// Gives the API the handlers' DLQ desks (once).
    pub(crate) fn attach(&self, desks: Vec<Desk>) {
        let _ = self.desks.set(desks);
    }

    pub(crate) fn desk(&self, handler: &str) -> Option<&Desk> {
        self.desks.get()?.iter().find(|d| d.handler() == handler)
    }
}

/// The answer: the search's result, and how long the database took.
#[derive(Serialize)]
struct Answer {
    handler: String,
    took_ms: f64,
    #[serde(flatten)]
    found: Found,
}

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/dead-letters", get(search))
        .route("/handlers/{name}/dead-letters/replay", post(replay))
        .route("/handlers/{name}/dead-letters/discard", post(discard))
        .with_state(state)
}

async fn search(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    query: Result<Query<Search>, QueryRejection>,
) -> Response {
    if state.slot(&name).is_none() {
        return unknown(&name);
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
        Err(e) => refused(e),
    }
}

/// A handler this host does not run: 404, its name shown safely.
fn unknown(name: &str) -> Response {
    let message = format!("no handler `{}` runs on this host", crate::text::shown(name, 100));
    error(StatusCode::NOT_FOUND, message).into_response()
}

/// A search's refusal: 400 naming the field, or 503 for the database.
fn refused(e: SearchError) -> Response {
    match e {
        SearchError::Invalid(message) => error(StatusCode::BAD_REQUEST, message).into_response(),
        SearchError::Database(e) => super::answer::database(&e),
    }
}
