//! The operator console (issue 26): in Debian's Chromium driven by
//! Playwright (`tests/console/console.mjs`), against `idem run` on Apache
//! Kafka and PostgreSQL; and its refusals, and the tokens' scopes on the
//! API and the CLI, over plain HTTP.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use idem_tests::provider::Fault;
use idem_tests::{host, kafka};
use rdkafka::Message as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::{Env, Host, READ_TOKEN, TOKEN, request};

/// Where the browser test's screenshots go (README's come from a run).
fn screenshots() -> PathBuf {
    let dir = std::env::var_os("IDEM_CONSOLE_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"));
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

pub(super) fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `n` orders from `first` on, spread over the topic's partitions.
async fn produce_orders(producer: &kafka::Producer, topic: &str, first: i64, n: i64) -> Vec<uuid::Uuid> {
    let mut ids = Vec::new();
    let mut records = Vec::new();
    for order in first..first + n {
        let (id, payload) = host::order_payload(order);
        ids.push(id);
        records.push(((order % 2) as i32, payload));
    }
    kafka::produce_all(producer, topic, &records).await;
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_watches_deploys_and_replays_in_a_browser() {
    let env = Env::new().await;
    // Under quarantine: a key failing at the provider is parked (and
    // released from the console); the poison's 422 still goes to the DLQ.
    let mut spec = env.billing().with_lanes("key", 4);
    spec.extra.push_str("failure = { on_exhausted = \"quarantine\" }\n");
    // Every event captured, for the modules page's replay section.
    spec.extra.push_str("capture = { sample = 1.0, redact = [\"$.customerId\"] }\n");
    let config = env.config(&spec, "");
    let host = Host::start(&config, None).await;
    let port = host.address.port();
    let shots = screenshots();
    let producer = kafka::producer();
    // Slow enough answers that a stream takes a few seconds to drain.
    env.provider.set_latency(Duration::from_millis(4));

    let mut node = tokio::process::Command::new("node")
        .arg(repo("tests/console/console.mjs"))
        .env("CONSOLE_URL", format!("http://localhost:{port}"))
        .env("OPERATE_TOKEN", super::TOKEN)
        .env("READ_TOKEN", READ_TOKEN)
        .env("SHOTS", &shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node (scripts/test installs tests/console's packages)");
    let mut to_node = node.stdin.take().expect("stdin");
    let mut from_node = BufReader::new(node.stdout.take().expect("stdout")).lines();
    let dlq_topic = format!("{}.billing.dlq", env.topic);
    let mut poison_id = None;
    let mut passed = false;
    let steps = async {
        while let Some(line) = from_node.next_line().await.expect("node's output") {
            if line == "pass" {
                passed = true;
                continue;
            }
            let Some(step) = line.strip_prefix("need ") else { continue };
            let answer = match step {
                "stream" => {
                    produce_orders(&producer, &env.topic, 1, 6000).await;
                    serde_json::json!(null)
                }
                "poison" => {
                    env.provider.set_latency(Duration::ZERO);
                    env.provider.set_fault(Fault::RejectTimes(1));
                    let markup = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>";
                    let (id, payload) = host::order_payload(900_001);
                    let mut order: serde_json::Value = serde_json::from_slice(&payload).expect("order");
                    order["note"] = markup.into();
                    kafka::produce(&producer, &env.topic, 0, "poison", order.to_string().as_bytes()).await;
                    poison_id = Some(id);
                    let (partition, offset) = dead_lettered(&dlq_topic, id).await;
                    serde_json::json!({ "partition": partition, "offset": offset, "markup": markup })
                }
                "quarantine" => {
                    env.provider.fail_marked(true);
                    for id in [800_001, 800_002] {
                        let (_, payload) = host::order_payload(id);
                        let mut order: serde_json::Value = serde_json::from_slice(&payload).expect("order");
                        order["currency"] = "FAI".into();
                        kafka::produce(&producer, &env.topic, 1, "customer-q", order.to_string().as_bytes()).await;
                    }
                    let held =
                        "SELECT count(*) FROM idem.parked_key WHERE key = 'customer-q'::bytea AND state = 'held'";
                    let parked = "SELECT count(*) FROM idem.parked_event WHERE key = 'customer-q'::bytea";
                    idem_tests::wait_until_async("customer-q held with its two orders", || async {
                        env.db.count(held).await == 1 && env.db.count(parked).await == 2
                    })
                    .await;
                    env.provider.fail_marked(false);
                    serde_json::json!({ "key": "customer-q", "key_base64": "Y3VzdG9tZXItcQ==", "events": 2 })
                }
                "released" => {
                    let charged = "SELECT count(*) FROM billing.charge WHERE order_id IN (800001, 800002)";
                    idem_tests::wait_until_async("both orders of customer-q charged", || async {
                        env.db.count(charged).await == 2
                    })
                    .await;
                    serde_json::json!(null)
                }
                "modules" => {
                    let dir = std::env::temp_dir().join(idem_tests::unique_name("console_modules"));
                    std::fs::create_dir_all(&dir).expect("dir");
                    let v1 = std::fs::read(idem_tests::guests::component("billing")).expect("billing component");
                    let (v2, garbage) = (dir.join("billing-v2.wasm"), dir.join("notes.wasm"));
                    std::fs::write(&v2, idem_tests::guests::with_marker(&v1, "console-v2")).expect("v2");
                    std::fs::write(&garbage, b"these are notes, not a component").expect("garbage");
                    serde_json::json!({ "v2": v2, "garbage": garbage })
                }
                "stream-v2" => {
                    produce_orders(&producer, &env.topic, 10_001, 300).await;
                    serde_json::json!(null)
                }
                "stream-shadow" => {
                    produce_orders(&producer, &env.topic, 20_001, 100).await;
                    serde_json::json!(null)
                }
                "active" => {
                    let version = env
                        .db
                        .count("SELECT version::bigint FROM idem.handler_module WHERE handler = 'billing' AND active")
                        .await;
                    serde_json::json!({ "version": version })
                }
                "charges" => {
                    let id = poison_id.expect("the poison record first");
                    let rows =
                        env.db.count(&format!("SELECT count(*) FROM billing.charge WHERE event_id = '{id}'")).await;
                    serde_json::json!({ "charges": rows })
                }
                other => panic!("console.mjs asked for an unknown step `{other}`"),
            };
            to_node.write_all(format!("done {step} {answer}\n").as_bytes()).await.expect("answer node");
        }
    };
    tokio::time::timeout(Duration::from_secs(600), steps).await.expect("the browser test ended within 10 minutes");
    let status = node.wait().await.expect("node");
    assert!(status.success() && passed, "console.mjs failed ({status}); its reason is in the output above");
    let id = poison_id.expect("poison");
    let posts = env.provider.keys().iter().filter(|k| k.as_deref() == Some(id.to_string().as_str())).count();
    assert_eq!(
        posts, 2,
        "the provider saw the refused charge and the replay's, nothing for the dry run or the duplicate"
    );
    for name in [
        "login",
        "overview-draining",
        "overview",
        "handler",
        "handler-quarantine",
        "modules",
        "modules-shadow",
        "dead-letters",
        "dead-letters-replayed",
    ] {
        let shot = shots.join(format!("{name}.png"));
        let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "{} is missing or empty", shot.display());
    }
    eprintln!("console screenshots: {}", shots.display());
    host.stop().await;
    env.finish().await;
}

/// The DLQ position (partition, offset) of the dead letter of event `id`.
async fn dead_lettered(dlq_topic: &str, id: uuid::Uuid) -> (i32, i64) {
    let wanted = id.to_string();
    for _ in 0..300 {
        let records = kafka::read_all(dlq_topic);
        if let Some(m) =
            records.iter().find(|m| m.payload().is_some_and(|p| String::from_utf8_lossy(p).contains(&wanted)))
        {
            return (m.partition(), m.offset());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("event {id} was not dead-lettered within 60 s");
}

/// The console's refusals without a browser, and the scopes on the API.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_and_the_api_refuse_what_a_session_or_token_may_not_do() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "console_hosts = [\"idem.internal:7700\"]");
    let host = Host::start(&config, None).await;
    let a = host.address;
    let login = |token: &str, origin: Option<&str>| {
        let body = serde_json::json!({ "token": token }).to_string();
        let origin = origin.map(|o| format!("origin: {o}\r\n")).unwrap_or_default();
        format!("content-type: application/json\r\ncontent-length: {}\r\n{origin}\r\n{body}", body.len())
    };
    let ours = format!("http://{a}");
    // The page itself answers anyone on an allowed Host, with its CSP.
    let page = request(a, "GET", "/console/", "").await;
    assert_eq!(page.status, 200, "{}", page.head);
    assert!(page.head.to_ascii_lowercase().contains("content-security-policy: default-src 'none'; script-src 'self'"));
    for host_name in ["evil.example", "127.0.0.1.evil.example:80"] {
        let refused = raw_with_host(a, "GET", "/console/", host_name, "").await;
        assert_eq!(refused.status, 403, "Host {host_name}: {}", refused.body);
        assert!(refused.body.contains("is not a name of this console"), "{}", refused.body);
    }
    let named = raw_with_host(a, "GET", "/console/", "idem.internal:7700", "").await;
    assert_eq!(named.status, 200, "a Host of console_hosts");
    // A login needs this console's Origin, and the right token.
    let no_origin = request_with_body(a, "POST", "/console/api/login", &login(TOKEN, None)).await;
    assert_eq!(no_origin.status, 403, "{}", no_origin.body);
    let foreign = request_with_body(a, "POST", "/console/api/login", &login(TOKEN, Some("http://evil.example"))).await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    let wrong = request_with_body(a, "POST", "/console/api/login", &login("nope", Some(&ours))).await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let read = request_with_body(a, "POST", "/console/api/login", &login(READ_TOKEN, Some(&ours))).await;
    assert_eq!(read.status, 200, "{}", read.body);
    let head = read.head.to_ascii_lowercase();
    assert!(
        head.contains("set-cookie: idem_console=") && head.contains("httponly") && head.contains("samesite=strict"),
        "{head}"
    );
    assert!(!head.contains("; secure"), "plain HTTP without console_behind_tls: no Secure, or no browser keeps it");
    let cookie = session_cookie(&read.head);
    let csrf =
        serde_json::from_str::<serde_json::Value>(&read.body).expect("json")["csrf"].as_str().expect("csrf").to_owned();
    // Without a session the console's API answers nothing.
    let anonymous = request(a, "GET", "/console/api/overview", "").await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let overview = request(a, "GET", "/console/api/overview", &format!("cookie: {cookie}\r\n")).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    // Nothing dead-lettered yet: an empty page saying so, not an error.
    let empty = request(a, "GET", "/console/api/handlers/billing/dead-letters", &format!("cookie: {cookie}\r\n")).await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert!(empty.body.contains("nothing was dead-lettered"), "{}", empty.body);
    let bad =
        request(a, "GET", "/console/api/handlers/billing/dead-letters?before=x", &format!("cookie: {cookie}\r\n"))
            .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("not partition:offset"), "{}", bad.body);
    let nowhere = request(a, "GET", "/console/api/no/such/page", &format!("cookie: {cookie}\r\n")).await;
    assert_eq!(nowhere.status, 404, "{}", nowhere.body);
    // A read session may not change anything, CSRF token or not.
    let change = format!("cookie: {cookie}\r\norigin: {ours}\r\nx-csrf-token: {csrf}\r\ncontent-length: 0\r\n");
    let activate = request(a, "POST", "/console/api/handlers/billing/activate?version=1", &change).await;
    assert_eq!(activate.status, 403, "{}", activate.body);
    assert!(activate.body.contains("scope `read`"), "{}", activate.body);
    let no_csrf = format!("cookie: {cookie}\r\norigin: {ours}\r\ncontent-length: 0\r\n");
    let refused = request(a, "POST", "/console/api/handlers/billing/activate?version=1", &no_csrf).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("CSRF"), "{}", refused.body);
    // The API: the read token reads, and is refused every change.
    let bearer_read = format!("authorization: Bearer {READ_TOKEN}\r\n");
    assert_eq!(request(a, "GET", "/handlers", &bearer_read).await.status, 200);
    let put = request(a, "PUT", "/handlers/billing/module", &format!("{bearer_read}content-length: 0\r\n")).await;
    assert_eq!(put.status, 403, "{}", put.body);
    assert!(put.body.contains("scope `read`") && put.body.contains("IDEM_ADMIN_TOKEN"), "{}", put.body);
    // And the CLI says so.
    let v1 = idem_tests::guests::component("billing");
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["deploy", "--url", &host.url, "--handler", "billing"])
        .arg(&v1)
        .env("IDEM_ADMIN_TOKEN", READ_TOKEN)
        .output()
        .expect("idem deploy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("scope `read`"), "idem deploy with a read token: {stderr}");
    assert_eq!(out.status.code(), Some(5), "forbidden has its exit code: {stderr}");
    let listed = std::process::Command::new(idem_tests::idem_bin())
        .args(["handlers", "--url", &host.url])
        .env("IDEM_ADMIN_TOKEN", READ_TOKEN)
        .output()
        .expect("idem handlers");
    assert!(listed.status.success(), "idem handlers with a read token: {}", String::from_utf8_lossy(&listed.stderr));
    the_cli_reads_with_the_read_token_and_exits_with_a_code_per_failure(&host.url);
    host.stop().await;
    env.finish().await;
}

async fn raw_with_host(
    a: std::net::SocketAddr,
    method: &str,
    path: &str,
    host_name: &str,
    headers: &str,
) -> super::Answer {
    let mut stream = tokio::net::TcpStream::connect(a).await.expect("connect");
    let text = format!("{method} {path} HTTP/1.1\r\nhost: {host_name}\r\n{headers}connection: close\r\n\r\n");
    super::exchange(&mut stream, text.as_bytes(), Duration::from_secs(30), path).await
}

/// The `name=value` of the session cookie a login's answer sets.
pub(super) fn session_cookie(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie:")
                .then(|| l[11..].trim().split(';').next().unwrap_or("").to_owned())
        })
        .expect("cookie")
}

/// `headers_and_body`: header lines, a blank line, the body.
pub(super) async fn request_with_body(
    a: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers_and_body: &str,
) -> super::Answer {
    let mut stream = tokio::net::TcpStream::connect(a).await.expect("connect");
    let text = format!("{method} {path} HTTP/1.1\r\nhost: {a}\r\nconnection: close\r\n{headers_and_body}");
    super::exchange(&mut stream, text.as_bytes(), Duration::from_secs(30), path).await
}

/// Nobody can lock operators out or starve their pages: wrong logins from
/// an address (every browser behind a proxy shares one) slow only wrong
/// tries, the right token is let in at once; a `read` session reading
/// dead-letter pages in a loop gets one page at a time and never takes an
/// operator's turn; behind TLS the session cookie is `Secure`.
#[tokio::test(flavor = "multi_thread")]
async fn the_right_token_is_never_refused_and_no_session_starves_another() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "console_behind_tls = true");
    let host = Host::start(&config, None).await;
    let a = host.address;
    // Dead letters to read: records that are not JSON.
    let producer = kafka::producer();
    for i in 0..20 {
        kafka::produce(&producer, &env.topic, i % 2, "k", format!("not json {i}").as_bytes()).await;
    }
    let dlq = format!("{}.billing.dlq", env.topic);
    idem_tests::wait_until("20 dead letters", || kafka::read_all(&dlq).len() == 20).await;

    let ours = format!("http://{a}");
    let login = |token: &str| {
        let body = serde_json::json!({ "token": token }).to_string();
        format!("content-type: application/json\r\ncontent-length: {}\r\norigin: {ours}\r\n\r\n{body}", body.len())
    };
    let mut statuses = Vec::new();
    for _ in 0..15 {
        statuses.push(request_with_body(a, "POST", "/console/api/login", &login("wrong-guess")).await.status);
    }
    assert_eq!(statuses[..10], [401; 10], "{statuses:?}");
    assert_eq!(statuses[10..], [429; 5], "wrong tries past 10 a minute are slowed: {statuses:?}");
    let operate = request_with_body(a, "POST", "/console/api/login", &login(TOKEN)).await;
    assert_eq!(operate.status, 200, "the right token from the same address: {}", operate.body);
    let head = operate.head.to_ascii_lowercase();
    assert!(head.contains("set-cookie: idem_console=") && head.contains("; secure"), "behind TLS: {head}");
    let read = request_with_body(a, "POST", "/console/api/login", &login(READ_TOKEN)).await;
    assert_eq!(read.status, 200, "{}", read.body);
    let cookie_of = |answer: &super::Answer| {
        answer
            .head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .starts_with("set-cookie:")
                    .then(|| l[11..].trim().split(';').next().unwrap_or("").to_owned())
            })
            .expect("cookie")
    };
    let (operator, reader) = (cookie_of(&operate), cookie_of(&read));
    let page = "/console/api/handlers/billing/dead-letters";

    // The reader: four requests at once, again and again, for 8 s.
    let looping = tokio::spawn(async move {
        let began = std::time::Instant::now();
        let (mut read, mut refused) = (0, 0);
        while began.elapsed() < Duration::from_secs(8) {
            let header = format!("cookie: {reader}\r\n");
            let tries = (0..4).map(|_| request(a, "GET", page, &header));
            for answer in futures::future::join_all(tries).await {
                match answer.status {
                    200 => read += 1,
                    429 => {
                        assert!(
                            answer.body.contains("a dead-letter read running and another waiting"),
                            "{}",
                            answer.body
                        );
                        refused += 1;
                    }
                    other => panic!("the reader got {other}: {}", answer.body),
                }
            }
        }
        (read, refused)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..10 {
        let answer = request(a, "GET", page, &format!("cookie: {operator}\r\n")).await;
        assert_eq!(answer.status, 200, "the operator's read {i} while a reader loops: {}", answer.body);
        assert!(answer.body.contains("not json"), "{}", answer.body);
    }
    let (read, refused) = looping.await.expect("reader");
    assert!(read > 0 && refused > 0, "the reader read {read} pages, one at a time ({refused} refused)");
    host.stop().await;
    env.finish().await;
}

/// The same shares and the Secure cookie in Chromium: a `read` session's
/// page looping over the dead-letter API never makes the operator's
/// dead-letter page fail or come up short, and behind TLS
/// (`console_behind_tls`) the browser holds a Secure cookie with which
/// every page works (tests/console/shares.mjs).
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_looping_reader_never_starves_the_operators_dead_letter_page() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "console_behind_tls = true");
    let host = Host::start(&config, None).await;
    let producer = kafka::producer();
    for i in 0..20 {
        kafka::produce(&producer, &env.topic, i % 2, "k", format!("not json {i}").as_bytes()).await;
    }
    let dlq = format!("{}.billing.dlq", env.topic);
    idem_tests::wait_until("20 dead letters", || kafka::read_all(&dlq).len() == 20).await;
    let node = tokio::process::Command::new("node")
        .arg(repo("tests/console/shares.mjs"))
        .env("CONSOLE_URL", format!("http://localhost:{}", host.address.port()))
        .env("OPERATE_TOKEN", super::TOKEN)
        .env("READ_TOKEN", READ_TOKEN)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), node)
        .await
        .expect("shares.mjs ended within 3 minutes")
        .expect("node (scripts/test installs tests/console's packages)");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{stderr}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with("pass"),
        "shares.mjs failed ({}):\n{stderr}",
        out.status
    );
    host.stop().await;
    env.finish().await;
}

/// A token short enough to guess is refused at start-up, naming its variable.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_token_is_refused_at_start_up() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "");
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["run", "--config", config.to_str().expect("path")])
        .env("IDEM_ADMIN_TOKEN", "admin-test-token")
        .env("IDEM_TEST_PARENT_PID", std::process::id().to_string())
        .stdin(Stdio::null())
        .output()
        .expect("idem run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("$IDEM_ADMIN_TOKEN holds a token of 16 characters"), "{stderr}");
    env.finish().await;
}

/// `idem` with `args`, `env` set and the admin tokens otherwise unset: its
/// exit code, stdout and stderr.
pub(super) fn cli(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = std::process::Command::new(idem_tests::idem_bin());
    command.args(args).env_remove("IDEM_ADMIN_TOKEN").env_remove("IDEM_ADMIN_READ_TOKEN").envs(env.iter().copied());
    let out = command.output().expect("idem");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// One CLI model (issue 41): the commands that only read take the read
/// token from `$IDEM_ADMIN_READ_TOKEN`; each failure has its exit code; a
/// reader that closes the output early ends the command quietly.
fn the_cli_reads_with_the_read_token_and_exits_with_a_code_per_failure(url: &str) {
    let read = [("IDEM_ADMIN_READ_TOKEN", READ_TOKEN)];
    let (code, out, err) = cli(&["handlers", "--url", url], &read);
    assert_eq!(code, Some(0), "idem handlers with $IDEM_ADMIN_READ_TOKEN only: {err}");
    assert!(out.contains("billing"), "{out}");
    let (code, out, err) = cli(&["status", "--once", "--url", url], &read);
    assert_eq!(code, Some(0), "idem status with $IDEM_ADMIN_READ_TOKEN only: {err}");
    assert!(out.contains("billing"), "{out}");

    let (code, _, err) = cli(&["handlers", "--url", url], &[]);
    assert_eq!(code, Some(4), "no token: {err}");
    assert!(err.contains("401") && err.contains("--token"), "{err}");
    let (code, _, err) = cli(&["handlers", "--url", url], &[("IDEM_ADMIN_TOKEN", "not-the-token-0123456789abcdef")]);
    assert_eq!(code, Some(4), "a wrong token: {err}");
    let operate = [("IDEM_ADMIN_TOKEN", super::TOKEN)];
    let (code, _, err) = cli(&["rollback", "--url", url, "--handler", "no-such-handler"], &operate);
    assert_eq!(code, Some(6), "an unknown handler: {err}");
    let (code, _, err) = cli(&["rollback", "--url", url, "--handler", "billing", "--to", "999"], &operate);
    assert!(matches!(code, Some(6 | 7)), "a version that does not exist: {code:?} {err}");
    let (code, _, err) = cli(&["handlers", "--url", "http://127.0.0.1:9"], &read);
    assert_eq!(code, Some(3), "nothing listens there: {err}");
    assert!(err.contains("unreachable") && err.contains("127.0.0.1:9"), "{err}");
    let (code, _, err) = cli(&["rollback", "--url", url], &operate);
    assert_eq!(code, Some(2), "no handler named: {err}");

    // The reader goes away before the frame is written (`status --once`
    // waits a second for its rate): no panic, exit 0.
    let mut child = std::process::Command::new(idem_tests::idem_bin())
        .args(["status", "--once", "--url", url])
        .env("IDEM_ADMIN_READ_TOKEN", READ_TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("idem status");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("idem status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "a closed pipe: {err}");
    assert!(!err.contains("panicked"), "{err}");
}
