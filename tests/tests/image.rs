//! idem's OCI image (scripts/image; docs/deployment.md) as Kubernetes would
//! run it, under podman: the billing example's config, component, schema
//! and migrations mounted read-only at /etc/idem, a read-only root
//! filesystem, a tmpfs for the compiled components, the host's network
//! (PostgreSQL and Kafka on loopback). `idem migrate` (the chart's hook
//! Job) then `idem run`: every order charged once, by a process that is not
//! root, ready within the limit, stopped by SIGTERM (`podman stop`) with
//! exit status 0 and its report.
//!
//! scripts/test builds the image and names it in IDEM_IMAGE; podman runs
//! it as `idem_tests::podman` says.

use std::process::Command;
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::podman::{self, Container};
use idem_tests::provider::PaymentProvider;

const ORDERS: i64 = 500;
/// From `podman run` to `/readyz` answering 200 (measured: about 1 s).
const READY_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_the_billing_example_read_only_and_not_as_root() {
    idem_tests::init_logging();
    let image = podman::image();
    let db = TestDb::new().await.expect("database");
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(4).await;
    let spec = HandlerSpec::billing(&topic, &provider.base_url());
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    let mounted = podman::stage(&config);

    let (status, out) = podman::run(&image, &mounted, &["--rm"], &["migrate", "--config", "/etc/idem/idem.toml"]);
    assert!(status.success(), "idem migrate in the image: {out}");

    let started = Instant::now();
    let name = idem_tests::unique_name("idem_image");
    let (status, out) =
        podman::run(&image, &mounted, &["-d", "--name", &name], &["run", "--config", "/etc/idem/idem.toml"]);
    assert!(status.success(), "podman run: {out}");
    let container = Container(name);
    host::ready(&config).await;
    assert!(started.elapsed() < READY_WITHIN, "not ready within {READY_WITHIN:?} of `podman run`");
    eprintln!("image: ready {} ms after `podman run`", started.elapsed().as_millis());

    let pid = container.inspect("{{.State.Pid}}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the container's process");
    let uids = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid line");
    assert!(uids.split_whitespace().skip(1).all(|u| u == "65532"), "idem runs as 65532, not root: {uids}");
    assert_eq!(container.inspect("{{.HostConfig.ReadonlyRootfs}}"), "true");

    let records: Vec<(i32, Vec<u8>)> = (1..=ORDERS).map(|i| ((i % 4) as i32, order_payload(i).1)).collect();
    kafka::produce_all(&kafka::producer(), &topic, &records).await;
    let began = Instant::now();
    while db.count("SELECT count(*) FROM billing.charge").await < ORDERS {
        assert!(began.elapsed() < Duration::from_secs(120), "{ORDERS} orders not charged within 120 s");
        assert_eq!(container.inspect("{{.State.Running}}"), "true", "the container is running: {}", container.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let stopping = Instant::now();
    let (status, out) = idem_tests::output_and_errors(
        Command::new("podman").args(["stop", "-t", "30", &container.0]),
        "podman stop",
        Duration::from_secs(120),
    );
    assert!(status.success(), "podman stop: {out}");
    assert!(
        stopping.elapsed() < Duration::from_secs(25),
        "SIGTERM ended it before podman's 30 s: {:?}",
        stopping.elapsed()
    );
    assert_eq!(container.inspect("{{.State.ExitCode}}"), "0", "exit status after SIGTERM: {}", container.logs());
    let logs = container.logs();
    assert!(logs.contains("\"handler\":\"billing\""), "the report line at exit: {logs}");
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, ORDERS, "each order charged once");
    assert_eq!(provider.charges(), ORDERS as usize, "the provider charged each order once");
    drop(container);
    db.drop_database().await;
}

/// What the image holds: idem, the libraries it links, the CA bundle and
/// the user table; no shell, no package manager, nothing else. The cache
/// folder is idem's (65532), so it is writable where no volume is mounted.
#[test]
fn the_image_holds_idem_its_libraries_and_the_ca_certificates_only() {
    let image = podman::image();
    let name = idem_tests::unique_name("idem_image_files");
    let (status, out) = idem_tests::output_and_errors(
        Command::new("podman").args(["create", "--name", &name, &image]),
        "podman create",
        Duration::from_secs(120),
    );
    assert!(status.success(), "podman create: {out}");
    let container = Container(name);
    let listing = format!("podman export {} | tar -tv --numeric-owner -f -", container.0);
    let (status, out) = idem_tests::output_and_errors(
        Command::new("sh").args(["-c", &listing]),
        "podman export",
        Duration::from_secs(120),
    );
    assert!(status.success(), "{out}");
    let allowed = |path: &str| {
        ["usr/local/bin/idem", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group", "etc/nsswitch.conf"]
            .contains(&path)
            // podman's own mount points, empty, made at create
            || ["etc/hosts", "etc/hostname", "etc/resolv.conf", "run/.containerenv"].contains(&path)
            || ["lib/x86_64-linux-gnu/lib", "lib64/ld-linux", "usr/lib/x86_64-linux-gnu/lib"].iter().any(|p| path.starts_with(p))
    };
    let mut files = 0;
    for line in out.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, owner, path) = (line.chars().next(), fields[1], fields[fields.len() - 1]);
        if path.trim_end_matches('/') == "var/cache/idem" {
            assert_eq!(owner, "65532/65532", "the cache folder is idem's: {line}");
        }
        if kind == Some('d') {
            continue;
        }
        assert!(allowed(path), "the image holds {path}, which is none of idem's: {line}");
        files += 1;
    }
    assert!(files >= 8, "idem, its libraries and the certificates: {out}");
    assert!(!out.contains("bin/sh"), "no shell");
}
