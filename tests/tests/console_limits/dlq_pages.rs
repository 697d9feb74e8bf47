//! Dead-letter pages beside a transaction left open on the DLQ topic.

use std::time::Duration;

use idem_tests::kafka;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use reqwest::StatusCode;

use super::console::Console;
use super::{Env, Host, TOKEN, payloads, read_uncommitted};

/// README ("What it costs the host"): "The readers read uncommitted
/// records too, and stop at a partition's end: a producer holding a
/// transaction open on the DLQ topic can neither stall a page nor hide what
/// idem wrote after it". A dead letter is written, then a transactional
/// producer writes to every DLQ partition and never commits, then two more
/// dead letters follow. The page answers within 10 s and shows all three,
/// sealed. A `read_committed` reader stops at the open transaction's first
/// record (the last stable offset): it would wait, or show only the first.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_left_open_on_the_dlq_topic_neither_stalls_a_page_nor_hides_later_dead_letters() {
    let env = Env::new().await;
    let host = Host::start(&env.config("")).await;
    let producer = kafka::producer();
    let dlq = env.dlq();
    kafka::produce(&producer, &env.topic, 0, "before", b"not json: dead before the open transaction").await;
    idem_tests::wait_until("the first dead letter", || !read_uncommitted(&dlq).is_empty()).await;

    // A producer with a transaction open on every DLQ partition.
    let partitions = kafka::partitions(&dlq);
    let id = idem_tests::unique_name("open_txn");
    let txn: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .set("transactional.id", &id)
        .set("transaction.timeout.ms", "300000")
        .create()
        .expect("transactional producer");
    txn.init_transactions(Duration::from_secs(30)).expect("init_transactions");
    txn.begin_transaction().expect("begin_transaction");
    for p in 0..partitions {
        let record =
            BaseRecord::<str, str>::to(&dlq).partition(p).key("open").payload("written in an open transaction");
        txn.send(record).map_err(|(e, _)| e).expect("send in the transaction");
    }
    txn.flush(Duration::from_secs(30)).expect("the transaction's records reached the broker");

    // idem dead-letters two more, after the open transaction's records.
    for p in 0..2 {
        let payload = format!("not json: dead after the open transaction {p}");
        kafka::produce(&producer, &env.topic, p, "after", payload.as_bytes()).await;
    }
    idem_tests::wait_until("the two later dead letters, after the open transaction's records", || {
        payloads(&read_uncommitted(&dlq)).iter().filter(|p| p.contains("after the open transaction")).count() == 2
    })
    .await;

    let console = Console::of(&host);
    let operator = console.session(TOKEN).await;
    let page = console.get(&operator, "/console/api/handlers/billing/dead-letters").await;
    assert_eq!(page.status, StatusCode::OK, "{:?}", page.body);
    assert!(page.took < Duration::from_secs(10), "the page took {:?} beside an open transaction", page.took);
    let records = page.body["records"].as_array().expect("records");
    let shown = |marker: &str| {
        records
            .iter()
            .filter(|r| r["payload"].as_str().is_some_and(|p| p.contains(marker)))
            .map(|r| r["authenticity"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(shown("before the open transaction"), ["sealed"], "{records:#?}");
    assert_eq!(shown("after the open transaction"), ["sealed", "sealed"], "{records:#?}");
    let open = shown("written in an open transaction");
    assert_eq!(open, vec!["unsealed"; partitions as usize], "the open transaction's records, as not idem's");
    eprintln!("a DLQ page beside a transaction left open: {:?}, {} records", page.took, records.len());

    txn.abort_transaction(Duration::from_secs(30)).expect("abort");
    host.stop().await;
    env.finish().await;
}
