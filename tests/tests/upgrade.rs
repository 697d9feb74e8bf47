//! Rolling upgrades of idem itself (docs/deployment.md, "Upgrading idem"):
//! the previous release's host runs beside this one on this release's
//! schema, in one group, every order charged once; a host refuses a schema
//! whose gate requires a migration it does not know; this release tolerates
//! a newer release's expand migrations, and its `idem migrate` leaves them.
//!
//! The previous release's binary is built by `scripts/previous-release`
//! (scripts/test runs it and names it in IDEM_PREVIOUS_RELEASE).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

const PARTITIONS: i32 = 4;
const ORDERS: i64 = 2_000;

fn previous_release() -> PathBuf {
    let path = std::env::var_os("IDEM_PREVIOUS_RELEASE").map(PathBuf::from).unwrap_or_else(|| {
        panic!("IDEM_PREVIOUS_RELEASE is not set: run `export IDEM_PREVIOUS_RELEASE=$(scripts/previous-release)`")
    });
    assert!(path.is_file(), "IDEM_PREVIOUS_RELEASE names {}, which is no file", path.display());
    path
}

/// A rolling upgrade in the middle: this release migrated the database
/// (its schema has migrations the previous release does not know), one
/// host of the previous release and one of this one share the group while
/// orders flow, then the old host stops (SIGTERM) and the new one takes
/// its partitions. Every order is charged exactly once, none dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn the_previous_release_runs_beside_this_one_on_this_releases_schema() {
    idem_tests::init_logging();
    let previous = previous_release();
    let db = TestDb::new().await.expect("database");
    let newer: i64 = db.count("SELECT count(*) FROM _sqlx_migrations WHERE version >= 20261209000001").await;
    assert!(newer >= 1, "this release's schema has migrations the previous one does not know");
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(PARTITIONS).await;
    let spec = HandlerSpec::billing(&topic, &provider.base_url());
    // One config each (each host its own admin port), the same handler.
    let (old_config, new_config) =
        (host::write_config(&db.url, std::slice::from_ref(&spec)), host::write_config(&db.url, &[spec]));

    idem_tests::use_idem_bin(Some(previous), true);
    let old = host::spawn(&old_config, false, &[("IDEM_INSTANCE_ID", "old")]);
    idem_tests::use_idem_bin(None, true);
    let new = host::spawn(&new_config, false, &[("IDEM_INSTANCE_ID", "new")]);
    both_assigned(&old_config, &new_config).await;

    let producer = kafka::producer();
    let send = |from: i64, n: i64| {
        let records: Vec<(i32, Vec<u8>)> =
            (1 + from..1 + from + n).map(|i| ((i % i64::from(PARTITIONS)) as i32, order_payload(i).1)).collect();
        let (producer, topic) = (&producer, &topic);
        async move { kafka::produce_all(producer, topic, &records).await }
    };
    send(0, ORDERS / 2).await;
    charged_at_least(&db, ORDERS / 4, "by the two hosts").await;
    host::signal(&old, "TERM");
    let (status, old_reports) = host::wait_report(old);
    assert!(status.success(), "the previous release's host exits 0 on SIGTERM: {status}");
    assert!(old_reports.iter().any(|r| r.processed > 0), "the previous release's host charged orders: {old_reports:?}");
    send(ORDERS / 2, ORDERS / 2).await;
    charged_at_least(&db, ORDERS, "after the old host stopped").await;

    // Everything settled: once each, nothing more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, ORDERS, "every order charged once");
    assert_eq!(provider.charges(), ORDERS as usize, "the provider charged each order once");
    assert_eq!(db.count("SELECT count(DISTINCT module_version) FROM idem.processed_event").await, 1);
    host::signal(&new, "TERM");
    let (status, reports) = host::wait_report(new);
    assert!(status.success(), "{status}");
    for r in old_reports.iter().chain(&reports) {
        assert_eq!((r.invalid, r.failed, r.dead_lettered), (0, 0, 0), "nothing failed nor dead-lettered: {r:?}");
    }
    db.drop_database().await;
}

/// A contract migration of a newer release raises the schema gate past
/// what this binary knows: `idem run` refuses to start, naming the
/// migration, and `idem migrate` refuses too (it would roll the schema
/// back under the newer hosts).
#[tokio::test(flavor = "multi_thread")]
async fn a_host_refuses_a_schema_gated_past_what_it_knows() {
    idem_tests::init_logging();
    let db = TestDb::new().await.expect("database");
    let topic = kafka::create_topic(1).await;
    let spec = HandlerSpec::billing(&topic, "http://127.0.0.1:9");
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    db.execute("UPDATE idem.schema_gate SET requires = 99991231000000, reason = 'the ledger split in two'").await;

    for args in [&["run", "--config"][..], &["migrate", "--config"][..]] {
        let (status, err) = run(args, &config);
        assert!(!status.success(), "idem {} starts against a gated schema", args[0]);
        assert!(
            err.contains("requires an idem that knows migration 99991231000000 (the ledger split in two)")
                && err.contains("upgrade this host"),
            "idem {} names the gate: {err}",
            args[0]
        );
    }
    db.drop_database().await;
}

/// A newer release's expand migration (one this binary does not know,
/// gate unchanged) is tolerated: `idem migrate` applies nothing and says
/// so, and `idem run` serves events against that schema.
#[tokio::test(flavor = "multi_thread")]
async fn a_newer_releases_expand_migration_is_tolerated() {
    idem_tests::init_logging();
    let db = TestDb::new().await.expect("database");
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(1).await;
    let spec = HandlerSpec::billing(&topic, &provider.base_url());
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    db.execute("ALTER TABLE idem.processed_event ADD COLUMN from_the_future text").await;
    db.execute(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99991231000000, 'from the future', true, '\\x00', 1)",
    )
    .await;

    let (status, out) = run(&["migrate", "--config"], &config);
    assert!(status.success(), "idem migrate against a newer schema: {out}");
    assert!(out.contains("1 migration(s) of a newer idem (up to 99991231000000)"), "{out}");

    let child = host::spawn(&config, false, &[]);
    kafka::produce(&kafka::producer(), &topic, 0, "k", &order_payload(1).1).await;
    charged_at_least(&db, 1, "against the newer schema").await;
    host::signal(&child, "TERM");
    assert!(host::wait_report(child).0.success());
    db.drop_database().await;
}

/// A contract migration begins with `idem.refuse_older_hosts(release)`:
/// it fails naming each host of an older release seen in the last 30 s
/// (the fleet's rows), and passes when every live host is at least that
/// release, or once the older one has stopped recording itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_contract_migration_is_refused_while_an_older_host_runs() {
    let db = TestDb::new().await.expect("database");
    db.execute(
        "INSERT INTO idem.fleet_host (host, version, started_at, seen_at) VALUES \
         ('old-1', '0.2.0', now(), now()), ('new-1', '0.10.0', now(), now())",
    )
    .await;
    let guard = |release: &'static str| {
        let pool = db.pool.clone();
        async move { sqlx::query("SELECT idem.refuse_older_hosts($1)").bind(release).execute(&pool).await }
    };
    let err = guard("0.3.0").await.expect_err("a 0.2.0 host runs");
    assert!(err.to_string().contains("hosts of a release older than 0.3.0 still run: old-1 (idem 0.2.0)"), "{err}");
    guard("0.2.0").await.expect("every host is 0.2.0 or newer (0.10.0 compares as a number)");
    db.execute("UPDATE idem.fleet_host SET seen_at = now() - interval '1 minute' WHERE host = 'old-1'").await;
    guard("0.3.0").await.expect("the 0.2.0 host has gone");
    db.drop_database().await;
}

/// `idem ARGS CONFIG` with this release's binary, within 60 s: its status
/// and what it printed (stdout, then stderr).
fn run(args: &[&str], config: &std::path::Path) -> (std::process::ExitStatus, String) {
    let mut command = Command::new(idem_tests::idem_bin());
    command.args(args).arg(config).env("IDEM_LOG", "warn").stdin(std::process::Stdio::null());
    idem_tests::output_and_errors(&mut command, &format!("idem {}", args[0]), Duration::from_secs(60))
}

/// Until the hosts of the two configs share the partitions, within 60 s.
async fn both_assigned(a: &std::path::Path, b: &std::path::Path) {
    let began = Instant::now();
    loop {
        let (of_a, of_b) = (host::assigned(a, PARTITIONS).await, host::assigned(b, PARTITIONS).await);
        if !of_a.is_empty() && !of_b.is_empty() && of_a.len() + of_b.len() == PARTITIONS as usize {
            return;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "no partitions shared by the two hosts within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn charged_at_least(db: &TestDb, n: i64, when: &str) {
    let began = Instant::now();
    loop {
        let charged = db.count("SELECT count(*) FROM billing.charge").await;
        if charged >= n {
            return;
        }
        assert!(began.elapsed() < Duration::from_secs(120), "{charged} of {n} orders charged within 120 s {when}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
