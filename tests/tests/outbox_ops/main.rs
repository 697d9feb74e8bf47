//! Operating the outbox (README, "The outbox"), through the real `idem`
//! binary on the real broker and PostgreSQL: `idem outbox --failed`,
//! `--redrive` and `--remove-producer`; `idem check` and `idem run`
//! refusing a missing outbox topic and a producer whose recorded topics
//! differ from the config; a key's emits in their source events' order
//! under key lanes and under `max_concurrent > 1`; the relay's lease given
//! up at once by a clean stop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::HandlerSpec;
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use rdkafka::Message as _;

mod failed;
mod order;
mod refusals;
mod remove;
mod takeover;

/// A test's database, fake provider and input topic.
struct Env {
    db: TestDb,
    provider: PaymentProvider,
    topic: String,
    producer: kafka::Producer,
}

impl Env {
    async fn new(partitions: i32) -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let topic = kafka::create_topic(partitions).await;
        Self { db, provider, topic, producer: kafka::producer() }
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    /// The login role an application outside idem publishes with
    /// (`[[outbox.producer]] role`), created as the application's own.
    fn app_role(&self) -> String {
        format!("{}_orders", self.db.name)
    }

    async fn create_app_role(&self) {
        sqlx::query(&format!("CREATE ROLE {} LOGIN", self.app_role()))
            .execute(&self.db.pool)
            .await
            .unwrap_or_else(|e| panic!("create role: {e}"));
    }

    /// A pool logged in as [`Env::app_role`].
    async fn app_pool(&self) -> sqlx::PgPool {
        let mut url = reqwest::Url::parse(&self.db.url).unwrap_or_else(|e| panic!("{e}"));
        url.set_username(&self.app_role()).unwrap_or_else(|()| panic!("user"));
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(url.as_str())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.app_role()))
    }

    async fn finish(self) {
        let role = self.app_role();
        self.db.drop_database().await;
        let admin = sqlx::PgPool::connect(&idem_tests::db::server_url()).await;
        if let Ok(admin) = admin {
            let _ = sqlx::query(&format!("DROP ROLE IF EXISTS {role}")).execute(&admin).await;
        }
    }
}

/// Appends `[[outbox.producer]] orders` (the application's role,
/// publishing `order.confirmed.v1` to each of `topics`) to the config at
/// `path`.
fn add_producer(path: &Path, role: &str, topics: &[&str]) {
    let mut text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.push_str(&format!("\n[[outbox.producer]]\nname = \"orders\"\nrole = \"{role}\"\n"));
    for topic in topics {
        text.push_str(&format!(
            "[[outbox.producer.topic]]\ntopic = \"{topic}\"\nevent_types = [\"order.confirmed.v1\"]\n"
        ));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// `idem_api.publish` of an `order.confirmed.v1` for `order` to `topic`,
/// committed, as the application does; the event id it returns.
async fn publish(app: &sqlx::PgPool, topic: &str, key: &str, order: i64) -> uuid::Uuid {
    let payload = serde_json::json!({
        "aggregateType": "Order", "orderId": order, "customerId": 7, "totalAmount": 12.5, "currency": "EUR",
    });
    sqlx::query_scalar("SELECT idem_api.publish($1, $2, 'order.confirmed.v1', $3)")
        .bind(topic)
        .bind(key)
        .bind(payload)
        .fetch_one(app)
        .await
        .unwrap_or_else(|e| panic!("publish: {e}"))
}

/// What one run of the `idem` command line printed, and how it ended.
#[derive(Debug)]
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `idem args…` to its end (at most 120 s), stdout and stderr kept.
/// The database comes from the arguments or the config only.
fn idem(args: &[&str]) -> Ran {
    let mut command = Command::new(idem_tests::idem_bin());
    command
        .args(args)
        .env_remove("IDEM_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .env("IDEM_LOG", "warn")
        // The binary under test exits when the test process does.
        .env("IDEM_TEST_PARENT_PID", std::process::id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap_or_else(|e| panic!("idem {args:?}: {e}"));
    let mut stderr = child.stderr.take().unwrap_or_else(|| panic!("stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        let _ = tx.send(text);
    });
    let what = format!("idem {}", args.join(" "));
    let (status, stdout) = idem_tests::wait_within(child, &what, Instant::now() + Duration::from_secs(120));
    let stderr = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{what}: stderr: {e}"));
    Ran { ok: status.success(), stdout: String::from_utf8_lossy(&stdout).into_owned(), stderr }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_else(|| panic!("{} is not UTF-8", p.display()))
}

/// A `test.scenario.v1` payload for the scenarios guest.
fn scenario(name: &str, extra: serde_json::Value) -> (uuid::Uuid, Vec<u8>) {
    let id = uuid::Uuid::now_v7();
    let mut payload = serde_json::json!({
        "eventId": id.to_string(), "eventType": "test.scenario.v1",
        "occurredAt": "2026-11-30T12:00:00Z", "scenario": name,
    });
    if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    (id, payload.to_string().into_bytes())
}

fn emitted_schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/scenarios/emitted.schema.json")
}

/// Every record of `topic` once there are at least `n`; panics past 60 s.
fn published(topic: &str, n: usize) -> Vec<rdkafka::message::OwnedMessage> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = kafka::read_all(topic);
        if records.len() >= n {
            return records;
        }
        assert!(Instant::now() < deadline, "{topic}: {} record(s), not {n}, within 60 s", records.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn value(record: &rdkafka::message::OwnedMessage) -> serde_json::Value {
    serde_json::from_slice(record.payload().unwrap_or_default()).unwrap_or_default()
}

fn key(record: &rdkafka::message::OwnedMessage) -> String {
    String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned()
}

/// The holder of `producer`'s relay lease, if a live one holds it.
async fn lease_holder(env: &Env, producer: &str) -> Option<String> {
    sqlx::query_scalar("SELECT holder FROM idem.outbox_lease WHERE producer = $1 AND expires_at > now()")
        .bind(producer)
        .fetch_optional(&env.db.pool)
        .await
        .unwrap_or_else(|e| panic!("lease: {e}"))
}

/// Whether a relay holder's name (`<hostname>-<pid>-<random>`) is the
/// process `pid`'s.
fn held_by(holder: &str, pid: u32) -> bool {
    holder.rsplit('-').nth(1) == Some(pid.to_string().as_str())
}

/// The scenarios handler, allowed to emit `test.emitted.v1` to `outs`.
fn emitter(env: &Env, outs: &[&str]) -> HandlerSpec {
    let base = HandlerSpec { max_attempts: 1, ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) };
    outs.iter().fold(base, |spec, out| spec.emitting(out, &["test.emitted.v1"], emitted_schema()))
}
