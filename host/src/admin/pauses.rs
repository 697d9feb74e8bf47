//! `GET /handlers/{name}/pauses`, `POST /handlers/{name}/pause` and
//! `POST /handlers/{name}/resume` (the console mounts all three): an
//! operator's pause of a handler, of its topic or of one partition, which
//! every host of the group obeys within seconds, across restarts and
//! rebalances (`pipeline::pauses`), and its lifting. The audit trail
//! records both, with who asked and why.

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
use crate::pipeline::pauses::{self, Scope};

/// The longest reason kept.
const MAX_REASON: usize = 500;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/pauses", get(show))
        .route("/handlers/{name}/pause", post(pause))
        .route("/handlers/{name}/resume", post(resume))
        .with_state(state)
}

/// What a pause or a resume asks: its scope and, for a pause, why.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    reason: String,
}

impl Asked {
    fn scope(&self) -> Scope {
        Scope { topic: self.topic.clone(), partition: self.partition }
    }
}

/// The scope's key for `name`, or the refusal naming what is wrong: an
/// unknown handler or a topic it does not consume (404), a bad partition
/// (400).
fn key_of(state: &AdminState, name: &str, scope: &Scope) -> Result<(String, i32), (StatusCode, String)> {
    let Some(desk) = state.dead_letters.desk(name) else {
        return Err((StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")));
    };
    // A partition alone is one of the topic the handler consumes.
    let mut scope = scope.clone();
    if scope.partition.is_some() {
        scope.topic.get_or_insert_with(|| desk.topic().to_owned());
    }
    let key = scope.key().map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    if !key.0.is_empty() && key.0 != desk.topic() {
        // No such topic of this handler: what the request names is not there.
        return Err((StatusCode::NOT_FOUND, format!("`{name}` consumes `{}`, not `{}`", desk.topic(), key.0)));
    }
    Ok(key)
}

fn refused((status, message): (StatusCode, String)) -> Response {
    routes::error(status, message).into_response()
}

/// A pause's or a resume's body, and its scope's key.
async fn read(state: &AdminState, name: &str, body: Body) -> Result<(Asked, (String, i32)), Response> {
    let asked: Asked = body::json(body, state.body_timeout).await?;
    let key = key_of(state, name, &asked.scope()).map_err(refused)?;
    Ok((asked, key))
}

/// The handler's pauses, oldest first, as the database holds them.
pub(super) async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    if let Err(refusal) = key_of(&state, &name, &Scope::default()) {
        return refused(refusal);
    }
    match pauses::read(&state.pool).await {
        Ok(all) => {
            Json(json!({ "pauses": all.into_iter().filter(|p| p.handler == name).collect::<Vec<_>>() })).into_response()
        }
        Err(e) => routes::database(&e),
    }
}

pub(super) async fn pause(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Response {
    let (asked, key) = match read(&state, &name, body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    if asked.reason.chars().count() > MAX_REASON {
        let message = format!("reason is longer than {MAX_REASON} characters");
        return routes::error(StatusCode::BAD_REQUEST, message).into_response();
    }
    let (shown, scope) = (shown(&name, &key), scope_of(&key));
    match pauses::pause(&state.pool, &name, key, &asked.reason, &actor.name).await {
        Ok(new) => {
            tracing::info!(actor = %actor.name, reason = %asked.reason, "paused {shown}");
            let message = if new {
                format!("paused {shown}: every host holds it within {} s", 2 * pauses::REFRESH.as_secs())
            } else {
                format!("{shown} was paused already")
            };
            let detail = audit::Detail(json!({ "scope": scope, "reason": asked.reason, "new": new }));
            (Extension(detail), Json(json!({ "paused": new, "message": message }))).into_response()
        }
        Err(e) => routes::database(&e),
    }
}

pub(super) async fn resume(State(state): State<AdminState>, Path(name): Path<String>, body: Body) -> Response {
    let (_, key) = match read(&state, &name, body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    let shown = shown(&name, &key);
    let (topic, partition) = key.clone();
    let lifted = match pauses::resume(&state.pool, &name, key).await {
        Ok(n) => n,
        Err(e) => return routes::database(&e),
    };
    // A broader pause (of the topic, of the handler) still holds it.
    let still = match pauses::read(&state.pool).await {
        Ok(all) => all.into_iter().filter(|p| p.covers(&name, &topic, partition.max(0))).collect::<Vec<_>>(),
        Err(e) => return routes::database(&e),
    };
    let message = match (lifted, still.is_empty()) {
        (0, true) => format!("{shown} was not paused"),
        (n, true) => format!(
            "resumed {shown} ({n} pause(s) lifted): every host runs it again within {} s",
            2 * pauses::REFRESH.as_secs()
        ),
        (n, false) => format!("{n} pause(s) lifted, but {shown} is still held by a broader pause: resume that one"),
    };
    let detail = audit::Detail(json!({ "scope": scope_of(&(topic, partition)), "lifted": lifted }));
    (Extension(detail), Json(json!({ "lifted": lifted, "still_held_by": still, "message": message }))).into_response()
}

/// A key as the scope it stands for (the handler's own topic filled in
/// for a partition named alone), for the audit trail.
fn scope_of((topic, partition): &(String, i32)) -> Scope {
    Scope { topic: (!topic.is_empty()).then(|| topic.clone()), partition: (*partition >= 0).then_some(*partition) }
}

/// `billing`, `billing's orders` or `billing's orders/3`.
fn shown(name: &str, (topic, partition): &(String, i32)) -> String {
    match (topic.as_str(), *partition) {
        ("", _) => format!("`{name}`"),
        (t, -1) => format!("`{name}`'s {t}"),
        (t, p) => format!("`{name}`'s {t}/{p}"),
    }
}
