//! Discarding dead letters: an operator's word that a dead letter needs no
//! replay (a test order, a customer refunded by hand). The record stays on
//! the topic, which is append-only and the source of truth; its row in the
//! index is marked `discarded`, which a rebuild of the index keeps (it
//! rewrites what it reads from the record, never the outcome), and every
//! replay (`idem dlq replay`, the API's, the console's) leaves a discarded
//! record alone and counts it. A restore clears the mark.

use serde::Serialize;
use sqlx::PgPool;

use super::search::{Search, SearchError, filtered};

/// Which dead letters: those a search matches (its paging ignored), or
/// these positions (DLQ partition, offset).
#[derive(Debug, Clone, Copy)]
pub enum Chosen<'a> {
    Search(&'a Search),
    Records(&'a [(i32, i64)]),
}

/// What a discard (or restore) found and changed.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Discarded {
    /// Dead letters the selection matched.
    pub matched: i64,
    /// Those whose mark changed (a dry run: would change); the rest were
    /// discarded already (restore: were not discarded).
    pub changed: i64,
    pub dry_run: bool,
    pub restore: bool,
}

/// Marks `chosen` dead letters of `handler` discarded (`restore`: clears
/// the mark); a dry run counts only.
pub async fn discard(
    pool: &PgPool,
    handler: &str,
    chosen: Chosen<'_>,
    restore: bool,
    dry_run: bool,
) -> Result<Discarded, SearchError> {
    let filters = match chosen {
        Chosen::Search(search) => search.filters()?,
        Chosen::Records(records) => Search::default().filters()?.at(records),
    };
    let matched: i64 =
        filtered("SELECT count(*) FROM idem.dead_letter", handler, &filters).build_query_scalar().fetch_one(pool).await?;
    // Only rows whose mark changes: a discard keeps the time of the first.
    let (set, unless) = if restore {
        ("UPDATE idem.dead_letter SET outcome = NULL, outcome_at = now()", " AND outcome = 'discarded'")
    } else {
        ("UPDATE idem.dead_letter SET outcome = 'discarded', outcome_at = now()", " AND outcome IS DISTINCT FROM 'discarded'")
    };
    let changed = if dry_run {
        let mut q = filtered("SELECT count(*) FROM idem.dead_letter", handler, &filters);
        q.push(unless);
        q.build_query_scalar().fetch_one(pool).await?
    } else {
        let mut q = filtered(set, handler, &filters);
        q.push(unless);
        i64::try_from(q.build().execute(pool).await?.rows_affected()).unwrap_or(i64::MAX)
    };
    Ok(Discarded { matched, changed, dry_run, restore })
}
