//! What accounts for a record below the committed offset: the dedup
//! ledger (its event took effect, here or at another offset), the
//! dead-letter index, the quarantine, or the dedup retention (an event
//! older than it may have lost its row legitimately). Looked up per chunk
//! of records; the verdict per record is [`account`], without I/O.

use std::collections::{HashMap, HashSet};

use anyhow::Context as _;
use uuid::Uuid;

/// What a record comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Account {
    /// Its event's dedup row names this record.
    Applied,
    /// Its event took effect from another record (a redelivery).
    Duplicate,
    /// The dead-letter index holds it.
    DeadLettered,
    /// The quarantine holds it.
    Parked,
    /// Its event is older than what the dedup retention guards.
    PastRetention,
    /// Nothing accounts for it: why.
    Unaccounted(&'static str),
}

/// What the database holds about one chunk of a partition's records.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Each event's dedup row: where it was applied (topic, partition,
    /// offset) and by which module version.
    pub ledger: HashMap<Uuid, (String, i32, i64, Option<i32>)>,
    /// The handler's stored versions, each with whether it ever ran live
    /// events (active or a canary); empty when it has none (a file).
    pub versions: HashMap<i32, bool>,
    /// Offsets of the partition the dead-letter index holds.
    pub dead_lettered: HashSet<i64>,
    /// Offsets of the partition the quarantine holds.
    pub parked: HashSet<i64>,
}

/// The verdict on the record at `offset` of `topic`/`partition` whose
/// event is `id` (`None`: not a valid event), given `facts` and the
/// oldest event the retention guards (`None`: every event is guarded).
pub(crate) fn account(
    (topic, partition, offset): (&str, i32, i64),
    id: Option<Uuid>,
    facts: &Facts,
    oldest_guarded: Option<chrono::DateTime<chrono::Utc>>,
) -> Account {
    if facts.dead_lettered.contains(&offset) {
        return Account::DeadLettered;
    }
    if facts.parked.contains(&offset) {
        return Account::Parked;
    }
    let Some(id) = id else {
        return Account::Unaccounted("not a valid event, and not in the dead-letter index");
    };
    match facts.ledger.get(&id) {
        Some((.., Some(v))) if !facts.versions.is_empty() && facts.versions.get(v) != Some(&true) => {
            Account::Unaccounted(if facts.versions.contains_key(v) {
                "its dedup row names a module version that was never active nor a canary"
            } else {
                "its dedup row names a module version the store does not hold"
            })
        }
        Some((t, p, o, _)) if t == topic && *p == partition && *o == offset => Account::Applied,
        Some(_) => Account::Duplicate,
        None if crate::event::created_at(&id).zip(oldest_guarded).is_some_and(|(at, oldest)| at < oldest) => {
            Account::PastRetention
        }
        None => Account::Unaccounted("its event has no dedup row, and it is neither dead-lettered nor parked"),
    }
}

/// What the database holds about `records` (offset, event id) of
/// `topic`/`partition` for `handler`.
pub(crate) async fn facts(
    pool: &sqlx::PgPool,
    handler: &str,
    (topic, partition): (&str, i32),
    records: &[(i64, Option<Uuid>)],
) -> anyhow::Result<Facts> {
    let (Some(first), Some(last)) = (records.first().map(|r| r.0), records.last().map(|r| r.0)) else {
        return Ok(Facts::default());
    };
    let place = (handler, topic, partition, first, last);
    let parked = offsets(
        pool,
        "SELECT \"offset\" FROM idem.parked_event WHERE handler = $1 AND topic = $2 \
         AND \"partition\" = $3 AND \"offset\" BETWEEN $4 AND $5",
        place,
    )
    .await
    .context("the ledger audit: failed to read the quarantine")?;
    let dead_lettered = offsets(
        pool,
        "SELECT source_offset FROM idem.dead_letter WHERE handler = $1 AND source_topic = $2 \
         AND source_partition = $3 AND source_offset BETWEEN $4 AND $5",
        place,
    )
    .await
    .context("the ledger audit: failed to read the dead-letter index")?;
    // After the quarantine and the dead-letter index, which a record
    // leaves for the ledger: a record moving meanwhile is seen in one.
    let ids: Vec<Uuid> = records.iter().filter_map(|r| r.1).collect();
    let rows: Vec<(Uuid, String, i32, i64, Option<i32>)> = sqlx::query_as(
        "SELECT event_id, topic, \"partition\", \"offset\", module_version FROM idem.processed_event \
         WHERE consumer = $1 AND event_id = ANY($2)",
    )
    .bind(handler)
    .bind(&ids)
    .fetch_all(pool)
    .await
    .context("the ledger audit: failed to read the dedup ledger")?;
    let ledger = rows.into_iter().map(|(id, t, p, o, v)| (id, (t, p, o, v))).collect();
    let versions: Vec<(i32, bool)> =
        sqlx::query_as("SELECT version, ran_live FROM idem.handler_module WHERE handler = $1")
            .bind(handler)
            .fetch_all(pool)
            .await
            .context("the ledger audit: failed to read the module store")?;
    let (dead_lettered, parked) = (dead_lettered.into_iter().collect(), parked.into_iter().collect());
    Ok(Facts { ledger, versions: versions.into_iter().collect(), dead_lettered, parked })
}

/// The oldest event whose dedup row the retention still guards, as the
/// database records it (the claim's own bound: the retention any host
/// last recorded, and delete mode's mark), an hour later for clocks that
/// disagree (`None`: no bound, every event is guarded).
pub(crate) async fn oldest_guarded(pool: &sqlx::PgPool, handler: &str) -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
    let ms: Option<i64> = sqlx::query_scalar(
        "SELECT greatest(floor(extract(epoch FROM now() - idem.retention_of($1)) * 1000)::bigint, \
                (SELECT deleted_before FROM idem.consumer_retention WHERE consumer = $1))",
    )
    .bind(handler)
    .fetch_one(pool)
    .await
    .context("the ledger audit: failed to read the handler's dedup retention")?;
    Ok(ms.and_then(chrono::DateTime::from_timestamp_millis).map(|t| t + chrono::Duration::hours(1)))
}

/// Where the audit of `topic`/`partition` begins (`idem.audit_start`),
/// set on its first sweep: the first record the handler accounted for
/// there (its lowest offset in the ledger, the dead-letter index or the
/// quarantine), or `committed` if that is lower or there is none. Records
/// before it were never consumed by this group (it started at `latest`, or
/// before the audit existed, its rows gone).
pub(crate) async fn first_offset(
    pool: &sqlx::PgPool,
    handler: &str,
    (topic, partition): (&str, i32),
    committed: i64,
) -> anyhow::Result<i64> {
    let known: Option<i64> = sqlx::query_scalar(
        "SELECT first_offset FROM idem.audit_start WHERE handler = $1 AND topic = $2 AND \"partition\" = $3",
    )
    .bind(handler)
    .bind(topic)
    .bind(partition)
    .fetch_optional(pool)
    .await
    .context("the ledger audit: failed to read idem.audit_start")?;
    if let Some(first) = known {
        return Ok(first);
    }
    // Once per partition: the lowest offset anything accounts for.
    sqlx::query(
        "INSERT INTO idem.audit_start (handler, topic, \"partition\", first_offset) SELECT $1, $2, $3, least( \
         (SELECT min(\"offset\") FROM idem.processed_event WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3), \
         (SELECT min(source_offset) FROM idem.dead_letter WHERE handler = $1 AND source_topic = $2 \
          AND source_partition = $3), \
         (SELECT min(\"offset\") FROM idem.parked_event WHERE handler = $1 AND topic = $2 AND \"partition\" = $3), \
         $4::bigint) ON CONFLICT DO NOTHING",
    )
    .bind(handler)
    .bind(topic)
    .bind(partition)
    .bind(committed)
    .execute(pool)
    .await
    .context("the ledger audit: failed to write idem.audit_start")?;
    sqlx::query_scalar(
        "SELECT first_offset FROM idem.audit_start WHERE handler = $1 AND topic = $2 AND \"partition\" = $3",
    )
    .bind(handler)
    .bind(topic)
    .bind(partition)
    .fetch_one(pool)
    .await
    .context("the ledger audit: failed to read idem.audit_start")
}

/// Unpublished rows of each kind counted at most.
const UNPUBLISHED_COUNTED: i64 = 10_000;

/// `producer`'s outbox rows not published 10 minutes after their commit:
/// pending still, or failed; each kind counted up to [`UNPUBLISHED_COUNTED`]
/// (the oldest pending first: a relay's outage leaves a backlog the count
/// must not read whole every sweep).
pub(crate) async fn unpublished(pool: &sqlx::PgPool, producer: &str) -> anyhow::Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM (SELECT created_at FROM idem.outbox WHERE producer = $1 \
                 AND published_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT $2) pending \
                 WHERE created_at < now() - interval '10 minutes') \
         + (SELECT count(*) FROM (SELECT 1 FROM idem.outbox WHERE producer = $1 AND published_at IS NULL \
                 AND failed_at IS NOT NULL LIMIT $2) failed)",
    )
    .bind(producer)
    .bind(UNPUBLISHED_COUNTED)
    .fetch_one(pool)
    .await
    .context("the ledger audit: failed to count the outbox's unpublished rows")?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The offsets `sql` finds for (handler, topic, partition, first, last).
async fn offsets(pool: &sqlx::PgPool, sql: &str, place: (&str, &str, i32, i64, i64)) -> sqlx::Result<Vec<i64>> {
    let (handler, topic, partition, first, last) = place;
    sqlx::query_scalar(sql).bind(handler).bind(topic).bind(partition).bind(first).bind(last).fetch_all(pool).await
}

#[cfg(test)]
mod tests {
    use super::{Account, Facts, account};

    #[test]
    fn each_record_is_accounted_for_by_the_first_thing_that_holds_it() {
        let id = uuid::Uuid::now_v7();
        let mut facts = Facts::default();
        let at = ("orders", 2, 40);
        assert!(matches!(account(at, Some(id), &facts, None), Account::Unaccounted(_)), "nothing holds it");
        assert!(matches!(account(at, None, &facts, None), Account::Unaccounted(_)), "an invalid record not dead-lettered");
        facts.ledger.insert(id, ("orders".into(), 2, 40, Some(2)));
        assert_eq!(account(at, Some(id), &facts, None), Account::Applied, "no store: any version");
        facts.versions = [(1, true), (2, false)].into_iter().collect();
        assert!(matches!(account(at, Some(id), &facts, None), Account::Unaccounted(w) if w.contains("never active")));
        facts.ledger.insert(id, ("orders".into(), 2, 40, Some(3)));
        assert!(matches!(account(at, Some(id), &facts, None), Account::Unaccounted(w) if w.contains("does not hold")));
        facts.ledger.insert(id, ("orders".into(), 2, 40, Some(1)));
        assert_eq!(account(at, Some(id), &facts, None), Account::Applied);
        assert_eq!(account(("orders", 2, 41), Some(id), &facts, None), Account::Duplicate, "applied at another offset");
        facts.parked.insert(41);
        assert_eq!(account(("orders", 2, 41), Some(id), &facts, None), Account::Parked);
        facts.dead_lettered.insert(42);
        assert_eq!(account(("orders", 2, 42), None, &facts, None), Account::DeadLettered);
        let old = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, 1_000_000, 0));
        let guarded = chrono::DateTime::from_timestamp(2_000_000, 0);
        assert_eq!(account(at, Some(old), &facts, guarded), Account::PastRetention);
        assert!(matches!(account(at, Some(old), &facts, None), Account::Unaccounted(_)), "no retention: guarded");
    }
}
