//! The dead-letter explorer at 100,000 dead letters and the fleet view with
//! two hosts, in Chromium (`tests/console/explorer.mjs`; issue 41's "done
//! when"): the script's timings are printed, its checks are the test.

use std::process::Stdio;
use std::time::Duration;

use super::console::repo;
use super::{Env, Host, TOKEN};

/// `config` with the host's own static-membership name.
fn named(config: &std::path::Path, name: &str) {
    let text = std::fs::read_to_string(config).expect("config");
    std::fs::write(config, text.replace("[kafka]\n", &format!("[kafka]\ninstance_id = \"{name}\"\n"))).expect("config");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_the_explorer_holds_at_100000_dead_letters_and_the_fleet_shows_both_hosts() {
    let env = Env::new().await;
    env.db.execute(&idem_tests::db::synthetic_dead_letters("billing")).await;
    env.db.execute("ANALYZE idem.dead_letter").await;
    let spec = env.billing();
    let (a, b) = (env.config(&spec, ""), env.config(&spec, ""));
    named(&a, "console-a");
    named(&b, "console-b");
    let (host_a, host_b) = (Host::start(&a, None).await, Host::start(&b, None).await);
    let node = tokio::process::Command::new("node")
        .arg(repo("tests/console/explorer.mjs"))
        .env("CONSOLE_URL", format!("http://localhost:{}", host_a.address.port()))
        .env("OPERATE_TOKEN", TOKEN)
        .env("HOSTS", "console-a,console-b")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), node)
        .await
        .expect("explorer.mjs ended within 5 minutes")
        .expect("node (scripts/test installs tests/console's packages)");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{stderr}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with("pass"),
        "explorer.mjs failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    eprintln!("the dead-letter explorer in Chromium at 100,000 dead letters (from the action to the table ready):");
    for line in stdout.lines().filter_map(|l| l.strip_prefix("timing ")) {
        let (what, ms) = line.rsplit_once(": ").unwrap_or((line, ""));
        eprintln!("  {ms:>6} ms  {what}");
    }
    host_b.stop().await;
    host_a.stop().await;
    env.finish().await;
}
