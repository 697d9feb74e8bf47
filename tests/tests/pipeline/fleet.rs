//! One view of the fleet (issue 41): every host records itself and the
//! partitions it owns in PostgreSQL, so any host's `GET /fleet`, console
//! and `idem status` show the whole group, and a host that stops leaves it.
//! (The console's fleet table is in the browser test.)

use std::time::Duration;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::wait_until_async;
use serde_json::Value;

use crate::Env;

/// `GET /fleet` (`Null` while the host's listener is not up yet).
async fn fleet(admin: &str) -> Value {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let Ok(response) = client.get(format!("{admin}/fleet")).send().await else { return Value::Null };
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.expect("JSON")
}

/// The names of the live hosts, and each partition's owner (`None`: nobody
/// owns it now).
fn seen(fleet: &Value) -> (Vec<String>, Vec<Option<String>>) {
    if fleet.is_null() {
        return (Vec::new(), Vec::new());
    }
    let hosts = fleet["hosts"].as_array().expect("hosts");
    let alive = hosts.iter().filter(|h| h["alive"] == true).filter_map(|h| h["host"].as_str().map(str::to_owned));
    let owners = fleet["partitions"].as_array().expect("partitions");
    let owner = |p: &Value| (p["owned"] == true).then(|| p["host"].as_str().unwrap_or_default().to_owned());
    (alive.collect(), owners.iter().map(owner).collect())
}

/// `config` with the host's own static-membership name.
fn named(config: &std::path::Path, name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(config).expect("config");
    std::fs::write(config, text.replace("[kafka]\n", &format!("[kafka]\ninstance_id = \"{name}\"\n"))).expect("config");
    config.to_path_buf()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_host_shows_the_whole_group_and_which_host_owns_each_partition() {
    let env = Env::new(4).await;
    env.send_orders(40).await;
    let spec = HandlerSpec::billing(&env.topic, &env.provider.base_url());
    let (a, b) =
        (host::write_config(&env.db.url, std::slice::from_ref(&spec)), host::write_config(&env.db.url, &[spec]));
    let (a, b) = (named(&a, "fleet-a"), named(&b, "fleet-b"));
    let (admin_a, admin_b) = (host::admin_url(&a), host::admin_url(&b));
    let host_a = host::InProcess::start(&a);
    let host_b = host::InProcess::start(&b);
    // Both hosts, each owning some of the four partitions, as either says.
    let split = |f: &Value| {
        let (hosts, owners) = seen(f);
        let by = |name: &str| owners.iter().filter(|o| o.as_deref() == Some(name)).count();
        hosts.len() == 2
            && owners.len() == 4
            && by("fleet-a") >= 1
            && by("fleet-b") >= 1
            && by("fleet-a") + by("fleet-b") == 4
    };
    wait_until_async("host B's /fleet shows both hosts sharing the four partitions", || async {
        split(&fleet(&admin_b).await)
    })
    .await;
    let from_a = fleet(&admin_a).await;
    assert!(split(&from_a), "host A sees the same group: {from_a}");
    for h in from_a["hosts"].as_array().expect("hosts") {
        assert_eq!(h["version"], env!("CARGO_PKG_VERSION"), "{h}");
        assert!(h["admin"].as_str().is_some_and(|a| admin_a.ends_with(a) || admin_b.ends_with(a)), "{h}");
    }
    let status = std::process::Command::new(idem_tests::idem_bin())
        .args(["status", "--once", "--url", &admin_a])
        .output()
        .expect("idem status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("fleet: 2 host(s)") && text.contains("owned by fleet-b"), "{text}");

    // A host that stops leaves the fleet at once; its partitions show no
    // owner (with static membership the group keeps them for it until its
    // session times out, then gives them to host A).
    let (_, before) = seen(&from_a);
    host_b.stop().await;
    wait_until_async("host B gone, its partitions without an owner", || async {
        let (hosts, owners) = seen(&fleet(&admin_a).await);
        let expected: Vec<Option<String>> = before.iter().map(|o| o.clone().filter(|name| name == "fleet-a")).collect();
        hosts == ["fleet-a"] && (owners == expected || owners.iter().all(|o| o.as_deref() == Some("fleet-a")))
    })
    .await;
    host_a.stop().await;
    env.finish().await;
}
