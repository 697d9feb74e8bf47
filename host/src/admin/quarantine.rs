//! `GET /handlers/{name}/quarantine`, `POST /handlers/{name}/quarantine/release`
//! and `POST /handlers/{name}/quarantine/dead-letter` (the console mounts
//! all three): a handler's parked keys with their first failure, and an
//! operator's release of one (its events run again, in order, each once)
//! or its dead-lettering (`pipeline::quarantine`). The audit trail
//! records both, with who asked and why.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;

use super::access::Actor;
use super::{AdminState, audit, body, routes};
use crate::pipeline::quarantine::operate::{self, Refused};

/// The longest reason kept.
const MAX_REASON: usize = 500;
/// Keys a listing shows at most.
const MAX_LISTED: i64 = 1_000;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/quarantine", get(list))
        .route("/handlers/{name}/quarantine/release", post(release))
        .route("/handlers/{name}/quarantine/dead-letter", post(dead_letter))
        .with_state(state)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Listing {
    #[serde(default)]
    limit: Option<i64>,
}

/// What a release or a dead-lettering names: one key, as text or exactly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    key_base64: Option<String>,
    /// How many events the operator was shown: refused (409) if the key
    /// holds another number now.
    #[serde(default)]
    events: Option<i64>,
    #[serde(default)]
    reason: String,
}

impl Asked {
    fn key(&self) -> Result<Vec<u8>, String> {
        match (&self.key, &self.key_base64) {
            (Some(text), None) => Ok(text.as_bytes().to_vec()),
            (None, Some(b64)) => {
                // Padded, as listed; stray bits after the last byte are not
                // worth a refusal.
                let config = base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true);
                base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, config)
                    .decode(b64)
                    .map_err(|e| format!("key_base64 is not base64: {e}"))
            }
            _ => Err("name the key by exactly one of key (its text) and key_base64 (its bytes)".into()),
        }
    }
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    routes::error(status, message).into_response()
}

/// The handler's pipeline on this host, or the 404 naming it.
fn handler(state: &AdminState, name: &str) -> Result<std::sync::Arc<crate::pipeline::HandlerContext>, Box<Response>> {
    let desk = state
        .dead_letters
        .desk(name)
        .ok_or_else(|| Box::new(refused(StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host"))))?;
    Ok(desk.parts().1)
}

/// The parked keys, oldest first, and the quarantine's totals.
pub(super) async fn list(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    listing: Result<Query<Listing>, QueryRejection>,
) -> Response {
    let shared = match handler(&state, &name) {
        Ok(shared) => shared,
        Err(refusal) => return *refusal,
    };
    let Query(listing) = match listing {
        Ok(listing) => listing,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let limit = listing.limit.unwrap_or(100);
    if !(1..=MAX_LISTED).contains(&limit) {
        return refused(StatusCode::BAD_REQUEST, format!("limit {limit}: between 1 and {MAX_LISTED}"));
    }
    match operate::list(&state.pool, &name, limit).await {
        Ok((keys, totals)) => {
            let on = shared.quarantine.on();
            Json(json!({ "quarantines": on, "keys": keys, "totals": totals })).into_response()
        }
        Err(e) => routes::database(&e),
    }
}

/// A release's or a dead-lettering's body, checked: the key and the reason.
async fn read(state: &AdminState, body: Body) -> Result<(Vec<u8>, Option<i64>, String), Response> {
    let asked: Asked = body::json(body, state.body_timeout).await?;
    if asked.reason.chars().count() > MAX_REASON {
        return Err(refused(StatusCode::BAD_REQUEST, format!("reason is longer than {MAX_REASON} characters")));
    }
    let key = asked.key().map_err(|e| refused(StatusCode::BAD_REQUEST, e))?;
    Ok((key, asked.events, asked.reason))
}

fn shown(key: &[u8]) -> String {
    crate::text::controls_escaped(&String::from_utf8_lossy(key), 200)
}

pub(super) async fn release(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Response {
    if let Err(refusal) = handler(&state, &name) {
        return *refusal;
    }
    let (key, expected, reason) = match read(&state, body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    match operate::release(&state.pool, &name, &key, expected).await {
        Ok(events) => {
            tracing::info!(actor = %actor.name, %reason, key = %shown(&key), events, "quarantined key of `{name}` released");
            let message = format!("released key `{}`: its {events} event(s) run again, in order", shown(&key));
            let detail = audit::Detail(json!({ "key": shown(&key), "events": events, "reason": reason }));
            (Extension(detail), Json(json!({ "released": true, "events": events, "message": message }))).into_response()
        }
        Err(e) => refusal(&name, &key, e),
    }
}

/// An act on a key refused: 404 not parked, 409 busy or changed, 503.
fn refusal(name: &str, key: &[u8], e: Refused) -> Response {
    match e {
        Refused::NotParked => refused(StatusCode::NOT_FOUND, format!("key `{}` of `{name}` is not parked", shown(key))),
        e @ (Refused::Busy | Refused::Changed { .. } | Refused::Stopped { .. }) => {
            refused(StatusCode::CONFLICT, e.to_string())
        }
        e @ Refused::Failed(_) => refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

pub(super) async fn dead_letter(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Response {
    let shared = match handler(&state, &name) {
        Ok(shared) => shared,
        Err(refusal) => return *refusal,
    };
    let (key, expected, reason) = match read(&state, body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    match operate::dead_letter_key(&shared, &key, expected, &actor.name).await {
        Ok(sent) => {
            tracing::info!(actor = %actor.name, %reason, key = %shown(&key), sent, "quarantined key of `{name}` dead-lettered");
            let message = format!("dead-lettered key `{}`: {sent} event(s) went to the dead-letter topic", shown(&key));
            let detail = audit::Detail(json!({ "key": shown(&key), "events": sent, "reason": reason }));
            (Extension(detail), Json(json!({ "dead_lettered": sent, "message": message }))).into_response()
        }
        Err(e) => refusal(&name, &key, e),
    }
}
