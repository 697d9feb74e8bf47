//! Test handler: `payload.scenario` picks what it does. Every scenario first
//! records an effect row, so tests can see whether its writes survived.

use idem_guest::http::{self, HttpError};
use idem_guest::{Db, DbError, Error, Event, config};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    scenario: String,
    #[serde(default)]
    sql: Option<String>,
    #[serde(default)]
    url: Option<String>,
    /// `forge-logs`: what the guest writes everywhere it can.
    #[serde(default)]
    text: Option<String>,
    /// `retry-until`: the attempt that succeeds.
    #[serde(default)]
    succeed_at: Option<u32>,
    /// `lane`: the record's place among its key's records.
    #[serde(default)]
    seq: Option<i64>,
    /// `lane`: how long the record holds its transaction.
    #[serde(default)]
    sleep_ms: Option<u32>,
    /// `emit`, `emit-then-fail`: the events to emit, in order.
    #[serde(default)]
    emits: Vec<Emit>,
}

/// One event for the `emit` scenarios to emit.
#[derive(Deserialize)]
struct Emit {
    topic: String,
    key: String,
    event_type: String,
    /// Any JSON: the test decides whether it is a valid payload.
    payload: serde_json::Value,
    #[serde(default)]
    headers: Vec<(String, String)>,
}

/// Emits each of `emits`, recording in `scenario.effect` what became of it:
/// `emitted <n> <eventId>` or `refused <n> <why>` (the guest's view).
fn emit_all(db: &Db, event: &Event, emits: &[Emit]) -> idem_guest::Result {
    for (n, e) in emits.iter().enumerate() {
        let mut builder = idem_guest::emit::event(&e.topic, &e.event_type).key(&e.key).json(&e.payload)?;
        for (name, value) in &e.headers {
            builder = builder.header(name, value);
        }
        let note = match builder.send() {
            Ok(id) => format!("emitted {n} {id}"),
            Err(why) => format!("refused {n} {why}"),
        };
        record(db, event, &note)?;
    }
    Ok(())
}

fn record(db: &Db, event: &Event, note: &str) -> idem_guest::Result {
    db.execute("INSERT INTO scenario.effect (event_id, note) VALUES ($1, $2)", &[&event.id(), &note])?;
    Ok(())
}

fn base() -> idem_guest::Result<String> {
    config::require("provider_base_url")
}

/// The `count` scenario's invocations of this instance.
static INVOCATIONS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn handle(event: &Event, db: &Db) -> idem_guest::Result {
    let p: Payload = event.payload()?;
    record(db, event, "start")?;
    match p.scenario.as_str() {
        "ok" => Ok(()),
        "emit" => emit_all(db, event, &p.emits),
        "emit-then-fail" => {
            emit_all(db, event, &p.emits)?;
            Err(Error::permanent("failing on purpose after emitting"))
        }
        "retry-until" => {
            // Tells the provider which attempt this is (an HTTP call outlives
            // the rolled-back transaction), then fails retryably until
            // `succeed_at`.
            let attempt = event.attempt();
            http::post(format!("{}/v1/charges", base()?)).label(format!("attempt{attempt}")).send()?;
            if attempt < p.succeed_at.unwrap_or(1) {
                return Err(Error::retryable(format!("attempt {attempt} fails on purpose")));
            }
            Ok(())
        }
        "write-then-fail" => Err(Error::permanent("failing on purpose after a write")),
        "write-then-retryable" => Err(Error::retryable("asking for a retry after a write")),
        "write-then-trap" => panic!("trapping on purpose after a write"),
        "hog" => {
            // Half a GiB: more than the host lets a test instance have.
            let hog = vec![1u8; 512 << 20];
            std::hint::black_box(&hog);
            Ok(())
        }
        "loop" => loop {
            std::hint::black_box(0u64);
        },
        "statement-loop" => {
            // The same statement for ever, whatever it answers: host work
            // (checking it) the budget must bound.
            let sql = p.sql.ok_or_else(|| Error::permanent("no sql in payload"))?;
            loop {
                let _ = db.execute(&sql, &[]);
            }
        }
        "lane" => {
            // What order the host kept: the record's key and place, and
            // when it began and ended on the clock.
            let key = String::from_utf8_lossy(event.key().unwrap_or_default()).into_owned();
            let (id, seq) = (event.id(), p.seq.unwrap_or(0));
            db.execute("INSERT INTO scenario.lane_log (event_id, key, seq) VALUES ($1, $2, $3)", &[&id, &key, &seq])?;
            db.execute("SELECT pg_sleep($1)", &[&(f64::from(p.sleep_ms.unwrap_or(0)) / 1000.0)])?;
            db.execute("UPDATE scenario.lane_log SET ended = clock_timestamp() WHERE event_id = $1", &[&id])?;
            Ok(())
        }
        "statement" => {
            let sql = p.sql.ok_or_else(|| Error::permanent("no sql in payload"))?;
            db.execute(&sql, &[])?;
            Ok(())
        }
        "unique-violation" => {
            // scenario.effect already has this (event_id, 'start'): a duplicate key.
            match db.execute("INSERT INTO scenario.effect (event_id, note) VALUES ($1, 'start')", &[&event.id()]) {
                Err(DbError::UniqueViolation(_)) => {}
                other => return Err(Error::permanent(format!("expected a unique violation, got {other:?}"))),
            }
            record(db, event, "after-violation")
        }
        "two-labeled-posts" => {
            http::post(format!("{}/v1/charges", base()?))
                .json(&serde_json::json!({"what": "charge"}))
                .send()?
                .error_for_status()?;
            http::post(format!("{}/v1/charges", base()?))
                .label("fee")
                .json(&serde_json::json!({"what": "fee"}))
                .send()?
                .error_for_status()?;
            if event.attempt() == 1 {
                return Err(Error::retryable("failing the first attempt after both requests"));
            }
            Ok(())
        }
        "roundtrip" => {
            use idem_guest::db::{Json, Numeric, Timestamp};
            let rows = db.query(
                "SELECT $1::bigint AS i, $2::text AS t, $3::numeric AS n, $4::jsonb AS j, $5::uuid AS u, \
                 $6::timestamptz AS ts, $7::bool AS b, $8::bytea AS by, $9::int AS nul, $10::float8 AS f",
                &[
                    &42i64,
                    &"héllo",
                    &Numeric("12345678901234567890.125".into()),
                    &Json(serde_json::json!({"a": [1, 2]})),
                    &event.id(),
                    &Timestamp("2026-11-30T01:02:03.5Z".into()),
                    &true,
                    &vec![0u8, 255],
                    &None::<i64>,
                    &1.5f64,
                ],
            )?;
            let row = rows.first().ok_or_else(|| Error::permanent("no row"))?;
            let summary = format!(
                "{}|{}|{}|{}|{}|{}|{}|{:?}|{:?}|{}",
                row.get::<i64>("i")?,
                row.get::<String>("t")?,
                row.get::<String>("n")?,
                row.get::<serde_json::Value>("j")?,
                row.get::<String>("u")?,
                row.get::<String>("ts")?,
                row.get::<bool>("b")?,
                row.get::<Vec<u8>>("by")?,
                row.get::<Option<i64>>("nul")?,
                row.get::<f64>("f")?,
            );
            record(db, event, &summary)
        }
        "two-unlabeled-posts" => {
            http::post(format!("{}/v1/charges", base()?)).json(&serde_json::json!({"what": "charge"})).send()?;
            http::post(format!("{}/v1/charges", base()?)).json(&serde_json::json!({"what": "fee"})).send()?;
            Ok(())
        }
        "resend-after-timeout" => {
            let send = || {
                http::post(format!("{}/v1/charges", base()?))
                    .json(&serde_json::json!({"what": "charge"}))
                    .send()
                    .map_err(Error::from)
            };
            match http::post(format!("{}/v1/charges", base()?)).json(&serde_json::json!({"what": "charge"})).send() {
                Err(HttpError::Timeout(_)) => {
                    record(db, event, "timed-out-once")?;
                    send()?.error_for_status()?;
                }
                other => {
                    other?.error_for_status()?;
                }
            }
            Ok(())
        }
        "bad-header" => {
            http::post(format!("{}/v1/charges", base()?)).header("bad header", "x").send()?;
            Ok(())
        }
        "swallow" => {
            // Runs the statement and hides its error: whatever it did must
            // not outlive the event, and the event itself succeeds.
            let sql = p.sql.ok_or_else(|| Error::permanent("no sql in payload"))?;
            let note = match db.execute(&sql, &[]) {
                Ok(_) => "swallow:ok".to_owned(),
                Err(e) => format!("swallow:err:{e:?}"),
            };
            record(db, event, &note.chars().take(500).collect::<String>())
        }
        "query-swallow" => {
            // Runs the statement as a query and hides its error.
            let sql = p.sql.ok_or_else(|| Error::permanent("no sql in payload"))?;
            let note = match db.query(&sql, &[]) {
                Ok(rows) => format!("query:ok:{}", rows.len()),
                Err(e) => format!("query:err:{e:?}"),
            };
            record(db, event, &note.chars().take(500).collect::<String>())
        }
        "statements" => {
            // Many cheap statements: more than the per-invocation allowance.
            for _ in 0..5_000 {
                db.query("SELECT 1", &[])?;
            }
            Ok(())
        }
        "requests" => {
            for i in 0..100 {
                http::post(format!("{}/v1/charges", base()?)).label(format!("r{i}")).send()?;
            }
            Ok(())
        }
        "wasi" => {
            // What WASI lets a guest see: each probe records what it got.
            let probes = [
                ("preopens", std::fs::read_dir("/").map(|d| d.count()).map_err(|e| e.kind())),
                ("read-file", std::fs::read("/etc/passwd").map(|b| b.len()).map_err(|e| e.kind())),
                ("cwd-file", std::fs::read("Cargo.toml").map(|b| b.len()).map_err(|e| e.kind())),
                ("connect", std::net::TcpStream::connect("127.0.0.1:5432").map(|_| 1).map_err(|e| e.kind())),
                (
                    "resolve",
                    std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 80))
                        .map(|a| a.count())
                        .map_err(|e| e.kind()),
                ),
                ("env", Ok(std::env::vars().count())),
                ("args", Ok(std::env::args().count())),
                ("stdin", std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 16]).map_err(|e| e.kind())),
            ];
            for (name, got) in probes {
                let note = match got {
                    Ok(n) => format!("{name}:ok:{n}"),
                    Err(kind) => format!("{name}:err:{kind:?}"),
                };
                record(db, event, &note)?;
            }
            println!("hello from the guest's stdout");
            eprintln!("hello from the guest's stderr");
            Ok(())
        }
        "forge-logs" => {
            // Everywhere a guest's words reach an operator: its log, its
            // stdout and stderr, its error.
            let text = p.text.unwrap_or_default();
            idem_guest::log::info(&text);
            idem_guest::log::warn(&text);
            println!("{text}");
            eprintln!("{text}");
            Err(Error::permanent(text))
        }
        "origin" => {
            // The record as its producer wrote it: `origin <schema id or -> <hex>`.
            let id = event.schema_id().map_or_else(|| "-".to_owned(), |id| id.to_string());
            let hex: String = event.value_bytes().iter().map(|b| format!("{b:02x}")).collect();
            record(db, event, &format!("origin {id} {hex}"))
        }
        "count" => {
            // Which invocation of this instance this is: 1 on a fresh one.
            let n = INVOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            record(db, event, &format!("count:{n}"))
        }
        // Traps on an instance that counted earlier events (what a guest
        // whose memory grows from event to event comes to), after a write;
        // passes on a fresh one.
        "trap-if-kept" => match INVOCATIONS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Ok(()),
            n => panic!("trapping on purpose: this instance served {n} events before"),
        },
        "get" => {
            let url = p.url.ok_or_else(|| Error::permanent("no url in payload"))?;
            http::get(url).send()?.error_for_status()?;
            Ok(())
        }
        "get-status" => {
            // Records the status the guest was answered, whatever it is.
            let url = p.url.ok_or_else(|| Error::permanent("no url in payload"))?;
            let status = http::get(url).send()?.status();
            record(db, event, &format!("status:{status}"))
        }
        "slow-then-fail" => {
            // Its `start` row stands, uncommitted, while a slow request is
            // answered; then the event fails, and the row is rolled back.
            http::post(format!("{}/v1/charges", base()?)).label("slow").body(r#"{"currency":"SLO"}"#).send()?;
            Err(Error::permanent("failing on purpose after a slow request"))
        }
        "post-what-it-sees" => {
            // A request built from what the transaction shows of the other
            // events, a batch-mate's uncommitted rows included: it waits up
            // to 2 s for `seq` rows (default 1) to show.
            let wanted = p.seq.unwrap_or(1);
            let mut seen = 0i64;
            for _ in 0..20 {
                let rows =
                    db.query("SELECT count(*)::bigint AS n FROM scenario.effect WHERE event_id <> $1", &[&event.id()])?;
                seen = rows.first().ok_or_else(|| Error::permanent("no count"))?.get("n")?;
                if seen >= wanted {
                    break;
                }
                db.execute("SELECT pg_sleep(0.1)", &[])?;
            }
            http::post(format!("{}/v1/charges", base()?)).body(format!(r#"{{"seen":{seen}}}"#)).send()?;
            Ok(())
        }
        other => Err(Error::permanent(format!("unknown scenario {other}"))),
    }
}

idem_guest::handler!(handle);
