//! Partition mode: one window (partition) of `idem.processed_event` per UTC
//! day of the event id's time, named `processed_event_pYYYYMMDD`.
//!
//! Neither creating nor dropping a window makes a claim wait:
//! - a window is created as a table of its own and then attached: ATTACH
//!   PARTITION takes SHARE UPDATE EXCLUSIVE on the parent, which claims
//!   (ROW EXCLUSIVE) do not conflict with;
//! - a window is dropped in three steps: it is recorded in
//!   `idem.dropped_window` (from then on claims treat it as gone), detached
//!   with DETACH PARTITION … CONCURRENTLY (SHARE UPDATE EXCLUSIVE again; it
//!   then waits for the transactions that use the table, without making any
//!   new one wait), and the detached table is dropped. A plain DROP would
//!   take ACCESS EXCLUSIVE on the parent and queue every claim behind the
//!   longest transaction running. When the wait runs out (`lock_timeout`),
//!   the window stays "detach pending" and the next try finishes it (DETACH
//!   … FINALIZE).
//!
//! Which windows go: a window is dropped once it ended longer ago than the
//! longest retention any host recorded (7 days when none did). A shorter
//! rule, the longest retention among the consumers with rows in the
//! window, would drop a window that a consumer with a longer retention
//! could still need for a late event; that event would then be refused as
//! stale though it is not. The cost of the simple rule is disk only: a
//! handler with a long retention keeps every handler's windows as long.
//! Dropped windows are never created again, so after a retention is raised
//! an event in a window already dropped is refused as stale (its row may
//! have been there), never claimed.

use chrono::NaiveDate;
use sqlx::{Executor as _, PgConnection};

use super::{Dropped, Report, begin_bounded, lock_timed_out};
use crate::config::RetentionConfig;

const DAY_MS: i64 = 86_400_000;

/// One pass: the windows the retentions need are created, the expired ones
/// dropped (a lock wait that runs out defers the rest to the next pass).
pub(super) async fn pass(
    conn: &mut PgConnection,
    settings: &RetentionConfig,
    report: &mut Report,
) -> anyhow::Result<()> {
    let horizon = Horizon::read(conn).await?;
    let (existing, expired) = found(conn, &horizon, report).await?;
    create_missing(conn, settings, &horizon, &existing, report).await?;
    drop_expired(conn, settings, expired, report).await
}

/// What a pass measures windows against, on the database's clock.
struct Horizon {
    now_ms: i64,
    /// The longest retention any handler recorded (or the default).
    longest_ms: i64,
    /// Days dropped before: their events are stale for everyone.
    dropped: Vec<NaiveDate>,
}

impl Horizon {
    async fn read(conn: &mut PgConnection) -> anyhow::Result<Self> {
        let now_ms: i64 =
            sqlx::query_scalar("SELECT floor(extract(epoch FROM now()) * 1000)::bigint").fetch_one(&mut *conn).await?;
        let recorded: Vec<i64> = sqlx::query_scalar(
            "SELECT floor(extract(epoch FROM retention) * 1000)::bigint FROM idem.consumer_retention",
        )
        .fetch_all(&mut *conn)
        .await?;
        let default_ms = i64::try_from(super::DEFAULT_RETENTION.as_millis()).unwrap_or(i64::MAX);
        let longest_ms = recorded.iter().copied().max().unwrap_or(default_ms);
        let dropped = sqlx::query_scalar("SELECT day FROM idem.dropped_window").fetch_all(&mut *conn).await?;
        Ok(Self { now_ms, longest_ms, dropped })
    }

    fn expired(&self, day: NaiveDate) -> bool {
        self.dropped.contains(&day) || (days(day) + 1) * DAY_MS <= self.now_ms - self.longest_ms
    }
}

/// Every window's day, and the windows that expired: each table of a
/// window, attached or left behind by an earlier try.
async fn found(
    conn: &mut PgConnection,
    horizon: &Horizon,
    report: &mut Report,
) -> anyhow::Result<(Vec<NaiveDate>, Vec<Window>)> {
    let tables: Vec<(String, bool, bool)> = sqlx::query_as(
        "SELECT c.relname::text, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false) \
         FROM pg_class c LEFT JOIN pg_inherits i \
             ON i.inhrelid = c.oid AND i.inhparent = 'idem.processed_event'::regclass \
         WHERE c.relnamespace = 'idem'::regnamespace AND c.relkind = 'r' \
           AND c.relname LIKE 'processed\\_event\\_p%' ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut existing = Vec::new();
    let mut expired = Vec::new();
    for (name, attached, pending) in tables {
        let Some(day) = day_of(&name) else {
            report.foreign.push(name);
            continue;
        };
        existing.push(day);
        if horizon.expired(day) {
            expired.push(Window { day, attached, pending });
        }
    }
    Ok((existing, expired))
}

/// Creates every day's window from the longest retention back to
/// `windows_ahead` ahead, except those dropped before.
async fn create_missing(
    conn: &mut PgConnection,
    settings: &RetentionConfig,
    horizon: &Horizon,
    existing: &[NaiveDate],
    report: &mut Report,
) -> anyhow::Result<()> {
    let today = horizon.now_ms.div_euclid(DAY_MS);
    let first = (horizon.now_ms - horizon.longest_ms).div_euclid(DAY_MS);
    for d in first..=today + i64::from(settings.windows_ahead) {
        let day = date(d);
        if existing.contains(&day) || horizon.dropped.contains(&day) {
            continue;
        }
        let mut tx = begin_bounded(conn, settings.lock_timeout.0).await?;
        match sqlx::query_scalar::<_, bool>("SELECT idem.create_window($1)").bind(day).fetch_one(&mut *tx).await {
            Ok(created) => {
                tx.commit().await?;
                if created {
                    report.created.push(day);
                }
            }
            Err(e) if lock_timed_out(&e) => report.deferred.push(format!("creating window {day}")),
            Err(e) => return Err(anyhow::anyhow!("failed to create window {day}: {e}")),
        }
    }
    Ok(())
}

/// Drops the expired windows. A table has at most one partition pending
/// detach: an interrupted one is finished first, and after a wait runs out
/// the rest waits too.
async fn drop_expired(
    conn: &mut PgConnection,
    settings: &RetentionConfig,
    mut expired: Vec<Window>,
    report: &mut Report,
) -> anyhow::Result<()> {
    expired.sort_by_key(|w| (!w.pending, w.day));
    // All of them count as gone for claims from now on, whichever is
    // detached in this pass.
    let mut rows = Vec::new();
    for window in &expired {
        rows.push(mark(conn, window.day).await?);
    }
    let mut waiting = false;
    for (window, rows) in expired.into_iter().zip(rows) {
        if waiting {
            report.deferred.push(format!("dropping window {}", window.day));
            continue;
        }
        match drop_window(conn, settings, &window).await {
            Ok(()) => report.dropped.push(Dropped { day: window.day, rows }),
            Err(e) if lock_timed_out(&e) => {
                report.deferred.push(format!("dropping window {}", window.day));
                waiting = true;
            }
            Err(e) => return Err(anyhow::anyhow!("failed to drop window {}: {e}", window.day)),
        }
    }
    Ok(())
}

/// A window's table as a pass found it.
struct Window {
    day: NaiveDate,
    /// Still a partition of `idem.processed_event`.
    attached: bool,
    /// Half detached by an earlier try (DETACH … CONCURRENTLY interrupted).
    pending: bool,
}

/// Records the window of `day` in `idem.dropped_window` (claims treat it as
/// gone from then on); the planner's estimate of its rows.
async fn mark(conn: &mut PgConnection, day: NaiveDate) -> Result<i64, sqlx::Error> {
    let table = format!("idem.processed_event_p{}", day.format("%Y%m%d"));
    let rows: i64 = sqlx::query_scalar(&format!(
        "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = '{table}'::regclass"
    ))
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query("INSERT INTO idem.dropped_window (day, rows_about) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING")
        .bind(day)
        .bind(rows)
        .execute(&mut *conn)
        .await?;
    Ok(rows)
}

/// Detaches and drops a marked window. Each step is its own statement
/// outside a transaction (DETACH … CONCURRENTLY must be), so an interrupted
/// drop is finished by the next pass from where it stopped.
async fn drop_window(conn: &mut PgConnection, settings: &RetentionConfig, window: &Window) -> Result<(), sqlx::Error> {
    let table = format!("idem.processed_event_p{}", window.day.format("%Y%m%d"));
    let statements = [
        format!("SET lock_timeout = {}", settings.lock_timeout.0.as_millis().max(1)),
        if window.pending {
            format!("ALTER TABLE idem.processed_event DETACH PARTITION {table} FINALIZE")
        } else if window.attached {
            format!("ALTER TABLE idem.processed_event DETACH PARTITION {table} CONCURRENTLY")
        } else {
            String::new()
        },
        format!("DROP TABLE {table}"),
    ];
    let mut done = Ok(());
    for statement in statements.iter().filter(|s| !s.is_empty()) {
        // The simple protocol, one statement: DETACH … CONCURRENTLY refuses
        // to run inside a transaction block.
        if let Err(e) = conn.execute(sqlx::raw_sql(statement)).await {
            done = Err(e);
            break;
        }
    }
    conn.execute(sqlx::raw_sql("RESET lock_timeout")).await?;
    done
}

/// The day of a window's table name, `processed_event_pYYYYMMDD`.
pub fn day_of(name: &str) -> Option<NaiveDate> {
    let digits = name.strip_prefix("processed_event_p")?;
    if digits.len() != 8 {
        return None;
    }
    NaiveDate::parse_from_str(digits, "%Y%m%d").ok()
}

fn epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default()
}

/// Days since the epoch → date.
fn date(days: i64) -> NaiveDate {
    epoch() + chrono::Days::new(u64::try_from(days).unwrap_or(0))
}

/// Date → days since the epoch.
fn days(day: NaiveDate) -> i64 {
    (day - epoch()).num_days()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_names_and_days() {
        assert_eq!(day_of("processed_event_p20261130"), NaiveDate::from_ymd_opt(2026, 11, 30));
        assert_eq!(day_of("processed_event_p2026113"), None);
        assert_eq!(day_of("processed_event_old"), None);
        let d = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default();
        assert_eq!(date(days(d)), d);
        assert_eq!(days(d) * DAY_MS, 1_795_996_800_000);
    }
}
