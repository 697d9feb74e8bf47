//! A rewind's window counted against the dedup ledger: how many records
//! it holds, how many of their events were applied already (skipped as
//! duplicates when run again), how many were not, how many are older than
//! the handler's dedup retention (their rows may be gone, so "not in the
//! ledger" would not mean "not applied"), and how many are not valid
//! events at all. Before a rewind that is its dry run; after it, with the
//! time the partition was rewound, its report: what the ledger got before
//! that time was a duplicate, what it got since was applied anew.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;
use uuid::Uuid;

use super::target::Window;
use crate::config::{Config, HandlerConfig};
use crate::pipeline::HandlerContext;
use crate::validate::Validator;

/// Records one count reads at most, over all its partitions: past that
/// the counts are lower bounds (`capped`).
pub const MAX_COUNTED: usize = 1_000_000;

/// Event ids looked up in the ledger per query.
const CHUNK: usize = 10_000;

/// What one partition's window holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub partition: i32,
    /// The window: from `to` up to `end` (not included).
    pub to: i64,
    pub end: i64,
    /// Records read in it.
    pub records: u64,
    /// Events the ledger held before the rewind (all it holds, in a dry
    /// run): duplicates when they run again.
    pub applied_before: u64,
    /// Events the ledger got since the rewind: applied anew (0 in a dry run).
    pub applied_since: u64,
    /// Events the ledger does not hold: run by the rewind (in a report:
    /// not yet, or failed again).
    pub not_applied: u64,
    /// Of the events, those older than the handler's `dedup_retention`.
    pub past_retention: u64,
    /// Records that are not valid events: dead-lettered again when run.
    pub invalid: u64,
    /// The reading stopped at [`MAX_COUNTED`]: the counts are lower bounds.
    pub capped: bool,
}

/// One partition's window and, after its rewind, when it was rewound.
pub type Asked = (Window, Option<chrono::DateTime<chrono::Utc>>);

/// Counts each window of `handler`'s topic (reading it on a blocking
/// thread), then looks its events up in the ledger.
pub(crate) async fn count(config: Arc<Config>, handler: Arc<HandlerContext>, asked: &[Asked]) -> anyhow::Result<Vec<Count>> {
    let windows: Vec<Window> = asked.iter().map(|(w, _)| *w).collect();
    let reading = handler.clone();
    let read = tokio::task::spawn_blocking(move || read_ids(&config, &reading.config, &reading.validator, &windows))
        .await
        .context("the window's reader panicked")??;
    // `None`: a retention too long to reach back (nothing is past it).
    let retention = chrono::Duration::from_std(handler.config.dedup_retention.0).ok();
    let oldest_kept = retention.and_then(|r| chrono::Utc::now().checked_sub_signed(r));
    let mut counts = Vec::new();
    for ((window, rewound), (ids, capped)) in asked.iter().zip(read) {
        let valid: Vec<Uuid> = ids.iter().flatten().copied().collect();
        let ledger = processed(&handler.idem_pool, &handler.name, &valid).await?;
        let mut count = tally(&ids, &ledger, *rewound, oldest_kept);
        (count.partition, count.to, count.end, count.capped) = (window.partition, window.to, window.end, capped);
        counts.push(count);
    }
    Ok(counts)
}

/// The counts of a window's records (`ids`: each one's event id, `None`
/// if not a valid event) given when the ledger got each event, when the
/// partition was rewound (`None`: not yet, a dry run) and the oldest
/// event the dedup retention keeps (`None`: none is past it).
fn tally(
    ids: &[Option<Uuid>],
    ledger: &HashMap<Uuid, chrono::DateTime<chrono::Utc>>,
    rewound: Option<chrono::DateTime<chrono::Utc>>,
    oldest_kept: Option<chrono::DateTime<chrono::Utc>>,
) -> Count {
    let mut count = Count { records: ids.len() as u64, ..Count::default() };
    for id in ids {
        let Some(id) = id else {
            count.invalid += 1;
            continue;
        };
        if crate::event::created_at(id).zip(oldest_kept).is_some_and(|(at, oldest)| at < oldest) {
            count.past_retention += 1;
        }
        match (ledger.get(id), rewound) {
            (None, _) => count.not_applied += 1,
            (Some(at), Some(rewound)) if *at >= rewound => count.applied_since += 1,
            (Some(_), _) => count.applied_before += 1,
        }
    }
    count
}

/// When the ledger got each of `ids` for `consumer` (those it holds).
async fn processed(
    pool: &sqlx::PgPool,
    consumer: &str,
    ids: &[Uuid],
) -> anyhow::Result<HashMap<Uuid, chrono::DateTime<chrono::Utc>>> {
    let mut found = HashMap::new();
    for chunk in ids.chunks(CHUNK) {
        let rows: Vec<(Uuid, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
            "SELECT event_id, processed_at FROM idem.processed_event WHERE consumer = $1 AND event_id = ANY($2)",
        )
        .bind(consumer)
        .bind(chunk)
        .fetch_all(pool)
        .await
        .context("failed to look the window's events up in the dedup ledger")?;
        found.extend(rows);
    }
    Ok(found)
}

/// Each window's records as event ids (`None`: not a valid event), and
/// whether the reading stopped at [`MAX_COUNTED`].
fn read_ids(
    config: &Config,
    handler: &HandlerConfig,
    validator: &Validator,
    windows: &[Window],
) -> anyhow::Result<Vec<(Vec<Option<Uuid>>, bool)>> {
    let reader = crate::pipeline::replay::small_reader(config, handler, "read_committed", "a window reader")?;
    let topic = handler.topic.as_str();
    let mut left = MAX_COUNTED;
    let mut out = Vec::new();
    for window in windows {
        let read = crate::pipeline::window::read(
            &reader,
            validator,
            (topic, window.partition),
            (window.to, window.end),
            left,
        )?;
        left -= read.records.len();
        out.push((read.records.into_iter().map(|(_, id)| id.ok()).collect(), read.capped));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    use super::{Count, tally};

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap_or_default()
    }

    fn id_at(ms: i64) -> Uuid {
        uuid::Builder::from_unix_timestamp_millis(u64::try_from(ms).unwrap_or(0), &[7; 10]).into_uuid()
    }

    #[test]
    fn a_window_is_told_apart_by_the_ledger_the_rewind_and_the_retention() {
        let day = 86_400_000;
        let (old, a, b, c) = (id_at(day), id_at(10 * day), id_at(10 * day + 1), id_at(10 * day + 2));
        let ids = [Some(old), Some(a), None, Some(b), Some(c)];
        let ledger = HashMap::from([(old, at(day)), (a, at(10 * day)), (b, at(12 * day))]);
        let oldest = Some(at(5 * day));
        let dry = tally(&ids, &ledger, None, oldest);
        let expected =
            Count { records: 5, applied_before: 3, not_applied: 1, past_retention: 1, invalid: 1, ..Count::default() };
        assert_eq!(dry, expected, "a dry run: whatever the ledger holds is skipped");
        let report = tally(&ids, &ledger, Some(at(11 * day)), oldest);
        let expected = Count { applied_before: 2, applied_since: 1, ..expected };
        assert_eq!(report, expected, "after the rewind: b was applied anew, c not at all");
        assert_eq!(tally(&ids, &ledger, None, None).past_retention, 0, "a retention too long to reach back");
    }
}
