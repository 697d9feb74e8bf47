//! The outbox's rules past the host: what the database refuses of a
//! handler's role that got past the statement guard (a chosen event id,
//! forged provenance headers, look-alike names), which trace and
//! correlation an emit carries from its input (`trust_input_trace_headers`),
//! and the near-miss envelope keys and look-alike header names a guest's
//! emit is refused, with their names.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use rdkafka::Message as _;
use sqlx::PgPool;
use uuid::Uuid;

use super::Env;
use super::failures::scenario;

const OTHER_TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn emitter(env: &Env, out: &str) -> HandlerSpec {
    let schema: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/scenarios/emitted.schema.json");
    HandlerSpec { max_attempts: 1, ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) }.emitting(
        out,
        &["test.emitted.v1"],
        schema,
    )
}

fn emit(topic: &str, payload: serde_json::Value, headers: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "topic": topic, "key": "k", "event_type": "test.emitted.v1", "payload": payload,
                        "headers": headers })
}

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

/// In a transaction of the handler's role: claims a made-up event (as the
/// host's claim does), then calls `emit_events` for it with `vouch`,
/// `headers` and `payload`; commits if the database accepts. Returns the
/// database's refusal, if any.
async fn direct_emit(
    role: &PgPool,
    version: Option<i32>,
    out: &str,
    id: Uuid,
    headers: serde_json::Value,
    payload: serde_json::Value,
) -> (Uuid, Option<String>) {
    let mut tx = role.begin().await.unwrap_or_else(|e| panic!("{e}"));
    let made_up = Uuid::now_v7();
    sqlx::query(
        "SELECT idem_api.claim_events(ARRAY[$1::uuid], ARRAY['made-up'], ARRAY[0], ARRAY[0::int8], $2, $3, false)",
    )
    .bind(made_up)
    .bind(vec![vec![0u8; 32]])
    .bind(version)
    .execute(&mut *tx)
    .await
    .unwrap_or_else(|e| panic!("the role claims a made-up event: {e}"));
    let result = sqlx::query(
        "SELECT idem_api.emit_events(ARRAY[$1::uuid], ARRAY[$2], ARRAY['k'], ARRAY['test.emitted.v1'], \
         ARRAY[$3::jsonb], ARRAY[$4::jsonb], ARRAY[$5::uuid])",
    )
    .bind(id)
    .bind(out)
    .bind(payload)
    .bind(headers)
    .bind(made_up)
    .execute(&mut *tx)
    .await;
    match result {
        Ok(_) => {
            tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
            (made_up, None)
        }
        Err(e) => (made_up, Some(e.to_string())),
    }
}

/// What the host would vouch for (computed by the database, as the
/// administrator: the test stands in for a caller who had the key).
async fn vouch_of(admin: &PgPool, id: Uuid, cause: Uuid, out: &str, correlation: Uuid) -> String {
    sqlx::query_scalar("SELECT idem.outbox_vouch($1, $2, $3, 'k', 'test.emitted.v1', $4, NULL)")
        .bind(id)
        .bind(cause)
        .bind(out)
        .bind(correlation.to_string())
        .fetch_one(admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The second layer: the handler's role, calling the outbox's function
/// itself for an event it claimed itself (as a guest past the statement
/// guard could), cannot publish a chosen event id, forged provenance
/// headers, idem's headers by look-alike names, nor an envelope key; nor can
/// it read the key that vouches for the host's rows.
#[tokio::test(flavor = "multi_thread")]
async fn the_handlers_role_cannot_emit_a_chosen_id_or_forged_headers_past_the_host() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(1).await;
    let (_, payload) = scenario("ok", serde_json::json!({}));
    env.send(0, &payload).await;
    let spec = emitter(&env, &out);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 1, "{r:?}");
    let version: Option<i32> =
        sqlx::query_scalar("SELECT version FROM idem.handler_module WHERE handler = 'scenarios' AND active")
            .fetch_optional(&env.db.pool)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let role = env.db.handler_pool("scenarios", "scenario").await;
    let other_chain = Uuid::now_v7();
    let forged = serde_json::json!({ "idem.correlation-id": other_chain.to_string(), "traceparent": OTHER_TRACE });
    let amount = serde_json::json!({ "amount": 1 });

    // A chosen id with forged provenance; with a made-up vouch too.
    let chosen = Uuid::now_v7();
    let (_, refused) = direct_emit(&role, version, &out, chosen, forged.clone(), amount.clone()).await;
    let refused = refused.unwrap_or_else(|| panic!("a chosen event id and forged headers were accepted"));
    assert!(refused.contains("was not minted by idem's host"), "{refused}");
    let mut guessed = forged.clone();
    guessed["idem.vouch"] = "0".repeat(64).into();
    let (_, refused) = direct_emit(&role, version, &out, Uuid::now_v7(), guessed, amount.clone()).await;
    assert!(refused.is_some_and(|e| e.contains("was not minted by idem's host")), "a guessed vouch");

    // The key is out of the role's reach, and so is the function that vouches.
    for sql in ["SELECT key FROM idem.outbox_key", "SELECT idem.outbox_vouch(NULL, NULL, 't', 'k', 't', NULL, NULL)"] {
        let e = sqlx::query(sql).execute(&role).await.expect_err(sql).to_string();
        assert!(e.contains("permission denied"), "{sql}: {e}");
    }

    // With a valid vouch (which only the key gives) the row is accepted;
    // any vouched field changed, or an unvouched header of idem's beside it,
    // or an envelope key in the payload, is refused.
    let mut tx = role.begin().await.unwrap_or_else(|e| panic!("{e}"));
    let made_up = Uuid::now_v7();
    sqlx::query(
        "SELECT idem_api.claim_events(ARRAY[$1::uuid], ARRAY['made-up'], ARRAY[0], ARRAY[0::int8], $2, $3, false)",
    )
    .bind(made_up)
    .bind(vec![vec![0u8; 32]])
    .bind(version)
    .execute(&mut *tx)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let id = Uuid::now_v7();
    let vouch = vouch_of(&env.db.pool, id, made_up, &out, made_up).await;
    let good = serde_json::json!({ "idem.correlation-id": made_up.to_string(), "idem.vouch": vouch, "x-app": "a" });
    let attempts = [
        (
            serde_json::json!({ "idem.correlation-id": other_chain.to_string(), "idem.vouch": vouch }),
            amount.clone(),
            "not minted",
        ),
        (
            serde_json::json!({ "idem.correlation-id": made_up.to_string(), "idem.vouch": vouch, "traceparent": OTHER_TRACE }),
            amount.clone(),
            "not minted",
        ),
        (
            serde_json::json!({ "idem.correlation-id": made_up.to_string(), "idem.vouch": vouch, "Idem.Correlation-Id": "x" }),
            amount.clone(),
            "header \"Idem.Correlation-Id\"",
        ),
        (
            serde_json::json!({ "idem.correlation-id": made_up.to_string(), "idem.vouch": vouch, "idem_causation_id": "x" }),
            amount.clone(),
            "header \"idem_causation_id\"",
        ),
        (
            serde_json::json!({ "idem.correlation-id": made_up.to_string(), "idem.vouch": vouch, "traceparent ": "x" }),
            amount.clone(),
            "header \"traceparent \"",
        ),
        (
            serde_json::json!({ "idem.correlation-id": made_up.to_string(), "idem.vouch": vouch, "\u{456}dem.x": "x" }),
            amount.clone(),
            "header \"\u{456}dem.x\"",
        ),
        (good.clone(), serde_json::json!({ "amount": 1, "EventId": chosen.to_string() }), "payload key \"EventId\""),
        (good.clone(), serde_json::json!({ "amount": 1, "occurred_at ": "2020" }), "payload key \"occurred_at \""),
    ];
    let emit_sql = "SELECT idem_api.emit_events(ARRAY[$1::uuid], ARRAY[$2], ARRAY['k'], ARRAY['test.emitted.v1'], \
                    ARRAY[$3::jsonb], ARRAY[$4::jsonb], ARRAY[$5::uuid])";
    for (headers, payload, expected) in attempts {
        sqlx::query("SAVEPOINT attempt").execute(&mut *tx).await.unwrap_or_else(|e| panic!("{e}"));
        let e = sqlx::query(emit_sql)
            .bind(id)
            .bind(&out)
            .bind(&payload)
            .bind(&headers)
            .bind(made_up)
            .execute(&mut *tx)
            .await
            .expect_err(expected)
            .to_string();
        assert!(e.contains(expected), "{headers} {payload}: `{e}` lacks `{expected}`");
        sqlx::query("ROLLBACK TO SAVEPOINT attempt").execute(&mut *tx).await.unwrap_or_else(|e| panic!("{e}"));
    }
    sqlx::query(emit_sql)
        .bind(id)
        .bind(&out)
        .bind(&amount)
        .bind(&good)
        .bind(made_up)
        .execute(&mut *tx)
        .await
        .unwrap_or_else(|e| panic!("the vouched row: {e}"));
    tx.rollback().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(env.count("SELECT count(*) FROM idem.outbox").await, 0, "nothing of the role's own written");
    env.finish().await;
}

/// `trust_input_trace_headers`: by default an emit starts a chain of its
/// own (its correlation id is its cause's id, no trace of the input's);
/// trusted, it carries the input's correlation id and trace.
#[tokio::test(flavor = "multi_thread")]
async fn an_emit_names_its_own_chain_unless_the_handler_trusts_its_inputs_trace_headers() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(1).await;
    let other_chain = Uuid::now_v7();
    let other = other_chain.to_string();
    let headers: [(&str, &[u8]); 2] =
        [("idem.correlation-id", other.as_bytes()), ("traceparent", OTHER_TRACE.as_bytes())];
    let send = |payload: Vec<u8>| {
        let (env, headers) = (&env, &headers);
        async move { kafka::produce_with_headers(&env.producer, &env.topic, 0, b"k", &payload, headers).await }
    };
    let (untrusted, payload) = scenario(
        "emit",
        serde_json::json!({ "emits": [emit(&out, serde_json::json!({ "amount": 1 }), serde_json::json!([]))] }),
    );
    send(payload).await;
    let spec = emitter(&env, &out);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 1, "{r:?}");

    let (trusted, payload) = scenario(
        "emit",
        serde_json::json!({ "emits": [emit(&out, serde_json::json!({ "amount": 2 }), serde_json::json!([]))] }),
    );
    send(payload).await;
    let mut spec = emitter(&env, &out);
    spec.extra.push_str("trust_input_trace_headers = true\n");
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 1, "the first event is a duplicate: {r:?}");

    let records = published(&out, 2);
    assert_eq!(records.len(), 2);
    for record in &records {
        let cause = header(record, "idem.causation-id");
        match value(record)["amount"].as_i64() {
            Some(1) => {
                assert_eq!(cause, Some(untrusted.to_string()));
                assert_eq!(
                    header(record, "idem.correlation-id"),
                    Some(untrusted.to_string()),
                    "by default, the event's own chain, not the input's"
                );
                assert_eq!(header(record, "traceparent"), None, "never the input's trace");
            }
            Some(2) => {
                assert_eq!(cause, Some(trusted.to_string()));
                assert_eq!(header(record, "idem.correlation-id"), Some(other.clone()), "trusted: the input's chain");
                assert_eq!(header(record, "traceparent").as_deref(), Some(OTHER_TRACE), "trusted: the input's trace");
            }
            other => panic!("an unexpected record: {other:?}"),
        }
    }
    env.finish().await;
}

/// A guest's near-miss envelope keys and look-alike header names are
/// refused by its emit, each naming the key or header; nothing of them is
/// written.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_emitting_a_near_miss_key_or_a_look_alike_header_is_refused_with_its_name() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(1).await;
    let amount = || serde_json::json!({ "amount": 1 });
    let with_key = |key: &str| {
        let mut p = amount();
        p[key] = "019a0000-0000-7000-8000-000000000001".into();
        emit(&out, p, serde_json::json!([]))
    };
    let with_header = |name: &str| emit(&out, amount(), serde_json::json!([[name, "x"]]));
    let attempts = vec![
        with_key("EventId"),
        with_key("eventId "),
        with_key("event_id"),
        with_key("\u{435}ventType"),
        with_header("Idem.Correlation-Id"),
        with_header("idem_correlation_id"),
        with_header("traceparent "),
        with_header("\u{456}dem.correlation-id"),
        with_header("x-t\u{e9}nant"),
        with_header("x-tenant"),
    ];
    let (event, payload) = scenario("emit", serde_json::json!({ "emits": attempts }));
    env.send(0, &payload).await;
    let spec = emitter(&env, &out);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 1, "{r:?}");
    let notes: Vec<String> =
        sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note <> 'start' ORDER BY note")
            .bind(event)
            .fetch_all(&env.db.pool)
            .await
            .unwrap_or_else(|e| panic!("notes: {e}"));
    // (In the notes' order: "emitted" sorts first.)
    let expected = [
        "emitted 9 ",
        "refused 0 emit invalid: `EventId` is the host's `eventId`",
        "refused 1 emit invalid: `eventId ` is the host's `eventId`",
        "refused 2 emit invalid: `event_id` is the host's `eventId`",
        "refused 3 emit invalid: `\u{435}ventType` is the host's `eventType`",
        "refused 4 emit refused: header `Idem.Correlation-Id` is the host's",
        "refused 5 emit refused: header `idem_correlation_id` is the host's",
        "refused 6 emit refused: header `traceparent ` is the host's",
        "refused 7 emit refused: header `\u{456}dem.correlation-id` is the host's",
        "refused 8 emit refused: header `x-t\u{e9}nant`: a header name is visible ASCII",
    ];
    assert_eq!(notes.len(), expected.len(), "{notes:?}");
    for (note, start) in notes.iter().zip(expected) {
        assert!(note.starts_with(start), "`{note}` does not start with `{start}`");
    }
    let records = published(&out, 1);
    assert_eq!(records.len(), 1, "only the well-named one");
    assert_eq!(header(&records[0], "x-tenant").as_deref(), Some("x"));
    env.finish().await;
}
