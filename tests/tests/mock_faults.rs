//! The tests that need a broker fault Apache Kafka cannot be made to give
//! from outside, on librdkafka's mock cluster (`kafka::use_mock_cluster`,
//! which every test here calls first, naming its fault). A binary of its
//! own: a fault is injected into every request of this process's cluster,
//! and every other test binary runs on Apache Kafka. `scripts/test` counts
//! the tests of this binary as the mock cluster's.

use std::time::Duration;

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use idem_tests::wait_until;

/// The fault: the broker refuses exactly the next 25 Produce requests as
/// not authorised, then accepts them (an operator fixing the DLQ topic's
/// ACLs). Apache Kafka with ACLs refuses every produce until the ACL is
/// changed, which this suite's broker (no authorizer) cannot be made to do
/// from a test; the refusal class is the topic's, so the partition waits
/// at the record, counted in `dlq_refused`, and proceeds once it lands.
#[tokio::test(flavor = "multi_thread")]
async fn an_unwritable_dlq_holds_the_source_offset_until_the_record_lands_there_once() {
    let r = refused_produces(
        "the next 25 Produce requests refused (TOPIC_AUTHORIZATION_FAILED), then accepted",
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )
    .await;
    assert!(r.dlq_refused >= 1, "the refused writes were counted as the topic's refusals: {r:?}");
    assert_eq!(r.enveloped, 0, "the topic's refusal is not the record's: {r:?}");
}

/// The fault: the next 25 Produce requests fail as an outage would
/// (NOT_ENOUGH_REPLICAS), then succeed; Apache Kafka gives it only with
/// several brokers and one of them stopped at the right moment.
#[tokio::test(flavor = "multi_thread")]
async fn a_dlq_outage_is_ridden_out_without_an_envelope_or_an_alert() {
    let r = refused_produces(
        "the next 25 Produce requests fail with NOT_ENOUGH_REPLICAS (an outage), then succeed",
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
    )
    .await;
    assert_eq!((r.dlq_refused, r.enveloped), (0, 0), "an outage is neither the topic's nor the record's: {r:?}");
}

/// One fault at a time: the cluster, and its queue of injected errors, is
/// this process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The fault: every Produce request fails as an outage would
/// (NOT_ENOUGH_REPLICAS) for 30 s, then they succeed. Apache Kafka gives it
/// only with several brokers and one stopped at the right moment; here only
/// the outbox relay produces, so the orders go on being consumed and
/// charged while the payment requests they emitted wait in the outbox.
#[tokio::test(flavor = "multi_thread")]
async fn an_outage_of_the_broker_holds_the_outbox_rows_and_loses_none() {
    let _alone = ONE_AT_A_TIME.lock().await;
    kafka::use_mock_cluster("every Produce request fails with NOT_ENOUGH_REPLICAS for 30 s, then they succeed");
    idem_tests::init_logging();
    let db = TestDb::new().await.unwrap_or_else(|e| panic!("database: {e:#}"));
    let provider = PaymentProvider::start().await;
    let (orders, requests) = (kafka::create_topic(1).await, kafka::create_topic(1).await);
    let producer = kafka::producer();
    for id in 1..=20 {
        kafka::produce(&producer, &orders, 0, "k", &host::order_payload(id).1).await;
    }
    // Every Produce request refused until cleared: more errors queued than
    // the relay's retries can use up in the outage.
    kafka::on_mock(|cluster| {
        let errors = vec![rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 100_000];
        cluster.request_errors(rdkafka::types::RDKafkaApiKey::Produce, &errors);
    });
    let spec = HandlerSpec::billing_announcing(&orders, &provider.base_url(), &requests);
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    db.allow_emits(&config).await;
    let running = host::InProcess::start(&config);
    let charged = || async { db.count("SELECT count(*) FROM billing.charge").await };
    idem_tests::wait_until_async("the 20 orders are charged during the outage", || async { charged().await == 20 })
        .await;
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_secs(30) {
        let (pending, failed, published) = (
            db.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NULL AND failed_at IS NULL").await,
            db.count("SELECT count(*) FROM idem.outbox WHERE failed_at IS NOT NULL").await,
            db.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NOT NULL").await,
        );
        assert_eq!((pending, failed, published), (20, 0, 0), "the rows wait through the outage, none failed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    kafka::on_mock(|cluster| cluster.clear_request_errors(rdkafka::types::RDKafkaApiKey::Produce));
    wait_until("the broker back, every request is published", || {
        let ids: std::collections::BTreeSet<String> = kafka::read_all(&requests)
            .iter()
            .filter_map(|m| idem::pipeline::replay::header(m, "idem.causation-id"))
            .collect();
        ids.len() == 20
    })
    .await;
    let r = running.stop().await.remove(0);
    assert_eq!(r.processed, 20, "{r:?}");
    assert_eq!(db.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NULL").await, 0);
    db.drop_database().await;
}

async fn refused_produces(fault: &str, code: rdkafka::types::RDKafkaRespErr) -> idem::stats::HandlerReport {
    let _alone = ONE_AT_A_TIME.lock().await;
    kafka::use_mock_cluster(fault);
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
    kafka::on_mock(move |cluster| {
        let errors = vec![code; 25];
        cluster.request_errors(rdkafka::types::RDKafkaApiKey::Produce, &errors);
    });
    let spec = HandlerSpec::scenarios(&topic, &provider.base_url());
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    let dlq = format!("{}.scenarios.dlq", topic);
    // From the moment the partition is assigned until the record is in the
    // DLQ, the partition's committed offset stays on it (the mock cluster
    // assigns after its 3 s initial rebalance delay).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !host::partition_gauge(&host::metrics(&config).await, "idem_partition_assigned", 0, "1") {
        assert!(std::time::Instant::now() < deadline, "the partition was not assigned within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut checks = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // The offset first, then the DLQ: an offset past the record seen
        // at one moment means the record was in the DLQ by then.
        let passed = kafka::committed(&spec.group_id, &topic, 1)[0].is_some_and(|o| o > 0);
        let landed = !kafka::read_all(&dlq).is_empty();
        assert!(!passed || landed, "the offset passed a record that is not in the DLQ");
        if landed {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the record never reached the DLQ");
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checks >= 3, "the DLQ refused the write for a while, and that was checked ({checks} checks)");
    wait_until("both committed", || kafka::committed(&spec.group_id, &topic, 1) == vec![Some(2)]).await;
    let r = running.stop().await.remove(0);
    assert_eq!((r.dead_lettered, r.processed), (1, 1), "{r:?}");
    assert_eq!(kafka::read_all(&dlq).len(), 1, "once");
    db.drop_database().await;
    r
}
