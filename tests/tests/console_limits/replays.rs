//! Replays from the console: one at a time per host, at most 200 records.

use std::time::Duration;

use idem_tests::provider::Fault;
use idem_tests::{host, kafka};
use rdkafka::Message as _;
use reqwest::StatusCode;
use serde_json::json;

use super::console::Console;
use super::{Env, Host, READ_TOKEN, TOKEN};

const REPLAY: &str = "/console/api/handlers/billing/dead-letters/replay";

/// README ("Dead letters", "Fair shares"): a replay of "the selected
/// records, or of the filters' range (at most 200: a replay holds its
/// records in memory)"; "Replays run one at a time per host and need
/// `operate`". With 251 sealed dead letters: 201 selected records are
/// refused (400, "at most 200 records at once"), a range asking for 1,000
/// reads 200; while one operator's replay runs (its charge held 3 s by the
/// provider), another operator's is refused (409, "a replay is running on
/// this host"), and taken once it ended; a `read` session's is refused
/// (403, naming the scope). Without the bound the range would read 251;
/// without the one-at-a-time rule the second replay would run beside the
/// first.
#[tokio::test(flavor = "multi_thread")]
async fn replays_run_one_at_a_time_per_host_and_hold_at_most_200_records() {
    let env = Env::new().await;
    let host = Host::start(&env.config("")).await;
    let producer = kafka::producer();
    let dlq = env.dlq();
    // One charge the provider refuses (dead-lettered, replayable), then 250
    // records that are not JSON.
    env.provider.set_fault(Fault::RejectTimes(1));
    let (id, order) = host::order_payload(1);
    kafka::produce(&producer, &env.topic, 0, "refused", &order).await;
    idem_tests::wait_until("the refused charge dead-lettered", || kafka::read_all(&dlq).len() == 1).await;
    let refused = kafka::read_all(&dlq).pop().expect("the refused charge's dead letter");
    assert!(String::from_utf8_lossy(refused.payload().unwrap_or_default()).contains(&id.to_string()));
    let junk: Vec<(i32, Vec<u8>)> = (0..250).map(|i| (i % 2, format!("not json {i}").into_bytes())).collect();
    kafka::produce_all(&producer, &env.topic, &junk).await;
    idem_tests::wait_until("251 dead letters", || kafka::read_all(&dlq).len() == 251).await;

    let console = Console::of(&host);
    let (one, other, reader) =
        (console.session(TOKEN).await, console.session(TOKEN).await, console.session(READ_TOKEN).await);
    // At most 200 records at once: 201 positions are refused unread.
    let positions: Vec<(i32, i64)> = (0..201).map(|o| (0, o)).collect();
    let many = console.post(&one, &one.csrf, REPLAY, &json!({ "records": positions, "dry_run": true })).await;
    assert_eq!(many.status, StatusCode::BAD_REQUEST, "{:?}", many.body);
    assert_eq!(many.error(), "at most 200 records at once");
    // A range asking for more reads 200.
    let range = json!({ "since": "2000-01-01T00:00:00Z", "limit": 1000, "dry_run": true });
    let dry = console.post(&one, &one.csrf, REPLAY, &range).await;
    assert_eq!(dry.status, StatusCode::OK, "{:?}", dry.body);
    assert_eq!(dry.body["read"], 200, "a range's dry run over 251 dead letters: {:?}", dry.body["read"]);

    // One replay at a time: the refused charge's, held 3 s at the provider.
    env.provider.set_latency(Duration::from_secs(3));
    let key = Some(id.to_string());
    let selected = json!({ "records": [[refused.partition(), refused.offset()]] });
    let running = tokio::spawn({
        let (console, one) = (console.clone(), one.clone());
        async move { console.post(&one, &one.csrf, REPLAY, &selected).await }
    });
    idem_tests::wait_until("the replay's charge at the provider", || {
        env.provider.keys().iter().filter(|k| **k == key).count() == 2
    })
    .await;
    let second = console.post(&other, &other.csrf, REPLAY, &range).await;
    assert_eq!(second.status, StatusCode::CONFLICT, "another operator's replay while one runs: {:?}", second.body);
    assert_eq!(second.error(), "a replay is running on this host: wait for it");
    let first = running.await.expect("the first replay");
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!((first.body["read"].clone(), first.body["applied"].clone()), (json!(1), json!(1)), "{:?}", first.body);
    assert!(second.took < Duration::from_secs(2), "refused at once, not after a wait: {:?}", second.took);
    env.provider.set_latency(Duration::ZERO);
    let after = console.post(&other, &other.csrf, REPLAY, &range).await;
    assert_eq!(after.status, StatusCode::OK, "a replay once the other ended: {:?}", after.body);
    // And a read session may not replay at all.
    let read = console.post(&reader, &reader.csrf, REPLAY, &range).await;
    assert_eq!(read.status, StatusCode::FORBIDDEN, "{:?}", read.body);
    assert!(read.error().contains("scope `read`"), "{:?}", read.body);
    assert_eq!(env.provider.charges(), 1, "the replayed charge, once");
    host.stop().await;
    env.finish().await;
}
