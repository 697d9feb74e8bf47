//! Generated configs through the loader: every value of a config that uses
//! every section replaced by hostile values, one at a time, then random
//! combinations of replacements, deleted, doubled and cut lines. The loader
//! never panics; it answers a config or an error, and an error about one
//! replaced value names its key (or at least its line).

use std::panic::AssertUnwindSafe;

use super::Config;

const BASE: &str = r#"[kafka]
brokers = "127.0.0.1:9092"
instance_id = "host-1"
[kafka.properties]
"security.protocol" = "PLAINTEXT"
"session.timeout.ms" = "6000"

[database]
url = "postgres://idem@127.0.0.1:5432/idem"
max_connections = 10
synchronous_commit = "on"

[admin]
listen = "127.0.0.1:7700"
token_env = "IDEM_ADMIN_TOKEN"
read_token_env = "IDEM_ADMIN_READ_TOKEN"
console_hosts = ["idem.internal:7700"]
console_behind_tls = false
header_timeout = "10s"
body_timeout = "60s"
max_connections = 64
max_connections_per_peer = 16
audit_retention = "400d"

[shutdown]
timeout = "10s"

[retention]
mode = "partition"
interval = "10m"
windows_ahead = 3
lock_timeout = "2s"
future_skew = "1h"
delete_chunk = 1000

[[handler]]
name = "billing"
topic = "orders.confirmed"
group_id = "billing-order-confirmed"
component = "billing.wasm"
max_module_mib = 32
event_types = ["order.confirmed.v1"]
schema = "order.schema.json"
concurrency = 3
ordering = "key"
max_in_flight = 8
timeout_ms = 30000
max_memory_mib = 256
events_per_instance = 1
group_protocol = "classic"
assignor = "cooperative-sticky"
auto_offset_reset = "earliest"
dedup_retention = "7d"
stale_events = "dlq"
trust_input_trace_headers = false
max_events_per_second = 200.0

[handler.batch]
max_events = 100
max_wait_ms = 5
max_concurrent = 4

[handler.retry]
max_attempts = 12
initial_backoff_ms = 500
max_backoff_ms = 60000
on_failure = "dlq"

[handler.failure]
on_exhausted = "dlq"
max_parked = 100000

[handler.database]
schema = "billing"
migrations = "migrations"

[handler.limits]
max_db_statements = 1000
max_http_requests = 16
max_emits = 16
max_emit_bytes = 65536

[handler.http]
allow = ["http://127.0.0.1:18080"]
timeout_ms = 5000
key_prefix = "billing"
allow_private = ["http://127.0.0.1:18080"]
[handler.http.rate]
"127.0.0.1" = { per_second = 50, burst = 100 }
[handler.http.retry]
max_attempts = 3
initial_backoff_ms = 10
max_backoff_ms = 1000
[[handler.http.credential]]
base = "http://127.0.0.1:18080"
header = "Authorization"
value_env = "PATH"

[handler.config]
payment_base_url = "http://127.0.0.1:18080"

[[handler.emit]]
topic = "payments.requested"
event_types = ["payment.requested.v1"]
schema = "payment-requested.v1.schema.json"

[outbox]
retention = "1d"
[[outbox.producer]]
name = "orders"
role = "orders_app"
[[outbox.producer.topic]]
topic = "orders.confirmed"
event_types = ["order.confirmed.v1"]
"#;

const HOSTILE: &[&str] = &[
    r#""""#,
    "0",
    "-1",
    "4294967296",
    "18446744073709551616",
    "1e400",
    "true",
    "[]",
    "{}",
    r#"[""]"#,
    r#""/dev/zero""#,
    r#""\u0000""#,
    r#""../../../../etc/passwd""#,
    r#""mysql://u@h/db""#,
    r#""Host""#,
    r#""a b""#,
];

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }
}

struct Loader {
    dir: std::path::PathBuf,
}

impl Loader {
    /// A folder of its own per test (`name`): tests run in parallel.
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("idem-generated-{name}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("migrations")).expect("dir");
        Self { dir }
    }

    /// `Ok(())`, or the error's text; panics are caught and reported.
    fn load(&self, text: &str) -> Result<Result<(), String>, String> {
        let path = self.dir.join("idem.toml");
        std::fs::write(&path, text).expect("write");
        std::panic::catch_unwind(AssertUnwindSafe(|| Config::load(&path).map(|_| ()).map_err(|e| format!("{e:#}"))))
            .map_err(|_| format!("the loader panicked on:\n{text}"))
    }
}

/// Lines of the form `key = value`, with their index and key.
fn assignments() -> Vec<(usize, String)> {
    BASE.lines()
        .enumerate()
        .filter_map(|(i, l)| l.split_once(" = ").map(|(k, _)| (i, k.trim_matches('"').to_owned())))
        .collect()
}

fn replaced(index: usize, value: &str) -> String {
    let lines: Vec<String> = BASE
        .lines()
        .enumerate()
        .map(|(i, l)| match (i == index, l.split_once(" = ")) {
            (true, Some((k, _))) => format!("{k} = {value}"),
            _ => l.to_owned(),
        })
        .collect();
    lines.join("\n") + "\n"
}

#[test]
fn generated_configs_load_or_are_refused_naming_the_key_and_never_panic() {
    let loader = Loader::new("generated");
    assert_eq!(loader.load(BASE), Ok(Ok(())), "the base config loads");
    let (mut tried, mut refused) = (0, 0);
    let mut unnamed = Vec::new();
    for (index, key) in assignments() {
        for value in HOSTILE {
            tried += 1;
            let text = replaced(index, value);
            match loader.load(&text) {
                Err(panic) => panic!("{panic}"),
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    refused += 1;
                    let line = format!("line {}", index + 1);
                    let last = key.rsplit('.').next().unwrap_or(&key);
                    if !(e.contains(last) || e.contains(&line)) {
                        unnamed.push(format!("`{key} = {value}`: {e}"));
                    }
                }
            }
        }
    }
    assert!(unnamed.is_empty(), "errors that name neither the key nor its line:\n{}", unnamed.join("\n"));
    // Random combinations: replacements, deleted, doubled and cut lines.
    let mut rng = Rng(0x1dea_5eed);
    let lines: Vec<&str> = BASE.lines().collect();
    for _ in 0..600 {
        tried += 1;
        let mut text: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(text.len());
            match rng.below(4) {
                0 => {
                    if let Some((k, _)) = text[at].clone().split_once(" = ") {
                        text[at] = format!("{k} = {}", HOSTILE[rng.below(HOSTILE.len())]);
                    }
                }
                1 => {
                    text.remove(at);
                }
                2 => {
                    let line = text[at].clone();
                    text.insert(at, line);
                }
                _ => {
                    let cut = rng.below(text[at].len() + 1);
                    let line: String = text[at].chars().take(cut).collect();
                    text[at] = line;
                }
            }
        }
        match loader.load(&(text.join("\n") + "\n")) {
            Err(panic) => panic!("{panic}"),
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                refused += 1;
                assert!(!e.trim().is_empty());
            }
        }
    }
    eprintln!("generated configs: {tried} tried, {refused} refused with an error, 0 panics");
    assert!(refused * 2 > tried, "most of them are bad, and refused: {refused} of {tried}");
    let _ = std::fs::remove_dir_all(&loader.dir);
}

/// The values found to panic the host, fail every event or be refused
/// later without naming their key: each is refused when the config loads.
/// (A capability's own keys are its module's to check:
/// `capabilities::tests`.)
#[test]
fn values_that_would_panic_or_fail_every_event_are_refused_naming_the_key() {
    let loader = Loader::new("values");
    let set = |key: &str, value: &str| {
        let (index, _) = assignments().into_iter().find(|(_, k)| k == key).unwrap_or_else(|| panic!("{key}"));
        replaced(index, value)
    };
    let cases = [
        (set("topic", r#""""#), "topic ``"),
        (set("max_connections", "0"), "max_connections = 0"),
        (set("max_connections", "1"), "max_connections = 1 is too few: a host needs at least 4"),
        (set("concurrency", "4294967296"), "concurrency = 4294967296"),
        (set("event_types", r#"[""]"#), "event_types has an empty entry"),
        (set("group_id", r#""""#), "group_id"),
        (set("timeout_ms", "2147483648"), "timeout_ms"),
        (set("migrations", r#""no-such-folder""#), "database.migrations"),
        (set("url", r#""mysql://u@h/db""#), "postgres://"),
        (set("max_memory_mib", "0"), "max_memory_mib"),
        (set("events_per_instance", "0"), "events_per_instance = 0 must be between 1"),
        (set("max_in_flight", "0"), "max_in_flight = 0 must be between 1 and 256"),
        (set("max_in_flight", "4294967296"), "max_in_flight"),
        (set("ordering", r#""random""#), "ordering"),
        (set("max_concurrent", "0"), "batch.max_concurrent = 0 must be between 1 and 64"),
        (set("role", r#""Orders-App""#), "role `Orders-App` must be lowercase"),
        (set("max_concurrent", "18446744073709551616"), "max_concurrent"),
        (set("concurrency", r#""three""#), "key `concurrency` of [[handler]]"),
        (set("header_timeout", r#""0ms""#), "[admin] header_timeout = \"0ms\" must be between"),
        (set("body_timeout", r#""2h""#), "[admin] body_timeout = \"2h\" must be between"),
        (set("max_connections_per_peer", "65"), "max_connections_per_peer = 65 must be between 1 and max_connections"),
        (set("audit_retention", r#""1h""#), "[admin] audit_retention = \"1h\" must be between 1d and 36500d"),
    ];
    for (text, expected) in cases {
        match loader.load(&text) {
            Ok(Err(e)) => assert!(e.contains(expected), "expected `{expected}` in: {e}"),
            other => panic!("`{expected}`: {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&loader.dir);
}
