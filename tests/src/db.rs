//! A fresh database per test, on the server `DATABASE_URL` names
//! (default `postgres://postgres@127.0.0.1:5432/postgres`).

use std::path::Path;

use anyhow::Context as _;
use idem::sandbox::Place;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection as _, Executor as _, PgConnection, PgPool};

/// Databases (and their handlers' roles) made by the harness start with
/// this; `scripts/test` drops leftovers.
pub const PREFIX: &str = "idem_t";

/// The handlers the tests run: name, schema, migrations folder.
pub const HANDLERS: [(&str, &str, &str); 4] = [
    ("billing", "billing", "examples/billing/migrations"),
    ("notification", "notification", "examples/notification/migrations"),
    ("payments", "payments", "examples/payments/migrations"),
    ("scenarios", "scenario", "tests/guests/scenarios/migrations"),
];

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Waits until the database server's clock is at least `margin` from a
/// UTC midnight on either side. Dedup windows are UTC days: a test that
/// reckons which windows exist (or in which one a row lands) from a clock
/// it reads more than once must not see the day change in between, at
/// whatever hour CI runs it. Costs nothing away from midnight; at most
/// twice `margin` next to one.
pub async fn away_from_midnight(margin: std::time::Duration) {
    const DAY_MS: i64 = 86_400_000;
    let server = server_url();
    let mut conn = PgConnection::connect(&server).await.unwrap_or_else(|e| panic!("connect to {server}: {e}"));
    let now: i64 = sqlx::query_scalar("SELECT floor(extract(epoch FROM now()) * 1000)::bigint")
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("the database's clock: {e}"));
    let margin_ms = i64::try_from(margin.as_millis()).unwrap_or(DAY_MS / 4);
    let since = now.rem_euclid(DAY_MS);
    let wait = if since < margin_ms {
        margin_ms - since
    } else if DAY_MS - since < margin_ms {
        DAY_MS - since + margin_ms
    } else {
        0
    };
    let _ = conn.close().await;
    tokio::time::sleep(std::time::Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
}

/// A database of its own, migrated, with the examples' and test guests'
/// tables. Dropped by [`TestDb::drop_database`] (or by `.ci/run` next time).
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

/// `url` with its database replaced by `name` (query parameters kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let server = match base.find("://").map(|i| i + 3) {
        Some(start) => match base[start..].find('/') {
            Some(slash) => &base[..start + slash],
            None => base,
        },
        None => base,
    };
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}

impl TestDb {
    /// An empty database: no schema, no migrations.
    pub async fn empty() -> anyhow::Result<Self> {
        // Bounded: a server that accepts but never answers fails the test.
        let limit = std::time::Duration::from_secs(120);
        tokio::time::timeout(limit, Self::create_empty())
            .await
            .map_err(|_| anyhow::anyhow!("no test database created on {} within {} s", server_url(), limit.as_secs()))?
    }

    async fn create_empty() -> anyhow::Result<Self> {
        let server = server_url();
        let name = crate::unique_name(PREFIX);
        let mut admin =
            PgConnection::connect(&server).await.with_context(|| format!("failed to connect to {server}"))?;
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .context("failed to create the test database")?;
        let url = with_database(&server, &name);
        let pool = PgPoolOptions::new().max_connections(20).connect(&url).await?;
        Ok(Self { name, url, pool })
    }

    /// A database migrated, with the examples' and test guests' handlers
    /// provisioned the way `idem migrate --config` does it: a login role
    /// each, a schema each, their migrations, their grants.
    pub async fn new() -> anyhow::Result<Self> {
        Self::new_for(idem::config::RetentionMode::Partition).await
    }

    /// As [`TestDb::new`], with `idem.processed_event` created for `mode`.
    pub async fn new_for(mode: idem::config::RetentionMode) -> anyhow::Result<Self> {
        let db = Self::empty().await?;
        idem::migrate::apply_for(&db.pool, mode).await?;
        idem::sandbox::provision::database(&db.pool).await?;
        for (handler, schema, _) in HANDLERS {
            idem::sandbox::provision::apply(&db.pool, &db.place(handler, schema)).await?;
        }
        Ok(db)
    }

    /// What the handlers and producers of the config at `path` may
    /// publish through the outbox, recorded as `idem migrate --config`
    /// records it.
    pub async fn allow_emits(&self, path: &Path) {
        let config = idem::config::Config::load(path).unwrap_or_else(|e| panic!("config: {e:#}"));
        idem::outbox::provision::apply(&self.pool, &config).await.unwrap_or_else(|e| panic!("outbox: {e:#}"));
    }

    /// An application outside idem that publishes through the outbox (the
    /// design notes' order service): a login role created as the
    /// application's own would be, `[[outbox.producer]] orders` for it in the
    /// config at `path` (publishing `order.confirmed.v1` to `topic`), the
    /// right recorded, and a pool logged in as that role.
    pub async fn order_service(&self, path: &Path, topic: &str) -> PgPool {
        let role = format!("{}_orders", self.name);
        sqlx::query(&format!("CREATE ROLE {role} LOGIN")).execute(&self.pool).await.unwrap_or_else(|e| panic!("{e}"));
        let mut text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.push_str(&format!(
            "\n[[outbox.producer]]\nname = \"orders\"\nrole = \"{role}\"\n[[outbox.producer.topic]]\n\
             topic = \"{topic}\"\nevent_types = [\"order.confirmed.v1\"]\n"
        ));
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        self.allow_emits(path).await;
        let mut url = reqwest::Url::parse(&self.url).unwrap_or_else(|e| panic!("{e}"));
        url.set_username(&role).unwrap_or_else(|()| panic!("user {role}"));
        PgPoolOptions::new().max_connections(4).connect(url.as_str()).await.unwrap_or_else(|e| panic!("{role}: {e}"))
    }

    /// Where `handler` lives in this database: its role is named the way
    /// idem names it by default (`<database>_<schema>`).
    pub fn place(&self, handler: &str, schema: &str) -> Place {
        let migrations = HANDLERS.iter().find(|(h, _, _)| *h == handler).map(|(_, _, m)| root().join(m));
        Place {
            handler: handler.into(),
            schema: schema.into(),
            role: format!("{}_{schema}", self.name),
            password: None,
            migrations,
            temp_file_limit_mib: 256,
            work_mem_mib: 4,
        }
    }

    /// A pool logged in as `handler`'s role, as `idem run` opens it.
    pub async fn handler_pool(&self, handler: &str, schema: &str) -> PgPool {
        let place = self.place(handler, schema);
        idem::sandbox::pool::connect(&self.url, &place, 4).await.unwrap_or_else(|e| panic!("handler pool: {e:#}"))
    }

    pub async fn count(&self, sql: &str) -> i64 {
        match sqlx::query_scalar::<_, i64>(sql).fetch_one(&self.pool).await {
            Ok(n) => n,
            Err(e) => panic!("{sql}: {e}"),
        }
    }

    /// Runs `sql` (a statement the test sets its world up with).
    pub async fn execute(&self, sql: &str) {
        if let Err(e) = sqlx::query(sql).execute(&self.pool).await {
            panic!("{sql}: {e}");
        }
    }

    /// The one text value `sql` selects.
    pub async fn scalar(&self, sql: &str) -> String {
        match sqlx::query_scalar::<_, String>(sql).fetch_one(&self.pool).await {
            Ok(v) => v,
            Err(e) => panic!("{sql}: {e}"),
        }
    }

    pub async fn drop_database(self) {
        // `close` waits for every connection to come back; one still held
        // somewhere does not hold the test: the drop below forces it.
        let limit = std::time::Duration::from_secs(30);
        if tokio::time::timeout(limit, self.pool.close()).await.is_err() {
            eprintln!(
                "{}: a pooled connection was still in use {} s after close; dropping anyway",
                self.name,
                limit.as_secs()
            );
        }
        let connect = tokio::time::timeout(limit, PgConnection::connect(&server_url()));
        if let Ok(Ok(mut admin)) = connect.await {
            let _ = admin.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str()).await;
            for (_, schema, _) in HANDLERS {
                let _ = admin.execute(format!("DROP ROLE IF EXISTS {}_{schema}", self.name).as_str()).await;
            }
        }
    }
}

/// SQL that puts 100,000 dead letters of `handler` into the index, as the
/// host writes them: over ten days from 2026-11-20, 70% permanent, 25%
/// invalid, 5% retryable, a thousand customers (`customer-N` keys and
/// `customer.id` fields), every other one with a `traceparent` header.
pub fn synthetic_dead_letters(handler: &str) -> String {
    format!(
        "INSERT INTO idem.dead_letter (topic, \"partition\", \"offset\", handler, authenticity, failed_at, \
     class, reason, pattern, attempts, source_topic, source_partition, source_offset, record_key, event_id, \
     header_names, payload_bytes, payload) \
     SELECT 'synthetic.dlq', i % 4, i / 4, '{handler}', 'sealed', \
            timestamptz '2026-11-20T00:00:00Z' + i * interval '8.64 seconds', \
            CASE WHEN i % 20 < 14 THEN 'permanent' WHEN i % 20 < 19 THEN 'invalid' ELSE 'retryable' END, \
            CASE WHEN i % 20 < 14 THEN 'order ' || i || ' declined by the provider' \
                 WHEN i % 20 < 19 THEN 'invalid: missing field `customer` at line ' || (i % 7) \
                 ELSE 'timed out after ' || (i % 30) || ' s' END, \
            CASE WHEN i % 20 < 14 THEN 'order # declined by the provider' \
                 WHEN i % 20 < 19 THEN 'invalid: missing field `…` at line #' \
                 ELSE 'timed out after # s' END, \
            1, 'orders', i % 4, i, 'customer-' || (i % 1000), md5(i::text)::uuid, \
            CASE WHEN i % 2 = 0 THEN ARRAY['traceparent'] ELSE ARRAY[]::text[] END, 200, \
            jsonb_build_object('customer', jsonb_build_object('id', (i % 1000)::text), 'amount', i) \
     FROM generate_series(0, 99999) AS i"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn with_database_replaces_only_the_database() {
        use super::with_database;
        assert_eq!(with_database("postgres://u@h:5432/postgres", "x"), "postgres://u@h:5432/x");
        assert_eq!(with_database("postgres://u@h:5432", "x"), "postgres://u@h:5432/x");
        assert_eq!(with_database("postgres://u@h/db?sslmode=disable", "x"), "postgres://u@h/x?sslmode=disable");
    }
}
