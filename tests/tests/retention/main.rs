//! Retention of `idem.processed_event` (R-KFK-IDEM-2) against real
//! PostgreSQL: the windows keyed on the event id, the maintenance pass, the
//! stale-event guard, and delete mode.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

mod delete;
mod guard;
mod windows;

use idem::config::{RetentionConfig, Span};
use idem::executor::Pins;
use idem::retention::{Maintenance, Report};
use idem::{Event, Executor, Handler, HandlerSettings, Runtime};
use idem_tests::db::TestDb;
use idem_tests::{guests, v7_at};
use serde_json::json;

const DAY_MS: i64 = 86_400_000;

struct Setup {
    db: TestDb,
    runtime: Runtime,
    pool: sqlx::PgPool,
}

impl Setup {
    async fn new() -> Self {
        // The windows tests count windows by the day: one day throughout.
        idem_tests::db::away_from_midnight(std::time::Duration::from_secs(180)).await;
        Self::on(TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"))).await
    }

    async fn on(db: TestDb) -> Self {
        idem_tests::init_logging();
        let runtime = Runtime::new().unwrap_or_else(|e| panic!("runtime: {e:#}"));
        let pool = db.handler_pool("scenarios", "scenario").await;
        Self { db, runtime, pool }
    }

    /// The scenarios handler, with its settings tuned.
    fn scenarios(&self, tune: impl FnOnce(&mut HandlerSettings)) -> Executor {
        let mut settings = HandlerSettings::new("scenarios");
        tune(&mut settings);
        let handler = Handler::load(&self.runtime, &guests::component("scenarios"), settings)
            .unwrap_or_else(|e| panic!("load scenarios: {e}"));
        let http = idem::http_client(&handler.settings().caps.http).unwrap_or_else(|e| panic!("http client: {e}"));
        let pins = Pins { schema: "scenario".into(), synchronous_commit: "on".into() };
        Executor::new(handler, self.pool.clone(), http, pins)
    }

    /// The database's clock, in milliseconds since the epoch.
    async fn now_ms(&self) -> i64 {
        sqlx::query_scalar("SELECT floor(extract(epoch FROM now()) * 1000)::bigint")
            .fetch_one(&self.db.pool)
            .await
            .unwrap_or_else(|e| panic!("now: {e}"))
    }

    /// Records `consumer`'s retention as a host does at start-up.
    async fn record(&self, consumer: &str, retention: &str) {
        sqlx::query(
            "INSERT INTO idem.consumer_retention (consumer, retention, future_skew, recorded_by) \
             VALUES ($1, $2::interval, interval '1 hour', 'test') \
             ON CONFLICT (consumer) DO UPDATE SET retention = excluded.retention",
        )
        .bind(consumer)
        .bind(retention)
        .execute(&self.db.pool)
        .await
        .unwrap_or_else(|e| panic!("record {consumer}: {e}"));
    }

    /// A claim row of `consumer` for an event created at `ms`, as a
    /// committed claim leaves it.
    async fn claimed_at(&self, consumer: &str, ms: i64) -> uuid::Uuid {
        let id = v7_at(ms);
        sqlx::query(
            "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\") \
             VALUES ($1, $2, 't', 0, 0)",
        )
        .bind(id)
        .bind(consumer)
        .execute(&self.db.pool)
        .await
        .unwrap_or_else(|e| panic!("insert a claim: {e}"));
        id
    }

    async fn pass(&self, settings: RetentionConfig) -> Report {
        Maintenance::new(self.db.pool.clone(), settings).pass().await.unwrap_or_else(|e| panic!("pass: {e:#}"))
    }

    /// The UTC days of the windows that exist.
    async fn windows(&self) -> Vec<chrono::NaiveDate> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'idem.processed_event'::regclass ORDER BY 1",
        )
        .fetch_all(&self.db.pool)
        .await
        .unwrap_or_else(|e| panic!("windows: {e}"));
        names.iter().filter_map(|n| idem::retention::windows::day_of(n)).collect()
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    async fn finish(self) {
        self.pool.close().await;
        self.db.drop_database().await;
    }
}

/// A scenario event whose id was created at `ms`.
fn scenario_at(ms: i64, name: &str) -> Event {
    idem_tests::event(v7_at(ms), json!({ "eventType": "test.scenario.v1", "scenario": name }), "scenarios", 0)
}

/// The UTC day `ms` falls on.
fn day(ms: i64) -> chrono::NaiveDate {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().date_naive()
}

fn settings() -> RetentionConfig {
    RetentionConfig::default()
}

fn span(text: &str) -> Span {
    Span::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

const EFFECTS: &str = "SELECT count(*) FROM scenario.effect";
