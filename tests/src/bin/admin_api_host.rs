//! A running `idem run` with an admin token, for tools that test its admin
//! API from outside (`scripts/schemathesis`):
//!
//! ```text
//! admin-api-host COMMAND [ARGS…]
//! ```
//!
//! Makes a fresh test database, a topic, a payment provider and a config
//! with the billing handler; starts `idem run` with a random
//! `IDEM_ADMIN_TOKEN`; once `/readyz` answers 200, runs COMMAND with
//! `IDEM_ADMIN_URL` and `IDEM_ADMIN_TOKEN` set; then stops the host
//! (SIGTERM, a clean exit required), drops the database and exits with
//! COMMAND's status. The broker is `KAFKA_BROKERS`'s.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        bail!("usage: admin-api-host COMMAND [ARGS…] (runs COMMAND against a running host's admin API)");
    };
    let db = TestDb::new().await.context("a test database")?;
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(2).await;
    let config = host::write_config(&db.url, &[HandlerSpec::billing(&topic, &provider.base_url())]);
    let token = uuid::Uuid::now_v7().simple().to_string();
    let child = host::spawn(&config, false, &[("IDEM_ADMIN_TOKEN", &token)]);
    let url = host::admin_url(&config);

    let ready = wait_ready(&url).await;
    let status = match ready {
        Ok(()) => {
            eprintln!("admin-api-host: idem run is ready at {url}; running {program}");
            Command::new(program)
                .args(rest)
                .env("IDEM_ADMIN_URL", &url)
                .env("IDEM_ADMIN_TOKEN", &token)
                .status()
                .with_context(|| format!("failed to run {program}"))
        }
        Err(e) => Err(e),
    };
    host::signal(&child, "TERM");
    let (exit, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    db.drop_database().await;
    let status = status?;
    if !exit.success() {
        bail!("idem run exited with {exit} after the run");
    }
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Until `/readyz` answers 200 (the consumer joined its group), for 120 s.
async fn wait_ready(url: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if client.get(format!("{url}/readyz")).send().await.is_ok_and(|r| r.status() == 200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the host at {url} was not ready within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
