//! Named operators and the audit trail (issue 41, "Identity and a trail"),
//! through two real hosts of one group: a token issued on one host works
//! on the other at once, acts in its operator's name (the module's
//! `uploaded_by`, the trail's actor, via the API and the console), is kept
//! only as a hash, and once revoked on one host is refused by the other
//! within seconds, ending its console sessions there too.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::console::{cli, request_with_body, session_cookie};
use super::{Env, Host, READ_TOKEN, TOKEN, request};

/// `idem ARGS --url URL --json` with the host's operate token; its JSON.
fn idem_json(args: &[&str], url: &str, token: &str) -> (Option<i32>, Value, String) {
    let mut all = args.to_vec();
    all.extend(["--url", url, "--json"]);
    let (code, out, err) = cli(&all, &[("IDEM_ADMIN_TOKEN", token)]);
    (code, serde_json::from_str(out.trim()).unwrap_or(Value::Null), err)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_token_acts_in_its_operators_name_on_every_host_until_revoked_on_one() {
    let env = Env::new().await;
    let (one, two) = (env.config(&env.billing(), ""), env.config(&env.billing(), ""));
    let (one, two) = (Host::start(&one, None).await, Host::start(&two, None).await);

    // Issued on one host, by the host's own token.
    let (code, alice, err) = idem_json(&["token", "create", "alice", "--scope", "operate"], &one.url, TOKEN);
    assert_eq!(code, Some(0), "{err}");
    let alice_token = alice["token"].as_str().expect("the token, once").to_owned();
    let (_, reader, _) = idem_json(&["token", "create", "rita", "--scope", "read"], &one.url, TOKEN);
    let reader_token = reader["token"].as_str().expect("token").to_owned();
    let (code, _, err) = idem_json(&["token", "create", "alice", "--scope", "read"], &one.url, TOKEN);
    assert_eq!(code, Some(8), "a name is issued once: {err}");
    let (code, _, err) = idem_json(&["token", "create", "rita2", "--scope", "operate"], &one.url, &reader_token);
    assert_eq!(code, Some(5), "a read operator issues nothing: {err}");
    // Nor does an operate one: no identity outlives its maker's revocation,
    // and no operator ends another's.
    let (code, _, err) = idem_json(&["token", "create", "alice-ci", "--scope", "operate"], &two.url, &alice_token);
    assert_eq!(code, Some(5), "a named operator issues nothing: {err}");
    assert!(err.contains("host's own operate token"), "{err}");
    let (code, _, err) = idem_json(&["token", "revoke", "rita"], &two.url, &alice_token);
    assert_eq!(code, Some(5), "a named operator revokes no one: {err}");
    let kept = env
        .db
        .count(&format!(
            "SELECT count(*) FROM idem.operator o WHERE row_to_json(o)::text LIKE '%{}%' \
             OR encode(token_sha256, 'escape') LIKE '%{}%'",
            &alice_token[5..],
            &alice_token[5..]
        ))
        .await;
    assert_eq!(kept, 0, "the token is kept only as its hash");

    // Used on the other host at once: a deploy in alice's name.
    let v1 = std::fs::read(idem_tests::guests::component("billing")).expect("billing component");
    let v2 = std::env::temp_dir().join(format!("{}.wasm", idem_tests::unique_name("alice_v2")));
    std::fs::write(&v2, idem_tests::guests::with_marker(&v1, "alice-v2")).expect("v2");
    let deployed = std::process::Command::new(idem_tests::idem_bin())
        .args(["deploy", "--url", &two.url, "--handler", "billing"])
        .arg(&v2)
        .env("IDEM_ADMIN_TOKEN", &alice_token)
        .output()
        .expect("idem deploy");
    assert!(deployed.status.success(), "{}", String::from_utf8_lossy(&deployed.stderr));
    let (_, listing, _) = idem_json(&["handlers"], &two.url, &reader_token);
    let versions = listing["handlers"][0]["versions"].as_array().cloned().unwrap_or_default();
    let v2_row = versions.iter().find(|v| v["version"] == 2).unwrap_or_else(|| panic!("{listing}"));
    let by = v2_row["uploaded_by"].as_str().unwrap_or("").to_owned();
    assert!(by.starts_with("alice (as "), "the actor first, what the client claims after: {by}");
    let put =
        request(two.address, "PUT", "/handlers/billing/module", &bearer(&reader_token, "content-length: 0\r\n")).await;
    assert_eq!(put.status, 403, "{}", put.body);

    // In the console too: the session is alice's.
    let ours = format!("http://{}", two.address);
    let login = serde_json::json!({ "token": alice_token }).to_string();
    let login =
        format!("content-type: application/json\r\ncontent-length: {}\r\norigin: {ours}\r\n\r\n{login}", login.len());
    let session = request_with_body(two.address, "POST", "/console/api/login", &login).await;
    assert_eq!(session.status, 200, "{}", session.body);
    let body: Value = serde_json::from_str(&session.body).expect("json");
    assert_eq!(body["actor"], "alice");
    let cookie = session_cookie(&session.head);
    let change = format!(
        "cookie: {cookie}\r\norigin: {ours}\r\nx-csrf-token: {}\r\ncontent-length: 0\r\n",
        body["csrf"].as_str().expect("csrf")
    );
    let activated = request(two.address, "POST", "/console/api/handlers/billing/activate?version=1", &change).await;
    assert_eq!(activated.status, 200, "{}", activated.body);

    // The trail names who did what, where, and how it was answered; the
    // refused change by a read operator is not a change, and no token is in it.
    let (_, trail, err) = idem_json(&["audit", "--handler", "billing"], &one.url, &reader_token);
    let entries = trail["entries"].as_array().unwrap_or_else(|| panic!("{trail} {err}")).clone();
    let seen: Vec<(String, String, String, i64)> = entries
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (s("actor"), s("via"), s("action"), e["status"].as_i64().unwrap_or(0))
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("alice".into(), "console".into(), "POST /console/api/handlers/billing/activate?version=1".into(), 200),
            ("alice".into(), "api".into(), "PUT /handlers/billing/module".into(), 201),
        ],
        "newest first: {trail}"
    );
    assert_eq!(entries[1]["detail"]["version"], 2, "{trail}");
    assert!(entries[0]["host"].as_str().is_some_and(|h| !h.is_empty()), "{trail}");
    let (_, all, _) = idem_json(&["audit"], &two.url, TOKEN);
    let issued =
        all["entries"].as_array().expect("entries").iter().filter(|e| e["action"] == "POST /operators").count();
    assert_eq!(
        issued, 4,
        "two issued, one refused as taken (409), one by alice refused (403); the read token's, refused for its \
         scope before any route, is no change: {all}"
    );
    assert!(!all.to_string().contains(&alice_token[5..]), "no token in the trail");
    let logins =
        all["entries"].as_array().expect("entries").iter().filter(|e| e["action"] == "POST /console/api/login");
    assert_eq!(logins.map(|e| e["actor"].clone()).collect::<Vec<_>>(), vec![Value::from("alice")]);

    // A host started with only a read token lets no one change anything:
    // alice's operate token reads there, and is refused a change.
    let three = env.config(&env.billing(), "");
    let three = Host::start_with(&three, None, &[("IDEM_ADMIN_READ_TOKEN", READ_TOKEN)]).await;
    let (code, _, err) = idem_json(&["handlers"], &three.url, &alice_token);
    assert_eq!(code, Some(0), "alice reads on a read-only host: {err}");
    let (code, _, err) = idem_json(&["rollback", "--handler", "billing", "--to", "1"], &three.url, &alice_token);
    assert_eq!(code, Some(5), "and changes nothing there: {err}");
    assert!(err.contains("scope"), "{err}");
    three.stop().await;

    // Revoked on one host: the other refuses the token, and ends its
    // console session, within seconds.
    let (code, revoked, err) = idem_json(&["token", "revoke", "alice"], &one.url, TOKEN);
    assert_eq!((code, &revoked["revoked"]), (Some(0), &Value::Bool(true)), "{err}");
    let start = Instant::now();
    loop {
        let api = request(two.address, "GET", "/handlers", &bearer(&alice_token, "")).await;
        let console = request(two.address, "GET", "/console/api/overview", &format!("cookie: {cookie}\r\n")).await;
        if api.status == 401 && console.status == 401 {
            assert!(console.body.contains("revoked"), "{}", console.body);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still let in: API {}, console {}",
            api.status,
            console.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("a revoked token was refused by the other host after {:?}", start.elapsed());
    let (_, listed, _) = idem_json(&["token", "list"], &two.url, READ_TOKEN);
    let alice = listed["operators"].as_array().expect("operators").iter().find(|o| o["name"] == "alice").cloned();
    assert!(alice.is_some_and(|a| a["revoked_by"] == "$IDEM_ADMIN_TOKEN"), "{listed}");
    let (code, _, err) = idem_json(&["token", "revoke", "nobody"], &one.url, TOKEN);
    assert_eq!(code, Some(6), "{err}");

    one.stop().await;
    two.stop().await;
    env.finish().await;
}

fn bearer(token: &str, more: &str) -> String {
    format!("authorization: Bearer {token}\r\n{more}")
}

/// The audit trail keeps a change for `[admin] audit_retention`: a host
/// deletes older entries when it starts (and hourly), and keeps the rest.
#[tokio::test(flavor = "multi_thread")]
async fn the_audit_trail_keeps_changes_for_its_retention_and_no_longer() {
    let env = Env::new().await;
    env.db
        .execute(
            "INSERT INTO idem.audit (at, actor, scope, via, host, action, status) VALUES \
             (now() - interval '40 days', 'old', 'operate', 'api', 'h', 'PUT /handlers/billing/module', 201), \
             (now() - interval '29 days', 'recent', 'operate', 'api', 'h', 'PUT /handlers/billing/module', 201)",
        )
        .await;
    let config = env.config(&env.billing(), "audit_retention = \"30d\"");
    let host = Host::start(&config, None).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while env.db.count("SELECT count(*) FROM idem.audit WHERE actor = 'old'").await > 0 {
        assert!(Instant::now() < deadline, "the 40-day-old entry was not deleted within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.db.count("SELECT count(*) FROM idem.audit WHERE actor = 'recent'").await, 1, "within 30 days: kept");
    host.stop().await;
    env.finish().await;
}

/// The newest entry of the trail: actor, via, action, status.
async fn newest(env: &Env) -> (String, String, String, i16) {
    sqlx::query_as("SELECT actor, via, action, status FROM idem.audit ORDER BY id DESC LIMIT 1")
        .fetch_one(&env.db.pool)
        .await
        .expect("an entry")
}

/// Issue 42: every lever an operator pulls — pause, resume, rewind,
/// throttle, a quarantined key's release and dead-lettering, a replay, a
/// discard — is in the trail under their name, with how it was answered
/// (a refused change too); a replay run without a host (`--config`) under
/// the machine's user, as `cli`, as it begins and with its outcome.
#[tokio::test(flavor = "multi_thread")]
async fn every_lever_an_operator_pulls_is_in_the_trail_under_their_name() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "");
    let host = Host::start(&config, None).await;
    let (code, alice, err) = idem_json(&["token", "create", "alice", "--scope", "operate"], &host.url, TOKEN);
    assert_eq!(code, Some(0), "{err}");
    let alice = alice["token"].as_str().expect("the token").to_owned();
    let levers: [(&[&str], &str); 9] = [
        (&["pause", "--handler", "billing", "--reason", "provider down"], "POST /handlers/billing/pause"),
        (&["resume", "--handler", "billing"], "POST /handlers/billing/resume"),
        (
            &["rewind", "--handler", "billing", "--to", "earliest", "--reason", "bad deploy"],
            "POST /handlers/billing/rewind",
        ),
        (
            &["throttle", "--handler", "billing", "--target", "events", "--per-second", "5"],
            "POST /handlers/billing/throttle",
        ),
        (&["throttle", "--handler", "billing", "--target", "events", "--reset"], "POST /handlers/billing/throttle"),
        (
            &["quarantine", "--handler", "billing", "--release", "customer-7"],
            "POST /handlers/billing/quarantine/release",
        ),
        (
            &["quarantine", "--handler", "billing", "--dead-letter", "customer-7"],
            "POST /handlers/billing/quarantine/dead-letter",
        ),
        (&["dlq", "replay", "--handler", "billing", "--since", "1h"], "POST /handlers/billing/dead-letters/replay"),
        (&["dlq", "discard", "--handler", "billing", "--since", "1h"], "POST /handlers/billing/dead-letters/discard"),
    ];
    for (args, action) in levers {
        let before = env.db.count("SELECT count(*) FROM idem.audit").await;
        let (code, answer, err) = idem_json(args, &host.url, &alice);
        let (actor, via, done, status) = newest(&env).await;
        assert_eq!(env.db.count("SELECT count(*) FROM idem.audit").await, before + 1, "{args:?}: one entry");
        assert_eq!((actor.as_str(), via.as_str()), ("alice", "api"), "{args:?}");
        assert!(done.starts_with(action), "{args:?}: {done}");
        // The CLI's exit code follows the answer: 0 for a change made.
        assert_eq!(code == Some(0), (200..300).contains(&status), "{args:?}: {status} {answer} {err}");
    }
    host.stop().await;

    // Without a host: the machine's user, via the CLI, and the counts.
    let path = config.to_str().expect("path");
    let (code, out, err) = cli(
        &["dlq", "replay", "--config", path, "--handler", "billing", "--since", "1h", "--json"],
        &[("USER", "oncall-bob")],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (actor, via, done, status) = newest(&env).await;
    assert_eq!((actor.as_str(), via.as_str(), status), ("local:oncall-bob", "cli", 200), "{done}");
    assert!(done.starts_with("idem dlq replay --config"), "{done}");
    let begun: Vec<(String, i16)> =
        sqlx::query_as("SELECT action, status FROM idem.audit WHERE via = 'cli' ORDER BY id")
            .fetch_all(&env.db.pool)
            .await
            .expect("rows");
    assert_eq!(begun, vec![(done.clone(), 202), (done.clone(), 200)], "once as it began, once with its outcome");
    let detail: Value = sqlx::query_scalar("SELECT detail FROM idem.audit ORDER BY id DESC LIMIT 1")
        .fetch_one(&env.db.pool)
        .await
        .expect("detail");
    assert_eq!(detail["report"]["read"], 0, "{detail}");
    assert!(detail["asked"]["since"].is_string(), "{detail}");
    let (code, _, _) =
        cli(&["dlq", "replay", "--config", path, "--handler", "billing", "--since", "1h", "--dry-run"], &[]);
    assert_eq!(code, Some(0));
    assert_eq!(newest(&env).await.2, done, "a dry run changes nothing and is not a change");
    env.finish().await;
}
