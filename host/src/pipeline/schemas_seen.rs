//! A registry-format handler's writer schema ids, recorded in
//! `idem.schema_seen` for the contract check (docs/formats.md): the ids
//! this host has fetched, each once it is met and hourly while it is kept.
//! Best effort: a failed write is logged and tried again at the next pass;
//! nothing waits for it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::HandlerContext;

/// How often the handler's cache is looked at.
const EVERY: Duration = Duration::from_secs(5);
/// How often an id still kept has its last_seen refreshed.
const REFRESH: Duration = Duration::from_secs(3600);

/// Records the handler's ids until `stop`.
pub(super) async fn record(shared: Arc<HandlerContext>, mut stop: watch::Receiver<bool>) {
    let Some(reading) = shared.validator.reading() else { return };
    let mut recorded: HashSet<u32> = HashSet::new();
    let mut refreshed = Instant::now();
    loop {
        // A last pass as the host stops: what it met is recorded however
        // short its run.
        let stopping = tokio::select! {
            _ = stop.changed() => true,
            () = tokio::time::sleep(EVERY) => false,
        };
        let due = refreshed.elapsed() >= REFRESH;
        let ids: Vec<u32> = reading.met().into_iter().filter(|id| due || !recorded.contains(id)).collect();
        if ids.is_empty() {
            if stopping {
                return;
            }
            continue;
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
            Ok(_) => {
                recorded.extend(ids);
                if due {
                    refreshed = Instant::now();
                }
            }
            Err(e) => tracing::warn!(handler = %shared.name, "failed to record the schema ids met: {e}"),
        }
        if stopping {
            return;
        }
    }
}
