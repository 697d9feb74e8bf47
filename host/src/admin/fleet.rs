//! `GET /fleet`: the whole group as its hosts record it
//! (`telemetry::fleet`): every host with its health, version and console,
//! every partition with the host that owns it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AdminState;
use super::routes::error;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new().route("/fleet", axum::routing::get(fleet)).with_state(state)
}

/// The fleet's JSON; the console mounts it behind its guard too.
pub(super) async fn fleet(State(state): State<AdminState>) -> Response {
    match crate::telemetry::fleet::read(&state.pool).await {
        Ok(fleet) => Json(fleet).into_response(),
        Err(e) => {
            tracing::error!("admin API: the database failed reading the fleet: {e}");
            error(StatusCode::SERVICE_UNAVAILABLE, format!("the database failed: {e}")).into_response()
        }
    }
}
