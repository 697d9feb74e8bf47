//! `idem test --replay FILE` and `--from-capture`: captured live events
//! (`[handler.capture]`, `crate::capture`) run against a component with
//! no database and no network: every statement and request is answered
//! with what it got when the event was captured (`capabilities::tape`).
//! Each divergence is named: a statement or request not issued, issued
//! differently or not in the capture, an emit changed, an outcome changed.
//! It exits non-zero when any event diverged, so CI can gate on it.
//!
//! A handler that reads the clock or random numbers and writes what it
//! read diverges on every replay: such values belong in the event (its
//! `occurredAt`) or in the database.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::capture::{Capture, CapturedEmit, Outcome};
use crate::config::Config;
use crate::executor::{Executor, Pins, Replayed};
use crate::output::outln;
use crate::runtime::{Handler, HandlerSettings};

/// Where the captures come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file: the API's answer, a JSON array, or one capture per line.
    File(PathBuf),
    /// A running host's admin API: the newest `limit`, kept in `save`.
    Host { target: crate::admin::client::Target, limit: i64, save: Option<PathBuf> },
}

/// What `idem test --replay` was asked.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub config: PathBuf,
    pub handler: String,
    pub component: Option<PathBuf>,
    pub source: Source,
}

/// Replays the captures; `Ok(true)` when none diverged.
pub async fn replay(o: ReplayOptions) -> anyhow::Result<bool> {
    let config = crate::app::loading::load_config(&o.config)?;
    let Some(h) = config.handlers.iter().find(|h| h.name == o.handler) else {
        let names: Vec<&str> = config.handlers.iter().map(|h| h.name.as_str()).collect();
        bail!("{} has no handler `{}` (it has: {})", o.config.display(), o.handler, names.join(", "));
    };
    let captures = match &o.source {
        Source::File(path) => read(path)?,
        Source::Host { target, limit, save } => fetch(target, &h.name, *limit, save.as_deref()).await?,
    };
    let Some(component) = o.component.clone().or_else(|| h.component.clone()) else {
        bail!("handler `{}` has no component file; name the one to replay against with --component", h.name);
    };
    let component = if component.is_dir() { super::build(&component)? } else { component };
    let exec = executor(&config, h, &component)?;
    let (mut diverged, mut found) = (0, 0);
    for capture in &captures {
        if capture.handler != h.name {
            bail!("a capture of event {} is handler `{}`'s, not `{}`'s", capture.event.id, capture.handler, h.name);
        }
        let replayed = exec.replay(&capture.event.event(), capture.recorded.clone()).await;
        let divergences = divergences(capture, replayed);
        if !divergences.is_empty() {
            diverged += 1;
            found += divergences.len();
            print(capture, &divergences)?;
        }
    }
    outln!(
        "{} captured event(s) replayed against {}: {diverged} diverged ({found} divergence(s))",
        captures.len(),
        component.display()
    )?;
    Ok(diverged == 0)
}

/// Everything that differs between `capture` and its replay.
fn divergences(capture: &Capture, replayed: Replayed) -> Vec<String> {
    let mut found = replayed.divergences;
    let now: Vec<CapturedEmit> = replayed.emitted.iter().map(CapturedEmit::of).collect();
    let shown = |e: &CapturedEmit| {
        let payload = crate::text::shown_whole(&Value::Object(e.payload.clone()).to_string(), 500);
        format!("{} to `{}` key {} {payload}", e.event_type, e.topic, e.key)
    };
    for i in 0..capture.emits.len().max(now.len()) {
        match (capture.emits.get(i), now.get(i)) {
            (Some(was), Some(is)) if !same_emit(was, is) => {
                found.push(format!("emit {} differs: captured {}, now {}", i + 1, shown(was), shown(is)));
            }
            (Some(was), None) => found.push(format!("emit {} was not emitted: {}", i + 1, shown(was))),
            (None, Some(is)) => found.push(format!("emit {} is not in the capture: {}", i + 1, shown(is))),
            _ => {}
        }
    }
    let outcome = replayed.result.as_ref().map_or_else(Outcome::failed, |_| Outcome::ok());
    if !capture.outcome.same_as(&outcome) {
        found.push(format!("outcome differs: captured {}, now {}", capture.outcome.shown(), outcome.shown()));
    }
    found
}

/// Two emits are the same: topic, key, type, and payload as a document.
fn same_emit(a: &CapturedEmit, b: &CapturedEmit) -> bool {
    let payload = |e: &CapturedEmit| Value::Object(e.payload.clone());
    (&a.topic, &a.key, &a.event_type) == (&b.topic, &b.key, &b.event_type)
        && crate::capabilities::tape::same_json(&payload(a), &payload(b))
}

fn print(capture: &Capture, divergences: &[String]) -> anyhow::Result<()> {
    let version = capture.version.map_or_else(|| "its file".to_owned(), |v| format!("version {v}"));
    let e = &capture.event;
    outln!(
        "event {} ({}, {}[{}]@{}, captured on {version}): {} divergence(s)",
        e.id,
        e.event_type,
        e.topic,
        e.partition,
        e.offset,
        divergences.len()
    )?;
    for d in divergences {
        outln!("  {d}")?;
    }
    Ok(())
}

/// The handler's executor for a replay: `idem run`'s settings and sandbox
/// on the component, with a pool that never connects (a replay opens no
/// connection: every statement is answered from its capture).
fn executor(config: &Config, h: &crate::config::HandlerConfig, component: &Path) -> anyhow::Result<Executor> {
    let settings = HandlerSettings::of(h)?;
    let http = crate::capabilities::http::client(&settings.caps.http)?;
    let handler = Handler::load(&super::tested_runtime(config)?, component, settings)?;
    let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy_with(sqlx::postgres::PgConnectOptions::new());
    let pins = Pins { schema: h.schema_name(), synchronous_commit: config.database.synchronous_commit.clone() };
    Ok(Executor::new(handler, pool, http, pins))
}

/// The largest captures file read.
const MAX_FILE_BYTES: u64 = 256 << 20;

/// The captures of `path`: the API's answer (`{"captures": [...]}`), a
/// JSON array of captures, or one capture per line.
fn read(path: &Path) -> anyhow::Result<Vec<Capture>> {
    let bytes = crate::files::read_bounded(path, MAX_FILE_BYTES)
        .with_context(|| format!("failed to read captures from {}", path.display()))?;
    let text = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))?;
    let at = |what: String| format!("{}: {what}", path.display());
    if let Ok(whole) = serde_json::from_str::<Value>(&text) {
        let list = whole.get("captures").cloned().unwrap_or(whole);
        let Value::Array(items) = list else { bail!(at("neither captures nor a list of them".into())) };
        return items
            .into_iter()
            .enumerate()
            .map(|(i, c)| serde_json::from_value(c).with_context(|| at(format!("capture {} is not one", i + 1))))
            .collect();
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| at(format!("line {} is not a capture", i + 1))))
        .collect()
}

/// The newest `limit` captures of `handler` from a host, kept in `save`.
async fn fetch(
    target: &crate::admin::client::Target,
    handler: &str,
    limit: i64,
    save: Option<&Path>,
) -> anyhow::Result<Vec<Capture>> {
    let answer = crate::admin::client::captures(target, handler, limit).await?;
    if let Some(save) = save {
        std::fs::write(save, serde_json::to_vec_pretty(&answer)?)
            .with_context(|| format!("failed to write {}", save.display()))?;
    }
    let items = answer["captures"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .enumerate()
        .map(|(i, c)| serde_json::from_value(c).with_context(|| format!("capture {} of the host's answer", i + 1)))
        .collect()
}
