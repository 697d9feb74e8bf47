//! The transactional outbox on the real broker: what a handler emits is
//! published once its event commits, never when it rolls back, with the
//! envelope and provenance the host sets; what the guest may not do; the
//! SQL producer of another application; the relay's lease.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use rdkafka::Message as _;

use super::Env;
use super::failures::scenario;

fn emitted_schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/scenarios/emitted.schema.json")
}

/// The scenarios handler allowed to emit `test.emitted.v1` to `out`.
fn emitter(env: &Env, out: &str) -> HandlerSpec {
    HandlerSpec { max_attempts: 1, ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) }.emitting(
        out,
        &["test.emitted.v1"],
        emitted_schema(),
    )
}

/// One `emit` entry of a scenario's payload.
fn emit(topic: &str, key: &str, payload: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "topic": topic, "key": key, "event_type": "test.emitted.v1", "payload": payload })
}

/// Every record of `topic` once `n` are there (at most 60 s).
fn published(topic: &str, n: usize) -> Vec<rdkafka::message::OwnedMessage> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = kafka::read_all(topic);
        if records.len() >= n || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn header(record: &rdkafka::message::OwnedMessage, name: &str) -> Option<String> {
    idem::pipeline::replay::header(record, name)
}

fn value(record: &rdkafka::message::OwnedMessage) -> serde_json::Value {
    serde_json::from_slice(record.payload().unwrap_or_default()).unwrap_or_default()
}

/// The guest's notes: `emitted <n> <id>` / `refused <n> <why>`, by event.
async fn notes(env: &Env, event: uuid::Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note <> 'start' ORDER BY note")
        .bind(event)
        .fetch_all(&env.db.pool)
        .await
        .unwrap_or_else(|e| panic!("notes: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_emitted_is_published_once_after_its_commit_and_never_when_it_rolls_back() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(2).await;
    let one = serde_json::json!({ "emits": [
        { "topic": out, "key": "k1", "event_type": "test.emitted.v1", "payload": { "amount": 1 },
          "headers": [["x-note", "hello"]] }
    ]});
    let (first, first_payload) = scenario("emit", one);
    let (failed, failed_payload) = scenario(
        "emit-then-fail",
        serde_json::json!({ "emits": [emit(&out, "k9", serde_json::json!({ "amount": 9 }))] }),
    );
    let two = serde_json::json!({ "emits": [
        emit(&out, "k2", serde_json::json!({ "amount": 2 })), emit(&out, "k3", serde_json::json!({ "amount": 3 }))
    ]});
    let (second, second_payload) = scenario("emit", two);
    for payload in [&first_payload, &failed_payload, &second_payload] {
        env.send(0, payload).await;
    }
    let spec = emitter(&env, &out);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.dead_lettered), (2, 1), "{r:?}");

    let records = published(&out, 3);
    assert_eq!(records.len(), 3, "three events emitted by committed events, none by the failed one");
    let ids: Vec<String> = [notes(&env, first).await, notes(&env, second).await]
        .concat()
        .iter()
        .map(|n| n.rsplit(' ').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "the guest was told three event ids");
    assert!(notes(&env, failed).await.is_empty(), "the failed event's writes rolled back");
    for record in &records {
        let v = value(record);
        let id = v["eventId"].as_str().unwrap_or_default().to_owned();
        assert!(ids.contains(&id), "published {id}, which the guest was told: {ids:?}");
        let parsed = uuid::Uuid::parse_str(&id).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(parsed.get_version_num(), 7, "a UUID v7 eventId");
        assert_eq!(v["eventType"], "test.emitted.v1");
        assert!(chrono::DateTime::parse_from_rfc3339(v["occurredAt"].as_str().unwrap_or_default()).is_ok(), "{v}");
        let key = String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned();
        let cause = if key == "k1" { first } else { second };
        assert_eq!(header(record, "idem.causation-id"), Some(cause.to_string()), "caused by its source event");
        assert_eq!(header(record, "idem.correlation-id"), Some(cause.to_string()), "a chain's first event");
        assert_eq!(header(record, "idem.producer").as_deref(), Some("scenarios"));
        assert_eq!(v["amount"].as_i64(), key.strip_prefix('k').and_then(|n| n.parse().ok()), "{v}");
        if key == "k1" {
            assert_eq!(header(record, "x-note").as_deref(), Some("hello"), "the guest's own header");
        }
    }
    let unpublished =
        env.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NULL OR failed_at IS NOT NULL").await;
    assert_eq!((env.count("SELECT count(*) FROM idem.outbox").await, unpublished), (3, 0), "marked published");
    env.finish().await;
}

/// What a guest may not do with `emit`: each refusal reaches the guest with
/// its reason, and nothing of it is published. Its role can neither read
/// nor write the outbox, nor emit for an event it did not claim.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_cannot_emit_what_it_is_not_allowed_nor_forge_the_envelope_nor_reach_the_outbox() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(1).await;
    let other = kafka::create_topic(1).await;
    let forged = serde_json::json!({ "eventId": "019a0000-0000-7000-8000-000000000001", "amount": 1 });
    let mut host_header = emit(&out, "k", serde_json::json!({ "amount": 1 }));
    host_header["headers"] = serde_json::json!([["idem.causation-id", "019a0000-0000-7000-8000-000000000002"]]);
    let mut trace = emit(&out, "k", serde_json::json!({ "amount": 1 }));
    trace["headers"] = serde_json::json!([["traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]]);
    let mut wrong_type = emit(&out, "k", serde_json::json!({ "amount": 1 }));
    wrong_type["event_type"] = "order.confirmed.v1".into();
    let attempts = vec![
        emit(&other, "k", serde_json::json!({ "amount": 1 })),
        wrong_type,
        emit(&out, "k", forged),
        host_header,
        trace,
        emit(&out, "k", serde_json::json!({ "amount": "lots" })),
        emit(&out, "k", serde_json::json!(["not", "an", "object"])),
        emit(&out, "", serde_json::json!({ "amount": 1 })),
    ];
    let (event, payload) = scenario("emit", serde_json::json!({ "emits": attempts }));
    env.send(0, &payload).await;
    let spec = emitter(&env, &out);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 1, "{r:?}");
    let notes = notes(&env, event).await;
    let expected = [
        "refused 0 emit refused: topic",
        "refused 1 emit refused: event type `order.confirmed.v1` is not configured",
        "refused 2 emit invalid: `eventId` is the host's",
        "refused 3 emit refused: header `idem.causation-id` is the host's",
        "refused 4 emit refused: header `traceparent` is the host's",
        "refused 5 emit invalid: the event violates topic",
        "refused 6 emit invalid: the payload is not a JSON object",
        "refused 7 emit refused: a key is 1 to",
    ];
    assert_eq!(notes.len(), expected.len(), "{notes:?}");
    for (note, start) in notes.iter().zip(expected) {
        assert!(note.starts_with(start), "`{note}` does not start with `{start}`");
    }
    assert_eq!(env.count("SELECT count(*) FROM idem.outbox").await, 0, "nothing written");

    // Its role (the boundary the statement guard only backs up): no rights
    // on the outbox, and the emit function only for events it claimed in
    // the same transaction.
    let role = env.db.handler_pool("scenarios", "scenario").await;
    for sql in
        ["SELECT count(*) FROM idem.outbox", "DELETE FROM idem.outbox", "UPDATE idem.outbox_lease SET holder = 'me'"]
    {
        let e = sqlx::query(sql).execute(&role).await.expect_err(sql).to_string();
        assert!(e.contains("permission denied"), "{sql}: {e}");
    }
    let e = sqlx::query(
        "SELECT idem_api.emit_events(ARRAY[$3::uuid], ARRAY[$1], ARRAY['k'], ARRAY['test.emitted.v1'], \
         ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], ARRAY[$2::uuid])",
    )
    .bind(&out)
    .bind(event)
    .bind(uuid::Uuid::now_v7())
    .execute(&role)
    .await
    .expect_err("an emit for an event not claimed in this transaction")
    .to_string();
    assert!(e.contains("not claimed in this transaction"), "{e}");
    let e = sqlx::query("SELECT idem_api.publish($1, 'k', 'test.emitted.v1', '{}'::jsonb)")
        .bind(&out)
        .execute(&role)
        .await
        .expect_err("a handler's role is no producer")
        .to_string();
    assert!(e.contains("permission denied"), "{e}");
    env.finish().await;
}

/// An `order.confirmed.v1` payload as an order service passes it to
/// `idem_api.publish` (the envelope is the outbox's to add).
fn order(id: i64) -> serde_json::Value {
    serde_json::json!({ "aggregateType": "Order", "orderId": id, "customerId": 7, "totalAmount": 12.5, "currency": "EUR" })
}

async fn charged(env: &Env, order: i64) -> bool {
    env.count(&format!("SELECT count(*) FROM billing.charge WHERE order_id = {order}")).await > 0
}

#[tokio::test(flavor = "multi_thread")]
async fn another_services_transactions_publish_once_each_in_commit_order_per_key() {
    let env = Env::new(1).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let service = env.db.order_service(&config, &env.topic).await;
    let publish = "SELECT idem_api.publish($1, $2, 'order.confirmed.v1', $3)";

    // T1 writes key a and stays open; T2 writes key b and commits first.
    let mut t1 = service.begin().await.unwrap_or_else(|e| panic!("{e}"));
    sqlx::query(publish)
        .bind(&env.topic)
        .bind("a")
        .bind(order(1))
        .execute(&mut *t1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut t2 = service.begin().await.unwrap_or_else(|e| panic!("{e}"));
    let headers = serde_json::json!({ "IDEM.correlation-id": "forged", "TraceParent": "forged", "x-app": "orders" });
    sqlx::query("SELECT idem_api.publish($1, $2, 'order.confirmed.v1', $3, $4)")
        .bind(&env.topic)
        .bind("b")
        .bind(order(2))
        .bind(headers)
        .execute(&mut *t2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    t2.commit().await.unwrap_or_else(|e| panic!("{e}"));
    // Headers are JSON objects of text, or refused as the call's error.
    for bad in [serde_json::json!({ "x": 1 }), serde_json::json!(["x"])] {
        let e = sqlx::query("SELECT idem_api.publish($1, 'c', 'order.confirmed.v1', $2, $3)")
            .bind(&env.topic)
            .bind(order(5))
            .bind(&bad)
            .execute(&service)
            .await
            .expect_err("malformed headers")
            .to_string();
        assert!(e.contains("headers must be"), "{bad}: {e}");
    }
    // T3 writes key a too: it waits for T1, whatever their ids.
    let (t3_service, topic) = (service.clone(), env.topic.clone());
    let t3 = tokio::spawn(async move {
        let mut t3 = t3_service.begin().await.unwrap_or_else(|e| panic!("{e}"));
        sqlx::query(publish)
            .bind(&topic)
            .bind("a")
            .bind(order(3))
            .execute(&mut *t3)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        t3.commit().await.unwrap_or_else(|e| panic!("{e}"));
    });
    // T4 rolls back: nothing of it is ever published.
    let mut t4 = service.begin().await.unwrap_or_else(|e| panic!("{e}"));
    sqlx::query(publish)
        .bind(&env.topic)
        .bind("r")
        .bind(order(4))
        .execute(&mut *t4)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    t4.rollback().await.unwrap_or_else(|e| panic!("{e}"));

    let running = host::InProcess::start(&config);
    idem_tests::wait_until_async("order 2 is published and charged", || async { charged(&env, 2).await }).await;
    assert!(!charged(&env, 1).await, "order 1's transaction has not committed");
    t1.commit().await.unwrap_or_else(|e| panic!("{e}"));
    t3.await.unwrap_or_else(|e| panic!("{e}"));
    idem_tests::wait_until_async("orders 1 and 3 are published and charged", || async {
        charged(&env, 1).await && charged(&env, 3).await
    })
    .await;
    let r = running.stop().await;
    assert_eq!(r[0].processed, 3, "{r:?}");
    assert!(!charged(&env, 4).await, "a rolled-back publish is never published");
    let records = kafka::read_all(&env.topic);
    let keyed_a: Vec<i64> = records
        .iter()
        .filter(|m| m.key() == Some(b"a".as_slice()))
        .map(|m| value(m)["orderId"].as_i64().unwrap_or_default())
        .collect();
    assert_eq!(keyed_a, vec![1, 3], "key a's events in the order their transactions committed");
    assert_eq!(records.len(), 3);
    for m in &records {
        assert_eq!(header(m, "idem.producer").as_deref(), Some("orders"));
        assert_eq!(
            (header(m, "IDEM.correlation-id"), header(m, "TraceParent")),
            (None, None),
            "the outbox's own names"
        );
    }
    let b = records.iter().find(|m| m.key() == Some(b"b".as_slice())).unwrap_or_else(|| panic!("key b"));
    assert_eq!(header(b, "x-app").as_deref(), Some("orders"), "the application's own header");
    env.finish().await;
}

/// `n` orders from `first` on, on the partitions in turn, keyed by customer.
async fn send_orders_from(env: &Env, first: i64, n: i64) {
    let records: Vec<(i32, String, Vec<u8>)> = (first..first + n)
        .map(|id| ((id % i64::from(env.partitions)) as i32, format!("customer-{}", id % 7), host::order_payload(id).1))
        .collect();
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
}

/// The order ids of the payment requests published on `topic` so far.
fn requested(topic: &str) -> std::collections::BTreeSet<i64> {
    kafka::read_all(topic).iter().filter_map(|m| value(m)["orderId"].as_i64()).collect()
}

async fn holds_lease(config: &Path) -> bool {
    host::metrics(config).await.iter().any(|l| l == "idem_outbox_lease_held{producer=\"billing\"} 1")
}

#[tokio::test(flavor = "multi_thread")]
async fn one_host_relays_a_producer_and_another_takes_over_when_it_is_killed() {
    let env = Env::new(2).await;
    let requests = kafka::create_topic(1).await;
    let spec = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    let configs = [
        host::write_config(&env.db.url, std::slice::from_ref(&spec)),
        host::write_config(&env.db.url, std::slice::from_ref(&spec)),
    ];
    env.db.allow_emits(&configs[0]).await;
    let mut hosts: Vec<_> = configs.iter().map(|c| host::spawn(c, false, &[])).collect();
    send_orders_from(&env, 1, 40).await;
    idem_tests::wait_until("the first 40 payment requests are published", || requested(&requests).len() == 40).await;
    let mut holding = Vec::new();
    for _ in 0..100 {
        holding = Vec::new();
        for (i, c) in configs.iter().enumerate() {
            if holds_lease(c).await {
                holding.push(i);
            }
        }
        if !holding.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(holding.len(), 1, "one relay holds the producer's lease: {holding:?}");
    let (dead, survivor) = (holding[0], 1 - holding[0]);
    host::signal(&hosts[dead], "KILL");
    let _ = hosts[dead].wait();
    send_orders_from(&env, 41, 40).await;
    let started = Instant::now();
    idem_tests::wait_until("the survivor publishes the next 40", || requested(&requests).len() == 80).await;
    assert!(holds_lease(&configs[survivor]).await, "the survivor took the lease over");
    // The dead holder's lease runs 10 s, the survivor asks every 2 s:
    // taken over and published within both and some slack for this machine.
    let took = started.elapsed();
    eprintln!("taken over and published within {took:?} of the kill");
    assert!(took < Duration::from_secs(20), "the survivor took the producer over {took:?} after the kill");
    host::signal(&hosts[survivor], "TERM");
    let (status, _) = host::wait_report(hosts.remove(survivor));
    assert!(status.success(), "{status}");
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM billing.charge").await, 80);
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, 80, "each order charged once");
    env.finish().await;
}

/// The design notes' chain: orders → billing (charges, emits
/// `payment.requested.v1`, here keyed by customer) → payments, each handler in a
/// host of its own, the billing host (and its relay) and the payments host
/// each killed mid-stream, a third of the orders redelivered: each request
/// taken once, caused by its order's charge, and each customer's requests
/// published in the order their charges committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_two_handlers_takes_each_event_once_through_crashes_of_either_host() {
    let env = Env::new(3).await;
    let requests = kafka::create_topic(3).await;
    let mut billing = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    billing.config.push(("payment_requests_key".into(), "customer".into()));
    let configs = [
        host::write_config(&env.db.url, &[billing]),
        host::write_config(&env.db.url, &[HandlerSpec::payments(&requests)]),
    ];
    env.db.allow_emits(&configs[0]).await;
    let n = 5_000;
    let orders: Vec<(i32, String, Vec<u8>)> =
        (1..=n).map(|id| ((id % 3) as i32, format!("customer-{}", id % 7), host::order_payload(id).1)).collect();
    let again: Vec<(i32, String, Vec<u8>)> = orders.iter().step_by(3).cloned().collect();
    kafka::produce_all_keyed(&env.producer, &env.topic, &orders).await;
    kafka::produce_all_keyed(&env.producer, &env.topic, &again).await;
    let taken = || async { env.count("SELECT count(*) FROM payments.request").await };
    let mut hosts = [host::spawn(&configs[0], false, &[]), host::spawn(&configs[1], false, &[])];
    // billing's host, then payments', then billing's again.
    for (target, victim) in [(1_000, 0), (2_500, 1), (3_500, 0)] {
        idem_tests::wait_until_async("the chain makes progress", || async { taken().await >= target }).await;
        host::signal(&hosts[victim], "KILL");
        let _ = hosts[victim].wait();
        hosts[victim] = host::spawn(&configs[victim], false, &[]);
    }
    idem_tests::wait_until_async("every request is taken", || async { taken().await >= n }).await;
    // A little longer: anything taken twice would show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for child in hosts {
        host::signal(&child, "TERM");
        let (status, _) = host::wait_report(child);
        assert!(status.success(), "{status}");
    }
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, n, "each order charged once");
    assert_eq!(env.count("SELECT count(*) FROM payments.request").await, n, "each request taken once");
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM payments.request").await, n);
    let mismatched = env
        .count(
            "SELECT count(*) FROM payments.request r JOIN billing.charge c ON c.order_id = r.order_id \
             WHERE r.caused_by IS DISTINCT FROM c.event_id",
        )
        .await;
    assert_eq!(mismatched, 0, "each request names the order event that caused it");
    // Per key, the order of first publication (a relay that died before
    // marking its rows publishes them again later: repeats come after) is
    // the order the charges committed, which is the outbox's id order within
    // a key (a transaction holds its keys' bucket locks until it commits).
    let mut committed: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT key, (value->>'orderId')::int8 FROM idem.outbox WHERE topic = $1 ORDER BY id")
            .bind(&requests)
            .fetch_all(&env.db.pool)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    for (key, order) in rows {
        committed.entry(key).or_default().push(order);
    }
    let mut published: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    let mut seen = std::collections::HashSet::new();
    let records = kafka::read_all(&requests);
    for m in &records {
        let order = value(m)["orderId"].as_i64().unwrap_or_else(|| panic!("orderId in {:?}", value(m)));
        if seen.insert(order) {
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
            published.entry(key).or_default().push(order);
        }
    }
    assert_eq!(committed.len(), 17, "the requests are keyed by the orders' 17 customers");
    assert_eq!(published, committed, "each customer's requests published in the order their charges committed");
    eprintln!(
        "{} records for {n} requests ({} published again after a kill)",
        records.len(),
        records.len() - n as usize
    );
    env.finish().await;
}

/// A host crash at the two places that matter: right after a commit (its
/// rows committed, not yet published) and after the broker acknowledged a
/// round (published, not yet marked). The next hosts publish what was left,
/// some rows a second time with the same `eventId`, and the downstream
/// handler takes each request once.
#[tokio::test(flavor = "multi_thread")]
async fn crashes_between_commit_and_publish_and_between_publish_and_mark_take_each_request_once() {
    let env = Env::new(2).await;
    let requests = kafka::create_topic(2).await;
    let billing = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    let config = host::write_config(&env.db.url, &[billing, HandlerSpec::payments(&requests)]);
    env.db.allow_emits(&config).await;
    send_orders_from(&env, 1, 50).await;
    let crashed = |variables: &'static [(&'static str, &'static str)]| {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let mut child = host::spawn(&config, false, variables);
            child.wait().unwrap_or_else(|e| panic!("{e}"))
        })
    };
    // Its relay never starts: a host that dies right after a commit leaves
    // the commit's rows unpublished, and its own relay racing the abort
    // (which it won in CI on a loaded machine) must not decide the test.
    let first = crashed(&[("IDEM_TEST_CRASH_AFTER_COMMITS", "3"), ("IDEM_TEST_OUTBOX_NO_RELAY", "1")]);
    let status = first.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!status.success(), "the first host aborted after its third commit: {status}");
    let pending = "SELECT count(*) FROM idem.outbox WHERE published_at IS NULL";
    assert!(env.count(pending).await > 0, "it died with committed rows not yet published");
    let status = crashed(&[("IDEM_TEST_OUTBOX_ABORT_AFTER_PUBLISH", "3")]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!status.success(), "the second host aborted after a round's acknowledgement: {status}");
    let sent = kafka::read_all(&requests).len();
    assert!(sent > 0, "the second host's relay published before it died");
    assert!(env.count(pending).await > 0, "and marked nothing");

    let last = host::spawn(&config, false, &[]);
    let taken = "SELECT count(*) FROM payments.request";
    // Until the dead host's lease expires the last one's relay waits; then
    // it publishes (again) what was never marked.
    idem_tests::wait_until_async("every request is taken and every row marked", || async {
        env.count(taken).await >= 50 && env.count(pending).await == 0
    })
    .await;
    host::signal(&last, "TERM");
    let (status, _) = host::wait_report(last);
    assert!(status.success(), "{status}");
    let records = kafka::read_all(&requests);
    let ids: std::collections::HashSet<String> =
        records.iter().filter_map(|m| value(m)["eventId"].as_str().map(str::to_owned)).collect();
    assert_eq!(ids.len(), 50, "one eventId per request");
    assert!(records.len() > 50, "some were published twice ({} records)", records.len());
    assert_eq!((env.count(taken).await, env.count("SELECT count(*) FROM billing.charge").await), (50, 50));
    assert_eq!(env.count(pending).await, 0);
    env.finish().await;
}
