//! Handler modules: upload through the admin API and `idem deploy`,
//! validation, hot swap between batches on every host, rollback, restart.

use std::process::Command;
use std::time::{Duration, Instant};

use idem_tests::host::{self, InProcess};
use idem_tests::{guests, kafka};
use serde_json::Value;

use super::{CHARGES, DISTINCT_ORDERS, Env};

fn variant(bytes: &[u8], tag: &str) -> Vec<u8> {
    guests::with_marker(bytes, tag)
}

fn billing_bytes() -> Vec<u8> {
    std::fs::read(guests::component("billing")).expect("billing component")
}

/// The admin API of one host, with an optional token.
pub(super) struct Api {
    pub(super) url: String,
    token: Option<String>,
    client: reqwest::Client,
}

impl Api {
    pub(super) fn of(config: &std::path::Path) -> Self {
        // A connection per request: the server may close one after refusing
        // an upload before reading its body, and a pooled connection reused
        // then fails the next request (seen as IncompleteMessage).
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
        Self { url: host::admin_url(config), token: None, client }
    }

    fn authorized(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let request = match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        };
        let response = request.send().await.expect("admin API reachable");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn upload(&self, handler: &str, bytes: Vec<u8>) -> (u16, Value) {
        self.send(self.client.put(format!("{}/handlers/{handler}/module", self.url)).body(bytes)).await
    }

    /// An upload over a plain socket that reads the answer even when the
    /// server answers (and closes) before the whole body is written, as
    /// it may for a body over the limit (an HTTP client reports a broken
    /// pipe instead).
    async fn upload_raw(&self, handler: &str, bytes: &[u8]) -> (u16, Value) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let address = self.url.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.expect("admin API reachable");
        let auth = self.token.as_ref().map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
        let head = format!(
            "PUT /handlers/{handler}/module HTTP/1.1\r\nhost: {address}\r\n{auth}content-length: {}\r\nconnection: close\r\n\r\n",
            bytes.len()
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(bytes).await; // may fail once the server has answered
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        let text = String::from_utf8_lossy(&answer);
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    async fn show(&self, handler: &str) -> Value {
        let (status, body) = self.send(self.client.get(format!("{}/handlers/{handler}", self.url))).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until the API answers (the host has started).
    pub(super) async fn ready(&self, handler: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let request = self.client.get(format!("{}/handlers/{handler}", self.url));
            let request = match &self.token {
                Some(t) => request.bearer_auth(t),
                None => request,
            };
            if request.send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(Instant::now() < deadline, "the admin API at {} did not come up within 60 s", self.url);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until this host runs `version`; returns how long that took.
    pub(super) async fn runs(&self, handler: &str, version: i64, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            if self.show(handler).await["running_version"].as_i64() == Some(version) {
                return start.elapsed();
            }
            assert!(start.elapsed() < within, "{}: not on version {version} within {within:?}", self.url);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_mid_stream_switches_versions_between_batches_each_event_once() {
    let env = Env::new(6).await;
    let mut spec = env.billing();
    spec.batch = Some((20, 5));
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let host = InProcess::start(&config);
    let api = Api::of(&config);
    api.ready("billing").await;
    assert_eq!(api.show("billing").await["active_version"], 1, "the component file seeded version 1");

    // 5,000 orders: half streamed before the deploy, half after its answer
    // (compiling the upload takes a while on 2 cores), all into a host that
    // is busy with the first half when the switch comes.
    let stream = |from: i64| {
        let (producer, topic) = (kafka::producer(), env.topic.clone());
        tokio::spawn(async move {
            for chunk in 0..25_i64 {
                let records: Vec<(i32, Vec<u8>)> = (0..100)
                    .map(|i| {
                        let order = from + chunk * 100 + i + 1;
                        ((order % 6) as i32, host::order_payload(order).1)
                    })
                    .collect();
                kafka::produce_all(&producer, &topic, &records).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let first = stream(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.count(CHARGES).await < 1000 {
        assert!(Instant::now() < deadline, "processing did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, answer) = api.upload("billing", variant(&billing_bytes(), "v2")).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["version"], 2);
    let second = stream(2500);
    first.await.expect("producer");
    second.await.expect("producer");
    let deadline = Instant::now() + Duration::from_secs(120);
    while env.count(CHARGES).await < 5000 {
        assert!(Instant::now() < deadline, "not all charged: {}", env.count(CHARGES).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reports = host.stop().await;

    assert_eq!(env.count(CHARGES).await, 5000, "no event processed twice");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 5000, "none lost");
    assert_eq!(env.provider.charges(), 5000);
    assert_eq!(reports[0].rebalances, 1, "the swap did not make the consumer rejoin its group");
    // Per partition, in offset order: v1, then v2, never back.
    let rows: Vec<(i32, i64, Option<i32>)> = sqlx::query_as(
        "SELECT \"partition\", \"offset\", module_version FROM idem.processed_event ORDER BY \"partition\", \"offset\"",
    )
    .fetch_all(&env.db.pool)
    .await
    .expect("claims");
    let mut last: Option<(i32, i32)> = None;
    for (partition, offset, version) in &rows {
        let version = version.unwrap_or_else(|| panic!("partition {partition} offset {offset}: no module version"));
        if let Some((p, v)) = last
            && p == *partition
        {
            assert!(version >= v, "partition {partition} went back from v{v} to v{version} at offset {offset}");
        }
        last = Some((*partition, version));
    }
    let on = |v: i32| rows.iter().filter(|r| r.2 == Some(v)).count();
    assert!(on(1) > 0 && on(2) > 0, "both versions processed events: v1 {}, v2 {}", on(1), on(2));
    assert_eq!(reports[0].processed as usize, on(1) + on(2));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_uploads_are_refused_with_their_reason_and_change_nothing() {
    let env = Env::new(1).await;
    let mut spec = env.billing();
    spec.extra = "max_module_mib = 1\n".into();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let token = "s3cret-token-0123456789abcdef-0123";
    let child = host::spawn(&config, false, &[("IDEM_ADMIN_TOKEN", token)]);
    let api = Api::of(&config).authorized(token);
    api.ready("billing").await;
    let before = api.show("billing").await;

    let anonymous = Api::of(&config);
    let (status, body) = anonymous.upload("billing", billing_bytes()).await;
    assert_eq!((status, body["error"].as_str()), (401, Some("a bearer token is required")));
    let (status, body) = Api::of(&config).authorized("wrong").upload("billing", billing_bytes()).await;
    assert_eq!((status, body["error"].as_str()), (401, Some("wrong bearer token")));

    let http_import =
        wat::parse_str(r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#).expect("wat");
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("not wasm", b"#!/bin/sh\nrm -rf /\n".to_vec(), 422, "is not a WebAssembly component"),
        ("a core module", wat::parse_str("(module)").expect("wat"), 422, "is not a WebAssembly component"),
        (
            "another world",
            std::fs::read(guests::component("not-a-handler")).expect("component"),
            422,
            "does not implement the idem:handler",
        ),
        ("wasi:http", http_import, 422, "wasi:http/outgoing-handler"),
        ("too large", vec![0u8; (1 << 20) + 10], 413, "larger than 1048576 bytes"),
    ];
    for (what, bytes, status, reason) in cases {
        let (got, body) =
            if status == 413 { api.upload_raw("billing", &bytes).await } else { api.upload("billing", bytes).await };
        assert_eq!(got, status, "{what}: {body}");
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{what}: `{message}` does not say `{reason}`");
    }
    let (status, body) = api.upload("nobody", billing_bytes()).await;
    assert_eq!(status, 404, "{body}");
    // The same bytes as the active version: one version, nothing changed.
    let (status, body) = api.upload("billing", billing_bytes()).await;
    assert_eq!((status, body["changed"].as_bool(), body["version"].as_i64()), (200, Some(false), Some(1)), "{body}");

    let after = api.show("billing").await;
    assert_eq!(after["versions"], before["versions"], "nothing was stored or activated");
    assert_eq!(after["running_version"], 1);
    stop(child).await;
    env.finish().await;
}

pub(super) fn idem(args: &[&str]) -> String {
    let out = Command::new(idem_tests::idem_bin()).args(args).output().expect("idem");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "idem {args:?}: {text}");
    text
}

/// Stops a host started with [`host::spawn`] the way an operator would.
async fn stop(child: std::process::Child) {
    host::signal(&child, "TERM");
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await.expect("wait");
    assert!(status.success(), "idem run exited with {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_host_processes_converge_on_a_deploy_and_a_rollback_and_a_restart_keeps_the_active_version() {
    two_hosts_converge("classic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_kip_848_two_host_processes_converge_on_a_deploy_and_a_rollback_and_a_restart_keeps_the_active_version() {
    two_hosts_converge("consumer").await;
}

/// Two host processes in one group (`protocol`: its group protocol).
async fn two_hosts_converge(protocol: &'static str) {
    let env = Env::new(2).await;
    let mut spec = env.billing();
    if protocol == "consumer" {
        spec = spec.with_consumer_protocol();
    }
    let (config_a, config_b) =
        (host::write_config(&env.db.url, std::slice::from_ref(&spec)), host::write_config(&env.db.url, &[spec]));
    let (a, b) = (host::spawn(&config_a, false, &[]), host::spawn(&config_b, false, &[]));
    let (api_a, api_b) = (Api::of(&config_a), Api::of(&config_b));
    api_a.ready("billing").await;
    api_b.ready("billing").await;

    // `idem deploy` through host A; host B follows (NOTIFY, or the 2 s
    // poll; the bounds here are generous, the time taken is printed).
    let v2 = std::env::temp_dir().join(format!("{}.wasm", idem_tests::unique_name("billing_v2")));
    std::fs::write(&v2, variant(&billing_bytes(), "v2")).expect("write v2");
    let path = v2.to_str().expect("path");
    let said = idem(&["deploy", "--url", &api_a.url, "--handler", "billing", path, "--note", "v2"]);
    assert!(said.contains("stored as version 2 and activated"), "{said}");
    api_a.runs("billing", 2, Duration::from_secs(30)).await;
    let took = api_b.runs("billing", 2, Duration::from_secs(30)).await;
    eprintln!("host B switched {took:?} after the deploy on host A");
    let said = idem(&["deploy", "--url", &api_b.url, "--handler", "billing", path]);
    assert!(said.contains("identical to the active version 2: nothing changed"), "{said}");

    // `idem rollback` through host B; host A follows.
    let said = idem(&["rollback", "--url", &api_b.url, "--handler", "billing"]);
    assert!(said.contains("version 1 is active"), "{said}");
    api_a.runs("billing", 1, Duration::from_secs(30)).await;

    // Events run on the active version, whichever host has them.
    env.send_orders(20).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.count(CHARGES).await < 20 {
        assert!(Instant::now() < deadline, "not charged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event WHERE module_version = 1").await, 20);
    let listing: Value = serde_json::from_str(idem(&["handlers", "--url", &api_a.url, "--json"]).trim()).expect("json");
    assert_eq!(listing["handlers"][0]["versions"].as_array().map(Vec::len), Some(2), "{listing}");
    let text = idem(&["handlers", "--url", &api_a.url]);
    assert!(text.contains("billing: active v1") && text.contains("v2"), "{text}");

    // A restarted host runs the active version, not its component file.
    let said = idem(&["rollback", "--url", &api_a.url, "billing", "--to", "2"]);
    assert!(said.contains("version 2 is active"), "{said}");
    stop(a).await;
    let a = host::spawn(&config_a, false, &[]);
    api_a.ready("billing").await;
    assert_eq!(api_a.show("billing").await["running_version"], 2);
    stop(a).await;
    stop(b).await;
    std::fs::remove_file(&v2).ok();
    env.finish().await;
}

/// Checks `body`, answered with `status` to `method path`, against what the
/// OpenAPI document says that operation answers.
fn conforms(doc: &Value, path: &str, method: &str, status: u16, body: &Value) {
    let mut response = &doc["paths"][path][method]["responses"][status.to_string()];
    assert!(!response.is_null(), "{method} {path} answered {status}, which docs/admin-api.json does not list: {body}");
    if let Some(reference) = response["$ref"].as_str() {
        let pointer = reference.trim_start_matches('#');
        response = doc.pointer(pointer).unwrap_or_else(|| panic!("dangling {reference}"));
    }
    let schema = &response["content"]["application/json"]["schema"];
    if schema.is_null() {
        return;
    }
    // The schema itself (a `$ref`, or a `oneOf` of them) with the document's components.
    let mut rooted = schema.clone();
    rooted["components"] = doc["components"].clone();
    let validator = jsonschema::validator_for(&rooted).expect("the document's schemas compile");
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{method} {path} {status}: {errors:?} in {body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_describes_the_running_api() {
    let doc: Value = serde_json::from_str(include_str!("../../../docs/admin-api.json")).expect("valid JSON");
    let env = Env::new(1).await;
    let config = host::write_config(&env.db.url, &[env.billing()]);
    let host = InProcess::start(&config);
    let api = Api::of(&config);
    api.ready("billing").await;
    let url = |p: &str| format!("{}{p}", api.url);
    let c = &api.client;
    let topic = env.topic.clone();
    let calls: Vec<(&str, &str, reqwest::RequestBuilder)> = vec![
        ("/handlers", "get", c.get(url("/handlers"))),
        ("/handlers/{name}", "get", c.get(url("/handlers/billing"))),
        ("/handlers/{name}", "get", c.get(url("/handlers/nobody"))),
        ("/handlers/{name}/module", "put", c.put(url("/handlers/billing/module")).body(billing_bytes())),
        (
            "/handlers/{name}/module",
            "put",
            c.put(url("/handlers/billing/module?note=v2"))
                .header("x-uploaded-by", "test")
                .body(variant(&billing_bytes(), "2")),
        ),
        ("/handlers/{name}/module", "put", c.put(url("/handlers/billing/module")).body(b"garbage".to_vec())),
        ("/handlers/{name}/module", "put", c.put(url("/handlers/nobody/module")).body(billing_bytes())),
        ("/handlers/{name}/activate", "post", c.post(url("/handlers/billing/activate?version=1"))),
        ("/handlers/{name}/activate", "post", c.post(url("/handlers/billing/activate?version=99"))),
        ("/handlers/{name}/activate", "post", c.post(url("/handlers/billing/activate"))),
        ("/handlers", "get", c.get(url("/handlers"))),
        // A web page on this machine: refused, by its Origin or, rebinding
        // its DNS name to loopback, by its Host.
        (
            "/handlers/{name}/activate",
            "post",
            c.post(url("/handlers/billing/activate?version=2")).header("origin", "http://evil.example"),
        ),
        ("/handlers", "get", c.get(url("/handlers")).header("host", "evil.example")),
        ("/metrics", "get", c.get(url("/metrics"))),
        ("/healthz", "get", c.get(url("/healthz"))),
        ("/readyz", "get", c.get(url("/readyz"))),
        // Probes that send HEAD are answered as GET, without a body.
        ("/healthz", "head", c.head(url("/healthz"))),
        ("/readyz", "head", c.head(url("/readyz"))),
        ("/handlers/{name}/dead-letters", "get", c.get(url("/handlers/billing/dead-letters?class=permanent&limit=5"))),
        ("/handlers/{name}/dead-letters", "get", c.get(url("/handlers/billing/dead-letters?limit=0"))),
        ("/handlers/{name}/dead-letters", "get", c.get(url("/handlers/nobody/dead-letters"))),
        ("/fleet", "get", c.get(url("/fleet"))),
        ("/operators", "get", c.get(url("/operators"))),
        // This host requires no token: a named one would mean nothing.
        (
            "/operators",
            "post",
            c.post(url("/operators")).json(&serde_json::json!({ "name": "alice", "scope": "read" })),
        ),
        ("/operators/{name}", "delete", c.delete(url("/operators/nobody"))),
        ("/audit", "get", c.get(url("/audit?handler=billing"))),
        ("/audit", "get", c.get(url("/audit?limit=0"))),
        // Dead letters replayed and discarded: this handler has none.
        (
            "/handlers/{name}/dead-letters/replay",
            "post",
            c.post(url("/handlers/billing/dead-letters/replay"))
                .json(&serde_json::json!({ "since": "2000-01-01T00:00:00Z", "dry_run": true })),
        ),
        (
            "/handlers/{name}/dead-letters/replay",
            "post",
            c.post(url("/handlers/billing/dead-letters/replay")).json(&serde_json::json!({ "search": { "key": "k" } })),
        ),
        (
            "/handlers/{name}/dead-letters/discard",
            "post",
            c.post(url("/handlers/billing/dead-letters/discard"))
                .json(&serde_json::json!({ "search": { "class": "permanent" }, "dry_run": true })),
        ),
        (
            "/handlers/{name}/dead-letters/discard",
            "post",
            c.post(url("/handlers/nobody/dead-letters/discard")).json(&serde_json::json!({ "records": [[0, 0]] })),
        ),
        ("/outbox", "get", c.get(url("/outbox"))),
        ("/outbox/redrive", "post", c.post(url("/outbox/redrive")).json(&serde_json::json!({}))),
        ("/outbox/redrive", "post", c.post(url("/outbox/redrive")).json(&serde_json::json!({ "all": true }))),
        // A partition paused, listed, refused (an empty topic), resumed; unknown.
        (
            "/handlers/{name}/pause",
            "post",
            c.post(url("/handlers/billing/pause")).json(&serde_json::json!({ "topic": topic, "partition": 0 })),
        ),
        ("/handlers/{name}/pauses", "get", c.get(url("/handlers/billing/pauses"))),
        (
            "/handlers/{name}/pause",
            "post",
            c.post(url("/handlers/billing/pause")).json(&serde_json::json!({ "topic": "" })),
        ),
        ("/handlers/{name}/resume", "post", c.post(url("/handlers/billing/resume")).json(&serde_json::json!({}))),
        ("/handlers/{name}/pauses", "get", c.get(url("/handlers/nobody/pauses"))),
        // A rewind's dry run, one refused (no target), the rewinds, a report of none; unknown.
        (
            "/handlers/{name}/rewind",
            "post",
            c.post(url("/handlers/billing/rewind")).json(&serde_json::json!({ "to": "earliest", "dry_run": true })),
        ),
        (
            "/handlers/{name}/rewind",
            "post",
            c.post(url("/handlers/billing/rewind")).json(&serde_json::json!({ "to": "x" })),
        ),
        ("/handlers/{name}/rewinds", "get", c.get(url("/handlers/billing/rewinds"))),
        ("/handlers/{name}/rewinds/{id}", "get", c.get(url("/handlers/billing/rewinds/999"))),
        ("/handlers/{name}/rewinds", "get", c.get(url("/handlers/nobody/rewinds"))),
        // The quarantine listed; a key not parked released, dead-lettered; a
        // key named twice; the rates listed, one changed, one refused.
        ("/handlers/{name}/quarantine", "get", c.get(url("/handlers/billing/quarantine"))),
        (
            "/handlers/{name}/quarantine/release",
            "post",
            c.post(url("/handlers/billing/quarantine/release")).json(&serde_json::json!({ "key": "nobody" })),
        ),
        (
            "/handlers/{name}/quarantine/dead-letter",
            "post",
            c.post(url("/handlers/billing/quarantine/dead-letter"))
                .json(&serde_json::json!({ "key": "k", "key_base64": "aw==" })),
        ),
        ("/handlers/{name}/throttles", "get", c.get(url("/handlers/billing/throttles"))),
        (
            "/handlers/{name}/throttle",
            "post",
            c.post(url("/handlers/billing/throttle"))
                .json(&serde_json::json!({ "target": "events", "per_second": 500 })),
        ),
        (
            "/handlers/{name}/throttle",
            "post",
            c.post(url("/handlers/billing/throttle")).json(&serde_json::json!({ "target": "a b", "reset": true })),
        ),
        // The ledger audit's figures; no shadow, no canary: shown, refused;
        // a canary share out of range.
        ("/handlers/{name}/audit", "get", c.get(url("/handlers/billing/audit"))),
        ("/handlers/{name}/shadow", "get", c.get(url("/handlers/billing/shadow"))),
        ("/handlers/{name}/shadow", "delete", c.delete(url("/handlers/billing/shadow"))),
        ("/handlers/{name}/shadow/activate", "post", c.post(url("/handlers/billing/shadow/activate"))),
        ("/handlers/{name}/canary", "get", c.get(url("/handlers/billing/canary"))),
        ("/handlers/{name}/canary", "delete", c.delete(url("/handlers/billing/canary"))),
        ("/handlers/{name}/canary/promote", "post", c.post(url("/handlers/billing/canary/promote"))),
        ("/handlers/{name}/module", "put", c.put(url("/handlers/billing/module?canary=0")).body(vec![0u8; 8])),
        // Its captures (none: it captures nothing); a limit out of range.
        ("/handlers/{name}/captures", "get", c.get(url("/handlers/billing/captures"))),
        ("/handlers/{name}/captures", "get", c.get(url("/handlers/billing/captures?limit=0"))),
    ];
    let mut seen = std::collections::BTreeSet::new();
    let mut statuses = Vec::new();
    for (path, method, request) in calls {
        let (status, body) = api.send(request).await;
        conforms(&doc, path, method, status, &body);
        seen.insert((path.to_owned(), method.to_owned()));
        statuses.push(status);
    }
    assert_eq!(statuses[..15], [200, 200, 404, 200, 201, 422, 404, 200, 404, 400, 200, 403, 403, 200, 200]);
    // Ready once the consumer joined its group; either answer is documented.
    assert!(matches!(statuses[15], 200 | 503), "{statuses:?}");
    assert_eq!(statuses[16], 200, "HEAD /healthz");
    assert!(matches!(statuses[17], 200 | 503), "{statuses:?}");
    assert_eq!(statuses[18..22], [200, 400, 404, 200], "dead letters searched, refused, unknown; the fleet");
    assert_eq!(statuses[22..27], [200, 409, 404, 200, 400], "operators listed, refused, unknown; the trail, refused");
    assert_eq!(
        statuses[27..31],
        [200, 400, 200, 404],
        "a dry replay of a window, nothing matched, a dry discard, unknown"
    );
    assert_eq!(statuses[31..34], [200, 400, 200], "the outbox; a redrive naming nothing, then all");
    assert_eq!(statuses[34..39], [200, 200, 400, 200, 404], "paused, listed, refused, resumed; unknown");
    assert_eq!(statuses[39..44], [200, 400, 200, 404, 404], "a dry rewind, refused, listed, no such rewind; unknown");
    assert_eq!(
        statuses[44..50],
        [200, 404, 400, 200, 200, 400],
        "the quarantine, its refusals; the rates, set, refused"
    );
    assert_eq!(statuses[50..58], [200, 200, 404, 404, 200, 404, 404, 400], "the audit; no shadow, no canary; 0%");
    assert_eq!(statuses[58..], [200, 400], "no captures; a limit refused");
    let documented: std::collections::BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(path, ops)| ops.as_object().into_iter().flatten().map(move |(m, _)| (path.clone(), m.clone())))
        .collect();
    assert_eq!(seen, documented, "every documented operation is exercised");
    assert_eq!(api.show("billing").await["active_version"], 1, "the refused activation changed nothing");
    // Each change is in the trail, by `local` (this host requires no token).
    let (_, trail) = api.send(c.get(url("/audit?handler=billing"))).await;
    let v2 = trail["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["action"] == "PUT /handlers/billing/module?note=v2");
    let v2 = v2.unwrap_or_else(|| panic!("the upload of v2 is not in the trail: {trail}"));
    assert_eq!(
        (&v2["actor"], &v2["status"], &v2["detail"]["version"]),
        (&Value::from("local"), &Value::from(201), &Value::from(2))
    );
    host.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_missed_the_switch_never_processes_with_the_replaced_version() {
    let env = Env::new(4).await;
    let spec = env.billing();
    let (config_a, config_b) =
        (host::write_config(&env.db.url, std::slice::from_ref(&spec)), host::write_config(&env.db.url, &[spec]));
    let a = InProcess::start(&config_a);
    let (api_a, api_b) = (Api::of(&config_a), Api::of(&config_b));
    api_a.ready("billing").await;
    // Host B neither listens nor polls for module changes: it keeps v1 in
    // memory until the claim tells it otherwise.
    let b = host::spawn(&config_b, false, &[("IDEM_TEST_NO_MODULE_WATCH", "1")]);
    api_b.ready("billing").await;
    env.send_orders(400).await;
    let wait_charged = async |n: i64| env.charged(n, Duration::from_secs(90)).await;
    wait_charged(400).await;

    let (status, body) = api_a.upload("billing", variant(&billing_bytes(), "v2")).await;
    assert_eq!(status, 201, "{body}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(api_b.show("billing").await["running_version"], 1, "host B has not heard of v2");

    // Host A leaves: B gets every partition, still holding v1.
    a.stop().await;
    let more: Vec<(i32, Vec<u8>)> = (0..400).map(|i| ((i % 4) as i32, host::order_payload(10_000 + i).1)).collect();
    kafka::produce_all(&env.producer, &env.topic, &more).await;
    wait_charged(800).await;
    assert_eq!(api_b.show("billing").await["running_version"], 2, "the claim's refusal made host B switch");
    let after: Vec<(i32, i64, Option<i32>)> = sqlx::query_as(
        "SELECT pe.\"partition\", pe.\"offset\", pe.module_version FROM idem.processed_event pe \
         JOIN billing.charge c ON c.event_id = pe.event_id WHERE c.order_id >= 10000",
    )
    .fetch_all(&env.db.pool)
    .await
    .expect("claims");
    assert_eq!(after.len(), 400);
    let stale: Vec<_> = after.iter().filter(|r| r.2 != Some(2)).collect();
    assert!(stale.is_empty(), "events processed on a replaced version: {stale:?}");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 800);
    assert_eq!(env.count(CHARGES).await, 800);
    stop(b).await;
    env.finish().await;
}

/// The claim/activation interlock is nothing a guest can name: the
/// advisory lock key idem once used for billing (computable from its name)
/// held for as long as anyone likes, and another handler's role trying to
/// lock idem's own rows, delay neither billing's claims nor its deploy and
/// rollback.
#[tokio::test(flavor = "multi_thread")]
async fn another_handlers_locks_delay_neither_claims_nor_a_deploy_nor_a_rollback() {
    use sqlx::Executor as _;
    let env = Env::new(1).await;
    let other_topic = kafka::create_topic(1).await;
    let specs = [env.billing(), idem_tests::host::HandlerSpec::scenarios(&other_topic, &env.provider.base_url())];
    let config = host::write_config(&env.db.url, &specs);
    let host = InProcess::start(&config);
    let api = Api::of(&config);
    api.ready("billing").await;

    // The advisory key idem once used for billing, held by a role that may
    // still take advisory locks (a handler's role may not: they are revoked
    // from PUBLIC, their keys being one namespace for every role).
    let hostile = env.db.handler_pool("scenarios", "scenario").await;
    let mut probe = hostile.acquire().await.expect("connection");
    let denied = probe
        .execute("SELECT pg_advisory_xact_lock(hashtext('idem.handler_module'), hashtext('billing'))")
        .await
        .expect_err("a handler role takes no advisory lock");
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    drop(probe);
    let mut held = env.db.pool.acquire().await.expect("connection");
    held.execute("BEGIN").await.expect("begin");
    for key in ["billing", "scenarios"] {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('idem.handler_module'), hashtext($1))")
            .bind(key)
            .execute(&mut *held)
            .await
            .expect("the administrator's role may");
    }
    let mut probe = hostile.acquire().await.expect("connection");
    let denied = probe.execute("SELECT 1 FROM idem.handler_role FOR KEY SHARE").await.expect_err("idem's rows");
    assert!(denied.to_string().contains("permission denied"), "{denied}");

    env.send_orders(20).await;
    idem_tests::wait_until_async("20 charges while the locks are held", || async { env.count(CHARGES).await == 20 })
        .await;
    let (status, body) = api.upload("billing", variant(&billing_bytes(), "v2")).await;
    assert_eq!((status, body["version"].as_i64()), (201, Some(2)), "a deploy: {body}");
    let (status, body) = api.send(api.client.post(format!("{}/handlers/billing/activate?version=1", api.url))).await;
    assert_eq!(status, 200, "a rollback: {body}");
    api.runs("billing", 1, Duration::from_secs(60)).await;
    env.send_orders(5).await;
    idem_tests::wait_until_async("25 charges", || async { env.count(CHARGES).await == 25 }).await;
    held.execute("ROLLBACK").await.expect("rollback");
    let reports = host.stop().await;
    let billing = reports.iter().find(|r| r.handler == "billing").expect("billing");
    assert_eq!((billing.dead_lettered, billing.processed), (0, 25), "{billing:?}");
    env.finish().await;
}

/// Compiling an upload is capped: a component that needs more CPU than
/// `max_compile_seconds` to compile (componentize-py's, with a cap of 1 s)
/// is refused naming the cap, its compiler process is killed (the work
/// stops, not only the wait), and events go on being committed meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_that_needs_more_compile_cpu_than_its_cap_is_refused_and_events_flow() {
    let env = Env::new(1).await;
    let mut spec = env.billing();
    spec.extra = "max_module_mib = 64\nmax_compile_seconds = 1\n".into();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let token = "s3cret-token-0123456789abcdef-0123";
    let child = host::spawn(&config, false, &[("IDEM_ADMIN_TOKEN", token)]);
    let api = Api::of(&config).authorized(token);
    api.ready("billing").await;
    let python = std::fs::read(guests::python_component("python-notification")).expect("python component");
    let upload = api.upload("billing", python);
    let orders = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        env.send_orders(5).await;
        idem_tests::wait_until_async("5 charges during the upload", || async { env.count(CHARGES).await == 5 }).await;
    };
    let ((status, body), ()) = tokio::join!(upload, orders);
    assert_eq!(status, 422, "{body}");
    let message = body["error"].as_str().unwrap_or_default();
    assert!(message.contains("more than 1 CPU seconds (max_compile_seconds)"), "{message}");
    // This host's compilers only (its process tree): another test's or
    // checkout's compile elsewhere on the machine is none of this test's.
    let compilers = host::descendants_running(child.id(), idem::runtime::compiler::CHILD_COMMAND);
    assert!(compilers.is_empty(), "a compiler process of this host outlived its cap: {compilers:?}");
    assert_eq!(api.show("billing").await["active_version"], 1, "nothing was activated");
    stop(child).await;
    env.finish().await;
}
