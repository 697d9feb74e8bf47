//! `GET /handlers/{name}/audit`: the ledger audit's figures on this host
//! (`pipeline::audit`, docs/guarantees.md "The ledger audit"): records
//! accounted for, records nothing accounts for, the last clean sweep.
//! Each host audits the partitions it owns; `GET /fleet` names the hosts.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::AdminState;
use super::answer::error;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new().route("/handlers/{name}/audit", get(show)).with_state(state)
}

async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(handler) = state.telemetry.handlers().into_iter().find(|h| h.name == name) else {
        return error(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")).into_response();
    };
    let figures = handler.audit();
    Json(json!({
        "handler": name,
        "host": state.host(),
        "enabled": handler_enabled(&state, &name),
        "checked": figures.checked,
        "unaccounted": figures.unaccounted,
        "clean_at": figures.clean_at,
        "unpublished": figures.unpublished,
    }))
    .into_response()
}

/// Whether `[handler.audit] enabled` is on for `name` on this host.
fn handler_enabled(state: &AdminState, name: &str) -> bool {
    state.dead_letters.desk(name).is_some_and(|desk| desk.parts().1.config.audit.enabled)
}
