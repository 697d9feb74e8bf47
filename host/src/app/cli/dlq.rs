//! `idem dlq`: a handler's dead letters. Searching, replaying and
//! discarding go through a running host's admin API (the index it keeps,
//! the pipeline it runs); `list` and `reindex` read the topic itself, and
//! `replay --config` runs in this process, for when no host runs.

use serde_json::{Value, json};

use super::actions::{dlq_list, dlq_reindex, dlq_replay_here, render_replay};
use super::commands::{AdminTarget, DlqCommand, DlqFilters};
use crate::admin::client;
use crate::runtime::NativeHandlers;

pub(super) async fn dlq(command: DlqCommand, natives: &NativeHandlers) -> anyhow::Result<()> {
    match command {
        DlqCommand::List { target } => dlq_list(&target),
        DlqCommand::Search { admin, filters, page } => {
            let mut query = filters.pairs()?;
            query.extend(page.pairs());
            let found = client::dead_letters(&admin.reading(), &filters.handler, &query).await?;
            admin.print(&found, client::render_dead_letters)
        }
        DlqCommand::Reindex { config, handler, json } => dlq_reindex(&config, &handler, json).await,
        DlqCommand::Replay { admin, filters, config, limit, dry_run, force, trust_unsigned } => {
            let options = crate::pipeline::replay::ReplayOptions { dry_run, force, trust_unsigned };
            let report = match config {
                Some(config) => {
                    let beyond = filters.beyond_offline();
                    if !beyond.is_empty() {
                        anyhow::bail!(
                            "{} select through a host's dead-letter index: drop --config to replay through the \
                             host, or select by --since, --until and --class",
                            beyond.join(", ")
                        );
                    }
                    let window = crate::pipeline::replay::Window {
                        since: filters.since,
                        until: filters.until,
                        limit,
                        class: filters.class.clone(),
                    };
                    dlq_replay_here(&config, &filters.handler, &window, options, natives).await?
                }
                None => {
                    let request = json!({
                        "search": filters.search()?, "dry_run": dry_run, "force": force,
                        "trust_unsigned": trust_unsigned,
                    });
                    client::replay_dead_letters(&admin.target(), &filters.handler, &request).await?
                }
            };
            admin.print(&report, render_replay)
        }
        DlqCommand::Discard { admin, filters, dry_run, restore } => discard(&admin, &filters, dry_run, restore).await,
    }
}

/// `idem dlq discard`: refuses to discard everything by accident.
async fn discard(admin: &AdminTarget, filters: &DlqFilters, dry_run: bool, restore: bool) -> anyhow::Result<()> {
    let search = filters.search()?;
    if search.as_object().is_none_or(serde_json::Map::is_empty) {
        anyhow::bail!(
            "give at least one filter (--class, --reason, --since, …): `idem dlq discard --handler {}` alone would \
             discard every dead letter; `idem dlq search` with the same filters shows what they match",
            filters.handler
        );
    }
    let request = json!({ "search": search, "dry_run": dry_run, "restore": restore });
    let done = client::discard_dead_letters(&admin.target(), &filters.handler, &request).await?;
    admin.print(&done, render_discard)
}

fn render_discard(done: &Value) -> String {
    let n = |field: &str| done[field].as_i64().unwrap_or(0);
    let (dry, restore) = (done["dry_run"].as_bool() == Some(true), done["restore"].as_bool() == Some(true));
    let verb = match (dry, restore) {
        (false, false) => "discarded",
        (true, false) => "would discard",
        (false, true) => "restored",
        (true, true) => "would restore",
    };
    let other = if restore { "were not discarded" } else { "were discarded already" };
    format!(
        "idem: {} dead letter(s) matched: {verb} {}, {} {other}\n",
        n("matched"),
        n("changed"),
        n("matched") - n("changed")
    )
}
