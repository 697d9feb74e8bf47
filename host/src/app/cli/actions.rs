//! The subcommands that read or change state outside a running host: the
//! dead-letter topic, the outbox, maintenance, migrations.

use anyhow::Context as _;
use axum::http::StatusCode;
use serde_json::json;

use super::commands::DlqTarget;
use crate::output::outln;
use crate::runtime::NativeHandlers;

/// `idem dlq list`.
pub(super) fn dlq_list(target: &DlqTarget) -> anyhow::Result<()> {
    let config = crate::app::loading::load_config(&target.config)?;
    let handler = config
        .handlers
        .iter()
        .find(|h| h.name == target.handler)
        .with_context(|| format!("no handler `{}` in {}", target.handler, target.config.display()))?;
    let listing = crate::pipeline::replay::list(&config, handler, &target.window())?;
    if target.json {
        outln!("{}", serde_json::to_string(&listing)?)?;
    } else {
        outln!("{}: {} record(s)", listing.topic, listing.records)?;
        for (reason, n) in &listing.by_reason {
            outln!("  {n:>6}  {reason}")?;
        }
        if listing.envelopes > 0 {
            outln!("  {} of them envelopes (the topic refused the record as it was)", listing.envelopes)?;
        }
        if listing.unauthenticated > 0 {
            outln!(
                "  {:>6}  unauthenticated: no valid seal (not written by idem, or before seals); not shown",
                listing.unauthenticated
            )?;
        }
        if let (Some(oldest), Some(newest)) = (&listing.oldest, &listing.newest) {
            outln!("  failed between {oldest} and {newest}")?;
        }
    }
    Ok(())
}

/// `idem dlq reindex`.
pub(super) async fn dlq_reindex(config: &std::path::Path, handler: &str, json: bool) -> anyhow::Result<()> {
    let loaded = crate::app::loading::load_config(config)?;
    let h = loaded
        .handlers
        .iter()
        .find(|h| h.name == handler)
        .with_context(|| format!("no handler `{handler}` in {}", config.display()))?;
    let pool = sqlx::PgPool::connect(&loaded.database.url)
        .await
        .with_context(|| format!("database unreachable at {}", crate::app::startup::redact(&loaded.database.url)))?;
    crate::migrate::check(&pool).await?;
    let report = crate::pipeline::replay::reindex(&loaded, h, &pool).await?;
    if json {
        outln!("{}", serde_json::to_string(&report)?)
    } else {
        outln!(
            "idem: {}: {} record(s) read; {} were missing from the index (added); {} row(s) named records the \
             topic no longer holds (removed)",
            report.topic,
            report.read,
            report.added,
            report.removed
        )
    }
}

/// `idem dlq replay --config`: the replay in this process (no host
/// needed), its report as the API's.
pub(super) async fn dlq_replay_here(
    config: &std::path::Path,
    handler: &str,
    window: &crate::pipeline::replay::Window,
    options: crate::pipeline::replay::ReplayOptions,
    natives: &NativeHandlers,
) -> anyhow::Result<serde_json::Value> {
    let prepared = crate::app::startup::prepare_with(config, natives).await?;
    let prepared_handler = prepared
        .handlers
        .iter()
        .find(|h| h.config.name == handler)
        .with_context(|| format!("no handler `{handler}` in {}", config.display()))?;
    let (dry_run, force, trust_unsigned) = (options.dry_run, options.force, options.trust_unsigned);
    let asked = json!({
        "since": window.since, "until": window.until, "limit": window.limit, "class": window.class,
        "force": force, "trust_unsigned": trust_unsigned,
    });
    let action = format!("idem dlq replay --config {}", config.display());
    // In the audit trail as a host's replay is (a dry run changes nothing):
    // once when it begins, so a replay killed midway is there too, and
    // once with what it came to.
    if !dry_run {
        let begun = json!({ "asked": asked });
        crate::admin::audit_local(&prepared.pool, handler, action.clone(), StatusCode::ACCEPTED, begun).await;
    }
    let replayed = crate::pipeline::replay::replay(&prepared.config, prepared_handler, &prepared.pool, window, options)
        .await
        .map(|report| serde_json::to_value(&report));
    if !dry_run {
        let detail = match &replayed {
            Ok(Ok(report)) => {
                let mut counts = report.clone();
                if let Some(fields) = counts.as_object_mut() {
                    fields.remove("outcomes");
                }
                json!({ "asked": asked, "report": counts })
            }
            Ok(Err(e)) => json!({ "asked": asked, "error": e.to_string() }),
            Err(e) => json!({ "asked": asked, "error": format!("{e:#}") }),
        };
        let status = if matches!(replayed, Ok(Ok(_))) { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
        crate::admin::audit_local(&prepared.pool, handler, action, status, detail).await;
    }
    Ok(replayed??)
}

/// A replay's report (from this process or a host) for people.
pub(super) fn render_replay(report: &serde_json::Value) -> String {
    let n = |field: &str| report[field].as_u64().unwrap_or(0);
    let verb = if report["dry_run"].as_bool() == Some(true) { "would apply" } else { "applied" };
    let mut out = format!(
        "idem: {} DLQ record(s) read: {verb} {}, skipped {} already processed, {} failed again\n",
        n("read"),
        n("applied"),
        n("duplicates"),
        n("failed_again")
    );
    let left = [
        (
            "stale",
            "older than the handler's dedup_retention, so they may have been processed already (--force runs them)",
        ),
        ("discarded", "an operator discarded them (idem dlq discard --restore makes them replayable)"),
        (
            "unauthenticated",
            "their seal is missing or does not verify, so idem did not write them (or wrote them before seals: \
             --trust-unsigned runs those)",
        ),
        (
            "envelopes",
            "the topic refused those records as they were; each names where the record is on its source topic",
        ),
    ];
    for (field, why) in left {
        if n(field) > 0 {
            out.push_str(&format!("idem: {} record(s) left in the DLQ: {why}\n", n(field)));
        }
    }
    if let Some(why) = report["stopped"].as_str() {
        out.push_str(&format!("idem: the replay stopped before its end: {why}\n"));
    }
    out
}

/// The config at `path` and idem's own pool on its database, its
/// migrations checked: what the commands that read idem's tables start with.
pub(super) async fn config_and_pool(path: &std::path::Path) -> anyhow::Result<(crate::config::Config, sqlx::PgPool)> {
    let config = crate::app::loading::load_config(path)?;
    let shown = crate::app::startup::redact(&config.database.url);
    let pool = sqlx::PgPool::connect(&config.database.url)
        .await
        .with_context(|| format!("database unreachable at {shown}"))?;
    crate::migrate::check(&pool).await?;
    Ok((config, pool))
}

/// `idem outbox --remove-producer`.
pub(super) async fn end_producer(
    config: &std::path::Path,
    name: &str,
    database_url: Option<String>,
) -> anyhow::Result<()> {
    let config = crate::app::loading::load_config(config)?;
    if crate::outbox::producers(&config).iter().any(|p| p == name) {
        anyhow::bail!("`{name}` is a producer of this config: remove it from the config first");
    }
    let url = database_url.unwrap_or_else(|| config.database.url.clone());
    let shown = crate::app::startup::redact(&url);
    let pool = sqlx::PgPool::connect(&url).await.with_context(|| format!("database unreachable at {shown}"))?;
    for line in crate::outbox::provision::remove(&pool, name).await? {
        outln!("idem: outbox: {line}")?;
    }
    Ok(())
}

pub(super) async fn maintenance(config: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let (config, pool) = config_and_pool(config).await?;
    crate::retention::check_mode(&pool, &config.retention).await?;
    // As a host starting with this config would.
    crate::retention::record(&pool, &config).await?;
    let report = crate::retention::Maintenance::new(pool, config.retention.clone()).pass().await?;
    if json {
        outln!("{}", serde_json::to_string(&report)?)?;
    } else {
        let lines = report.lines();
        if lines.is_empty() {
            outln!("idem: maintenance: nothing to do")?;
        }
        for line in lines {
            outln!("idem: maintenance: {line}")?;
        }
    }
    Ok(())
}

/// `idem migrate`.
pub(super) async fn migrate(database_url: Option<String>, config: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let config = config.map(|path| crate::app::loading::load_config(&path)).transpose()?;
    let url = database_url
        .or_else(|| crate::env::get(crate::env::DATABASE_URL))
        .or_else(|| crate::env::get(crate::env::FALLBACK_DATABASE_URL))
        .or_else(|| config.as_ref().map(|c| c.database.url.clone()))
        .context("no database: pass --database-url or --config, or set IDEM_DATABASE_URL")?;
    if let Some(config) = &config {
        same_database(&url, &config.database_name()?)?;
    }
    let shown = crate::app::startup::redact(&url);
    let pool = sqlx::PgPool::connect(&url).await.with_context(|| format!("failed to connect to {shown}"))?;
    let mode = config.as_ref().map_or(crate::config::RetentionMode::Partition, |c| c.retention.mode);
    let crate::migrate::Newer(newer) = crate::migrate::apply_for(&pool, mode).await?;
    if let Some(newest) = newer.last() {
        outln!(
            "idem: this database has {} migration(s) of a newer idem (up to {newest}) and every one this idem knows: \
             nothing applied, the newer ones left as they are",
            newer.len()
        )?;
    } else {
        outln!("idem: idem's migrations applied")?;
    }
    if let Some(config) = config {
        for line in crate::migrate::provision(&pool, &config).await? {
            outln!("idem: {line}")?;
        }
        // Before any maintenance pass: a pass keeps windows for the
        // retentions recorded, and upgraded rows count as 7 days.
        crate::retention::record(&pool, &config).await?;
        outln!("idem: dedup retentions recorded")?;
    }
    Ok(())
}

/// Refuses an administrator's URL naming another database than the
/// config's: `idem migrate --config` would provision handlers where `idem
/// run` never looks (a `DATABASE_URL` left in a shell for another project,
/// say), and `run` would then find idem's migrations missing.
fn same_database(admin_url: &str, configured: &str) -> anyhow::Result<()> {
    let admin: sqlx::postgres::PgConnectOptions =
        admin_url.parse().context("the administrator's database URL is not a PostgreSQL URL")?;
    let admin = admin.get_database().unwrap_or(admin.get_username());
    anyhow::ensure!(
        admin == configured,
        "the administrator's URL (--database-url, IDEM_DATABASE_URL or DATABASE_URL) names database `{admin}`, \
         the config's [database] url names `{configured}`: idem migrate --config would provision a database \
         idem run does not use; pass --database-url for `{configured}`"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::same_database;

    #[test]
    fn an_administrators_url_for_another_database_is_refused_naming_both() {
        assert!(same_database("postgres://postgres@localhost/shop?sslmode=disable", "shop").is_ok());
        assert!(same_database("postgres://postgres@%2Fvar%2Frun%2Fpostgresql/shop", "shop").is_ok(), "a socket");
        let e = same_database("postgres://postgres@127.0.0.1:5432/postgres", "shop").expect_err("another database");
        let text = format!("{e:#}");
        assert!(text.contains("`postgres`") && text.contains("`shop`"), "{text}");
    }
}
