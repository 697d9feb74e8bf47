//! `idem run` against the test broker's SASL_SSL listener (TLS with a
//! certificate from a CA made for it, SCRAM-SHA-512), the way managed Kafka
//! services are set up. The config names only that listener, so every
//! connection the host makes (bootstrap, partition leaders, the group
//! coordinator, the admin client creating the dead-letter topic) goes
//! through TLS and the SASL exchange; the password reaches the host only
//! through the environment.

use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;

use crate::{CHARGES, Env};

#[tokio::test(flavor = "multi_thread")]
async fn idem_consumes_and_commits_over_tls_and_scram_with_the_password_from_the_environment() {
    let tls = kafka::TlsListeners::from_env();
    let env = Env::new(2).await;
    let producer = kafka::producer_from(tls.client_config());
    let records: Vec<(i32, Vec<u8>)> = (0..300).map(|i| ((i % 2) as i32, order_payload(i + 1).1)).collect();
    kafka::produce_all(&producer, &env.topic, &records).await;

    let spec = HandlerSpec::billing(&env.topic, &env.provider.base_url());
    let config = host::write_config_with(
        &tls.sasl_ssl,
        &tls.sasl_properties("SCRAM-SHA-512"),
        &[("sasl.password", "IDEM_TEST_KAFKA_PASSWORD")],
        &env.db.url,
        std::slice::from_ref(&spec),
    );
    let text = std::fs::read_to_string(&config).unwrap_or_default();
    assert!(!text.contains(&tls.password), "the config file names the variable, not the password");
    let child = host::spawn(&config, true, &[("IDEM_TEST_KAFKA_PASSWORD", &tls.password)]);
    let (status, reports) = host::wait_report(child);
    assert!(status.success(), "idem run over SASL_SSL: {status}");
    let r = &reports[0];
    assert_eq!((r.processed, r.failed, r.invalid), (300, 0, 0), "{r:?}");
    assert_eq!(env.count(CHARGES).await, 300);
    assert_eq!(
        kafka::committed_from(tls.client_config(), &spec.group_id, &env.topic, 2),
        vec![Some(150), Some(150)],
        "offsets were committed through the secure listener"
    );
    assert_eq!(kafka::partitions(&format!("{}.billing.dlq", env.topic)), 2, "the DLQ was created over SASL_SSL");
    env.finish().await;
}
