//! `GET /handlers/{name}/throttles` and `POST /handlers/{name}/throttle`
//! (the console mounts both): a handler's rates — its events', its
//! destinations' — as configured, as an operator changed them, and how
//! long events and requests waited; and an operator's change of one, which
//! every host applies within about two seconds (`pipeline::throttles`).
//! The audit trail records each change with who made it and why.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::access::Actor;
use super::{AdminState, audit, body, routes};
use crate::pipeline::throttles;
use crate::throttle::EVENTS;

/// The longest reason kept.
const MAX_REASON: usize = 500;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/throttles", get(show))
        .route("/handlers/{name}/throttle", post(change))
        .with_state(state)
}

/// What a change asks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    /// `events`, or a destination host.
    target: String,
    /// Per second; `null` (with `reset` false): no limit.
    #[serde(default)]
    per_second: Option<f64>,
    #[serde(default)]
    burst: Option<u32>,
    /// Back to the config's rate.
    #[serde(default)]
    reset: bool,
    #[serde(default)]
    reason: String,
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    routes::error(status, message).into_response()
}

/// The handler's throttles on this host, or the refusal naming it.
fn throttles_of(
    state: &AdminState,
    name: &str,
) -> Result<std::sync::Arc<crate::throttle::Throttles>, (StatusCode, String)> {
    let desk = state
        .dead_letters
        .desk(name)
        .ok_or((StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")))?;
    Ok(desk.parts().1.slot.executor().throttles().clone())
}

/// What is wrong with a target's name, if anything.
fn check_target(target: &str) -> Result<String, String> {
    let target = target.trim().to_ascii_lowercase();
    let host_like = !target.is_empty()
        && target.len() <= 253
        && target.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
    if target == EVENTS || host_like {
        Ok(target)
    } else {
        Err(format!("target `{target}`: `events`, or a destination host such as api.example.com"))
    }
}

pub(super) async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let throttles = match throttles_of(&state, &name) {
        Ok(throttles) => throttles,
        Err((status, message)) => return refused(status, message),
    };
    let changes = match throttles::read(&state.pool, &name).await {
        Ok(changes) => changes,
        Err(e) => return routes::database(&e),
    };
    let effective: Vec<_> = throttles
        .effective()
        .into_iter()
        .map(|e| {
            json!({ "target": e.target, "in_force": throttles.rate(&e.target), "configured": e.configured,
            "changed": e.changed.is_some(), "waited_seconds": e.waited_seconds })
        })
        .collect();
    Json(json!({ "throttles": effective, "changes": changes })).into_response()
}

pub(super) async fn change(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Response {
    let asked: Asked = match body::json(body, state.body_timeout).await {
        Ok(asked) => asked,
        Err(refusal) => return refusal,
    };
    if let Err((status, message)) = throttles_of(&state, &name) {
        return refused(status, message);
    }
    let target = match check_target(&asked.target) {
        Ok(target) => target,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e),
    };
    if asked.reason.chars().count() > MAX_REASON {
        return refused(StatusCode::BAD_REQUEST, format!("reason is longer than {MAX_REASON} characters"));
    }
    if asked.reset {
        if asked.per_second.is_some() || asked.burst.is_some() {
            return refused(
                StatusCode::BAD_REQUEST,
                "reset goes back to the config's rate: give no per_second or burst",
            );
        }
        return match throttles::reset(&state.pool, &name, &target).await {
            Ok(was) => {
                let message = format!("`{name}` {target}: back to the configured rate on every host within 2 s");
                let detail =
                    audit::Detail(json!({ "target": target, "reset": true, "changed": was, "reason": asked.reason }));
                (Extension(detail), Json(json!({ "changed": was, "message": message }))).into_response()
            }
            Err(e) => routes::database(&e),
        };
    }
    let rate = match asked.per_second {
        Some(per_second) => match crate::config::check_rate("per_second", per_second, asked.burst) {
            Ok(rate) => Some(rate),
            Err(e) => return refused(StatusCode::BAD_REQUEST, e),
        },
        None if asked.burst.is_some() => return refused(StatusCode::BAD_REQUEST, "a burst needs a per_second"),
        None => None,
    };
    if let Err(e) = throttles::set(&state.pool, &name, &target, rate, &asked.reason, &actor.name).await {
        return routes::database(&e);
    }
    let said = rate.map_or("no limit".to_owned(), |r| format!("{} a second (burst {})", r.per_second, r.burst));
    tracing::info!(actor = %actor.name, reason = %asked.reason, "throttle of `{name}` {target}: {said}");
    let message = format!("`{name}` {target}: {said} on every host within 2 s");
    let detail = audit::Detail(json!({ "target": target, "rate": rate, "reason": asked.reason }));
    (Extension(detail), Json(json!({ "changed": true, "message": message }))).into_response()
}
