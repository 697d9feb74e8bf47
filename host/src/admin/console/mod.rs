//! The operator console: pages served by the admin listener under
//! `/console/`, from files embedded in the binary (`assets/`: plain HTML,
//! CSS and JavaScript, no build step), over a JSON API of its own under
//! `/console/api/`.
//!
//! The admin API refuses browsers (see `admin::authorize`); the console is
//! for them, so it keeps the attacks that refusal stops out by other means:
//! - a login exchanges a token for a session (`session`): an HttpOnly,
//!   SameSite=Strict cookie, so no other site's page sends it;
//! - every change carries the session's CSRF token in `X-CSRF-Token` (a
//!   form on another site cannot set headers) and an `Origin` naming this
//!   console;
//! - `Host` must be a loopback name or one of `[admin] console_hosts`, so a
//!   page whose DNS name was re-pointed here (rebinding) is refused;
//! - a strict Content-Security-Policy (no inline script, no other origin)
//!   and the page renders every guest-controlled text (reasons, payloads,
//!   headers) as text, never as HTML.
//!
//! The session's scope decides what it may do, as a token's does on the API
//! (`access`). Uploads, activations, replays and discards run the API's
//! own handlers (`routes`, `dead_letters`).

mod api;
mod assets;
mod explorer;
mod history;
mod series;
mod session;
mod shares;
mod views;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use tokio::sync::watch;

use super::access::{self, Scope};
use super::{AdminState, audit, dead_letters, routes};
use crate::config::AdminConfig;
use crate::telemetry::Telemetry;

/// The console's state beside the API's.
pub(crate) struct Console {
    sessions: session::Sessions,
    /// `[admin] console_hosts`, lower-cased.
    hosts: Vec<String>,
    telemetry: Arc<Telemetry>,
    /// The live pages, rendered at the last sample.
    rendered: RwLock<views::Rendered>,
    /// DLQ pages read at once, shared fairly (`shares`), each turn held
    /// by the read itself, not by the request, which a client can drop.
    reading: shares::Shares,
    /// `[admin] console_behind_tls`: cookies are `Secure`.
    secure: bool,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

impl Console {
    pub(crate) fn new(config: &AdminConfig, telemetry: Arc<Telemetry>) -> anyhow::Result<Self> {
        for host in &config.console_hosts {
            let fine = !host.is_empty()
                && host.len() <= 260
                && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !fine {
                anyhow::bail!(
                    "[admin] console_hosts: `{}` is not a host name with an optional port (as a browser sends \
                     `Host`: letters, digits, `.`, `-`, `:`, `[`, `]`)",
                    crate::text::shown(host, 100)
                );
            }
        }
        Ok(Self {
            sessions: session::Sessions::default(),
            hosts: config.console_hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            telemetry,
            rendered: RwLock::default(),
            reading: shares::Shares::default(),
            secure: config.console_behind_tls,
        })
    }

    /// The cookies' `Secure` attribute, when the console is behind TLS.
    fn secure_attribute(&self) -> &'static str {
        if self.secure { "; Secure" } else { "" }
    }

    fn host_allowed(&self, host: Option<&HeaderValue>) -> bool {
        access::loopback_host(host)
            || host.and_then(|h| h.to_str().ok()).is_some_and(|h| self.hosts.iter().any(|a| a.eq_ignore_ascii_case(h)))
    }

    /// Samples every handler once a second and renders the live pages,
    /// until `stop`.
    pub(crate) async fn sample(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut histories = history::Histories::default();
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            histories.sample(&self.telemetry.handlers());
            let rendered = views::render(&histories.by_handler);
            *self.rendered.write().unwrap_or_else(|e| e.into_inner()) = rendered;
        }
    }

    fn rendered(&self) -> views::Rendered {
        self.rendered.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/console", get(|| async { axum::response::Redirect::permanent("/console/") }))
        .route("/console/", get(assets::index))
        .route("/console/console.js", get(assets::script))
        .route("/console/console.css", get(assets::style))
        .route("/console/api/login", post(api::login))
        .route("/console/api/logout", post(api::logout))
        .route("/console/api/session", get(api::current))
        .route("/console/api/overview", get(api::overview))
        .route("/console/api/fleet", get(super::fleet::fleet))
        .route("/console/api/audit", get(audit::show))
        .route("/console/api/outbox", get(super::outbox::show))
        .route("/console/api/outbox/redrive", post(super::outbox::redrive))
        .route("/console/api/handlers/{name}/pauses", get(super::pauses::show))
        .route("/console/api/handlers/{name}/pause", post(super::pauses::pause))
        .route("/console/api/handlers/{name}/resume", post(super::pauses::resume))
        .route("/console/api/handlers/{name}/rewind", post(super::rewinds::rewind))
        .route("/console/api/handlers/{name}/rewinds", get(super::rewinds::list))
        .route("/console/api/handlers/{name}/rewinds/{id}", get(super::rewinds::report))
        .route("/console/api/handlers/{name}/throttles", get(super::throttles::show))
        .route("/console/api/handlers/{name}/throttle", post(super::throttles::change))
        .route("/console/api/handlers/{name}/quarantine", get(super::quarantine::list))
        .route("/console/api/handlers/{name}/quarantine/release", post(super::quarantine::release))
        .route("/console/api/handlers/{name}/quarantine/dead-letter", post(super::quarantine::dead_letter))
        .route("/console/api/handlers/{name}", get(api::handler))
        .route("/console/api/handlers/{name}/history", get(api::history))
        .route("/console/api/handlers/{name}/modules", get(routes::show))
        .route("/console/api/handlers/{name}/module", put(routes::upload).layer(DefaultBodyLimit::disable()))
        .route("/console/api/handlers/{name}/activate", post(routes::activate))
        .route("/console/api/handlers/{name}/shadow", get(super::shadow::show).delete(super::shadow::end))
        .route("/console/api/handlers/{name}/shadow/activate", post(super::shadow::activate))
        .route("/console/api/handlers/{name}/canary", get(super::canary::show).delete(super::canary::abort))
        .route("/console/api/handlers/{name}/canary/promote", post(super::canary::promote))
        .route("/console/api/handlers/{name}/captures", get(super::captures::show))
        .route("/console/api/handlers/{name}/dead-letters", get(api::dead_letters))
        .route("/console/api/handlers/{name}/dead-letters/replay", post(dead_letters::replay))
        .route("/console/api/handlers/{name}/dead-letters/discard", post(dead_letters::discard))
        .route("/console/api/handlers/{name}/dead-letters/search", get(explorer::search))
        .route(
            "/console/{*rest}",
            axum::routing::any(|| async { routes::error(StatusCode::NOT_FOUND, "no such console page") }),
        )
        // On the console's routes only: any other path stays the API's.
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Every console request: the `Host` check, then for a change its origin,
/// and for the API a session (and for a change its CSRF token and scope);
/// every answer gets the security headers.
async fn guard(State(state): State<AdminState>, mut request: Request, next: Next) -> Response {
    let checked = match check(&state, &mut request) {
        Ok(()) => still_named(&state, request.extensions().get::<session::Session>().and_then(|s| s.named)).await,
        Err(refusal) => Err(refusal),
    };
    let mut response = match checked {
        Ok(()) => match request.extensions().get::<session::Session>().map(|s| s.actor.clone()) {
            Some(actor) => {
                request.extensions_mut().insert(actor.clone());
                audit::recorded(&state, &actor, audit::Via::Console, request, next).await
            }
            None => next.run(request).await,
        },
        Err((status, message)) => routes::error(status, message).into_response(),
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    headers.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    response
}

/// Why a request is refused: answered as `{"error": …}` with the status.
type Refusal = (StatusCode, String);

fn refuse(status: StatusCode, message: impl Into<String>) -> Result<(), Refusal> {
    Err((status, message.into()))
}

fn check(state: &AdminState, request: &mut Request) -> Result<(), Refusal> {
    let console = &state.console;
    let host = request.headers().get(header::HOST).cloned();
    if !console.host_allowed(host.as_ref()) {
        let shown = host.as_ref().and_then(|h| h.to_str().ok()).map_or("(none)".into(), |h| crate::text::shown(h, 100));
        return refuse(
            StatusCode::FORBIDDEN,
            format!("Host `{shown}` is not a name of this console (loopback, or [admin] console_hosts)"),
        );
    }
    let path = request.uri().path().to_owned();
    let changes = Scope::needed_for(request.method()) == Scope::Operate;
    if changes {
        same_origin(request, host.as_ref())?;
    }
    if !path.starts_with("/console/api/") || path == "/console/api/login" {
        return Ok(());
    }
    let Some(session) = session::cookie(request.headers()).and_then(|id| console.sessions.get(id)) else {
        return refuse(StatusCode::UNAUTHORIZED, "log in first: no session, or it ended");
    };
    if changes {
        let given = request.headers().get("x-csrf-token").and_then(|v| v.to_str().ok()).unwrap_or("");
        if !access::same_secret(given, &session.csrf) {
            return refuse(StatusCode::FORBIDDEN, "a change needs this session's CSRF token in X-CSRF-Token");
        }
        if path != "/console/api/logout" && session.scope < Scope::Operate {
            return refuse(StatusCode::FORBIDDEN, state.tokens.too_narrow(session.scope));
        }
    }
    request.extensions_mut().insert(session);
    Ok(())
}

/// A named operator's session lasts while their token does: revoked, it
/// ends on every host within `operators::FRESH`.
async fn still_named(state: &AdminState, named: Option<[u8; 32]>) -> Result<(), Refusal> {
    let Some(digest) = named else { return Ok(()) };
    match state.operators.lookup_digest(digest).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => refuse(StatusCode::UNAUTHORIZED, "log in again: this operator's token was revoked"),
        Err(e) => {
            tracing::warn!("console: a session's operator token could not be checked: {e:#}");
            refuse(StatusCode::SERVICE_UNAVAILABLE, format!("cannot check this session's token now: {e}"))
        }
    }
}

/// A change must come from a page of this console: browsers name the page's
/// origin in `Origin` on every non-GET request, and its relation to the
/// target in `Sec-Fetch-Site`.
fn same_origin(request: &Request, host: Option<&HeaderValue>) -> Result<(), Refusal> {
    let headers = request.headers();
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if site.is_some_and(|s| s != "same-origin") {
        return refuse(StatusCode::FORBIDDEN, "changes are accepted only from the console's own pages");
    }
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = host.and_then(|h| h.to_str().ok()).unwrap_or("");
    let ours = origin.is_some_and(|o| {
        o.strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
    });
    if !ours || request.method() == Method::OPTIONS {
        return refuse(StatusCode::FORBIDDEN, "changes are accepted only from the console's own pages (Origin)");
    }
    Ok(())
}
