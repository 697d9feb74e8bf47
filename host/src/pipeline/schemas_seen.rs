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
