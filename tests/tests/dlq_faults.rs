//! The dead-letter topic refusing writes: the source offset stays on the
//! record until it lands in the DLQ, once. A binary of its own: the fault is
//! injected into every Produce request of this process's mock cluster.

use std::time::Duration;

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use idem_tests::wait_until;

#[tokio::test(flavor = "multi_thread")]
async fn an_unwritable_dlq_holds_the_source_offset_until_the_record_lands_there_once() {
    if !kafka::is_mock() {
        return; // fault injection needs the mock cluster
    }
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
    // While the DLQ refuses the record, the partition's offset stays on it.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !kafka::read_all(&dlq).is_empty() {
            break;
        }
        assert!(
            kafka::committed(&spec.group_id, &topic, 1)[0].is_none_or(|o| o == 0),
            "the offset passed a record that is not in the DLQ"
        );
    }
    wait_until("the record in the DLQ", || !kafka::read_all(&dlq).is_empty()).await;
    wait_until("both committed", || kafka::committed(&spec.group_id, &topic, 1) == vec![Some(2)]).await;
    let r = &running.stop().await[0];
    assert!(r.unavailable >= 1, "the refused writes were retried: {r:?}");
    assert_eq!((r.dead_lettered, r.processed), (1, 1), "{r:?}");
    assert_eq!(kafka::read_all(&dlq).len(), 1, "once");
    db.drop_database().await;
}
