//! The shadow report in the database: per shadow version and event type,
//! events agreed on, differed on and skipped (`idem.shadow_tally`, every
//! host adding its own), and the first differing events with both sides
//! (`idem.shadow_difference`). Written and read on idem's own pool.

use serde::Serialize;
use sqlx::PgPool;

use super::run::{OTHER, Tally, type_name};

/// Differing events one version's report keeps.
const MAX_DIFFERENCES: i64 = 20;

/// The versions a run compared.
#[derive(Debug, Clone, Copy)]
pub struct Versions {
    pub shadow: i32,
    pub active: i32,
}

/// Adds `tally` to `handler`'s report of `at.shadow`.
pub async fn write(pool: &PgPool, handler: &str, at: Versions, tally: &Tally) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    for (kind, [agree, differ, skipped]) in &tally.counts {
        sqlx::query(
            "INSERT INTO idem.shadow_tally AS t (handler, version, event_type, agree, differ, skipped) \
             SELECT $1, $2, CASE WHEN EXISTS (SELECT 1 FROM idem.shadow_tally \
                                              WHERE handler = $1 AND version = $2 AND event_type = $3) \
                                   OR (SELECT count(*) FROM idem.shadow_tally WHERE handler = $1 AND version = $2) < 100 \
                                 THEN $3 ELSE $7 END, $4, $5, $6 \
             ON CONFLICT (handler, version, event_type) DO UPDATE SET agree = t.agree + EXCLUDED.agree, \
                 differ = t.differ + EXCLUDED.differ, skipped = t.skipped + EXCLUDED.skipped",
        )
        .bind(handler)
        .bind(at.shadow)
        .bind(kind)
        .bind(agree)
        .bind(differ)
        .bind(skipped)
        .bind(OTHER)
        .execute(&mut *tx)
        .await?;
    }
    for d in &tally.differences {
        let (active, shadow) =
            (serde_json::to_value(&d.active).unwrap_or_default(), serde_json::to_value(&d.shadow).unwrap_or_default());
        sqlx::query(
            "INSERT INTO idem.shadow_difference (handler, version, active_version, event_id, event_type, topic, \
                 \"partition\", \"offset\", differs, active, shadow) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 \
             WHERE (SELECT count(*) FROM idem.shadow_difference WHERE handler = $1 AND version = $2) < $12 \
             ON CONFLICT DO NOTHING",
        )
        .bind(handler)
        .bind(at.shadow)
        .bind(at.active)
        .bind(d.event.id)
        .bind(type_name(&d.event.event_type))
        .bind(&d.event.topic)
        .bind(d.event.partition)
        .bind(d.event.offset)
        .bind(&d.differs)
        .bind(active)
        .bind(shadow)
        .bind(MAX_DIFFERENCES)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// A handler's shadow report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The shadow version.
    pub version: i32,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Every event type's counts, most events first.
    pub types: Vec<TypeTally>,
    /// All types' counts added up.
    pub total: TypeTally,
    /// The first differing events, with both sides.
    pub differences: Vec<DifferenceView>,
}

/// One event type's counts (`total`: every type's).
#[derive(Debug, Default, Serialize, sqlx::FromRow)]
pub struct TypeTally {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub event_type: String,
    pub agree: i64,
    pub differ: i64,
    pub skipped: i64,
}

/// A differing event as the report shows it.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct DifferenceView {
    pub event_id: uuid::Uuid,
    pub event_type: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub active_version: i32,
    /// The fields the versions differ in.
    pub differs: Vec<String>,
    pub active: serde_json::Value,
    pub shadow: serde_json::Value,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// `handler`'s report of its shadow version; `None` when it has none.
pub async fn read(pool: &PgPool, handler: &str) -> Result<Option<Report>, sqlx::Error> {
    let shadow: Option<(i32, Option<chrono::DateTime<chrono::Utc>>)> =
        sqlx::query_as("SELECT version, shadow_since FROM idem.handler_module WHERE handler = $1 AND shadow")
            .bind(handler)
            .fetch_optional(pool)
            .await?;
    let Some((version, since)) = shadow else { return Ok(None) };
    let types: Vec<TypeTally> = sqlx::query_as(
        "SELECT event_type, agree, differ, skipped FROM idem.shadow_tally WHERE handler = $1 AND version = $2 \
         ORDER BY agree + differ + skipped DESC, event_type",
    )
    .bind(handler)
    .bind(version)
    .fetch_all(pool)
    .await?;
    let differences: Vec<DifferenceView> = sqlx::query_as(
        "SELECT event_id, event_type, topic, \"partition\" AS partition, \"offset\" AS offset, active_version, \
                differs, active, shadow, at \
         FROM idem.shadow_difference WHERE handler = $1 AND version = $2 ORDER BY at, \"offset\"",
    )
    .bind(handler)
    .bind(version)
    .fetch_all(pool)
    .await?;
    let total = types.iter().fold(TypeTally::default(), |t, c| TypeTally {
        event_type: String::new(),
        agree: t.agree + c.agree,
        differ: t.differ + c.differ,
        skipped: t.skipped + c.skipped,
    });
    Ok(Some(Report { version, since, types, total, differences }))
}
