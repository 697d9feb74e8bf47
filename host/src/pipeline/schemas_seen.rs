//! A registry-format handler's writer schema ids, recorded in
//! `idem.schema_seen` for the contract check (docs/formats.md): every
//! minute, the ids its records used since the last pass (last_seen is when
//! a record last used the id, to the minute), and once more when the
//! pipeline ends. Best effort: a failed write is logged, and its ids are
//! written at the next pass; nothing waits for it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::HandlerContext;

/// The contract check of one handler (docs/formats.md): its reader
/// schema against every version of its subject and every id its hosts met
/// on the topic within its dedup retention; what it cannot read, each
/// named with its schema id and field. `idem check` and every upload of a
/// module (`idem deploy`) run it.
pub(crate) async fn unreadable(
    pool: &sqlx::PgPool,
    handler: &crate::config::HandlerConfig,
    reading: &crate::formats::Reading,
) -> anyhow::Result<Vec<String>> {
    use anyhow::Context as _;
    let subject = handler.subject();
    let seen: Vec<i64> = sqlx::query_scalar(
        "SELECT schema_id FROM idem.schema_seen \
         WHERE consumer = $1 AND last_seen > now() - make_interval(secs => $2)",
    )
    .bind(&handler.name)
    .bind(handler.dedup_retention.0.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("failed to read idem.schema_seen")?;
    let seen: Vec<u32> = seen.into_iter().filter_map(|id| u32::try_from(id).ok()).collect();
    let name = &handler.name;
    let refused = reading
        .unreadable_versions(&subject, &seen)
        .await
        .with_context(|| format!("handler `{name}`: the contract check could not read subject `{subject}`"))?;
    Ok(refused.into_iter().map(|r| format!("handler `{name}`: its reader schema cannot read {r}")).collect())
}

/// How often the ids used are written.
const EVERY: Duration = Duration::from_secs(60);

/// Writes the handler's ids every [`EVERY`], until aborted.
pub(super) async fn record(shared: Arc<HandlerContext>) {
    let mut unwritten: HashSet<u32> = HashSet::new();
    loop {
        tokio::time::sleep(EVERY).await;
        if let Some(reading) = shared.validator.reading() {
            unwritten.extend(reading.met());
        }
        if write(&shared, &unwritten).await {
            unwritten.clear();
        }
    }
}

/// The last pass, as the pipeline ends: what it met is recorded however
/// short its run.
pub(super) async fn last_pass(shared: &HandlerContext) {
    let ids: HashSet<u32> = shared.validator.reading().map(|r| r.met().into_iter().collect()).unwrap_or_default();
    write(shared, &ids).await;
}

/// `ids` upserted (`true`: written, or nothing to write).
async fn write(shared: &HandlerContext, ids: &HashSet<u32>) -> bool {
    if ids.is_empty() {
        return true;
    }
    let wide: Vec<i64> = ids.iter().map(|id| i64::from(*id)).collect();
    let written = sqlx::query(
        "INSERT INTO idem.schema_seen (consumer, schema_id) SELECT $1, unnest($2::bigint[]) \
         ON CONFLICT (consumer, schema_id) DO UPDATE SET last_seen = now()",
    )
    .bind(&shared.name)
    .bind(&wide)
    .execute(&shared.idem_pool)
    .await;
    match written {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(handler = %shared.name, "failed to record the schema ids met: {e}");
            false
        }
    }
}
