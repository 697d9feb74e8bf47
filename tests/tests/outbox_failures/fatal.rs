//! A producer librdkafka calls broken for good (a fatal error of the
//! idempotent producer) is made anew, and the relay goes on publishing.

use crate::mock::Mock;
use crate::{Env, Host, emit, wait_rows};

/// README: "A producer librdkafka calls broken for good (a fatal error of
/// the idempotent producer) is made anew." The broker answers the relay's
/// first Produce request with OUT_OF_ORDER_SEQUENCE_NUMBER, which for the
/// head of an idempotent producer's requests librdkafka takes as a
/// sequence desynchronisation: a fatal error, after which that producer
/// refuses every record. The row it carried must wait (not fail) and be
/// published by the producer made anew, and so must a row committed
/// later. A relay that kept the broken producer would publish neither.
///
/// On the mock cluster: Apache Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER
/// only when its sequence state and the producer's disagree (lost log
/// data, a broker bug), and the relay is idempotent, not transactional, so
/// no other producer can fence it: no client can make Kafka give it.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_fatal_error_of_its_producer_the_relay_makes_another_and_goes_on_publishing() {
    let mock = Mock::start("the next Produce request answered OUT_OF_ORDER_SEQUENCE_NUMBER (fatal)");
    let env = Env::on_mock(&mock).await;
    let out = mock.topic();
    let config = env.config(env.emitter(&[&out])).await;
    env.emit(vec![emit(&out, "k1", 1, 0)]).await;
    // From here only the host's relay produces to this cluster.
    mock.on(|c| {
        let fatal = rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
        c.request_errors(rdkafka::types::RDKafkaApiKey::Produce, &[fatal]);
    });
    let running = Host::start(&config);
    let rows = wait_rows(&env, "the row is published despite the fatal error", |rows| {
        rows.len() == 1 && (rows[0].published || rows[0].failed)
    })
    .await;
    assert!(rows[0].published && !rows[0].failed, "published, not failed: {rows:?}");
    let remade = running.logged("ERROR", "outbox: the Kafka producer failed for good; making another");
    assert_eq!(remade.len(), 1, "the fatal error was met once and the producer made anew: {remade:?}");
    assert!(running.logged("ERROR", "cannot make another producer").is_empty());

    // The new producer goes on: a row committed later is published too.
    env.emit(vec![emit(&out, "k2", 2, 0)]).await;
    let rows = wait_rows(&env, "a later row is published", |rows| rows.len() == 2 && rows[1].published).await;
    assert!(rows.iter().all(|r| !r.failed), "{rows:?}");
    let mut keys = mock.keys(&out);
    keys.dedup();
    assert_eq!(keys, ["k1", "k2"], "both rows reached the topic, in order");
    running.stop();
    env.finish().await;
}
