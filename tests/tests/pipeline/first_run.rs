//! The examples work as written (issue 41, "First run"): the chain's
//! config (`examples/chain/idem.toml`) with the paths it names — the
//! components where `cargo build --target-dir target` puts them, the
//! migrations and schemas beside it — and the provider stub
//! (`scripts/provider`) on the port it names. Only the two addresses the
//! config documents as overridable (IDEM_KAFKA_BROKERS, IDEM_DATABASE_URL)
//! point at the suite's broker and a fresh database.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_tests::db::TestDb;
use idem_tests::{guests, host, kafka, wait_until_async};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The examples' folder as a checkout has it, with `target/` where a build
/// by hand puts the components: the chain's config copied (so that its
/// relative paths resolve here), the rest linked.
fn checkout() -> PathBuf {
    let root = std::env::temp_dir().join(idem_tests::unique_name("idem_first_run"));
    let examples = root.join("examples");
    std::fs::create_dir_all(examples.join("chain")).expect("dirs");
    for example in ["billing", "payments", "notification"] {
        std::os::unix::fs::symlink(repo(&format!("examples/{example}")), examples.join(example)).expect("link");
    }
    let release = root.join("target/wasm32-wasip2");
    std::fs::create_dir_all(&release).expect("dirs");
    let built = guests::component("billing").parent().expect("the guests' folder").to_path_buf();
    std::os::unix::fs::symlink(built, release.join("release")).expect("link");
    let config = examples.join("chain/idem.toml");
    std::fs::copy(repo("examples/chain/idem.toml"), &config).expect("copy the config");
    config
}

/// `name`, unless the broker has it already (a second run on one broker).
async fn topic(name: &str) {
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", kafka::brokers()).create().expect("admin client");
    let new = NewTopic::new(name, 3, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in admin.create_topics([&new], &options).await.expect("create topics") {
        match result {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => panic!("create topic {topic}: {code}"),
        }
    }
}

struct Stub(Child);

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chain_example_runs_as_written_with_the_provider_stub() {
    idem_tests::init_logging();
    let config = checkout();
    let db = TestDb::empty().await.expect("a database");
    // The two addresses, and the DLQ key the by-hand steps export.
    let overrides = [
        ("IDEM_KAFKA_BROKERS", kafka::brokers()),
        ("IDEM_DATABASE_URL", db.url.clone()),
        ("IDEM_DLQ_KEY", idem_tests::DLQ_KEY.to_owned()),
    ];
    let idem = |args: &[&str]| {
        let out = Command::new(idem_tests::idem_bin()).args(args).envs(overrides.clone()).output().expect("idem");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "idem {args:?}: {said}");
    };
    topic("orders.confirmed").await;
    topic("payments.requested").await;
    let path = config.to_str().expect("path");
    idem(&["migrate", "--config", path]);
    idem(&["check", "--config", path]);

    let stub = Stub(
        Command::new(repo("scripts/provider"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("scripts/provider (python3)"),
    );
    let charges = || async {
        let answer = reqwest::get("http://127.0.0.1:18080/v1/charges").await.ok()?;
        answer.json::<serde_json::Value>().await.ok()
    };
    wait_until_async("the provider stub answers on 18080", || async { charges().await.is_some() }).await;

    let env: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let child = host::spawn(&config, false, &env);
    // The orders as docs/first-run.md produces them: scripts/orders piped
    // into Kafka's console producer.
    let orders = Command::new(repo("scripts/orders")).args(["20", "7000000"]).output().expect("scripts/orders");
    assert!(orders.status.success(), "scripts/orders: {orders:?}");
    let ids: Vec<String> = String::from_utf8_lossy(&orders.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("an event")["eventId"].as_str().expect("id").to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 20);
    let brokers = kafka::brokers();
    let mut producer = Command::new(repo("scripts/kafka/tool"))
        .args(["console-producer", "--bootstrap-server", &brokers, "--topic", "orders.confirmed"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("scripts/kafka/tool");
    std::io::Write::write_all(&mut producer.stdin.take().expect("stdin"), &orders.stdout).expect("orders piped");
    assert!(producer.wait().expect("the console producer").success());
    let all_of = |table: &'static str, column: &'static str| {
        let (db, ids) = (&db, &ids);
        async move {
            let sql = format!("SELECT count(*) FROM {table} WHERE {column}::text = ANY('{{{}}}')", ids.join(","));
            db.count(&sql).await == 20
        }
    };
    wait_until_async("each order charged, its payment requested and taken, its customer told", || async {
        all_of("billing.charge", "event_id").await
            && all_of("payments.request", "caused_by").await
            && all_of("notification.sent", "event_id").await
    })
    .await;
    let made = charges().await.expect("charges");
    let keys: Vec<&str> =
        made["charges"].as_array().expect("charges").iter().filter_map(|c| c["idempotencyKey"].as_str()).collect();
    for id in &ids {
        assert!(keys.contains(&id.as_str()), "the provider was asked to charge {id} with its event id as the key");
    }
    host::signal(&child, "TERM");
    let (status, _) = host::wait_report(child);
    assert!(status.success(), "{status}");
    drop(stub);
    db.drop_database().await;
}
