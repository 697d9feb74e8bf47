//! Searching the dead-letter index (`index`): filters, totals by class and
//! by reason pattern, pages both ways by a cursor. Every filter is a
//! condition on one table, so a search at 100,000 dead letters is one
//! index or sequential scan of small rows (the benchmark in the explorer's
//! test prints its times).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, QueryBuilder, Row as _};
use uuid::Uuid;

/// Records a page shows at most.
pub const MAX_PAGE: usize = 500;
/// Reason patterns the totals list, most frequent first.
const PATTERNS_LISTED: i64 = 20;
/// Characters of a payload shown in a row (the topic has all of it).
const PAYLOAD_SHOWN: usize = 2_000;

/// What to find, as the query string says it: every field optional,
/// together they narrow. Each is read and checked by `Search::read`,
/// which names the field a value is wrong for.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// A failure class (`permanent`, `invalid`, …).
    pub class: Option<String>,
    /// A reason pattern exactly as the totals name it.
    pub pattern: Option<String>,
    /// Text the reason contains (any case).
    pub reason: Option<String>,
    /// The record's key, exactly.
    pub key: Option<String>,
    pub event_id: Option<String>,
    /// A source header the record carries (its name).
    pub header: Option<String>,
    /// A field of the JSON payload, dotted, and the value it must have
    /// (as text), in one: `customer.id=42`.
    pub field: Option<String>,
    /// RFC 3339.
    pub since: Option<String>,
    pub until: Option<String>,
    /// What a replay made of it: `applied`, `duplicate`, `failed_again`, …,
    /// or `none` (never replayed).
    pub outcome: Option<String>,
    /// `newest` (the default) or `oldest` first.
    pub order: Option<String>,
    /// The page after the row this cursor names (a page's `next`).
    pub after: Option<String>,
    /// The page before it (a page's `previous`).
    pub before: Option<String>,
    /// Rows shown (1 to [`MAX_PAGE`], 100 by default).
    pub limit: Option<String>,
}

/// A [`Search`] read: what the queries bind.
#[derive(Debug, Default)]
pub(super) struct Filters {
    class: Option<String>,
    pattern: Option<String>,
    reason: Option<String>,
    key: Option<String>,
    event_id: Option<Uuid>,
    header: Option<String>,
    field: Option<(Vec<String>, String)>,
    since: Option<chrono::DateTime<chrono::Utc>>,
    until: Option<chrono::DateTime<chrono::Utc>>,
    outcome: Option<String>,
    /// Only these rows (DLQ partitions and offsets, side by side).
    positions: Option<(Vec<i32>, Vec<i64>)>,
}

impl Filters {
    /// Narrowed to the rows at `positions` (partition, offset).
    pub(super) fn at(self, positions: &[(i32, i64)]) -> Self {
        Self { positions: Some(positions.iter().copied().unzip()), ..self }
    }
}

/// How a page is read: from `after` on, or back from `before`; with both,
/// the rows between them, read from `after` on.
#[derive(Debug, Clone, Copy)]
struct Paging {
    limit: usize,
    newest_first: bool,
    after: Option<Cursor>,
    before: Option<Cursor>,
}

impl Search {
    /// The search with every blank text filter taken as not given
    /// (`?class=&key=` is a form left blank, not a search for empty text)
    /// and NUL written as the index keeps it ([`super::index::text`]). Typed
    /// values (a time, an id, a cursor, an order, a limit) are read as
    /// given: an empty one is wrong, and refused naming it.
    fn given(&self) -> Search {
        let text = |v: &Option<String>| v.as_deref().filter(|v| !v.is_empty()).map(super::index::text);
        Search {
            class: text(&self.class),
            pattern: text(&self.pattern),
            reason: text(&self.reason),
            key: text(&self.key),
            header: text(&self.header),
            field: text(&self.field),
            outcome: text(&self.outcome),
            ..self.clone()
        }
    }

    /// The filters alone (a discard's), or what is wrong with which field.
    pub(super) fn filters(&self) -> Result<Filters, SearchError> {
        Ok(self.read()?.0)
    }

    /// The filters and the paging, or what is wrong with which field.
    fn read(&self) -> Result<(Filters, Paging), SearchError> {
        let given = self.given();
        let s = &given;
        let invalid = |field: &str, why: String| SearchError::Invalid(format!("{field}: {why}"));
        let time = |field: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| {
                    chrono::DateTime::parse_from_rfc3339(t)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .map_err(|e| invalid(field, format!("`{t}` is not an RFC 3339 time ({e})")))
                })
                .transpose()
        };
        let limit = match s.limit.as_deref() {
            None => 100,
            Some(text) => match text.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
                _ => return Err(invalid("limit", format!("`{text}`: a page has 1 to {MAX_PAGE} rows"))),
            },
        };
        let newest_first = match s.order.as_deref() {
            None | Some("newest") => true,
            Some("oldest") => false,
            Some(other) => return Err(invalid("order", format!("`{other}`: newest or oldest"))),
        };
        let field = match s.field.as_deref().map(|f| f.split_once('=')) {
            None => None,
            Some(Some((path, value))) if !path.is_empty() => {
                Some((path.split('.').map(str::to_owned).collect(), value.to_owned()))
            }
            Some(_) => {
                let text = s.field.as_deref().unwrap_or_default();
                return Err(invalid("field", format!("`{text}`: give PATH=VALUE, e.g. customer.id=42")));
            }
        };
        let event_id = s
            .event_id
            .as_deref()
            .map(|id| Uuid::parse_str(id).map_err(|e| invalid("event_id", format!("`{id}` is not a UUID ({e})"))))
            .transpose()?;
        let (after, before) = (cursor("after", &s.after)?, cursor("before", &s.before)?);
        let filters = Filters {
            class: s.class.clone(),
            pattern: s.pattern.clone(),
            reason: s.reason.clone(),
            key: s.key.clone(),
            event_id,
            header: s.header.clone(),
            field,
            since: time("since", &s.since)?,
            until: time("until", &s.until)?,
            outcome: s.outcome.clone(),
            positions: None,
        };
        Ok((filters, Paging { limit, newest_first, after, before }))
    }
}

/// A page of dead letters and the totals of everything that matched.
#[derive(Debug, Serialize)]
pub struct Found {
    /// Dead letters matching the filters (all pages).
    pub total: i64,
    pub by_class: BTreeMap<String, i64>,
    /// The most frequent reason patterns among them: class, pattern, count.
    pub patterns: Vec<(Option<String>, Option<String>, i64)>,
    pub rows: Vec<Row>,
    /// Cursors for the next and the previous page (`None`: none there).
    pub next: Option<String>,
    pub previous: Option<String>,
}

/// One dead letter as the index has it.
#[derive(Debug, Serialize)]
pub struct Row {
    pub partition: i32,
    pub offset: i64,
    pub authenticity: String,
    pub failed_at: chrono::DateTime<chrono::Utc>,
    pub class: Option<String>,
    pub reason: Option<String>,
    pub pattern: Option<String>,
    pub attempts: Option<i32>,
    pub replays: i32,
    pub envelope: bool,
    pub source_topic: Option<String>,
    pub source_partition: Option<i32>,
    pub source_offset: Option<i64>,
    pub key: Option<String>,
    pub event_id: Option<Uuid>,
    pub header_names: Vec<String>,
    pub payload_bytes: i32,
    /// The JSON payload (cut at 2,000 characters), when it is one.
    pub payload: Option<String>,
    pub outcome: Option<String>,
    pub outcome_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A search the index cannot answer as asked.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("{0}")]
    Invalid(String),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// The earliest time PostgreSQL's `timestamptz` holds (4713-11-24 BC),
/// and a time past every dead letter both it and chrono hold.
const EARLIEST_MICROS: i64 = -210_866_803_200_000_000;
const LATEST_MICROS: i64 = 8_000_000_000_000_000_000;

/// Where a page starts: the row's time, partition and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    micros: i64,
    partition: i32,
    offset: i64,
}

impl Cursor {
    fn of(row: &Row) -> String {
        format!("{}.{}.{}", row.failed_at.timestamp_micros(), row.partition, row.offset)
    }

    fn parse(field: &str, text: &str) -> Result<Self, SearchError> {
        let bad = || {
            SearchError::Invalid(format!("{field}: `{text}` is not a cursor: pass a page's `next` or `previous`"))
        };
        let mut parts = text.split('.');
        let mut field = || parts.next().ok_or_else(bad);
        // A cursor's time is any i64 of microseconds; one before the
        // earliest PostgreSQL holds (4713 BC) or after the latest chrono
        // does names the same page as that edge: no row lies beyond it.
        let micros = field()?.parse::<i64>().map_err(|_| bad())?.clamp(EARLIEST_MICROS, LATEST_MICROS);
        let partition = field()?.parse().map_err(|_| bad())?;
        let offset = field()?.parse().map_err(|_| bad())?;
        Ok(Self { micros, partition, offset })
    }
}

/// `handler`'s dead letters matching `search`.
pub async fn search(pool: &PgPool, handler: &str, search: &Search) -> Result<Found, SearchError> {
    let (filters, paging) = search.read()?;
    let total: i64 = filtered("SELECT count(*) FROM idem.dead_letter", handler, &filters)
        .build_query_scalar()
        .fetch_one(pool)
        .await?;
    let mut by_class = BTreeMap::new();
    let mut q = filtered("SELECT coalesce(class, authenticity), count(*) FROM idem.dead_letter", handler, &filters);
    for row in q.push(" GROUP BY 1").build().fetch_all(pool).await? {
        by_class.insert(row.try_get(0)?, row.try_get(1)?);
    }
    let mut q = filtered("SELECT class, pattern, count(*) FROM idem.dead_letter", handler, &filters);
    q.push(" GROUP BY 1, 2 ORDER BY 3 DESC, 2 LIMIT ").push_bind(PATTERNS_LISTED);
    let patterns = q
        .build()
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let (rows, more) = page(pool, handler, &filters, paging).await?;
    // `more`: rows beyond this page in the direction it was read.
    let backwards = paging.backwards();
    let (next, previous) = match (rows.first(), rows.last()) {
        (Some(first), Some(last)) => {
            let next = if backwards { true } else { more };
            let previous = if backwards { more } else { paging.after.is_some() };
            (next.then(|| Cursor::of(last)), previous.then(|| Cursor::of(first)))
        }
        _ => (None, None),
    };
    Ok(Found { total, by_class, patterns, rows, next, previous })
}

/// The DLQ positions of every dead letter of `handler` matching `search`
/// (its paging ignored), when there are at most `max`; else how many.
pub async fn positions(
    pool: &PgPool,
    handler: &str,
    search: &Search,
    max: usize,
) -> Result<Result<Vec<(i32, i64)>, i64>, SearchError> {
    let (filters, _) = search.read()?;
    let mut q = filtered("SELECT \"partition\", \"offset\" FROM idem.dead_letter", handler, &filters);
    q.push(" ORDER BY \"partition\", \"offset\" LIMIT ").push_bind(i64::try_from(max + 1).unwrap_or(i64::MAX));
    let found: Vec<(i32, i64)> = q.build_query_as().fetch_all(pool).await?;
    if found.len() <= max {
        return Ok(Ok(found));
    }
    let total: i64 =
        filtered("SELECT count(*) FROM idem.dead_letter", handler, &filters).build_query_scalar().fetch_one(pool).await?;
    Ok(Err(total))
}

fn cursor(field: &str, text: &Option<String>) -> Result<Option<Cursor>, SearchError> {
    text.as_deref().map(|t| Cursor::parse(field, t)).transpose()
}

/// One page in display order, and whether rows lie beyond it in the
/// direction it was read.
async fn page(pool: &PgPool, handler: &str, filters: &Filters, paging: Paging) -> Result<(Vec<Row>, bool), SearchError> {
    let select = format!(
        "SELECT \"partition\", \"offset\", authenticity, failed_at, class, reason, pattern, attempts, replays, \
         envelope, source_topic, source_partition, source_offset, record_key, event_id, header_names, \
         payload_bytes, left(payload::text, {PAYLOAD_SHOWN}), outcome, outcome_at FROM idem.dead_letter"
    );
    let mut q = filtered(select, handler, filters);
    // Read backwards (towards the previous page) in the opposite order.
    let descending = paging.newest_first != paging.backwards();
    let (past, short_of) = if descending { ("<", ">") } else { (">", "<") };
    if let Some(from) = paging.after.or(paging.before) {
        beyond(&mut q, past, from)?;
    }
    if let (Some(_), Some(to)) = (paging.after, paging.before) {
        beyond(&mut q, short_of, to)?;
    }
    let direction = if descending { "DESC" } else { "ASC" };
    q.push(format!(" ORDER BY failed_at {direction}, \"partition\" {direction}, \"offset\" {direction} LIMIT "))
        .push_bind(i64::try_from(paging.limit + 1).unwrap_or(i64::MAX));
    let mut rows = q.build().fetch_all(pool).await?.iter().map(row).collect::<Result<Vec<_>, _>>()?;
    let more = rows.len() > paging.limit;
    rows.truncate(paging.limit);
    if paging.backwards() {
        rows.reverse();
    }
    Ok((rows, more))
}

impl Paging {
    /// Read back from `before` (no `after` given).
    fn backwards(&self) -> bool {
        self.before.is_some() && self.after.is_none()
    }
}

/// `AND` the rows `op` (`<` or `>`) the cursor `at` in display order.
fn beyond(q: &mut QueryBuilder<'_, Postgres>, op: &str, at: Cursor) -> Result<(), SearchError> {
    let time = chrono::DateTime::from_timestamp_micros(at.micros)
        .ok_or_else(|| SearchError::Invalid(format!("the cursor's time {} is out of range", at.micros)))?;
    q.push(format!(" AND (failed_at, \"partition\", \"offset\") {op} ("))
        .push_bind(time)
        .push(", ")
        .push_bind(at.partition)
        .push(", ")
        .push_bind(at.offset)
        .push(")");
    Ok(())
}

fn row(r: &sqlx::postgres::PgRow) -> Result<Row, sqlx::Error> {
    Ok(Row {
        partition: r.try_get(0)?,
        offset: r.try_get(1)?,
        authenticity: r.try_get(2)?,
        failed_at: r.try_get(3)?,
        class: r.try_get(4)?,
        reason: r.try_get(5)?,
        pattern: r.try_get(6)?,
        attempts: r.try_get(7)?,
        replays: r.try_get(8)?,
        envelope: r.try_get(9)?,
        source_topic: r.try_get(10)?,
        source_partition: r.try_get(11)?,
        source_offset: r.try_get(12)?,
        key: r.try_get(13)?,
        event_id: r.try_get(14)?,
        header_names: r.try_get(15)?,
        payload_bytes: r.try_get(16)?,
        payload: r.try_get(17)?,
        outcome: r.try_get(18)?,
        outcome_at: r.try_get(19)?,
    })
}

/// `select` with `WHERE` the handler and every filter.
pub(super) fn filtered<'a>(select: impl Into<String>, handler: &'a str, f: &'a Filters) -> QueryBuilder<'a, Postgres> {
    let mut q = QueryBuilder::new(select.into());
    q.push(" WHERE handler = ").push_bind(handler);
    for (column, value) in [("class", &f.class), ("pattern", &f.pattern), ("record_key", &f.key)] {
        if let Some(value) = value {
            q.push(format!(" AND {column} = ")).push_bind(value);
        }
    }
    if let Some(text) = &f.reason {
        q.push(" AND strpos(lower(reason), lower(").push_bind(text).push(")) > 0");
    }
    if let Some(id) = f.event_id {
        q.push(" AND event_id = ").push_bind(id);
    }
    if let Some(name) = &f.header {
        q.push(" AND ").push_bind(name).push(" = ANY(header_names)");
    }
    if let Some((path, value)) = &f.field {
        q.push(" AND payload #>> ").push_bind(path).push(" = ").push_bind(value);
    }
    if let Some(since) = f.since {
        q.push(" AND failed_at >= ").push_bind(since);
    }
    if let Some(until) = f.until {
        q.push(" AND failed_at < ").push_bind(until);
    }
    match f.outcome.as_deref() {
        None => {}
        Some("none") => {
            q.push(" AND outcome IS NULL");
        }
        Some(outcome) => {
            q.push(" AND outcome = ").push_bind(outcome);
        }
    }
    if let Some((partitions, offsets)) = &f.positions {
        q.push(" AND (\"partition\", \"offset\") IN (SELECT * FROM unnest(")
            .push_bind(partitions)
            .push("::integer[], ")
            .push_bind(offsets)
            .push("::bigint[]))");
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(search: Search) -> String {
        match search.read() {
            Err(SearchError::Invalid(message)) => message,
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn each_wrong_value_is_refused_naming_its_field() {
        let s = |f: fn(&mut Search)| {
            let mut search = Search::default();
            f(&mut search);
            search
        };
        assert!(refused(s(|s| s.limit = Some("0".into()))).starts_with("limit: `0`"));
        assert!(refused(s(|s| s.limit = Some("ten".into()))).starts_with("limit:"));
        assert!(refused(s(|s| s.order = Some("sideways".into()))).starts_with("order:"));
        assert!(refused(s(|s| s.event_id = Some("42".into()))).starts_with("event_id: `42`"));
        assert!(refused(s(|s| s.since = Some("yesterday".into()))).starts_with("since: `yesterday`"));
        assert!(refused(s(|s| s.field = Some("customer.id".into()))).starts_with("field: `customer.id`"));
        assert!(refused(s(|s| s.field = Some("=42".into()))).starts_with("field:"));
        assert!(refused(s(|s| s.after = Some("1.2".into()))).starts_with("after: `1.2` is not a cursor"));
        assert!(refused(s(|s| s.limit = Some(String::new()))).starts_with("limit: ``"));
        assert!(refused(s(|s| s.event_id = Some(String::new()))).starts_with("event_id: ``"));
    }

    #[test]
    fn a_search_reads_into_filters_and_paging() {
        let search = Search {
            field: Some("customer.id=42".into()),
            since: Some("2026-12-01T00:00:00+01:00".into()),
            after: Some("1764543600000000.3.17".into()),
            order: Some("oldest".into()),
            limit: Some("500".into()),
            ..Search::default()
        };
        let (filters, paging) = search.read().expect("valid");
        assert_eq!(filters.field, Some((vec!["customer".to_owned(), "id".to_owned()], "42".to_owned())));
        assert_eq!(filters.since.map(|t| t.to_rfc3339()).as_deref(), Some("2026-11-30T23:00:00+00:00"));
        assert_eq!(paging.after, Some(Cursor { micros: 1_764_543_600_000_000, partition: 3, offset: 17 }));
        assert!(!paging.newest_first && paging.limit == 500);
    }

    #[test]
    fn blank_text_filters_are_not_given_and_nul_reads_as_the_index_keeps_it() {
        let e = || Some(String::new());
        let blank = Search {
            class: e(),
            pattern: e(),
            reason: e(),
            key: e(),
            header: e(),
            field: e(),
            outcome: e(),
            ..Search::default()
        };
        let (filters, paging) = blank.read().expect("a blank form is a search for everything");
        assert!(filters.class.is_none() && filters.pattern.is_none() && filters.reason.is_none());
        assert!(filters.key.is_none() && filters.header.is_none() && filters.field.is_none());
        assert!(filters.outcome.is_none() && paging.after.is_none() && paging.newest_first && paging.limit == 100);
        let nul = Search { key: Some("a\0b".into()), field: Some("x=\0".into()), ..Search::default() };
        let (filters, _) = nul.read().expect("NUL is text");
        assert_eq!(filters.key.as_deref(), Some("a\u{2400}b"));
        assert_eq!(filters.field.map(|f| f.1).as_deref(), Some("\u{2400}"));
    }

    #[test]
    fn a_window_between_two_cursors_reads_forwards() {
        let both = Search { after: Some("1.2.3".into()), before: Some("4.5.6".into()), ..Search::default() };
        let (_, paging) = both.read().expect("a window");
        assert!(!paging.backwards());
        let far = Search { after: Some("-9223372036854775808.0.0".into()), ..Search::default() };
        assert_eq!(far.read().expect("a time past every row").1.after.map(|c| c.micros), Some(EARLIEST_MICROS));
        let (_, back) = Search { before: Some("4.5.6".into()), ..Search::default() }.read().expect("valid");
        assert!(back.backwards());
    }
}
