//! `idem run` against a listener that requires TLS and SASL/SCRAM, the way
//! managed Kafka services are set up: every connection the host makes, to
//! bootstrap and to the partition leader, goes through TLS and the SASL
//! exchange, and the password reaches it only through the environment.

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use idem_tests::secure::{ListenerStats, Mechanism, Requires, SecureBroker};

use crate::CHARGES;

#[tokio::test(flavor = "multi_thread")]
async fn idem_consumes_and_commits_over_tls_and_scram_with_the_password_from_the_environment() {
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
    assert_eq!(db.count(CHARGES).await, 300);
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
