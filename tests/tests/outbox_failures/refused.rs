//! A row the broker refuses for good: marked failed with the reason,
//! logged at error level, shown by `idem outbox --failed`, and holding no
//! other row back.

use std::time::Duration;

use idem_tests::kafka;
use rdkafka::Message as _;
use rdkafka::types::RDKafkaRespErr;

use crate::mock::Mock;
use crate::{Env, Host, emit, wait_for, wait_rows};

/// The amounts published on `topic`, in order, and their keys.
pub(crate) fn published(topic: &str) -> Vec<(String, i64)> {
    kafka::read_all(topic)
        .iter()
        .map(|m| {
            let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or_default();
            (String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(), value["amount"].as_i64().unwrap_or(0))
        })
        .collect()
}

/// README: "A row the broker refuses for good (too large, the topic gone,
/// not authorised) is marked failed with the reason, logged at error
/// level, counted, and holds no other row back; `idem outbox --failed`
/// shows it". One transaction emits, to a topic whose `max.message.bytes`
/// is 2 KiB, a small row, a 4 KB one, another small one and a small one of
/// the large one's key, and a row to another topic of the same producer;
/// a later event emits one more. Only the large row may fail: a relay that
/// retried it for ever, or failed the rows sent beside it (same round,
/// same partition, same key), would leave them unpublished.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_too_large_for_its_topic_is_failed_and_every_other_row_is_published() {
    let env = Env::new().await;
    let out = idem_tests::unique_name("idem_topic");
    kafka::create_topic_with(&out, 1, &[("max.message.bytes", "2048")]).await;
    let other = kafka::create_topic(1).await;
    let config = env.config(env.emitter(&[&out, &other])).await;
    env.emit(vec![
        emit(&out, "k1", 1, 0),
        emit(&out, "big", 2, 4_000),
        emit(&out, "k3", 3, 0),
        emit(&out, "big", 4, 0),
        emit(&other, "k5", 5, 0),
    ])
    .await;
    let running = Host::start(&config);
    wait_rows(&env, "the five rows are published or failed", |rows| {
        rows.len() == 5 && rows.iter().all(|r| r.published || r.failed)
    })
    .await;
    // A later event's row, in a later round: nothing waits on the failed one.
    env.emit(vec![emit(&out, "big", 6, 0)]).await;
    let rows = wait_rows(&env, "the later row is published too", |rows| rows.len() == 6 && rows[5].published).await;

    let failed: Vec<_> = rows.iter().filter(|r| r.failed).collect();
    assert_eq!(failed.len(), 1, "only the large row failed: {rows:#?}");
    let big = failed[0];
    assert_eq!((big.id, big.key.as_str()), (rows[1].id, "big"), "{rows:#?}");
    assert!(!big.published, "{big:?}");
    let reason = big.failure.clone().unwrap_or_default();
    assert!(reason.contains(&out) && reason.contains("Message size too large"), "the reason: {reason}");
    assert_eq!(
        published(&out),
        vec![("k1".into(), 1), ("k3".into(), 3), ("big".into(), 4), ("big".into(), 6)],
        "every other row of the topic, the large one's key's too, published in id order"
    );
    assert_eq!(published(&other), vec![("k5".into(), 5)], "the producer's other topic");

    let logged = running.logged("ERROR", "outbox: the broker refused a row for good");
    assert_eq!(logged.len(), 1, "logged once at error level: {logged:?}");
    assert!(logged[0].contains("Message size too large"), "{logged:?}");
    running.stop();

    // `idem outbox --failed --json` shows it, with its reason.
    let (status, stdout) = idem_tests::output_within(
        std::process::Command::new(idem_tests::idem_bin())
            .args(["outbox", "--failed", "--json", "--config"])
            .arg(&config),
        "idem outbox --failed",
        Duration::from_secs(60),
    );
    assert!(status.success(), "{status}");
    let shown: serde_json::Value = serde_json::from_slice(&stdout).expect("idem outbox --json");
    assert_eq!(shown["failed"].as_array().map(Vec::len), Some(1), "{shown}");
    assert_eq!(shown["failed"][0]["id"], big.id, "{shown}");
    assert_eq!(shown["failed"][0]["failure"].as_str(), Some(reason.as_str()), "{shown}");
    assert_eq!((&shown["producers"][0]["published"], &shown["producers"][0]["failed"]), (&5.into(), &1.into()));
    env.finish().await;
}

/// README: a row the broker refuses for good — "the topic gone" among the
/// causes — "is marked failed with the reason … and holds no other row
/// back". A topic the relay has published to is deleted while the host
/// runs; the row emitted to it next must fail (naming the topic), and the
/// rows to the producer's other topic, emitted with it and after it, are
/// published. A relay that took the deleted topic for an outage would keep
/// its row pending for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_for_a_topic_deleted_under_the_relay_is_failed_and_the_other_topics_go_on() {
    let env = Env::new().await;
    let gone = kafka::create_topic(1).await;
    let other = kafka::create_topic(1).await;
    let config = env.config(env.emitter(&[&gone, &other])).await;
    env.emit(vec![emit(&gone, "k1", 1, 0)]).await;
    let running = Host::start(&config);
    wait_rows(&env, "the first row is published while its topic exists", |rows| rows.len() == 1 && rows[0].published)
        .await;
    kafka::delete_topic(&gone).await;
    env.emit(vec![emit(&gone, "k2", 2, 0), emit(&other, "k3", 3, 0)]).await;
    // librdkafka calls the topic unknown once its metadata says so for
    // `topic.metadata.propagation.max.ms` (30 s): until then the row waits
    // as in an outage, and the other topic's row goes out meanwhile.
    wait_rows(&env, "the other topic's row is published", |rows| rows.len() == 3 && rows[2].published).await;
    wait_rows(&env, "the row to the deleted topic is failed", |rows| rows[1].failed).await;
    env.emit(vec![emit(&other, "k4", 4, 0)]).await;
    let rows = wait_rows(&env, "the later row is published", |rows| rows.len() == 4 && rows[3].published).await;
    let reason = rows[1].failure.clone().unwrap_or_default();
    assert!(reason.contains(&gone), "the reason names the topic: {reason}");
    assert!(!rows[1].published, "{rows:#?}");
    assert_eq!(published(&other), vec![("k3".into(), 3), ("k4".into(), 4)]);
    let logged = running.logged("ERROR", "outbox: the broker refused a row for good");
    assert_eq!(logged.len(), 1, "logged once at error level: {logged:?}");
    running.stop();
    env.finish().await;
}

/// README's third cause of a refusal for good, "not authorised": the
/// broker answers that the producer may not write the topic. Its row must
/// be failed naming the refusal, and the producer's other topic's row,
/// committed with it, published.
///
/// On the mock cluster: the suite's Apache Kafka runs without an
/// authorizer, so no topic can be closed to the relay.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_for_a_topic_the_producer_is_not_authorised_for_is_failed_and_the_other_topics_go_on() {
    let mock = Mock::start("a topic answering TOPIC_AUTHORIZATION_FAILED");
    let env = Env::on_mock(&mock).await;
    let (denied, other) = (mock.topic(), mock.topic());
    let config = env.config(env.emitter(&[&denied, &other])).await;
    let running = Host::start(&config);
    // Closed once the host has started (its start-up check reads the
    // outbox topics' metadata, and would refuse to start).
    wait_for("the relay holds the lease", Duration::from_secs(60), || async {
        let lines = idem_tests::host::metrics(&config).await;
        match crate::metric(&lines, "idem_outbox_lease_held", "scenarios") {
            Some(1.0) => Ok(()),
            other => Err(format!("idem_outbox_lease_held {other:?}")),
        }
    })
    .await;
    let closed = denied.clone();
    mock.on(move |c| c.topic_error(&closed, RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED))
        .expect("topic error");
    env.emit(vec![emit(&denied, "d1", 1, 0), emit(&other, "o2", 2, 0)]).await;
    let rows = wait_rows(&env, "one row failed, the other published", |rows| {
        rows.len() == 2 && rows.iter().all(|r| r.published || r.failed)
    })
    .await;
    assert!(rows[0].failed && !rows[0].published, "{rows:#?}");
    let reason = rows[0].failure.clone().unwrap_or_default();
    assert!(reason.contains(&denied) && reason.contains("TopicAuthorizationFailed"), "the reason: {reason}");
    assert!(rows[1].published && !rows[1].failed, "{rows:#?}");
    assert_eq!(mock.keys(&other), ["o2"]);
    running.stop();
    env.finish().await;
}
