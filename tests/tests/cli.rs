//! The `idem` binary: `migrate` on an empty database, and `check` refusing
//! each kind of bad start-up with a message that names the problem.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

use std::path::Path;
use std::process::Command;

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};

fn idem(args: &[&str]) -> (bool, String) {
    let out = Command::new(idem_tests::idem_bin()).args(args).output().unwrap_or_else(|e| panic!("run idem: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn check(config: &Path) -> (bool, String) {
    idem(&["check", "--config", config.to_str().unwrap_or_default()])
}

/// `idem run --exit-when-drained`: start-up, then whatever the topic holds.
fn run_drained(config: &Path) -> (bool, String) {
    idem(&["run", "--exit-when-drained", "--config", config.to_str().unwrap_or_default()])
}

/// A copy of `config` with `from` replaced by `to`.
fn variant(config: &Path, from: &str, to: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(config).expect("config");
    assert!(text.contains(from), "{from} not in config");
    let path = config.with_file_name(format!("variant-{}.toml", idem_tests::unique_name("v")));
    std::fs::write(&path, text.replacen(from, to, 1)).expect("write variant");
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_works_on_an_empty_database_and_check_then_passes() {
    idem_tests::init_logging();
    let db = TestDb::empty().await.expect("empty database");
    let topic = idem_tests::kafka::create_topic(1).await;
    let config = host::write_config(&db.url, &[HandlerSpec::billing(&topic, "http://127.0.0.1:9")]);

    let (ok, out) = check(&config);
    assert!(!ok && out.contains("idem migrate"), "check refuses an unmigrated database: {out}");

    let (ok, out) = idem(&["migrate", "--database-url", &db.url]);
    assert!(ok, "{out}");
    assert_eq!(db.count("SELECT count(*) FROM idem.processed_event").await, 0);
    let (ok, out) = check(&config);
    assert!(!ok && out.contains("does not exist") && out.contains("idem migrate --config"), "no role yet: {out}");

    let config_arg = config.to_str().expect("path");
    let (ok, out) = idem(&["migrate", "--config", config_arg]);
    assert!(ok, "{out}");
    assert!(out.contains("created role") && out.contains("applied migration 1 (charge)"), "{out}");
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, 0, "the handler's migration made its table");
    let (ok, out) = idem(&["migrate", "--config", config_arg]);
    assert!(ok, "migrate is idempotent: {out}");
    assert!(!out.contains("created role") && !out.contains("applied migration"), "nothing done twice: {out}");

    let (ok, out) = check(&config);
    assert!(ok, "{out}");
    // `idem check` consumes nothing and creates nothing: it says what
    // `idem run` will create.
    let dlq = format!("{topic}.billing.dlq");
    assert!(out.contains(&format!("dead-letter topic {dlq} does not exist")) && out.contains("idem run"), "{out}");
    assert_eq!(idem_tests::kafka::partitions(&dlq), 0, "idem check created {dlq}");
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn check_refuses_each_bad_start_up_naming_the_problem() {
    idem_tests::init_logging();
    let db = TestDb::new().await.expect("database");
    let topic = idem_tests::kafka::create_topic(1).await;
    let config = host::write_config(&db.url, &[HandlerSpec::billing(&topic, "http://127.0.0.1:9")]);
    let (ok, out) = check(&config);
    assert!(ok, "the base config passes: {out}");

    let not_wasm = config.with_file_name("not-a-component.wasm");
    std::fs::write(&not_wasm, b"\0asm\x01\0\0\0").expect("write");
    let bad_schema = config.with_file_name("bad.schema.json");
    std::fs::write(&bad_schema, br#"{"type": 12}"#).expect("write");
    let billing_component = idem_tests::guests::component("billing").display().to_string();
    let schema = std::fs::read_to_string(&config)
        .expect("config")
        .lines()
        .find_map(|l| l.strip_prefix("schema = \"").map(|s| s.trim_end_matches('"').to_owned()))
        .expect("schema line");

    let cases: Vec<(std::path::PathBuf, &str)> = vec![
        (config.with_file_name("missing.toml"), "failed to read config"),
        (variant(&config, "concurrency = 3", "concurrency = 3\nconcurency = 4"), "unknown field `concurency`"),
        (
            variant(&config, "[kafka.properties]", "[kafka.properties]\n\"enable.auto.commit\" = \"true\""),
            "enable.auto.commit",
        ),
        (
            variant(&config, "[kafka.properties]", "[kafka.properties]\n\"enable.auto.offset.store\" = \"true\""),
            "enable.auto.offset.store",
        ),
        (variant(&config, "concurrency = 3", "concurrency = 3\nmax_events = 100"), "max_events"),
        (variant(&config, &billing_component, not_wasm.to_str().expect("path")), "not-a-component.wasm"),
        (
            variant(
                &config,
                &billing_component,
                idem_tests::guests::component("not-a-handler").to_str().expect("path"),
            ),
            "does not implement the idem:handler@0.1.0 world",
        ),
        (variant(&config, &schema, bad_schema.to_str().expect("path")), "does not compile"),
        (
            variant(&config, "concurrency = 3", "concurrency = 3\nmax_memory_mib = 1"),
            "cannot be instantiated under its limits",
        ),
        (variant(&config, &db.url, "postgres://postgres@127.0.0.1:1/nowhere"), "database unreachable"),
        (variant(&config, &idem_tests::kafka::brokers(), "127.0.0.1:1"), "broker unreachable"),
        // KIP-848: the session timeout is the broker's, the assignor too.
        (
            variant(
                &config,
                "group_protocol = \"classic\"\nassignor = \"cooperative-sticky\"\n",
                "group_protocol = \"consumer\"\n",
            ),
            "where it is the broker's group.consumer.",
        ),
        (
            variant(
                &variant(&config, "\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"\n", ""),
                "group_protocol = \"classic\"",
                "group_protocol = \"consumer\"",
            ),
            "assignor = \"uniform\"",
        ),
        (
            variant(&config, "[kafka.properties]", "[kafka.properties]\n\"group.protocol\" = \"consumer\""),
            "`group_protocol`",
        ),
    ];
    for (path, expected) in cases {
        let (ok, out) = check(&path);
        assert!(!ok, "{expected}: check passed a bad config");
        assert!(out.contains(expected), "expected `{expected}` in: {out}");
    }

    // No dead-letter topic: `check` changes nothing and says what `run`
    // will do; start-up creates it with the source topic's partition
    // count. One the broker refuses to create is refused, naming it: Kafka
    // refuses a name that collides with an existing topic's once `.` and
    // `_` are taken as one.
    let lonely = idem_tests::kafka::create_topic(2).await;
    let spec = HandlerSpec::billing(&lonely, "http://127.0.0.1:9");
    assert_eq!(idem_tests::kafka::partitions(&format!("{lonely}.billing.dlq")), 0);
    let lonely_config = host::write_config(&db.url, &[spec]);
    let (ok, out) = check(&lonely_config);
    assert!(ok && out.contains("creates it with 2 partition(s)"), "{out}");
    assert_eq!(idem_tests::kafka::partitions(&format!("{lonely}.billing.dlq")), 0, "idem check created nothing");
    let (ok, out) = run_drained(&lonely_config);
    assert!(ok, "{out}");
    assert_eq!(idem_tests::kafka::partitions(&format!("{lonely}.billing.dlq")), 2, "created like {lonely}");
    let colliding = idem_tests::kafka::create_topic(1).await;
    idem_tests::kafka::create_named_topic(&format!("{colliding}_billing_dlq"), 1).await;
    let spec = HandlerSpec::billing(&colliding, "http://127.0.0.1:9");
    let (ok, out) = run_drained(&host::write_config(&db.url, &[spec]));
    assert!(!ok && out.contains(&format!("{colliding}.billing.dlq")) && out.contains("could not be created"), "{out}");
    // The old top-level max_attempts says where it went.
    let (ok, out) = check(&variant(&config, "concurrency = 3", "concurrency = 3\nmax_attempts = 3"));
    assert!(!ok && out.contains("[handler.retry]"), "{out}");

    // Duplicate names and groups, across two handlers.
    let a = HandlerSpec::billing(&topic, "http://127.0.0.1:9");
    let mut b = HandlerSpec::notification(&topic);
    b.name = a.name.clone();
    let (ok, out) = check(&host::write_config(&db.url, &[a.clone(), b]));
    assert!(!ok && out.contains("two handlers have this name"), "{out}");
    // Two handlers calling one provider with the same key prefix: a warning.
    let (ok, out) = check(&host::write_config(&db.url, &[a.clone(), HandlerSpec::notification(&topic)]));
    assert!(ok && out.contains("would collide"), "{out}");
    let mut c = HandlerSpec::notification(&topic);
    c.group_id = a.group_id.clone();
    let (ok, out) = check(&host::write_config(&db.url, &[a, c]));
    assert!(!ok && out.contains("is used by another handler"), "{out}");
    db.drop_database().await;
}

/// `idem check` with extra environment variables.
fn check_with_env(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(idem_tests::idem_bin())
        .args(["check", "--config", config.to_str().unwrap_or_default()])
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run idem: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Against the test broker's SSL and SASL_SSL listeners (Apache Kafka's
/// own TLS and SASL, scripts/kafka/broker).
#[tokio::test(flavor = "multi_thread")]
async fn check_reaches_brokers_that_require_tls_and_sasl_and_never_prints_a_secret() {
    idem_tests::init_logging();
    let tls = idem_tests::kafka::TlsListeners::from_env();
    let db = TestDb::new().await.expect("database");
    let topic = idem_tests::kafka::create_topic(1).await;
    let spec = HandlerSpec::billing(&topic, "http://127.0.0.1:9");
    const VAR: &str = "IDEM_TEST_KAFKA_PASSWORD";
    // librdkafka's own debug log of its configuration and of the SASL
    // exchange goes to idem's log too: none of it may carry the password.
    let verbose = |password: &str| -> Vec<(&'static str, String)> {
        vec![(VAR, password.to_owned()), ("IDEM_LOG", "info,idem=debug,librdkafka=debug".to_owned())]
    };
    let run = |config: &Path, env: &[(&'static str, String)]| {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        check_with_env(config, &pairs)
    };
    let config_for = |brokers: &str, properties: &[(&str, String)], from_env: &[(&str, &str)]| {
        host::write_config_with(brokers, properties, from_env, &db.url, std::slice::from_ref(&spec))
    };

    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let mut properties = tls.sasl_properties(mechanism);
        properties.push(("debug", "conf,security,broker".to_owned()));
        let config = config_for(&tls.sasl_ssl, &properties, &[("sasl.password", VAR)]);
        let (ok, out) = run(&config, &verbose(&tls.password));
        assert!(ok, "{mechanism} over TLS: {out}");
        assert!(!out.contains(&tls.password), "{mechanism}: the password was printed");

        // A wrong password: refused at once, saying so, printing neither.
        let (ok, out) = run(&config, &verbose("wrong-password-4711"));
        assert!(
            !ok && out.contains("broker unreachable") && out.contains("Authentication failed"),
            "{mechanism}: {out}"
        );
        assert!(!out.contains("wrong-password-4711") && !out.contains(&tls.password), "a password was printed");
    }
    let scram = tls.sasl_properties("SCRAM-SHA-512");

    // The variable missing: named, before anything connects.
    let (ok, out) = run(&config_for(&tls.sasl_ssl, &scram, &[("sasl.password", VAR)]), &[]);
    assert!(!ok && out.contains(VAR) && out.contains("not set"), "{out}");

    // The password written into the file: refused, and not echoed.
    let mut literal = scram.clone();
    literal.push(("sasl.password", tls.password.clone()));
    let (ok, out) = run(&config_for(&tls.sasl_ssl, &literal, &[]), &[]);
    assert!(!ok && out.contains("holds a secret") && out.contains("properties_env"), "{out}");
    assert!(!out.contains(&tls.password), "the refused password was printed: {out}");

    // TLS without SASL, to the listener that requires SASL.
    let tls_only = vec![("security.protocol", "SSL".to_owned()), ("ssl.ca.location", tls.ca_file.clone())];
    let (ok, out) = run(&config_for(&tls.sasl_ssl, &tls_only, &[]), &[]);
    assert!(!ok && out.contains("broker unreachable"), "{out}");

    // A CA that did not sign the broker's certificate.
    let mut untrusted = scram.clone();
    untrusted.retain(|(k, _)| *k != "ssl.ca.location");
    untrusted.push(("ssl.ca.location", tls.other_ca_file.clone()));
    let (ok, out) = run(&config_for(&tls.sasl_ssl, &untrusted, &[("sasl.password", VAR)]), &verbose(&tls.password));
    assert!(!ok && out.contains("certificate verify failed"), "an untrusted certificate: {out}");

    // Plaintext, to the TLS listener: the TLS handshake never happens.
    let (ok, out) = run(&config_for(&tls.ssl, &[], &[]), &[]);
    assert!(!ok && out.contains("broker unreachable"), "{out}");

    // TLS alone (no SASL), trusted through ssl.ca.location.
    let (ok, out) = run(&config_for(&tls.ssl, &tls_only, &[]), &[]);
    assert!(ok, "TLS only: {out}");
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_runs_one_pass_and_migrate_follows_the_retention_mode() {
    idem_tests::init_logging();
    let topic = idem_tests::kafka::create_topic(1).await;
    let mut spec = HandlerSpec::billing(&topic, "http://127.0.0.1:9");
    spec.extra = "dedup_retention = \"2d\"\n".into();
    for mode in ["partition", "delete"] {
        // It counts the windows the migration and two passes leave: one
        // UTC day throughout.
        idem_tests::db::away_from_midnight(std::time::Duration::from_secs(120)).await;
        let db = TestDb::empty().await.expect("empty database");
        let config = host::write_config(&db.url, std::slice::from_ref(&spec));
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(&config, format!("{text}\n[retention]\nmode = \"{mode}\"\nwindows_ahead = 5\n")).expect("write");
        let path = config.to_str().expect("path");
        let (ok, out) = idem(&["migrate", "--config", path]);
        assert!(ok, "{out}");
        let kind: String =
            sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE oid = 'idem.processed_event'::regclass")
                .fetch_one(&db.pool)
                .await
                .expect("kind");
        assert_eq!(kind, if mode == "partition" { "p" } else { "r" });
        let (ok, out) = check(&config);
        assert!(ok, "{out}");
        // The topic keeps records for Kafka's default 7 days, longer than
        // the 2 days of dedup rows: warned of, with both figures.
        assert!(out.contains("idem: warning: handler `billing`"), "check warns about the topic's retention: {out}");
        assert!(out.contains("dedup_retention = \"2d\" is shorter than topic"), "{out}");
        assert!(out.contains("(retention.ms = 604800000)"), "{out}");

        let (ok, out) = idem(&["maintenance", "--config", path]);
        assert!(ok, "{out}");
        if mode == "partition" {
            assert!(out.contains("idem: maintenance: created window"), "{out}");
            assert!(out.contains("idem: maintenance: dropped window"), "{out}");
            let windows =
                db.count("SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.processed_event'::regclass").await;
            // `idem migrate --config` recorded 2 days: the 2 days before
            // today, today, 5 ahead; the older ones the migration made went.
            assert_eq!(windows, 8, "{out}");
        } else {
            assert!(out.contains("deleted 0 expired rows"), "{out}");
        }
        let (ok, out) = idem(&["maintenance", "--config", path, "--json"]);
        assert!(ok, "{out}");
        let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or_default()).expect("json");
        assert_eq!(report["mode"], mode, "{report}");
        assert_eq!(report["created"].as_array().map(Vec::len), Some(0), "nothing left to create: {report}");
        db.drop_database().await;
    }
}

/// `idem test`: a handler against a file of events in one transaction, rolled
/// back at the end unless `--commit`, each event's statements, requests and
/// outcome printed, the exit status telling whether all went through.
#[tokio::test(flavor = "multi_thread")]
async fn idem_test_runs_a_file_of_events_in_a_rolled_back_transaction_and_shows_what_each_did() {
    idem_tests::init_logging();
    let db = TestDb::empty().await.expect("empty database");
    let provider = "http://127.0.0.1:9"; // nothing listens: the recorder takes the requests
    let config = host::write_config(&db.url, &[HandlerSpec::billing("orders.confirmed", provider)]);
    let config_arg = config.to_str().expect("path");
    assert!(idem(&["migrate", "--config", config_arg]).0);

    let order = |id: &str, order: i64, amount: &str| {
        format!(
            r#"{{"eventId":"{id}","eventType":"order.confirmed.v1","occurredAt":"2026-12-02T07:00:00Z","aggregateType":"Order","orderId":{order},"customerId":7,{amount}"currency":"EUR"}}"#
        )
    };
    let (a, old) = (uuid::Uuid::now_v7().to_string(), "01938a4e-8c2a-7c3e-9b1a-2f4d5e6a7b01");
    let lines = [
        order(&a, 1, r#""totalAmount":10.25,"#),
        order(&a, 1, r#""totalAmount":10.25,"#),
        order(&uuid::Uuid::now_v7().to_string(), 2, ""),
        order(old, 3, r#""totalAmount":5,"#),
    ];
    let events = std::env::temp_dir().join(format!("{}.jsonl", idem_tests::unique_name("events")));
    std::fs::write(&events, lines.join("\n")).expect("events file");
    let events_arg = events.to_str().expect("path");

    // On the config's database (migrated above), to see the rollback there.
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", "--no-scratch", events_arg]);
    assert!(!ok, "an invalid event fails the run: {out}");
    for expected in [
        format!("line 1: {a} order.confirmed.v1: processed"),
        format!(
            "sql  INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, \
             $5) [$1=Value::Uuid(\"{a}\"), $2=Value::Int64(1), $3=Value::Int64(7), $4=Value::Float64(10.25), \
             $5=Value::Text(\"EUR\")] -> 1 row(s)"
        ),
        format!("http POST {provider}/v1/charges Idempotency-Key: {a} body: "),
        format!("line 2: {a} order.confirmed.v1: duplicate"),
        "line 3: invalid: the payload violates the schema".to_owned(),
        format!("line 4: its eventId {old} is older than the dedup retention: it runs with a fresh one"),
        "4 event(s), 1 failed; the transaction was rolled back".to_owned(),
    ] {
        assert!(out.contains(&expected), "`{expected}` missing from:\n{out}");
    }
    assert_eq!(out.matches("order.confirmed.v1: processed").count(), 2, "lines 1 and 4 ran: {out}");
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, 0, "rolled back");

    // A line marked with what it should come to passes when it does.
    let marked = [&lines[0], "# expect: duplicate", &lines[1], "# expect: invalid", &lines[2]].join("\n");
    std::fs::write(&events, marked).expect("events file");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", "--no-scratch", events_arg]);
    assert!(ok, "every line came to what the file expects: {out}");
    assert!(out.contains("line 5: invalid as the file expects"), "{out}");
    assert!(out.contains("3 event(s), 0 failed (1 more failed as the file expects)"), "{out}");
    let wrong = [&lines[0], "# expect: processed", &lines[2]].join("\n");
    std::fs::write(&events, wrong).expect("events file");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", "--no-scratch", events_arg]);
    assert!(!ok && out.contains("line 3: the file expects processed, it came to invalid"), "{out}");
    std::fs::write(&events, format!("# expect: fine\n{}", lines[0])).expect("events file");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", "--no-scratch", events_arg]);
    assert!(!ok && out.contains("line 1: `expect: fine`: say processed, duplicate, invalid or failed"), "{out}");
    assert_eq!(db.count("SELECT count(*) FROM idem.processed_event").await, 0, "the claims too");

    std::fs::write(&events, lines[..2].join("\n")).expect("events file");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", "--commit", events_arg]);
    assert!(ok, "{out}");
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, 1, "committed, the duplicate once");

    std::fs::write(&events, format!("{}\n{{not json\n", lines[0])).expect("events file");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", events_arg]);
    assert!(!ok && out.contains("line 2: not JSON"), "a malformed line is named: {out}");
    assert!(!out.contains("line 1:"), "before anything runs: {out}");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "nobody", events_arg]);
    assert!(!ok && out.contains("has no handler `nobody` (it has: billing)"), "{out}");
    let _ = std::fs::remove_file(&events);
    db.drop_database().await;
}

/// `idem test --commit`: an event that writes and then fails leaves nothing
/// (its savepoint), the events around it are kept; and only the component
/// `idem run` would run may be committed.
#[tokio::test(flavor = "multi_thread")]
async fn idem_test_commit_keeps_the_events_that_succeeded_and_only_for_the_configured_component() {
    idem_tests::init_logging();
    let db = TestDb::empty().await.expect("empty database");
    let config = host::write_config(&db.url, &[HandlerSpec::scenarios("scenarios.in", "http://127.0.0.1:9")]);
    let config_arg = config.to_str().expect("path");
    assert!(idem(&["migrate", "--config", config_arg]).0);
    let scenario = |name: &str| {
        let id = uuid::Uuid::now_v7();
        let line = format!(
            r#"{{"eventId":"{id}","eventType":"test.scenario.v1","occurredAt":"2026-12-02T07:00:00Z","scenario":"{name}"}}"#
        );
        (id, line)
    };
    let (first, second, third) = (scenario("ok"), scenario("write-then-fail"), scenario("ok"));
    let events = std::env::temp_dir().join(format!("{}.jsonl", idem_tests::unique_name("events")));
    std::fs::write(&events, [&first.1, &second.1, &third.1].map(String::as_str).join("\n")).expect("events file");
    let events_arg = events.to_str().expect("path");

    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "scenarios", "--commit", events_arg]);
    assert!(!ok, "one event failed: {out}");
    assert!(out.contains("line 2: ") && out.contains("failed (permanent)"), "{out}");
    assert!(out.contains("3 event(s), 1 failed; the transaction was committed"), "{out}");
    let kept: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT DISTINCT event_id FROM scenario.effect ORDER BY 1")
        .fetch_all(&db.pool)
        .await
        .expect("effects");
    assert_eq!(kept, vec![first.0, third.0], "the failed event's write was undone, the others kept");

    let other = idem_tests::guests::component("notification");
    let (ok, out) = idem(&[
        "test",
        "--config",
        config_arg,
        "--handler",
        "scenarios",
        "--component",
        other.to_str().expect("path"),
        "--commit",
        events_arg,
    ]);
    assert!(!ok && out.contains("is not the handler's component"), "{out}");
    let _ = std::fs::remove_file(&events);
    db.drop_database().await;
}

/// Copies the folder `from` to `to` (files and folders only).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a folder");
    for entry in std::fs::read_dir(from).expect("read a folder") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// `idem test --component DIR` builds the project with its `build.sh`, which
/// runs the project's own code: in an empty environment (none of the
/// operator's secrets, a scratch HOME), and never as root: as root it
/// refuses, naming the way out; as an unprivileged user the build runs and
/// sees neither `IDEM_ADMIN_TOKEN` nor `IDEM_DLQ_KEY` nor `DATABASE_URL`.
#[test]
fn idem_test_builds_a_project_without_the_operators_secrets_and_never_as_root() {
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::process::CommandExt as _;
    const NOBODY: u32 = 65_534;
    let config = host::write_config(
        "postgres://127.0.0.1:1/never-reached",
        &[HandlerSpec::billing("orders.confirmed", "http://127.0.0.1:9")],
    );
    // The unprivileged user must read what the config names, wherever the
    // checkout is (a clone in a root-only folder): the example's files are
    // copied beside the config and named there.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let copied = config.with_file_name("examples");
    copy_tree(&examples.join("billing"), &copied.join("billing"));
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replace(examples.to_str().expect("path"), copied.to_str().expect("path"));
    assert!(!text.contains(examples.to_str().expect("path")), "the config names the copies:\n{text}");
    std::fs::write(&config, text).expect("config");
    let project = config.with_file_name("project");
    std::fs::create_dir(&project).expect("project");
    // The build writes what it sees (its environment and uid) and no component.
    std::fs::write(project.join("build.sh"), "#!/usr/bin/env bash\n{ env; echo \"uid=$(id -u)\"; } > seen.txt\n")
        .expect("build.sh");
    let events = project.join("events.jsonl");
    std::fs::write(
        &events,
        r#"{"eventId":"0193aa4e-8c2a-7c3e-9b1a-2f4d5e6a7b01","eventType":"order.confirmed.v1","occurredAt":"2026-12-02T07:00:00Z","aggregateType":"Order","orderId":1,"customerId":7,"totalAmount":1,"currency":"EUR"}"#,
    )
    .expect("events");
    let secrets = [
        ("IDEM_ADMIN_TOKEN", "admin-token-that-must-not-leak"),
        ("IDEM_DLQ_KEY", "dlq-key-that-must-not-leak"),
        ("DATABASE_URL", "postgres://leaked@127.0.0.1/leak"),
    ];
    let run = |uid: Option<u32>| {
        let mut command = Command::new(idem_tests::idem_bin());
        command.args(["test", "--config"]).arg(&config).args(["--handler", "billing", "--component"]);
        command.arg(&project).arg(&events).envs(secrets);
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        let out = command.output().expect("run idem test");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let seen = project.join("seen.txt");

    let root = std::fs::metadata("/proc/self").expect("/proc/self").uid() == 0;
    if root {
        let (ok, out) = run(None);
        assert!(!ok, "{out}");
        let expected = format!("refusing to run {} as root", project.join("build.sh").display());
        assert!(out.contains(&expected) && out.contains("--component"), "`{expected}` missing from:\n{out}");
        assert!(!seen.exists(), "build.sh ran as root: {:?}", std::fs::read_to_string(&seen));
        // The same build by an unprivileged user, owning the project.
        std::os::unix::fs::chown(&project, Some(NOBODY), Some(NOBODY)).expect("chown the project");
    }
    let (ok, out) = run(root.then_some(NOBODY));
    assert!(!ok && out.contains("built no .wasm"), "the build ran and wrote no component: {out}");
    let env = std::fs::read_to_string(&seen).unwrap_or_else(|e| panic!("build.sh did not run ({e}): {out}"));
    for (name, value) in secrets {
        assert!(!env.contains(name) && !env.contains(value), "{name} reached the build:\n{env}");
    }
    let uid = env.lines().find_map(|l| l.strip_prefix("uid=")).expect("uid line");
    assert_ne!(uid, "0", "the build ran as root:\n{env}");
    let home = env.lines().find_map(|l| l.strip_prefix("HOME=")).expect("HOME line");
    assert!(home.contains("idem-build-"), "HOME is a scratch directory, not the operator's: {home}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "PATH is kept:\n{env}");
    assert!(!Path::new(home).exists(), "the scratch directory is removed");
    let _ = std::fs::remove_dir_all(config.parent().expect("config dir"));
}

/// Times on the command line: what an operator types in an incident is
/// read, anything else is refused naming what is accepted (exit 2, as
/// every usage error), before anything is read from anywhere.
#[test]
fn a_time_that_is_not_one_is_a_usage_error_naming_the_accepted_forms() {
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["dlq", "list", "--config", "/nonexistent/idem.toml", "--handler", "billing", "--since", "last tuesday"])
        .output()
        .expect("idem dlq list");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`last tuesday` is not a time") && err.contains("yesterday") && err.contains("1h"), "{err}");
    // A relative time is accepted: what fails next is the missing config.
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["dlq", "list", "--config", "/nonexistent/idem.toml", "--handler", "billing", "--since", "1h"])
        .output()
        .expect("idem dlq list");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/idem.toml"), "{err}");
}

/// `IDEM_WORKER_THREADS` sizes the async runtime before anything else
/// runs: a number of threads is taken, anything else is refused naming the
/// variable and what it held.
#[test]
fn a_worker_thread_count_that_is_not_one_is_refused_naming_it() {
    let run = |workers: &str| {
        let out = std::process::Command::new(idem_tests::idem_bin())
            .args(["check", "--config", "/nonexistent/idem.toml"])
            .env("IDEM_WORKER_THREADS", workers)
            .output()
            .expect("idem check");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for bad in ["0", "two", "-1", "100000"] {
        let (code, err) = run(bad);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&format!("IDEM_WORKER_THREADS must be a whole number of threads from 1 to 1024: got `{bad}`")),
            "{err}"
        );
        assert!(!err.contains("/nonexistent/idem.toml"), "refused before anything else ran: {err}");
    }
    for good in ["1", " 3 "] {
        let (code, err) = run(good);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("/nonexistent/idem.toml") && !err.contains("IDEM_WORKER_THREADS"), "{err}");
    }
}

/// `idem test` runs in a scratch database made on the config's server for
/// the run and dropped after (issue 47): nothing to migrate first, a
/// migration edited after a run tests again, the config's database is
/// never touched; `--no-scratch` uses the config's, and says what it needs.
#[tokio::test(flavor = "multi_thread")]
async fn idem_test_runs_in_a_scratch_database_so_a_migration_can_be_edited_and_tested_again() {
    idem_tests::init_logging();
    let db = TestDb::empty().await.expect("empty database");
    let config = host::write_config(&db.url, &[HandlerSpec::billing("orders.confirmed", "http://127.0.0.1:9")]);
    // The handler's migrations in a folder of its own, to edit.
    let migrations = std::env::temp_dir().join(idem_tests::unique_name("migrations"));
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/billing/migrations"), &migrations);
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("migrations = ") {
                format!("migrations = {:?}", migrations.display().to_string())
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&config, text).expect("config");
    let config_arg = config.to_str().expect("path");
    let id = uuid::Uuid::now_v7();
    let line = format!(
        r#"{{"eventId":"{id}","eventType":"order.confirmed.v1","occurredAt":"2026-12-02T07:00:00Z","aggregateType":"Order","orderId":1,"customerId":7,"totalAmount":10.25,"currency":"EUR"}}"#
    );
    let events = std::env::temp_dir().join(format!("{}.jsonl", idem_tests::unique_name("events")));
    std::fs::write(&events, line).expect("events file");
    let events_arg = events.to_str().expect("path");
    let scratch_of = |out: &str| {
        let after = out.split("in the scratch database ").nth(1).unwrap_or_else(|| panic!("no scratch named: {out}"));
        after.split_whitespace().next().unwrap_or_default().to_owned()
    };
    let exists = |name: String| {
        let pool = &db.pool;
        async move {
            sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)")
                .bind(name)
                .fetch_one(pool)
                .await
                .expect("pg_database")
        }
    };

    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", events_arg]);
    assert!(ok, "no idem migrate needed: {out}");
    assert!(out.contains(&format!("line 1: {id} order.confirmed.v1: processed")), "{out}");
    assert!(!exists(scratch_of(&out)).await, "the scratch database was dropped: {out}");

    // The migration edited (a column the handler does not write), and
    // tested again: no "changed after it was applied".
    let first = std::fs::read_dir(&migrations).expect("migrations").flatten().map(|e| e.path()).min().expect("a file");
    let edited =
        std::fs::read_to_string(&first).expect("migration") + "\nALTER TABLE billing.charge ADD COLUMN note text;\n";
    std::fs::write(&first, edited).expect("edit the migration");
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", events_arg]);
    assert!(ok, "the edited migration tests again: {out}");
    assert!(!exists(scratch_of(&out)).await);
    let untouched: bool =
        sqlx::query_scalar("SELECT NOT EXISTS (SELECT FROM pg_namespace WHERE nspname IN ('idem', 'billing'))")
            .fetch_one(&db.pool)
            .await
            .expect("schemas");
    assert!(untouched, "the config's database was never touched");

    // On the config's database: its migrations must be applied first.
    let (ok, out) = idem(&["test", "--config", config_arg, "--handler", "billing", "--no-scratch", events_arg]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("on the config's database (--no-scratch): its migrations must be applied (idem migrate)"),
        "{out}"
    );
    let _ = std::fs::remove_file(&events);
    let _ = std::fs::remove_dir_all(&migrations);
    db.drop_database().await;
}
