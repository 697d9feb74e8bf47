//! Operators' pauses: a handler, one of its topics or one partition held
//! until resumed (`idem pause`, `POST /handlers/{name}/pause`, the
//! console), whichever host owns it now or later.
//!
//! A pause is a row of `idem.pause`, so it outlives restarts and follows a
//! partition to its next owner. Every host reads the table when it starts
//! (before it consumes) and then every second ([`follow`]); the polling
//! thread applies the latest reading to each assigned partition at its
//! next pass, and a partition assigned later is held from its first record
//! (`consumer::assign`). So a pause is obeyed by every host within about a
//! second and a half.
//!
//! A held partition's fetching is paused (lag keeps growing, visibly), and
//! its workers take no record: an event in flight ends (its transaction
//! commits or rolls back), records already fetched wait in memory, nothing
//! else runs until the pause is lifted. Should PostgreSQL be unreachable,
//! a host keeps its last reading: a pause does not lapse in an outage.

use std::sync::Arc;

use tokio::sync::watch;

pub use super::follow::REFRESH;

/// One row of `idem.pause`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Pause {
    pub handler: String,
    /// `""`: every topic of the handler.
    pub topic: String,
    /// `-1`: every partition of the topic.
    pub partition: i32,
    pub reason: String,
    pub paused_by: String,
    pub paused_at: chrono::DateTime<chrono::Utc>,
}

impl Pause {
    /// Whether this pause holds `handler`'s `topic`/`partition`.
    pub fn covers(&self, handler: &str, topic: &str, partition: i32) -> bool {
        self.handler == handler
            && (self.topic.is_empty() || self.topic == topic)
            && (self.partition < 0 || self.partition == partition)
    }
}

/// The pauses as this host last read them.
#[derive(Clone)]
pub struct Pauses(watch::Receiver<Arc<Vec<Pause>>>);

impl Pauses {
    /// Whether `handler`'s `topic`/`partition` is held.
    pub fn holds(&self, handler: &str, topic: &str, partition: i32) -> bool {
        self.0.borrow().iter().any(|p| p.covers(handler, topic, partition))
    }
}

/// Every pause, oldest first.
pub async fn read(pool: &sqlx::PgPool) -> sqlx::Result<Vec<Pause>> {
    sqlx::query_as(
        "SELECT handler, topic, \"partition\", reason, paused_by, paused_at FROM idem.pause \
         ORDER BY paused_at, handler, topic, \"partition\"",
    )
    .fetch_all(pool)
    .await
}

/// Reads the pauses now (a host that cannot must not start consuming what
/// an operator may have paused), then every [`REFRESH`] until `stop`.
pub async fn follow(pool: sqlx::PgPool, stop: watch::Receiver<bool>) -> anyhow::Result<Pauses> {
    let read = |pool: sqlx::PgPool| async move { read(&pool).await };
    Ok(Pauses(super::follow::follow(pool, stop, "the operators' pauses (idem.pause)", read).await?))
}

/// What a pause or a resume names: a handler, one of its topics, or one
/// partition of a topic.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    #[serde(default)]
    pub topic: Option<String>,
    #[serde(default)]
    pub partition: Option<i32>,
}

impl Scope {
    /// The row's key: `("", -1)` for the whole handler.
    pub fn key(&self) -> Result<(String, i32), String> {
        match (&self.topic, self.partition) {
            (_, Some(p)) if p < 0 => Err(format!("partition {p}: a partition is 0 or more")),
            (None, Some(_)) => Err("a partition needs its topic".into()),
            (Some(t), _) if t.is_empty() => Err("topic is empty: leave it out to name every topic".into()),
            (topic, partition) => Ok((topic.clone().unwrap_or_default(), partition.unwrap_or(-1))),
        }
    }
}

/// Pauses `handler` within `scope`; `false` if that pause was in place.
pub async fn pause(
    pool: &sqlx::PgPool,
    handler: &str,
    (topic, partition): (String, i32),
    reason: &str,
    by: &str,
) -> sqlx::Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO idem.pause (handler, topic, \"partition\", reason, paused_by) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT DO NOTHING",
    )
    .bind(handler)
    .bind(topic)
    .bind(partition)
    .bind(reason)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Lifts `handler`'s pauses within `scope` (its own and narrower ones:
/// the whole handler's scope lifts every pause of it); answers how many.
/// A broader pause still holds what it covers.
pub async fn resume(pool: &sqlx::PgPool, handler: &str, (topic, partition): (String, i32)) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM idem.pause WHERE handler = $1 AND ($2 = '' OR topic = $2) AND ($3 = -1 OR \"partition\" = $3)",
    )
    .bind(handler)
    .bind(topic)
    .bind(partition)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(topic: &str, partition: i32) -> Pause {
        Pause {
            handler: "billing".into(),
            topic: topic.into(),
            partition,
            reason: String::new(),
            paused_by: "ops".into(),
            paused_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn a_pause_covers_its_handler_topic_or_partition_only() {
        assert!(pause("", -1).covers("billing", "orders", 3));
        assert!(!pause("", -1).covers("shipping", "orders", 3));
        assert!(pause("orders", -1).covers("billing", "orders", 0));
        assert!(!pause("orders", -1).covers("billing", "refunds", 0));
        assert!(pause("orders", 2).covers("billing", "orders", 2));
        assert!(!pause("orders", 2).covers("billing", "orders", 1));
    }

    #[test]
    fn a_scope_names_what_is_wrong_with_it() {
        let scope = |topic: Option<&str>, partition| Scope { topic: topic.map(str::to_owned), partition };
        assert_eq!(scope(None, None).key(), Ok((String::new(), -1)));
        assert_eq!(scope(Some("orders"), Some(2)).key(), Ok(("orders".into(), 2)));
        assert!(scope(None, Some(2)).key().is_err_and(|e| e.contains("needs its topic")));
        assert!(scope(Some("orders"), Some(-2)).key().is_err_and(|e| e.contains("0 or more")));
        assert!(scope(Some(""), None).key().is_err_and(|e| e.contains("topic is empty")));
    }
}
