//! The host's admin API: one HTTP listener (`[admin] listen`, loopback by
//! default) for handler modules (upload, list, activate) and for operators
//! (`/metrics`, `/healthz`, `/readyz`, see `telemetry`).
//! `docs/admin-api.json` is its OpenAPI document; [`client`] is the CLI's
//! side of it.
//!
//! Access: with a token in the environment (`[admin] token_env`, default
//! `IDEM_ADMIN_TOKEN`), every request must carry `Authorization: Bearer
//! <token>`. Without one, the listener must be on a loopback address (the
//! host refuses to start otherwise) and says at start-up that anyone on this
//! machine can deploy. `/healthz` and `/readyz` answer anyone: probes carry
//! no token.
//!
//! The listener (`listener`, `peers`) caps connections in all and per
//! address and drops clients that send their headers too slowly, or stop
//! taking an answer (`stall`); an upload's body has its own deadline
//! (`body`). docs/modules.md, "Admin listener
//! limits".

mod access;
mod activation;
mod answer;
mod audit;
mod body;
mod canary;
mod captures;
pub mod client;
mod console;
mod dead_letters;
mod fleet;
mod ledger;
mod listener;
mod nul;
mod operators;
mod outbox;
mod pauses;
mod peers;
mod quarantine;
mod rewinds;
mod routes;
mod shadow;
mod stall;
mod throttles;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::AdminConfig;
use crate::modules::Slot;
use access::Scope;
pub(crate) use audit::write_local as audit_local;

/// Uploads handled at once; more wait (each holds up to `max_module_mib`).
const MAX_UPLOADS: usize = 2;

/// The address a request came from (an extension the listener adds).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub std::net::IpAddr);

/// What every request sees.
#[derive(Clone)]
pub(crate) struct AdminState {
    pub pool: PgPool,
    pub slots: Arc<Vec<Arc<Slot>>>,
    tokens: access::Tokens,
    /// The console's sessions, its allowed `Host` names and what it shows.
    pub console: Arc<console::Console>,
    /// Each handler's DLQ desk: replays and discards.
    pub dead_letters: Arc<dead_letters::Desks>,
    /// The outbox producers of this host's config (`outbox::producers`).
    producers: Arc<Vec<String>>,
    /// Uploads read and checked at once: each buffers a module.
    pub uploads: Arc<tokio::sync::Semaphore>,
    /// What `/metrics` and `/readyz` read.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// `[admin] body_timeout`.
    pub body_timeout: Duration,
    /// The named operators' tokens.
    pub operators: Arc<operators::Operators>,
    /// This host as the fleet names it (the audit trail's `host`), known
    /// once it serves.
    host: Arc<std::sync::OnceLock<String>>,
}

impl AdminState {
    pub(crate) fn host(&self) -> String {
        self.host.get().cloned().unwrap_or_default()
    }

    pub(crate) fn slot(&self, name: &str) -> Option<&Arc<Slot>> {
        self.slots.iter().find(|s| s.name() == name)
    }
}

/// The listener, bound (so a taken port fails start-up, not later).
pub struct Admin {
    listener: TcpListener,
    state: AdminState,
    limits: listener::Limits,
    /// `[admin] audit_retention`.
    audit_retention: Duration,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("listener", &self.listener.local_addr().ok()).finish_non_exhaustive()
    }
}

impl Admin {
    /// Binds `[admin] listen`; `None` when it is `"off"`. `producers`
    /// names this host's outbox producers (shown even with no rows).
    pub async fn bind(
        config: &AdminConfig,
        producers: Vec<String>,
        pool: PgPool,
        slots: Vec<Arc<Slot>>,
        telemetry: Arc<crate::telemetry::Telemetry>,
    ) -> anyhow::Result<Option<Self>> {
        let Some(address) = config.address()? else { return Ok(None) };
        let tokens = access::Tokens::from_config(config)?;
        let console = console::Console::new(config, telemetry.clone())?;
        if !tokens.any() && !address.ip().is_loopback() {
            bail!(
                "[admin] listen = {address} is not a loopback address and ${} is not set: the admin API \
                 deploys code, so off this machine it requires a token",
                config.token_env
            );
        }
        let listener = TcpListener::bind(address)
            .await
            .with_context(|| format!("failed to listen on {address} ([admin] listen)"))?;
        let bound = listener.local_addr()?;
        match tokens.any() {
            true => {
                tracing::info!(address = %bound, "admin API listening (bearer token required); console at /console/")
            }
            false => tracing::warn!(
                address = %bound,
                "admin API listening on loopback WITHOUT a token (${} is not set): anyone on this machine can deploy",
                config.token_env
            ),
        }
        let limits = limits(config);
        let state = AdminState {
            operators: Arc::new(operators::Operators::new(pool.clone(), tokens.highest())),
            host: Arc::default(),
            pool,
            slots: Arc::new(slots),
            tokens,
            console: Arc::new(console),
            dead_letters: Arc::new(dead_letters::Desks::new()),
            producers: Arc::new(producers),
            uploads: Arc::new(tokio::sync::Semaphore::new(MAX_UPLOADS)),
            telemetry,
            body_timeout: config.body_timeout.0,
        };
        Ok(Some(Self { listener, state, limits, audit_retention: config.audit_retention.0 }))
    }

    /// Serves until `stop` turns true as `host` (the fleet's name for
    /// it); the API and the console replay dead letters with `desks` (one
    /// per handler of this host).
    pub async fn serve(self, host: String, stop: watch::Receiver<bool>, desks: Vec<crate::pipeline::replay::Desk>) {
        let telemetry = self.state.telemetry.clone();
        let state = self.state;
        let _ = state.host.set(host);
        state.dead_letters.attach(desks);
        let sampler = tokio::spawn(state.console.clone().sample(stop.clone()));
        let trimmer = tokio::spawn(audit::trim(state.pool.clone(), self.audit_retention, stop.clone()));
        let app = routes::router(state.clone())
            .merge(dead_letters::router(state.clone()))
            .merge(fleet::router(state.clone()))
            .merge(outbox::router(state.clone()))
            .merge(pauses::router(state.clone()))
            .merge(rewinds::router(state.clone()))
            .merge(quarantine::router(state.clone()))
            .merge(throttles::router(state.clone()))
            .merge(shadow::router(state.clone()))
            .merge(canary::router(state.clone()))
            .merge(ledger::router(state.clone()))
            .merge(captures::router(state.clone()))
            .merge(audit::router(state.clone()))
            .merge(operators::router(state.clone()))
            .merge(console::router(state.clone()))
            // Inside `authorize`: a request without a token is 401 whatever it holds.
            .layer(axum::middleware::from_fn(nul::refuse))
            .layer(axum::middleware::from_fn_with_state(state, authorize));
        listener::serve(self.listener, app, self.limits, telemetry, stop).await;
        sampler.abort();
        trimmer.abort();
    }
}

/// The listener's limits: `[admin]`'s, with at most a quarter of the
/// open-files limit in force for connections (`fd_limit`).
fn limits(config: &AdminConfig) -> listener::Limits {
    let soft = crate::fd_limit::soft();
    let max_connections = crate::fd_limit::admin_share(config.max_connections, soft);
    if max_connections < config.max_connections {
        tracing::warn!(
            "[admin] max_connections = {} lowered to {max_connections}: a quarter of the open-files limit \
             ({}, RLIMIT_NOFILE), so that admin clients cannot take the sockets events need",
            config.max_connections,
            soft.unwrap_or(0)
        );
    }
    listener::Limits {
        header_timeout: config.header_timeout.0,
        body_timeout: config.body_timeout.0,
        max_connections,
        per_peer: config.max_connections_per_peer.min(max_connections),
    }
}

/// Refuses an API request without a token of this host, when there is
/// one, or whose token's scope is too narrow for its method; and any
/// request a web browser sends (the console, under `/console`, has its own
/// rules: `console::guard`). A page open on this machine can send requests
/// to loopback (a form POST needs no preflight) and, by rebinding its DNS
/// name to 127.0.0.1, read the answers. Browsers always name the page's
/// origin in `Origin` (and describe the request in `Sec-Fetch-*`) on such
/// requests, and the page's host name in `Host`; the CLI sends neither an
/// `Origin` nor a `Sec-Fetch-*` header nor a name other than the address.
async fn authorize(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    // Probes (a kubelet's, a load balancer's) carry no token and name the
    // pod's address; the answers say only whether the host is up and ready.
    // Any method: GET and HEAD are answered, others 405 naming them.
    if matches!(request.uri().path(), "/healthz" | "/readyz") {
        return next.run(request).await;
    }
    // The console's routes have their own guard (`console::guard`).
    if request.uri().path() == "/console" || request.uri().path().starts_with("/console/") {
        return next.run(request).await;
    }
    let from_browser = request.headers().keys().any(|k| k.as_str().starts_with("sec-fetch-"));
    if from_browser || request.headers().contains_key(header::ORIGIN) {
        let message = "requests from web pages are refused (the console, at /console/, is for browsers)";
        return routes::error(StatusCode::FORBIDDEN, message).into_response();
    }
    let peer = request.extensions().get::<Peer>().map(|p| p.0);
    let actor = match actor(&state, request.headers(), peer).await {
        Ok(actor) => actor,
        Err(refusal) => return refusal,
    };
    if actor.scope < Scope::needed_for(request.method()) {
        tracing::warn!(actor = %actor.name, ?peer, path = %request.uri().path(), "admin API: a change refused for scope");
        return routes::error(StatusCode::FORBIDDEN, state.tokens.too_narrow(actor.scope)).into_response();
    }
    let mut request = request;
    request.extensions_mut().insert(actor.clone());
    audit::recorded(&state, &actor, audit::Via::Api, request, next).await
}

/// Who sent `request`: the operator or host token it carries, or `local`
/// on a host that requires none (then only addressed to loopback).
async fn actor(
    state: &AdminState,
    headers: &axum::http::HeaderMap,
    peer: Option<std::net::IpAddr>,
) -> Result<access::Actor, Response> {
    if !state.tokens.any() {
        if !access::loopback_host(headers.get(header::HOST)) {
            let message =
                "without a token the admin API answers only requests addressed to localhost or a loopback address";
            return Err(routes::error(StatusCode::FORBIDDEN, message).into_response());
        }
        return Ok(access::Actor { name: access::LOCAL.into(), scope: Scope::Operate, named: false });
    }
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let Some(given) = given else {
        return Err(routes::error(StatusCode::UNAUTHORIZED, "a bearer token is required").into_response());
    };
    if let Some(actor) = state.tokens.actor_of(given) {
        return Ok(actor);
    }
    match state.operators.lookup(given).await {
        Ok(Some(named)) => Ok(named),
        Ok(None) => {
            // Info, not warn: anyone can send these, as fast as they like.
            tracing::info!(?peer, "admin API: a wrong bearer token");
            Err(routes::error(StatusCode::UNAUTHORIZED, "wrong bearer token").into_response())
        }
        Err(e) => {
            tracing::warn!(?peer, "admin API: an operator's token could not be checked: {e:#}");
            let message = format!("cannot check this token now: {e}");
            Err(routes::error(StatusCode::SERVICE_UNAVAILABLE, message).into_response())
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::AdminConfig;

    #[tokio::test]
    async fn off_loopback_without_a_token_is_refused_at_start_up() {
        let config = AdminConfig {
            listen: "0.0.0.0:0".into(),
            token_env: "IDEM_TEST_NO_SUCH_TOKEN_VAR".into(),
            ..AdminConfig::default()
        };
        let pool = sqlx::PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").expect("lazy pool");
        let telemetry = crate::telemetry::Telemetry::new(pool.clone());
        let err = super::Admin::bind(&config, Vec::new(), pool, Vec::new(), telemetry).await.expect_err("refused");
        assert!(err.to_string().contains("requires a token"), "{err}");
    }
}
