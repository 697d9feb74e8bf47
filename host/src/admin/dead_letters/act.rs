//! `POST …/dead-letters/replay` and `…/discard`: what an operator does with
//! dead letters, chosen by ticked rows, by a window, or by every row a
//! search matches. Both are changes, so the token needs the `operate`
//! scope and the audit trail records them with their counts.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{refused, unknown};
use crate::admin::{AdminState, audit, body, routes};
use crate::pipeline::dlq::discard::{self, Chosen};
use crate::pipeline::dlq::search::{self, Search};
use crate::pipeline::replay::{MAX_SELECTED, ReplayOptions, Selection, Window};

/// A replay's selection (records by DLQ position, a window, or a search)
/// and how it runs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    #[serde(default)]
    records: Vec<(i32, i64)>,
    since: Option<chrono::DateTime<chrono::Utc>>,
    until: Option<chrono::DateTime<chrono::Utc>>,
    class: Option<String>,
    limit: Option<usize>,
    /// Every dead letter the explorer's filters match (its paging ignored).
    search: Option<Search>,
    #[serde(default)]
    dry_run: bool,
    /// Also run events older than the handler's dedup retention.
    #[serde(default)]
    force: bool,
    /// Also run records without a seal.
    #[serde(default)]
    trust_unsigned: bool,
}

/// Replays the selected records (or judges them, dry), one replay at a
/// time on a host.
pub(crate) async fn replay(State(state): State<AdminState>, Path(name): Path<String>, body: Body) -> Response {
    let Some(desk) = state.dead_letters.desk(&name) else { return unknown(&name) };
    let request: ReplayRequest = match body::search_json(body, state.body_timeout).await {
        Ok(request) => request,
        Err(refusal) => return refusal,
    };
    if let Some(refusal) = not_positions(&request.records) {
        return refusal;
    }
    let selection = match selection(&state, &name, request.search.as_ref(), &request).await {
        Ok(selection) => selection,
        Err(refusal) => return refusal,
    };
    let Ok(replaying) = state.dead_letters.replaying.clone().try_acquire_owned() else {
        return routes::error(StatusCode::CONFLICT, "a replay is running on this host: wait for it").into_response();
    };
    let options =
        ReplayOptions { dry_run: request.dry_run, force: request.force, trust_unsigned: request.trust_unsigned };
    // A task of its own: a client that goes away does not cut it short,
    // and the next replay waits for its end.
    let desk = desk.clone();
    let run = tokio::spawn(async move {
        let _replaying = replaying;
        desk.replay(selection, options).await
    });
    match run.await {
        Ok(Ok(report)) => {
            tracing::info!(
                handler = %name, dry_run = report.dry_run, read = report.read, applied = report.applied,
                stopped = ?report.stopped, "DLQ replay"
            );
            // Stopped by an outage: what it did so far, as a 503.
            let status = if report.stopped.is_some() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
            let detail = audit::Detail(json!({
                "dry_run": report.dry_run, "read": report.read, "applied": report.applied,
                "duplicates": report.duplicates, "failed_again": report.failed_again,
                "discarded": report.discarded, "stopped": report.stopped,
            }));
            (status, axum::Extension(detail), Json(report)).into_response()
        }
        Ok(Err(e)) => routes::error(StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")).into_response(),
        Err(e) => routes::error(StatusCode::INTERNAL_SERVER_ERROR, format!("the replay failed: {e}")).into_response(),
    }
}

/// What a replay request selects, or the refusal naming what is wrong.
async fn selection(
    state: &AdminState,
    name: &str,
    search: Option<&Search>,
    request: &ReplayRequest,
) -> Result<Selection, Response> {
    let bad = |message: String| routes::error(StatusCode::BAD_REQUEST, message).into_response();
    if let Some(search) = search {
        return match search::positions(&state.pool, name, search, MAX_SELECTED).await {
            Ok(Ok(records)) if records.is_empty() => Err(bad("no dead letter matches the filters".into())),
            Ok(Ok(records)) => Ok(Selection::Records(records)),
            Ok(Err(total)) => Err(bad(format!(
                "{total} dead letters match: a replay runs at most {MAX_SELECTED} at once; narrow the filters \
                 (e.g. a time range, or outcome=none for those never replayed)"
            ))),
            Err(e) => Err(refused(e)),
        };
    }
    if request.records.is_empty() {
        if request.since.is_none() && request.until.is_none() {
            return Err(bad("select records, a search, or a range with since and/or until".into()));
        }
        if request.limit == Some(0) {
            return Err(bad("limit: at least 1".into()));
        }
        let limit = request.limit.map(|l| l.min(MAX_SELECTED));
        let window = Window { since: request.since, until: request.until, limit, class: request.class.clone() };
        return Ok(Selection::Window(window));
    }
    let mut records = request.records.clone();
    records.sort_unstable();
    records.dedup();
    if records.len() > MAX_SELECTED {
        return Err(bad(format!("at most {MAX_SELECTED} records at once")));
    }
    Ok(Selection::Records(records))
}

/// The refusal of a position no topic has (a negative partition or
/// offset), if `records` holds one.
fn not_positions(records: &[(i32, i64)]) -> Option<Response> {
    let (p, o) = records.iter().find(|(p, o)| *p < 0 || *o < 0)?;
    let message = format!("records: [{p}, {o}] is not a DLQ position (a partition and an offset, both 0 or more)");
    Some(routes::error(StatusCode::BAD_REQUEST, message).into_response())
}

/// Dead letters to discard (or restore): ticked rows, or a search.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardRequest {
    #[serde(default)]
    records: Vec<(i32, i64)>,
    search: Option<Search>,
    #[serde(default)]
    dry_run: bool,
    /// Clear the mark instead: the records are replayable again.
    #[serde(default)]
    restore: bool,
}

/// Marks the selected dead letters discarded (never replayed; the topic
/// keeps them), or restores them; a dry run counts only.
pub(crate) async fn discard(State(state): State<AdminState>, Path(name): Path<String>, body: Body) -> Response {
    if state.slot(&name).is_none() {
        return unknown(&name);
    }
    let request: DiscardRequest = match body::search_json(body, state.body_timeout).await {
        Ok(request) => request,
        Err(refusal) => return refusal,
    };
    if let Some(refusal) = not_positions(&request.records) {
        return refusal;
    }
    let chosen = match (&request.search, request.records.as_slice()) {
        (Some(search), []) => Chosen::Search(search),
        (None, records) if !records.is_empty() => Chosen::Records(records),
        (Some(_), _) => {
            let message = "give records or a search, not both";
            return routes::error(StatusCode::BAD_REQUEST, message).into_response();
        }
        (None, _) => return routes::error(StatusCode::BAD_REQUEST, "select records or a search").into_response(),
    };
    match discard::discard(&state.pool, &name, chosen, request.restore, request.dry_run).await {
        Ok(done) => {
            tracing::info!(handler = %name, matched = done.matched, changed = done.changed,
                restore = done.restore, dry_run = done.dry_run, "DLQ discard");
            let detail = audit::Detail(serde_json::to_value(&done).unwrap_or_default());
            (axum::Extension(detail), Json(done)).into_response()
        }
        Err(e) => refused(e),
    }
}
