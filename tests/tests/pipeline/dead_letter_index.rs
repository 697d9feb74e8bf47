//! The dead-letter index (issue 41): every record idem dead-letters is
//! searchable through the admin API and `idem dlq search` without reading
//! the topic; `idem dlq reindex` rebuilds it from the topic and says what
//! differed; a replay marks each original with its outcome; and at 100,000
//! dead letters every search answers (its time printed: speed is the
//! benchmark's to judge, not a test's).

use std::collections::BTreeSet;
use std::time::Duration;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::{kafka, wait_until_async};
use rdkafka::Message as _;
use serde_json::Value;

use crate::Env;
use crate::failures::{idem_json, scenario};

async fn search(admin: &str, handler: &str, query: &str) -> (u16, Value) {
    let url = format!("{admin}/handlers/{handler}/dead-letters?{query}");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let response = client.get(&url).send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A search that must succeed.
async fn found(admin: &str, handler: &str, query: &str) -> Value {
    let (status, body) = search(admin, handler, query).await;
    assert_eq!(status, 200, "?{query}: {body}");
    body
}

fn positions(page: &Value) -> Vec<(i64, i64)> {
    page["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["partition"].as_i64().expect("partition"), r["offset"].as_i64().expect("offset")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_dead_letter_is_indexed_searchable_and_rebuilt_from_its_topic() {
    let env = Env::new(2).await;
    let mut failing = Vec::new();
    for i in 0..4 {
        let (id, payload) = scenario("write-then-fail", serde_json::json!({ "customer": { "id": format!("c-{i}") } }));
        let headers: &[(&str, &[u8])] = if i < 2 { &[("x-tenant", b"north")] } else { &[] };
        let key = format!("k-fail-{i}");
        let offset =
            kafka::produce_with_headers(&env.producer, &env.topic, i % 2, key.as_bytes(), &payload, headers).await;
        failing.push((id, key, i % 2, offset));
    }
    for i in 0..2 {
        kafka::produce(&env.producer, &env.topic, 0, &format!("k-invalid-{i}"), b"not json at all").await;
    }
    // NUL, which PostgreSQL's text cannot hold, in a key and a payload.
    kafka::produce(&env.producer, &env.topic, 0, "k-invalid-2\0", br#"{"note":"a\u0000b"}"#).await;
    let (_, ok) = scenario("ok", serde_json::json!({}));
    env.send(1, &ok).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    wait_until_async("7 dead letters indexed", || async {
        env.count("SELECT count(*) FROM idem.dead_letter").await == 7
    })
    .await;

    // What the index has is what the topic holds, position for position.
    let dlq = format!("{}.scenarios.dlq", env.topic);
    let in_topic: BTreeSet<(i64, i64)> =
        kafka::read_all(&dlq).iter().map(|m| (i64::from(m.partition()), m.offset())).collect();
    let all = found(&admin, "scenarios", "").await;
    assert_eq!(all["total"], 7, "{all}");
    assert_eq!(positions(&all).into_iter().collect::<BTreeSet<_>>(), in_topic);
    assert_eq!((all["by_class"]["permanent"].as_i64(), all["by_class"]["invalid"].as_i64()), (Some(4), Some(3)));
    let patterned: i64 = all["patterns"].as_array().expect("patterns").iter().filter_map(|p| p[2].as_i64()).sum();
    assert_eq!(patterned, 7, "every dead letter under a pattern: {}", all["patterns"]);

    // Each filter finds what it names.
    let (id, key, partition, offset) = &failing[2];
    let one = found(&admin, "scenarios", &format!("event_id={id}")).await;
    assert_eq!(one["total"], 1, "{one}");
    let row = &one["rows"][0];
    assert_eq!((row["key"].as_str(), row["class"].as_str()), (Some(key.as_str()), Some("permanent")), "{row}");
    assert_eq!(
        (row["source_partition"].as_i64(), row["source_offset"].as_i64()),
        (Some(i64::from(*partition)), Some(*offset))
    );
    assert_eq!(row["source_topic"].as_str(), Some(env.topic.as_str()));
    assert_eq!(found(&admin, "scenarios", "key=k-invalid-1").await["total"], 1);
    assert_eq!(found(&admin, "scenarios", "header=x-tenant").await["total"], 2);
    assert_eq!(found(&admin, "scenarios", "field=customer.id%3Dc-3").await["total"], 1);
    assert_eq!(found(&admin, "scenarios", "class=invalid").await["total"], 3);
    assert_eq!(found(&admin, "scenarios", "key=k-invalid-2%00").await["total"], 1);
    assert_eq!(found(&admin, "scenarios", "field=note%3Da%00b").await["total"], 1);
    let reason = row["reason"].as_str().expect("reason");
    let word: String = reason.chars().skip(reason.chars().count() / 3).take(8).collect();
    let by_reason = found(&admin, "scenarios", &format!("reason={}", urlencode(&word.to_uppercase()))).await;
    assert!(by_reason["total"].as_i64().is_some_and(|n| n >= 1), "`{word}` of `{reason}`: {by_reason}");
    assert!(
        by_reason["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["reason"].as_str().is_some_and(|t| t.to_lowercase().contains(&word.to_lowercase())))
    );
    assert_eq!(found(&admin, "scenarios", "since=2999-01-01T00:00:00Z").await["total"], 0);

    // Pages of 3 go forward through all 7 once, newest first, and back.
    let mut seen = Vec::new();
    let mut page = found(&admin, "scenarios", "limit=3").await;
    let mut pages = vec![page.clone()];
    loop {
        seen.extend(positions(&page));
        let Some(next) = page["next"].as_str() else { break };
        page = found(&admin, "scenarios", &format!("limit=3&after={next}")).await;
        pages.push(page.clone());
    }
    assert_eq!(seen, positions(&all), "paged in the order of one page of all");
    assert_eq!(pages.len(), 3);
    let back = pages[2]["previous"].as_str().expect("the last page has a previous one");
    assert_eq!(positions(&found(&admin, "scenarios", &format!("limit=3&before={back}")).await), positions(&pages[1]));
    assert!(pages[0]["previous"].is_null(), "the first page has none before it");
    let first_next = pages[0]["next"].as_str().expect("next");
    let between = found(&admin, "scenarios", &format!("after={first_next}&before={back}")).await;
    assert_eq!(positions(&between), positions(&pages[1]), "the rows between two cursors");
    let oldest = found(&admin, "scenarios", "order=oldest").await;
    assert_eq!(positions(&oldest).into_iter().rev().collect::<Vec<_>>(), positions(&all));

    // Bad filters are refused, naming what was wrong.
    for (query, says) in [
        ("limit=0", "limit"),
        ("limit=", "limit"),
        ("event_id=", "event_id"),
        ("limit=501", "limit"),
        ("after=yesterday", "cursor"),
        ("order=sideways", "order"),
        ("field=customer.id", "field"),
        ("colour=blue", "colour"),
        ("event_id=not-a-uuid", "event_id"),
    ] {
        let (status, body) = search(&admin, "scenarios", query).await;
        assert_eq!(status, 400, "?{query}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains(says)), "?{query}: {body}");
    }
    assert_eq!(search(&admin, "no-such-handler", "").await.0, 404);
    // A form left blank is a search for everything, not for empty text.
    assert_eq!(found(&admin, "scenarios", "class=&key=&field=&header=&reason=&pattern=&outcome=").await["total"], 7);

    // The CLI, through the same API.
    let cli = idem_json(&["dlq", "search", "--url", &admin, "--handler", "scenarios", "--class", "invalid", "--json"]);
    assert_eq!(cli["total"], 3, "{cli}");
    running.stop().await;

    // The topic is the source of truth: rows lost or made up are repaired.
    env.db.execute("DELETE FROM idem.dead_letter WHERE class = 'invalid' AND record_key <> 'k-invalid-0'").await;
    env.db
        .execute(&format!(
            "INSERT INTO idem.dead_letter (topic, \"partition\", \"offset\", handler, authenticity, failed_at, \
             payload_bytes) VALUES ('{dlq}', 0, 100000, 'scenarios', 'sealed', now() - interval '1 day', 0)"
        ))
        .await;
    let path = config.to_str().expect("path");
    let rebuilt = idem_json(&["dlq", "reindex", "--config", path, "--handler", "scenarios", "--json"]);
    assert_eq!(
        (rebuilt["read"].as_i64(), rebuilt["added"].as_i64(), rebuilt["removed"].as_i64()),
        (Some(7), Some(2), Some(1)),
        "{rebuilt}"
    );
    assert_eq!(env.count("SELECT count(*) FROM idem.dead_letter").await, 7);

    // A replay marks each original with what became of it; what failed
    // again is a new dead letter, indexed, its replay counted.
    let replayed = idem_json(&["dlq", "replay", "--config", path, "--handler", "scenarios", "--json"]);
    assert_eq!(replayed["failed_again"], 7, "{replayed}");
    assert_eq!(env.count("SELECT count(*) FROM idem.dead_letter WHERE outcome = 'failed_again'").await, 7);
    assert_eq!(env.count("SELECT count(*) FROM idem.dead_letter WHERE outcome IS NULL AND replays = 1").await, 7);
    env.finish().await;
}

/// Percent-encodes a query value.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_explorer_answers_every_search_at_100000_dead_letters() {
    let env = Env::new(1).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    env.db.execute(&idem_tests::db::synthetic_dead_letters("scenarios")).await;
    env.db.execute("ANALYZE idem.dead_letter").await;
    let id: String = env.db.scalar("SELECT md5('4242')::uuid::text").await;
    let mut timings = Vec::new();
    for (what, query, total) in [
        ("everything, newest first", String::new(), 100_000),
        ("one class", "class=invalid".to_owned(), 25_000),
        ("reason text", "reason=DECLINED".to_owned(), 70_000),
        ("a pattern", "pattern=timed%20out%20after%20%23%20s".to_owned(), 5_000),
        ("a key", "key=customer-42".to_owned(), 100),
        ("an event id", format!("event_id={id}"), 1),
        ("a header", "header=traceparent".to_owned(), 50_000),
        ("a payload field", "field=customer.id%3D42".to_owned(), 100),
        ("a day", "since=2026-11-25T00:00:00Z&until=2026-11-26T00:00:00Z".to_owned(), 10_000),
        (
            "a class in a day, oldest first",
            "class=retryable&since=2026-11-25T00:00:00Z&until=2026-11-26T00:00:00Z&order=oldest".to_owned(),
            500,
        ),
    ] {
        let page = found(&admin, "scenarios", &query).await;
        assert_eq!(page["total"], total, "{what}: ?{query}");
        let shown = page["rows"].as_array().expect("rows").len() as i64;
        assert_eq!(shown, total.min(100), "{what}");
        timings.push((what, page["took_ms"].as_f64().unwrap_or(f64::NAN)));
        if what == "one class" {
            // Deep paging by cursor costs what the first page does.
            let mut page = page;
            for _ in 0..5 {
                let next = page["next"].as_str().expect("next").to_owned();
                page = found(&admin, "scenarios", &format!("{query}&after={next}")).await;
            }
            assert!(page["rows"].as_array().expect("rows").iter().all(|r| r["class"] == "invalid"));
            timings.push(("one class, its 6th page", page["took_ms"].as_f64().unwrap_or(f64::NAN)));
        }
    }
    let all = found(&admin, "scenarios", "").await;
    assert_eq!(
        (
            all["by_class"]["permanent"].as_i64(),
            all["by_class"]["invalid"].as_i64(),
            all["by_class"]["retryable"].as_i64()
        ),
        (Some(70_000), Some(25_000), Some(5_000))
    );
    let top = &all["patterns"][0];
    assert_eq!((top[1].as_str(), top[2].as_i64()), (Some("order # declined by the provider"), Some(70_000)), "{top}");
    eprintln!(
        "dead-letter explorer at 100,000 dead letters (the database's time per search, one page of 100 and every total):"
    );
    for (what, ms) in &timings {
        eprintln!("  {ms:>8.1} ms  {what}");
    }
    running.stop().await;
    env.finish().await;
}
