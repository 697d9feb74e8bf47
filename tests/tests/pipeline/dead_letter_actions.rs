//! What an operator does with dead letters through a running host (issue
//! 41): `idem dlq discard|replay` by the same filters as a search, through
//! the admin API; a discarded record is never replayed (through the host or
//! in a process of its own), keeps its mark across a rebuild of the index,
//! and a restore makes it replayable again.

use std::time::Duration;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::{kafka, wait_until_async};
use serde_json::{Value, json};

use crate::Env;
use crate::failures::{idem_json, scenario};

async fn post(admin: &str, path: &str, body: &Value) -> (u16, Value) {
    let url = format!("{admin}{path}");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
    let response = client.post(&url).json(body).send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `idem ARGS`: its exit code and what it printed.
fn idem(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(idem_tests::idem_bin()).args(args).output().expect("run idem");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discarded_dead_letter_is_never_replayed_until_restored() {
    let env = Env::new(1).await;
    for i in 0..4 {
        let (_, payload) = scenario("write-then-fail", json!({ "customer": { "id": format!("c-{i}") } }));
        kafka::produce(&env.producer, &env.topic, 0, &format!("k-{i}"), &payload).await;
    }
    kafka::produce(&env.producer, &env.topic, 0, "k-invalid", b"not json").await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let (admin, path) = (host::admin_url(&config), config.to_str().expect("path").to_owned());
    let running = host::InProcess::start(&config);
    wait_until_async("5 dead letters indexed", || async {
        env.count("SELECT count(*) FROM idem.dead_letter").await == 5
    })
    .await;
    let marked = |key: &'static str| {
        let db = &env.db;
        async move {
            db.scalar(&format!("SELECT coalesce(outcome, 'none') FROM idem.dead_letter WHERE record_key = '{key}'"))
                .await
        }
    };
    let cli = ["--url", admin.as_str(), "--handler", "scenarios", "--json"];
    let with = |extra: &[&'static str]| [&["dlq"][..], extra, &cli[..]].concat();

    // A dry run counts and changes nothing; the discard marks; a second
    // one finds it discarded already.
    let dry = idem_json(&with(&["discard", "--key", "k-0", "--dry-run"]));
    assert_eq!((dry["matched"].as_i64(), dry["changed"].as_i64()), (Some(1), Some(1)), "{dry}");
    assert_eq!(marked("k-0").await, "none");
    let done = idem_json(&with(&["discard", "--key", "k-0"]));
    assert_eq!(done["changed"], 1, "{done}");
    assert_eq!(marked("k-0").await, "discarded");
    assert_eq!(idem_json(&with(&["discard", "--key", "k-0"]))["changed"], 0);
    // The search finds it by its mark.
    let found = idem_json(&with(&["search", "--outcome", "discarded"]));
    assert_eq!(found["total"], 1, "{found}");

    // Discarding everything takes a filter: no silent "all".
    let (code, said) = idem(&with(&["discard"]));
    assert_ne!(code, Some(0), "{said}");
    assert!(said.contains("give at least one filter"), "{said}");

    // A replay by filter (through the host) leaves the discarded one alone.
    let report = idem_json(&with(&["replay", "--class", "permanent"]));
    assert_eq!((report["read"].as_i64(), report["discarded"].as_i64()), (Some(4), Some(1)), "{report}");
    assert_eq!(report["failed_again"], 3, "{report}");
    assert_eq!(marked("k-0").await, "discarded");
    assert_eq!(env.count("SELECT count(*) FROM idem.dead_letter WHERE outcome = 'failed_again'").await, 3);
    running.stop().await;

    // So does a replay in a process of its own, and a rebuild keeps the mark.
    let here = idem_json(&["dlq", "replay", "--config", &path, "--handler", "scenarios", "--dry-run", "--json"]);
    assert!(here["discarded"].as_i64().is_some_and(|n| n >= 1), "{here}");
    let outcomes = here["outcomes"].as_array().expect("outcomes");
    assert_eq!(outcomes.iter().filter(|o| o["outcome"] == "discarded").count(), 1, "{here}");
    let (code, said) = idem(&["dlq", "replay", "--config", &path, "--handler", "scenarios", "--key", "k-1", "--json"]);
    assert_ne!(code, Some(0), "{said}");
    assert!(said.contains("--key select through a host's dead-letter index"), "{said}");
    let rebuilt = idem_json(&["dlq", "reindex", "--config", &path, "--handler", "scenarios", "--json"]);
    assert_eq!(rebuilt["removed"], 0, "{rebuilt}");
    assert_eq!(marked("k-0").await, "discarded");

    // Restored, it runs again.
    let running = host::InProcess::start(&config);
    wait_until_async("the host serves its admin API again", || async {
        reqwest::get(format!("{admin}/readyz")).await.is_ok_and(|r| r.status().is_success())
    })
    .await;
    let restored = idem_json(&with(&["discard", "--key", "k-0", "--restore"]));
    assert_eq!(restored["changed"], 1, "{restored}");
    assert_eq!(marked("k-0").await, "none");
    let again = idem_json(&with(&["replay", "--key", "k-0"]));
    assert_eq!((again["read"].as_i64(), again["failed_again"].as_i64()), (Some(1), Some(1)), "{again}");
    assert_eq!(again["discarded"], 0, "{again}");

    // Selections that are not one are refused, naming why.
    for (path, body, says) in [
        ("discard", json!({ "records": [[-1, 0]] }), "not a DLQ position"),
        ("replay", json!({ "records": [[0, -3]] }), "not a DLQ position"),
        ("discard", json!({ "records": [[0, 0]], "search": { "key": "k-1" } }), "not both"),
        ("discard", json!({}), "select records or a search"),
        ("replay", json!({ "search": { "key": "nobody" } }), "no dead letter matches"),
        ("replay", json!({ "search": { "colour": "blue" } }), "colour"),
        ("discard", json!({ "search": { "since": "yesterday" } }), "since"),
    ] {
        let (status, answer) = post(&admin, &format!("/handlers/scenarios/dead-letters/{path}"), &body).await;
        assert_eq!(status, 400, "{path} {body}: {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(says)), "{path} {body}: {answer}");
    }
    let (status, _) = post(&admin, "/handlers/nobody/dead-letters/discard", &json!({ "records": [[0, 0]] })).await;
    assert_eq!(status, 404);
    running.stop().await;
    env.finish().await;
}
