//! The console's own JSON routes: login, the live pages (rendered by the
//! sampler), and the dead-letter pages and replays. Deploys and
//! activations are the admin API's handlers (`routes`), mounted under
//! `/console/api/` behind the console's guard.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::session::{self, Session};
use crate::admin::{AdminState, audit, body, routes};
use crate::pipeline::replay::PageQuery;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    token: String,
}

/// Exchanges a token for a session cookie.
pub(super) async fn login(
    State(state): State<AdminState>,
    peer: Option<axum::Extension<crate::admin::Peer>>,
    body: Body,
) -> Response {
    let peer = peer.map(|axum::Extension(p)| p.0);
    let console = &state.console;
    if !state.tokens.any() {
        let message = "the console needs a token: start the host with $IDEM_ADMIN_TOKEN (scope operate) or \
                       $IDEM_ADMIN_READ_TOKEN (scope read) set ([admin] token_env, read_token_env)";
        return routes::error(StatusCode::FORBIDDEN, message).into_response();
    }
    let login: Login = match body::json(body, state.body_timeout).await {
        Ok(login) => login,
        Err(refusal) => return refusal,
    };
    // The right token is let in whatever others tried (see `session`).
    let (actor, named) = match state.tokens.actor_of(&login.token) {
        Some(actor) => (Some(actor), None),
        None => match state.operators.lookup(&login.token).await {
            Ok(named) => {
                let digest = crate::admin::access::sha256(&login.token);
                (named, Some(digest))
            }
            Err(e) => {
                tracing::warn!(peer = ?peer, "console: an operator's token could not be checked: {e:#}");
                let message = format!("cannot check this token now: {e}");
                return routes::error(StatusCode::SERVICE_UNAVAILABLE, message).into_response();
            }
        },
    };
    let Some(actor) = actor else {
        tracing::warn!(peer = ?peer, "console: a login with a wrong token");
        if console.sessions.failed(peer) {
            let message = "wrong token, and too many wrong tokens from this address: wrong tries are slowed for a \
                           minute (the right token is always let in)";
            return routes::error(StatusCode::TOO_MANY_REQUESTS, message).into_response();
        }
        return routes::error(StatusCode::UNAUTHORIZED, "wrong token").into_response();
    };
    let (id, session) = console.sessions.start(actor.clone(), named);
    tracing::info!(actor = %actor.name, scope = actor.scope.as_str(), "console: logged in");
    let entry = audit::Entry {
        actor: &actor,
        via: audit::Via::Console,
        peer: peer.map(|p| p.to_string()),
        action: "POST /console/api/login".into(),
        handler: None,
        status: StatusCode::OK,
        detail: None,
    };
    audit::write(&state.pool, &state.host(), &entry).await;
    let cookie = format!(
        "{}={id}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={}{}",
        session::COOKIE,
        session::LIFETIME.as_secs(),
        console.secure_attribute()
    );
    let body = json!({ "scope": session.scope, "csrf": session.csrf, "actor": &*session.actor.name });
    let mut response = Json(body).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

pub(super) async fn logout(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(id) = session::cookie(&headers) {
        state.console.sessions.end(id);
    }
    let gone = format!(
        "{}=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0{}",
        session::COOKIE,
        state.console.secure_attribute()
    );
    let mut response = Json(json!({ "message": "logged out" })).into_response();
    if let Ok(value) = HeaderValue::from_str(&gone) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The session the cookie names: its scope and CSRF token (read by the
/// page after a reload; another site's page cannot read it).
pub(super) async fn current(axum::Extension(session): axum::Extension<Session>) -> Response {
    Json(json!({ "scope": session.scope, "csrf": session.csrf, "actor": &*session.actor.name })).into_response()
}

fn cached(bytes: axum::body::Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

pub(super) async fn overview(State(state): State<AdminState>) -> Response {
    let rendered = state.console.rendered();
    if rendered.overview.is_empty() {
        return cached(axum::body::Bytes::from_static(b"{\"handlers\":[]}"));
    }
    cached(rendered.overview)
}

/// `?range=`: `10m` (the default), `1h` or `24h`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChartQuery {
    range: Option<String>,
}

/// A handler's lag and throughput over `range`, and when its lag drains.
pub(super) async fn history(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    query: Result<Query<ChartQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let asked = match &query {
        Ok(Query(q)) => q.range.as_deref().unwrap_or("10m"),
        Err(e) => return routes::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    let Some(i) = super::series::Range::ALL.iter().position(|r| r.name() == asked) else {
        let message = format!("range: `{}` is not one: 10m, 1h or 24h", crate::text::shown(asked, 40));
        return routes::error(StatusCode::BAD_REQUEST, message).into_response();
    };
    match state.console.rendered().charts.remove(&name) {
        Some(mut charts) if i < charts.len() => cached(charts.swap_remove(i)),
        _ => not_rendered(&state, &name),
    }
}

pub(super) async fn handler(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    match state.console.rendered().handlers.remove(&name) {
        Some(page) => cached(page),
        None => not_rendered(&state, &name),
    }
}

/// Why nothing is rendered for `name`: not sampled yet, or no such handler.
fn not_rendered(state: &AdminState, name: &str) -> Response {
    if state.slot(name).is_some() {
        return routes::error(StatusCode::SERVICE_UNAVAILABLE, "not sampled yet").into_response();
    }
    let message = format!("no handler `{}` runs on this host", crate::text::shown(name, 100));
    routes::error(StatusCode::NOT_FOUND, message).into_response()
}

/// `?before=0:123,1:456&since=…&until=…&class=…&limit=…`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadLetterQuery {
    before: Option<String>,
    since: Option<chrono::DateTime<chrono::Utc>>,
    until: Option<chrono::DateTime<chrono::Utc>>,
    class: Option<String>,
    limit: Option<usize>,
}

fn positions(text: &str) -> Result<BTreeMap<i32, i64>, String> {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (p, o) = pair.split_once(':').ok_or_else(|| format!("`{pair}` is not partition:offset"))?;
            Ok((
                p.parse().map_err(|_| format!("`{p}` is not a partition"))?,
                o.parse().map_err(|_| format!("`{o}` is not an offset"))?,
            ))
        })
        .collect()
}

/// A page of the handler's DLQ, newest first.
pub(super) async fn dead_letters(
    State(state): State<AdminState>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    query: Result<Query<DeadLetterQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Some(desk) = state.dead_letters.desk(&name) else {
        return routes::error(
            StatusCode::NOT_FOUND,
            format!("no handler `{}` runs on this host", crate::text::shown(&name, 100)),
        )
        .into_response();
    };
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => return routes::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    let before = match q.before.as_deref().map(positions).transpose() {
        Ok(before) => before.unwrap_or_default(),
        Err(e) => return routes::error(StatusCode::BAD_REQUEST, format!("before: {e}")).into_response(),
    };
    let reading = match state.console.reading.take(session.scope, session.id).await {
        Ok(share) => share,
        Err(refused) => return super::explorer::no_turn(refused),
    };
    let query = PageQuery { before, since: q.since, until: q.until, class: q.class, limit: q.limit };
    match desk.page(query, reading).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => routes::error(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")).into_response(),
    }
}
