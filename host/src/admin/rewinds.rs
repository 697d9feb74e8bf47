//! `POST /handlers/{name}/rewind`, `GET /handlers/{name}/rewinds` and
//! `GET /handlers/{name}/rewinds/{id}` (the console mounts all three): an
//! operator's rewind of a handler's group (`pipeline::rewinds`), its dry
//! run, and its report. A rewind is counted before it is asked — every
//! answer, a dry run's or not, says per partition how many records the
//! window holds and how many the dedup ledger will skip — and refused when
//! it reaches past the handler's dedup retention unless forced.

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
use crate::pipeline::replay::Desk;
use crate::pipeline::rewinds::{self, Refused, Target, census};

/// The longest reason kept.
const MAX_REASON: usize = 500;

/// Rewinds a listing shows at most.
const LISTED: i64 = 50;

pub(super) fn router(state: AdminState) -> axum::Router {
    axum::Router::new()
        .route("/handlers/{name}/rewind", post(rewind))
        .route("/handlers/{name}/rewinds", get(list))
        .route("/handlers/{name}/rewinds/{id}", get(report))
        .with_state(state)
}

/// What a rewind asks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    /// `earliest`, an offset, or an RFC 3339 time.
    to: String,
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    partition: Option<i32>,
    /// Count only; ask nothing.
    #[serde(default)]
    dry_run: bool,
    /// Reach past the handler's dedup retention.
    #[serde(default)]
    force: bool,
    #[serde(default)]
    reason: String,
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    routes::error(status, message).into_response()
}

/// A refusal, before it is an answer.
type Refusal = (StatusCode, String);

fn desk<'a>(state: &'a AdminState, name: &str) -> Result<&'a Desk, Refusal> {
    state
        .dead_letters
        .desk(name)
        .ok_or_else(|| (StatusCode::NOT_FOUND, format!("no handler `{name}` runs on this host")))
}

/// What is wrong with `asked` for the handler consuming `topic`, if anything.
fn check(asked: &Asked, topic: &str) -> Result<Target, Refusal> {
    let target = Target::parse(&asked.to).map_err(|e| (StatusCode::BAD_REQUEST, format!("to: {e}")))?;
    if let Some(t) = asked.topic.as_deref().filter(|t| *t != topic) {
        return Err((StatusCode::NOT_FOUND, format!("the handler consumes `{topic}`, not `{t}`")));
    }
    if let Some(p) = asked.partition.filter(|p| *p < 0) {
        return Err((StatusCode::BAD_REQUEST, format!("partition {p}: a partition is 0 or more")));
    }
    if asked.reason.chars().count() > MAX_REASON {
        return Err((StatusCode::BAD_REQUEST, format!("reason is longer than {MAX_REASON} characters")));
    }
    Ok(target)
}

/// What a rewind over `counts` risks, if anything: events past the dedup
/// retention, or a window too large to have been checked whole.
fn risk(name: &str, counts: &[census::Count], retention: crate::config::Span) -> Option<String> {
    let past: u64 = counts.iter().map(|c| c.past_retention).sum();
    if past > 0 {
        Some(format!(
            "the window holds {past} event(s) older than `{name}`'s dedup_retention ({retention}): their dedup rows \
             may be gone, so they may be applied a second time (or dead-lettered, under stale_events = \"dlq\")"
        ))
    } else if counts.iter().any(|c| c.capped) {
        Some(format!(
            "the window holds more than {} records: what lies past them was not counted, nor checked against the \
             dedup retention",
            census::MAX_COUNTED
        ))
    } else {
        None
    }
}

/// The status a refused plan is answered with.
fn plan_refused(e: &Refused) -> Response {
    let status = match e {
        Refused::NoPartition { .. } => StatusCode::NOT_FOUND,
        Refused::BeforeEarliest { .. } | Refused::Forward { .. } => StatusCode::CONFLICT,
        Refused::Kafka(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    refused(status, e.to_string())
}

pub(super) async fn rewind(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Response {
    let asked: Asked = match body::json(body, state.body_timeout).await {
        Ok(asked) => asked,
        Err(refusal) => return refusal,
    };
    let desk = match desk(&state, &name) {
        Ok(desk) => desk,
        Err((status, message)) => return refused(status, message),
    };
    let (config, handler) = desk.parts();
    let target = match check(&asked, &handler.config.topic) {
        Ok(target) => target,
        Err((status, message)) => return refused(status, message),
    };
    let windows = match rewinds::plan(config.clone(), handler.clone(), asked.partition, target).await {
        Ok(windows) => windows,
        Err(e) => return plan_refused(&e),
    };
    let counted: Vec<census::Asked> = windows.iter().map(|w| (*w, None)).collect();
    let counts = match census::count(config, handler.clone(), &counted).await {
        Ok(counts) => counts,
        Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")),
    };
    let risk = risk(&name, &counts, handler.config.dedup_retention);
    if let Some(risk) = risk.as_ref().filter(|_| !asked.force && !asked.dry_run) {
        let message = format!("{risk}; rewind to a later point, or ask again with force to accept that");
        return (StatusCode::CONFLICT, Json(json!({ "error": message, "partitions": counts }))).into_response();
    }
    let records: u64 = counts.iter().map(|c| c.records).sum();
    let skipped: u64 = counts.iter().map(|c| c.applied_before).sum();
    let mut summary =
        format!("{records} record(s) in the window, {skipped} of them applied already (skipped as duplicates)");
    if let Some(risk) = risk {
        summary = format!("{summary}; {risk}");
    }
    if asked.dry_run || windows.is_empty() {
        let message = if windows.is_empty() { "nothing to rewind: every window is empty".to_owned() } else { summary };
        return Json(json!({ "id": null, "dry_run": asked.dry_run, "partitions": counts, "message": message }))
            .into_response();
    }
    let partitions: Vec<(i32, i64, i64)> = windows.iter().map(|w| (w.partition, w.to, w.end)).collect();
    let request = rewinds::Request {
        handler: &name,
        topic: &handler.config.topic,
        target: &target,
        reason: &asked.reason,
        forced: asked.force,
        by: &actor.name,
        partitions: &partitions,
    };
    let id = match rewinds::request(&state.pool, &request).await {
        Ok(id) => id,
        Err(e) => return routes::database(&e),
    };
    tracing::info!(actor = %actor.name, reason = %asked.reason, rewind = id, "rewind of `{name}` to {target} asked");
    let message = format!(
        "rewind {id} asked: {summary}; each partition's owner applies it within {} s",
        2 * rewinds::REFRESH.as_secs()
    );
    let detail = json!({ "id": id, "to": target.to_string(), "reason": asked.reason, "forced": asked.force,
        "records": records, "skipped": skipped });
    let answer = json!({ "id": id, "dry_run": false, "partitions": counts, "message": message });
    (Extension(audit::Detail(detail)), Json(answer)).into_response()
}

/// The handler's rewinds, newest first, each partition's state.
pub(super) async fn list(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    if let Err((status, message)) = desk(&state, &name) {
        return refused(status, message);
    }
    match rewinds::recorded(&state.pool, &name, None, LISTED).await {
        Ok(all) => Json(json!({ "rewinds": all })).into_response(),
        Err(e) => routes::database(&e),
    }
}

/// One rewind and its report: per partition, its window counted against
/// the ledger — applied before the rewind (duplicates), applied since
/// (anew), not applied (yet).
pub(super) async fn report(State(state): State<AdminState>, Path((name, id)): Path<(String, String)>) -> Response {
    let desk = match desk(&state, &name) {
        Ok(desk) => desk,
        Err((status, message)) => return refused(status, message),
    };
    let Ok(id) = id.parse::<i64>() else {
        return refused(StatusCode::NOT_FOUND, format!("no rewind `{id}` of `{name}`"));
    };
    let found = match rewinds::recorded(&state.pool, &name, Some(id), 1).await {
        Ok(found) => found,
        Err(e) => return routes::database(&e),
    };
    let Some(rewind) = found.into_iter().next() else {
        return refused(StatusCode::NOT_FOUND, format!("no rewind {id} of `{name}`"));
    };
    let asked: Vec<census::Asked> = rewind
        .partitions
        .iter()
        .map(|p| {
            let end = p.from_offset.unwrap_or(p.asked_at).max(p.to_offset);
            (rewinds::Window { partition: p.partition, to: p.to_offset, end }, p.applied_at)
        })
        .collect();
    let (config, handler) = desk.parts();
    match census::count(config, handler, &asked).await {
        Ok(counts) => {
            let applied = rewind.partitions.iter().filter(|p| p.applied_at.is_some()).count();
            let message = format!("{applied} of {} partition(s) rewound", rewind.partitions.len());
            Json(json!({ "rewind": rewind, "report": counts, "message": message })).into_response()
        }
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")),
    }
}
