//! Variant v: variant a watched by [`VIEWERS`] console viewers. Each logs
//! in as a browser does, then every second fetches both live pages'
//! data, the overview and the billing handler's page (a browser on one
//! page fetches one of them a second: this is twice a real viewer's load).

use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;

pub const VIEWERS: usize = 10;
/// The host's admin token in variant v (`IDEM_ADMIN_TOKEN`).
pub const TOKEN: &str = "bench-console-viewers-0123456789abcdef";

/// Viewers running until [`Viewers::stop`].
pub struct Viewers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<(u64, u64)>>,
}

impl Viewers {
    /// Starts the viewers of the host that runs `config` (they wait for its
    /// admin listener).
    pub fn start(config: &Path) -> Self {
        let base = idem_tests::host::admin_url(config);
        let (stop, stopped) = watch::channel(false);
        let tasks = (0..VIEWERS).map(|_| tokio::spawn(view(base.clone(), stopped.clone()))).collect();
        Self { stop, tasks }
    }

    /// Stops them; the page fetches answered 200, and the others.
    pub async fn stop(self) -> (u64, u64) {
        let _ = self.stop.send(true);
        let mut totals = (0, 0);
        for task in self.tasks {
            let (ok, failed) = task.await.unwrap_or((0, 1));
            totals = (totals.0 + ok, totals.1 + failed);
        }
        totals
    }
}

async fn view(base: String, mut stop: watch::Receiver<bool>) -> (u64, u64) {
    let client = reqwest::Client::new();
    let (mut ok, mut failed) = (0, 0);
    // Logged in as soon as the listener answers (it is bound before the
    // host consumes), so the viewers watch the whole drain.
    let session = loop {
        if let Some(cookie) = login(&client, &base).await {
            break cookie;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = stop.wait_for(|s| *s) => return (ok, failed),
        }
    };
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.wait_for(|s| *s) => return (ok, failed),
        }
        for page in ["/console/api/overview", "/console/api/handlers/billing"] {
            let answer = client.get(format!("{base}{page}")).header("cookie", &session).send().await;
            let fetched = match answer {
                Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                _ => false,
            };
            if fetched { ok += 1 } else { failed += 1 }
        }
    }
}

/// The session cookie (`None` while the host is not listening yet).
async fn login(client: &reqwest::Client, base: &str) -> Option<String> {
    let answer = client
        .post(format!("{base}/console/api/login"))
        .header("origin", base)
        .json(&serde_json::json!({ "token": TOKEN }))
        .send()
        .await
        .ok()?;
    let set = answer.headers().get("set-cookie")?.to_str().ok()?;
    set.split(';').next().map(str::to_owned)
}
