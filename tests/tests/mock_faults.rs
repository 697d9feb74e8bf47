//! The tests that need a broker fault Apache Kafka cannot be made to give
//! from outside, on librdkafka's mock cluster (`kafka::use_mock_cluster`,
//! which every test here calls first, naming its fault). A binary of its
//! own: a fault is injected into every request of this process's cluster,
//! and every other test binary runs on Apache Kafka. `scripts/test` counts
//! the tests of this binary as the mock cluster's.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use idem_tests::secure::{ListenerStats, Mechanism, Requires, SecureBroker};
use idem_tests::wait_until;

/// The fault: the broker refuses exactly the next 25 Produce requests, then
/// accepts them. Apache Kafka refuses a produce for an ACL, a size or a
/// missing topic, and then refuses every one after it as well.
#[tokio::test(flavor = "multi_thread")]
async fn an_unwritable_dlq_holds_the_source_offset_until_the_record_lands_there_once() {
    kafka::use_mock_cluster("the next 25 Produce requests refused (TOPIC_AUTHORIZATION_FAILED), then accepted");
    idem_tests::init_logging();
    let db = TestDb::new().await.unwrap_or_else(|e| panic!("database: {e:#}"));
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(1).await;
    let producer = kafka::producer();
    for name in ["write-then-fail", "ok"] {
        let payload = serde_json::json!({
            "eventId": uuid::Uuid::now_v7().to_string(), "eventType": "test.scenario.v1",
            "occurredAt": "2026-11-30T12:00:00Z", "scenario": name,
        });
        kafka::produce(&producer, &topic, 0, "k", payload.to_string().as_bytes()).await;
    }
    // The next 25 Produce requests are refused: the DLQ writes, since
    // nothing else in this process (a test binary of its own, with its own
    // mock cluster) produces from now on.
    kafka::on_mock(|cluster| {
        let errors = vec![rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 25];
        cluster.request_errors(rdkafka::types::RDKafkaApiKey::Produce, &errors);
    });
    let spec = HandlerSpec::scenarios(&topic, &provider.base_url());
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    let dlq = format!("{}.scenarios.dlq", topic);
    // From the moment the partition is assigned until the record is in the
    // DLQ, the partition's committed offset stays on it (the mock cluster
    // assigns after its 3 s initial rebalance delay).
    let metrics = format!("{}/metrics", host::admin_url(&config));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !assigned(&metrics).await {
        assert!(std::time::Instant::now() < deadline, "the partition was not assigned within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut checks = 0;
    while kafka::read_all(&dlq).is_empty() {
        assert!(
            kafka::committed(&spec.group_id, &topic, 1)[0].is_none_or(|o| o == 0),
            "the offset passed a record that is not in the DLQ"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checks >= 3, "the DLQ refused the write for a while, and that was checked ({checks} checks)");
    wait_until("both committed", || kafka::committed(&spec.group_id, &topic, 1) == vec![Some(2)]).await;
    let r = &running.stop().await[0];
    assert!(r.unavailable >= 1, "the refused writes were retried: {r:?}");
    assert_eq!((r.dead_lettered, r.processed), (1, 1), "{r:?}");
    assert_eq!(kafka::read_all(&dlq).len(), 1, "once");
    db.drop_database().await;
}

/// Whether the host's `/metrics` says its one partition is assigned.
async fn assigned(metrics: &str) -> bool {
    let body = match reqwest::get(metrics).await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(), // the listener is not up yet
    };
    body.lines().any(|l| l.starts_with("idem_partition_assigned{") && l.ends_with(" 1"))
}

/// The TLS and SASL tests' fault: a listener of the suite's own
/// (`tests/src/secure`) in front of a mock cluster of their own, which
/// counts handshakes, SASL refusals and requests sent before
/// authentication, and can present a certificate from a CA the client does
/// not trust. Moving them onto the test broker's own SSL and SASL_SSL
/// listeners is open work (the README says so).
const SECURE_LISTENER: &str = "a TLS/SASL listener that counts handshakes and refusals (tests/src/secure)";

/// `idem_consumes_and_commits_over_tls_and_scram_…`: every connection the
/// host makes, to bootstrap and to the partition leader, goes through TLS
/// and the SASL exchange, and the password reaches it only through the
/// environment.
#[tokio::test(flavor = "multi_thread")]
async fn idem_consumes_and_commits_over_tls_and_scram_with_the_password_from_the_environment() {
    kafka::use_mock_cluster(SECURE_LISTENER);
    idem_tests::init_logging();
    let broker = SecureBroker::start(Requires { tls: true, sasl: Some(Mechanism::ScramSha512) });
    let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
    let provider = PaymentProvider::start().await;
    let topic = broker.create_topic(2);
    let producer = kafka::producer_from(broker.client_config());
    let records: Vec<(i32, Vec<u8>)> = (0..300).map(|i| ((i % 2) as i32, order_payload(i + 1).1)).collect();
    kafka::produce_all(&producer, &topic, &records).await;
    let before = ListenerStats::get(&broker.stats.authenticated);

    let spec = HandlerSpec::billing(&topic, &provider.base_url());
    let config = host::write_config_with(
        &broker.address,
        &broker.properties(),
        &[("sasl.password", "IDEM_TEST_KAFKA_PASSWORD")],
        &db.url,
        std::slice::from_ref(&spec),
    );
    let text = std::fs::read_to_string(&config).unwrap_or_default();
    assert!(!text.contains(&broker.password), "the config file names the variable, not the password");
    let child = host::spawn(&config, true, &[("IDEM_TEST_KAFKA_PASSWORD", &broker.password)]);
    let (status, reports) = host::wait_report(child);
    assert!(status.success(), "idem run over SASL_SSL: {status}");
    let r = &reports[0];
    assert_eq!((r.processed, r.failed, r.invalid), (300, 0, 0), "{r:?}");
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, 300);
    assert!(
        ListenerStats::get(&broker.stats.authenticated) > before,
        "the host's connections passed the SCRAM exchange"
    );
    assert_eq!(ListenerStats::get(&broker.stats.failed_authentications), 0);
    assert_eq!(ListenerStats::get(&broker.stats.unauthenticated_requests), 0);
    assert_eq!(
        kafka::committed_from(broker.client_config(), &spec.group_id, &topic, 2),
        vec![Some(150), Some(150)],
        "offsets were committed through the secure listener"
    );
    db.drop_database().await;
}

/// `idem check` with extra environment variables.
fn check_with_env(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(idem_tests::idem_bin())
        .args(["check", "--config", config.to_str().unwrap_or_default()])
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run idem: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn check_reaches_brokers_that_require_tls_and_sasl_and_never_prints_a_secret() {
    kafka::use_mock_cluster(SECURE_LISTENER);
    idem_tests::init_logging();
    let db = TestDb::new().await.expect("database");
    const VAR: &str = "IDEM_TEST_KAFKA_PASSWORD";
    // librdkafka's own debug log of its configuration and of the SASL
    // exchange goes to idem's log too: none of it may carry the password.
    let verbose = |password: &str| -> Vec<(&'static str, String)> {
        vec![(VAR, password.to_owned()), ("IDEM_LOG", "info,idem=debug,librdkafka=debug".to_owned())]
    };
    let run = |config: &Path, env: &[(&'static str, String)]| {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        check_with_env(config, &pairs)
    };

    for mechanism in [Mechanism::Plain, Mechanism::ScramSha256, Mechanism::ScramSha512] {
        let broker = SecureBroker::start(Requires { tls: true, sasl: Some(mechanism) });
        let topic = broker.create_topic(1);
        let mut properties = broker.properties();
        properties.push(("debug", "conf,security,broker".to_owned()));
        let spec = HandlerSpec::billing(&topic, "http://127.0.0.1:9");
        let config = host::write_config_with(
            &broker.address,
            &properties,
            &[("sasl.password", VAR)],
            &db.url,
            std::slice::from_ref(&spec),
        );
        let (ok, out) = run(&config, &verbose(&broker.password));
        assert!(ok, "{mechanism:?} over TLS: {out}");
        assert!(!out.contains(&broker.password), "{mechanism:?}: the password was printed");
        assert!(ListenerStats::get(&broker.stats.authenticated) >= 1, "{mechanism:?}: authenticated");
        if mechanism != Mechanism::ScramSha512 {
            continue;
        }

        // A wrong password: refused at once, saying so, printing neither.
        let (ok, out) = run(&config, &verbose("wrong-password-4711"));
        assert!(!ok && out.contains("broker unreachable") && out.contains("Authentication failed"), "{out}");
        assert!(!out.contains("wrong-password-4711") && !out.contains(&broker.password), "a password was printed");
        assert!(ListenerStats::get(&broker.stats.failed_authentications) >= 1);

        // The variable missing: named, before anything connects.
        let (ok, out) = run(&config, &[]);
        assert!(!ok && out.contains(VAR) && out.contains("not set"), "{out}");

        // The password written into the file: refused, and not echoed.
        let mut literal = broker.properties();
        literal.push(("sasl.password", broker.password.clone()));
        let file = host::write_config_with(&broker.address, &literal, &[], &db.url, std::slice::from_ref(&spec));
        let (ok, out) = run(&file, &[]);
        assert!(!ok && out.contains("holds a secret") && out.contains("properties_env"), "{out}");
        assert!(!out.contains(&broker.password), "the refused password was printed: {out}");

        // TLS without SASL: the listener closes the connection at the
        // first request that is not part of the SASL exchange.
        let tls_only =
            vec![("security.protocol", "SSL".to_owned()), ("ssl.ca.location", broker.ca_file.display().to_string())];
        let file = host::write_config_with(&broker.address, &tls_only, &[], &db.url, std::slice::from_ref(&spec));
        let (ok, out) = run(&file, &[]);
        assert!(!ok && out.contains("broker unreachable"), "{out}");
        assert!(ListenerStats::get(&broker.stats.unauthenticated_requests) >= 1, "the listener refused it");

        // A CA that did not sign the listener's certificate.
        let stranger = SecureBroker::start(Requires { tls: true, sasl: None });
        let mut untrusted = broker.properties();
        untrusted.retain(|(k, _)| *k != "ssl.ca.location");
        untrusted.push(("ssl.ca.location", stranger.ca_file.display().to_string()));
        let file = host::write_config_with(
            &broker.address,
            &untrusted,
            &[("sasl.password", VAR)],
            &db.url,
            std::slice::from_ref(&spec),
        );
        let (ok, out) = run(&file, &verbose(&broker.password));
        assert!(!ok && out.contains("certificate verify failed"), "an untrusted certificate: {out}");

        // Plaintext: the TLS handshake fails.
        let file = host::write_config_with(&broker.address, &[], &[], &db.url, std::slice::from_ref(&spec));
        let (ok, out) = run(&file, &[]);
        assert!(!ok && out.contains("broker unreachable"), "{out}");
        assert!(ListenerStats::get(&broker.stats.tls_failures) >= 1, "the TLS handshake failed");
    }

    // TLS alone (no SASL), trusted through ssl.ca.location.
    let broker = SecureBroker::start(Requires { tls: true, sasl: None });
    let topic = broker.create_topic(1);
    let file = host::write_config_with(
        &broker.address,
        &broker.properties(),
        &[],
        &db.url,
        &[HandlerSpec::billing(&topic, "http://127.0.0.1:9")],
    );
    let (ok, out) = run(&file, &[]);
    assert!(ok, "TLS only: {out}");
    db.drop_database().await;
}
