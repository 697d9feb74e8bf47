//! Running the host under test: a config file written for the test, then
//! either `idem::app::run` in this process or the `idem` binary as a
//! child process (for SIGKILL and SIGTERM).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use idem::stats::HandlerReport;

/// One `[[handler]]` of a test config.
#[derive(Debug, Clone)]
pub struct HandlerSpec {
    pub name: String,
    /// A crate of [`crate::guests::CRATES`], or a handler written with an
    /// SDK (see [`crate::guests::component`]).
    pub component: &'static str,
    pub topic: String,
    pub group_id: String,
    pub event_types: Vec<String>,
    pub concurrency: usize,
    /// `group_protocol`: "classic" or "consumer" (KIP-848).
    pub group_protocol: &'static str,
    /// `assignor`; "" leaves it to the protocol's default.
    pub assignor: &'static str,
    pub provider_url: String,
    /// `[handler.http] key_prefix`: tells which host sent a request.
    pub key_prefix: Option<String>,
    /// The payload's JSON Schema.
    pub schema: PathBuf,
    /// `[handler.retry] max_attempts`; backoffs are short in tests.
    pub max_attempts: u32,
    /// `[handler.retry] initial_backoff_ms, max_backoff_ms` (short by default).
    pub backoff_ms: (u64, u64),
    /// More `[handler.retry]` lines (`on_failure`, `dlq_topic`, …).
    pub retry: String,
    /// Create the handler's dead-letter topic before idem starts (on Apache
    /// Kafka idem creates it itself otherwise; the mock cluster cannot, so
    /// there the harness always does).
    pub create_dlq: bool,
    /// `[handler.database] schema`; its migrations are those of
    /// [`crate::db::HANDLERS`].
    pub db_schema: &'static str,
    /// Extra TOML lines for the `[[handler]]` table (before its sub-tables).
    pub extra: String,
    /// `[handler.batch] max_events, max_wait_ms`; `None`: idem's defaults
    /// (batches of up to 100).
    pub batch: Option<(usize, u64)>,
    /// `[handler.batch] max_concurrent` (1, idem's default, is not written).
    pub max_concurrent: usize,
    /// `[[handler.emit]]`: topic, event types, schema.
    pub emit: Vec<(String, Vec<String>, PathBuf)>,
    /// More `[handler.config]` keys.
    pub config: Vec<(String, String)>,
}

impl HandlerSpec {
    pub fn billing(topic: &str, provider_url: &str) -> Self {
        Self {
            name: "billing".into(),
            component: "billing",
            topic: topic.into(),
            group_id: crate::unique_name("billing"),
            event_types: vec!["order.confirmed.v1".into()],
            concurrency: 3,
            group_protocol: "classic",
            assignor: "cooperative-sticky",
            provider_url: provider_url.into(),
            key_prefix: None,
            schema: example_path("billing/order-confirmed.v1.schema.json"),
            max_attempts: 5,
            backoff_ms: (20, 200),
            retry: String::new(),
            create_dlq: false,
            db_schema: "billing",
            extra: String::new(),
            batch: None,
            max_concurrent: 1,
            emit: Vec::new(),
            config: Vec::new(),
        }
    }

    /// `self` under KIP-848's consumer protocol (the broker's assignor).
    /// `ordering` (`"key"` or `"none"`) with `max_in_flight` lanes per
    /// partition, and the concurrency for them to run side by side.
    pub fn with_lanes(mut self, ordering: &str, max_in_flight: u32) -> Self {
        self.extra.push_str(&format!("ordering = \"{ordering}\"\nmax_in_flight = {max_in_flight}\n"));
        self.concurrency = self.concurrency.max(max_in_flight as usize);
        self
    }

    /// `self` running up to `n` events of a batch at once (`[handler.batch]
    /// max_concurrent`; the ordering must allow it).
    pub fn with_max_concurrent(self, n: usize) -> Self {
        Self { max_concurrent: n, ..self }
    }

    /// `self` allowed to emit `event_types` to `topic`, checked against
    /// `schema` (`[[handler.emit]]`).
    pub fn emitting(mut self, topic: &str, event_types: &[&str], schema: PathBuf) -> Self {
        self.emit.push((topic.into(), event_types.iter().map(|t| (*t).to_owned()).collect(), schema));
        self
    }

    /// The billing example announcing each charge on `topic` (its
    /// `payment_requests_topic`, and the `[[handler.emit]]` for it).
    pub fn billing_announcing(topic: &str, provider_url: &str, requests: &str) -> Self {
        let mut spec = Self::billing(topic, provider_url).emitting(
            requests,
            &["payment.requested.v1"],
            example_path("billing/payment-requested.v1.schema.json"),
        );
        spec.config.push(("payment_requests_topic".into(), requests.into()));
        spec
    }

    /// The payments example, taking `payment.requested.v1` from `topic`.
    pub fn payments(topic: &str) -> Self {
        Self {
            name: "payments".into(),
            component: "payments",
            db_schema: "payments",
            group_id: crate::unique_name("payments"),
            event_types: vec!["payment.requested.v1".into()],
            schema: example_path("billing/payment-requested.v1.schema.json"),
            ..Self::billing(topic, "http://127.0.0.1:9")
        }
    }

    pub fn with_consumer_protocol(self) -> Self {
        Self { group_protocol: "consumer", assignor: "", ..self }
    }

    pub fn notification(topic: &str) -> Self {
        Self {
            name: "notification".into(),
            component: "notification",
            db_schema: "notification",
            group_id: crate::unique_name("notification"),
            ..Self::billing(topic, "http://127.0.0.1:9")
        }
    }

    /// The `scenarios` test handler: `test.scenario.v1` events, any payload.
    pub fn scenarios(topic: &str, provider_url: &str) -> Self {
        Self {
            name: "scenarios".into(),
            component: "scenarios",
            db_schema: "scenario",
            group_id: crate::unique_name("scenarios"),
            event_types: vec!["test.scenario.v1".into()],
            schema: Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/scenarios/any.schema.json"),
            ..Self::billing(topic, provider_url)
        }
    }
}

/// `[handler.batch]`, when `h` sets anything in it.
fn batch_table(h: &HandlerSpec) -> String {
    let mut table =
        h.batch.map(|(events, wait)| format!("max_events = {events}\nmax_wait_ms = {wait}\n")).unwrap_or_default();
    if h.max_concurrent != 1 {
        table.push_str(&format!("max_concurrent = {}\n", h.max_concurrent));
    }
    if table.is_empty() { table } else { format!("[handler.batch]\n{table}") }
}

fn example_path(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(path)
}

/// Writes an `idem.toml` for `handlers` into a fresh folder and returns its path.
pub fn write_config(database_url: &str, handlers: &[HandlerSpec]) -> PathBuf {
    write_config_for(&crate::kafka::brokers(), database_url, handlers)
}

/// [`write_config`] for another broker (a mock cluster, say).
pub fn write_config_for(brokers: &str, database_url: &str, handlers: &[HandlerSpec]) -> PathBuf {
    write_config_with(brokers, &[], &[], database_url, handlers)
}

/// [`write_config_for`] with more `[kafka.properties]`, and
/// `[kafka.properties_env]` entries (property, environment variable).
pub fn write_config_with(
    brokers: &str,
    properties: &[(&str, String)],
    properties_env: &[(&str, &str)],
    database_url: &str,
    handlers: &[HandlerSpec],
) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::unique_name("idem_config"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("config dir: {e}"));
    // The suite's DLQ key, in a file as a mounted secret would be.
    std::fs::write(dir.join("dlq.key"), crate::DLQ_KEY).unwrap_or_else(|e| panic!("dlq key: {e}"));
    let dlq = if crate::seals_dead_letters() { "[dlq]\nkey_file = \"dlq.key\"\n" } else { "" };
    let mut text = format!("{dlq}[kafka]\nbrokers = \"{brokers}\"\n[kafka.properties]\n");
    // Short sessions for the classic protocol; under KIP-848 they are the
    // broker's (scripts/kafka/server.properties sets them as short).
    if handlers.iter().all(|h| h.group_protocol == "classic") {
        text.push_str("\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"\n");
    }
    for (key, value) in properties {
        text.push_str(&format!("{key:?} = {value:?}\n"));
    }
    if !properties_env.is_empty() {
        text.push_str("[kafka.properties_env]\n");
        for (key, variable) in properties_env {
            text.push_str(&format!("{key:?} = {variable:?}\n"));
        }
    }
    text.push_str(&format!("\n[database]\nurl = \"{database_url}\"\n"));
    // A port of its own per host config: tests run many hosts at once.
    text.push_str(&format!("\n[admin]\nlisten = \"127.0.0.1:{}\"\n", free_port()));
    for h in handlers {
        if (h.create_dlq || crate::kafka::on_mock_cluster()) && brokers == crate::kafka::brokers() {
            crate::kafka::create_topic_like(&format!("{}.{}.dlq", h.topic, h.name), &h.topic);
        }
        let types: Vec<String> = h.event_types.iter().map(|t| format!("\"{t}\"")).collect();
        text.push_str(&format!(
            "\n[[handler]]\nname = \"{name}\"\ntopic = \"{topic}\"\ngroup_id = \"{group}\"\ncomponent = \"{component}\"\n\
             event_types = [{types}]\nschema = \"{schema}\"\nconcurrency = {concurrency}\ngroup_protocol = \"{protocol}\"\n{assignor}\
             {extra}\
             [handler.retry]\nmax_attempts = {max_attempts}\ninitial_backoff_ms = {initial}\nmax_backoff_ms = {max}\n{retry}\
             {batch}[handler.database]\nschema = \"{db_schema}\"\nmigrations = \"{migrations}\"\n\
             [handler.http]\nallow = [\"{url}\"]\nallow_private = [\"{url}\"]\ntimeout_ms = 5000\n{prefix}[handler.config]\npayment_base_url = \"{url}\"\nprovider_base_url = \"{url}\"\n{config}{emit}",
            name = h.name,
            topic = h.topic,
            group = h.group_id,
            component = crate::guests::component(h.component).display(),
            types = types.join(", "),
            schema = h.schema.display(),
            concurrency = h.concurrency,
            protocol = h.group_protocol,
            assignor = if h.assignor.is_empty() { String::new() } else { format!("assignor = \"{}\"\n", h.assignor) },
            max_attempts = h.max_attempts,
            retry = h.retry,
            initial = h.backoff_ms.0,
            max = h.backoff_ms.1,
            extra = h.extra,
            batch = batch_table(h),
            db_schema = h.db_schema,
            migrations = crate::db::HANDLERS
                .iter()
                .find(|(_, schema, _)| *schema == h.db_schema)
                .map(|(_, _, m)| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(m).display().to_string())
                .unwrap_or_default(),
            url = h.provider_url,
            prefix = h.key_prefix.as_ref().map(|p| format!("key_prefix = \"{p}\"\n")).unwrap_or_default(),
            config = h.config.iter().map(|(k, v)| format!("{k} = {v:?}\n")).collect::<String>(),
            emit = h
                .emit
                .iter()
                .map(|(topic, types, schema)| format!(
                    "[[handler.emit]]\ntopic = \"{topic}\"\nevent_types = {types:?}\nschema = \"{}\"\n",
                    schema.display()
                ))
                .collect::<String>(),
        ));
    }
    let path = dir.join("idem.toml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write config: {e}"));
    path
}

/// Until the host of `config` answers `/readyz` with 200 (bounded as
/// [`crate::wait_until_async`] bounds every wait).
pub async fn ready(config: &Path) {
    let url = format!("{}/readyz", admin_url(config));
    crate::wait_until_async(&format!("the host of {} ready", config.display()), || async {
        reqwest::get(&url).await.is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
    })
    .await;
}

/// Which of the topic's first `partitions` the host of `config` says are
/// assigned to it (`idem_partition_assigned`).
pub async fn assigned(config: &Path, partitions: i32) -> Vec<i32> {
    let metrics = metrics(config).await;
    (0..partitions).filter(|p| partition_gauge(&metrics, "idem_partition_assigned", *p, "1")).collect()
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// The admin API's base URL of the host that runs `config`.
pub fn admin_url(config: &Path) -> String {
    let text = std::fs::read_to_string(config).unwrap_or_else(|e| panic!("config: {e}"));
    let listen = text
        .lines()
        .skip_while(|l| l.trim() != "[admin]")
        .find_map(|l| l.strip_prefix("listen = "))
        .unwrap_or_else(|| panic!("no [admin] listen in {}", config.display()));
    format!("http://{}", listen.trim_matches('"'))
}

/// The lines of `/metrics` of the host that runs `config` (none while its
/// admin listener is not up yet, or when it has not answered within 10 s).
pub async fn metrics(config: &Path) -> Vec<String> {
    let url = format!("{}/metrics", admin_url(config));
    let fetch = async { reqwest::get(&url).await?.text().await };
    match tokio::time::timeout(Duration::from_secs(10), fetch).await {
        Ok(Ok(text)) => text.lines().map(str::to_owned).collect(),
        Ok(Err(_)) | Err(_) => Vec::new(),
    }
}

/// Whether `metrics` has `name` at `value` for `partition`.
pub fn partition_gauge(metrics: &[String], name: &str, partition: i32, value: &str) -> bool {
    let label = format!("partition=\"{partition}\"");
    metrics
        .iter()
        .any(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label) && l.ends_with(&format!(" {value}")))
}

/// The longest a host (in this process or a child) may run before it
/// drains its partitions and exits by itself (`--exit-when-drained`), or a
/// child that was sent no signal may run before [`wait_report`] gives up:
/// the suite's longest drains take about a minute on 2 busy cores.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Beyond a host's `[shutdown] timeout`, how long its exit may take after
/// SIGTERM (or after SIGKILL) before the harness calls it hung.
pub const EXIT_MARGIN: Duration = Duration::from_secs(30);

/// The `[shutdown] timeout` of `config` (idem's default, 10 s, when unset).
pub fn shutdown_timeout(config: &Path) -> Duration {
    let text = std::fs::read_to_string(config).unwrap_or_default();
    let mut in_shutdown = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_shutdown = line == "[shutdown]";
        } else if in_shutdown && let Some(value) = line.strip_prefix("timeout") {
            let value = value.trim_start().trim_start_matches('=').trim().trim_matches('"');
            if let Ok(span) = idem::config::Span::parse(value) {
                return span.0;
            }
        }
    }
    Duration::from_secs(10)
}

/// Runs the host in this process until every partition is drained
/// (within [`RUN_LIMIT`]).
pub async fn run_until_drained(config: &Path) -> Vec<HandlerReport> {
    run_in_process(config, true, std::future::pending()).await
}

/// Runs the host in this process until `shutdown` (or drained, if asked).
/// Bounded: drained within [`RUN_LIMIT`], and stopped within the config's
/// `[shutdown] timeout` and [`EXIT_MARGIN`] of `shutdown`; past either the
/// test panics saying which.
pub async fn run_in_process(
    config: &Path,
    exit_when_drained: bool,
    shutdown: impl std::future::Future<Output = ()>,
) -> Vec<HandlerReport> {
    let prepared = idem::startup::prepare(config).await.unwrap_or_else(|e| panic!("start-up checks: {e:#}"));
    let options = idem::app::RunOptions { exit_when_drained, ..Default::default() };
    let (fired_tx, fired_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = fired_tx.send(());
    };
    let stop_limit = shutdown_timeout(config) + EXIT_MARGIN;
    let stopped_in_time = async move {
        if fired_rx.await.is_err() {
            // The run ended without the shutdown: nothing to bound.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(stop_limit).await;
    };
    let drained_in_time = async {
        if exit_when_drained {
            tokio::time::sleep(RUN_LIMIT).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = idem::app::run(prepared, options, shutdown) => result.unwrap_or_else(|e| panic!("run: {e:#}")),
        () = stopped_in_time => panic!(
            "the host in this process ({}) had not stopped {} s after its shutdown was asked \
             ([shutdown] timeout {} s + {} s)",
            config.display(), stop_limit.as_secs(), shutdown_timeout(config).as_secs(), EXIT_MARGIN.as_secs()
        ),
        () = drained_in_time => panic!(
            "the host in this process ({}) had not drained its partitions within {} s",
            config.display(), RUN_LIMIT.as_secs()
        ),
    }
}

/// A host running in this process until [`InProcess::stop`].
pub struct InProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Vec<HandlerReport>>,
}

impl InProcess {
    pub fn start(config: &Path) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = config.to_path_buf();
        let task = tokio::spawn(async move {
            run_in_process(&config, false, async {
                let _ = stopped.await;
            })
            .await
        });
        Self { stop, task }
    }

    /// Stops the host the way SIGTERM would and returns its counters
    /// ([`run_in_process`] bounds how long that may take).
    pub async fn stop(self) -> Vec<HandlerReport> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_else(|e| panic!("host: {e}"))
    }
}

/// `idem run` as a child process.
pub fn spawn(config: &Path, exit_when_drained: bool, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(crate::idem_bin());
    cmd.arg("run").arg("--config").arg(config).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // The child logs to the test's stderr: warnings and worse unless IDEM_LOG says otherwise.
    cmd.env("IDEM_LOG", std::env::var("IDEM_LOG").unwrap_or_else(|_| "warn".into()));
    cmd.env("IDEM_TEST_PARENT_PID", std::process::id().to_string());
    if exit_when_drained {
        cmd.arg("--exit-when-drained");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", crate::idem_bin().display()));
    let started = Spawned {
        config: config.to_path_buf(),
        shutdown: shutdown_timeout(config),
        started: Instant::now(),
        stopping: None,
    };
    spawned().insert(child.id(), started);
    child
}

/// What the harness knows of a child it started: enough for
/// [`wait_report`] to know how long the child may take to exit.
struct Spawned {
    config: PathBuf,
    shutdown: Duration,
    started: Instant,
    /// The last stopping signal sent ([`signal`]) and when.
    stopping: Option<(String, Instant)>,
}

fn spawned() -> std::sync::MutexGuard<'static, BTreeMap<u32, Spawned>> {
    static SPAWNED: Mutex<BTreeMap<u32, Spawned>> = Mutex::new(BTreeMap::new());
    SPAWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits for a child started with [`spawn`] and parses its report line.
///
/// Bounded: after SIGTERM (or SIGINT) the child must exit within its
/// config's `[shutdown] timeout` plus [`EXIT_MARGIN`], after SIGKILL within
/// [`EXIT_MARGIN`], and one sent neither (`--exit-when-drained`) within
/// [`RUN_LIMIT`] of its start. Past that it is killed and the test panics
/// naming the child, its config and the bound, instead of hanging the run.
pub fn wait_report(child: Child) -> (std::process::ExitStatus, Vec<HandlerReport>) {
    let pid = child.id();
    let known = spawned().remove(&pid);
    let now = Instant::now();
    let (deadline, what) = match known {
        Some(Spawned { config, stopping: Some((signal, at)), .. }) if signal == "KILL" => (
            at + EXIT_MARGIN,
            format!("idem run ({}) after SIGKILL, allowed {} s", config.display(), EXIT_MARGIN.as_secs()),
        ),
        Some(Spawned { config, shutdown, stopping: Some((signal, at)), .. }) => (
            at + shutdown + EXIT_MARGIN,
            format!(
                "idem run ({}) after SIG{signal}, allowed its [shutdown] timeout {} s + {} s",
                config.display(),
                shutdown.as_secs_f64(),
                EXIT_MARGIN.as_secs()
            ),
        ),
        Some(Spawned { config, started, .. }) => (
            started + RUN_LIMIT,
            format!(
                "idem run ({}) sent no stopping signal, allowed {} s to end",
                config.display(),
                RUN_LIMIT.as_secs()
            ),
        ),
        None => (now + RUN_LIMIT, format!("idem run (pid {pid}), allowed {} s to end", RUN_LIMIT.as_secs())),
    };
    // However late the call, a child that is exiting gets a moment to.
    let deadline = deadline.max(now + Duration::from_secs(5));
    let (status, out) = crate::wait_within(child, &what, deadline);
    let stdout = String::from_utf8_lossy(&out);
    let reports = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| serde_json::from_value(v["handlers"].clone()).ok())
        .unwrap_or_default();
    (status, reports)
}

/// Sends SIGTERM (or SIGKILL, or another signal) to a child.
pub fn signal(child: &Child, signal: &str) {
    let (status, _) = crate::output_within(
        Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()),
        &format!("kill -{signal} {}", child.id()),
        Duration::from_secs(10),
    );
    assert!(status.success(), "kill -{signal} {}", child.id());
    if matches!(signal, "TERM" | "INT" | "KILL" | "QUIT")
        && let Some(known) = spawned().get_mut(&child.id())
    {
        known.stopping = Some((signal.to_owned(), Instant::now()));
    }
}

/// An `order.confirmed.v1` payload with a fresh UUID v7 id.
pub fn order_payload(order_id: i64) -> (uuid::Uuid, Vec<u8>) {
    order_payload_with(order_id, uuid::Uuid::now_v7())
}

/// [`order_payload`] with the event id `id` (one made in the past, say:
/// [`crate::v7_at`]).
pub fn order_payload_with(order_id: i64, id: uuid::Uuid) -> (uuid::Uuid, Vec<u8>) {
    let payload = serde_json::json!({
        "eventId": id.to_string(), "eventType": "order.confirmed.v1", "occurredAt": "2026-11-30T12:00:00Z",
        "aggregateType": "Order", "orderId": order_id, "customerId": 1000 + order_id % 17,
        "totalAmount": 10.5 + (order_id % 90) as f64, "currency": "EUR",
    });
    (id, payload.to_string().into_bytes())
}

/// The processes descended from `root` (its children, theirs, …) whose
/// command line contains `needle`, as (pid, command line).
pub fn descendants_running(root: u32, needle: &str) -> Vec<(u32, String)> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap_or_else(|e| panic!("/proc: {e}")).flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut next = 0;
    while let Some(&parent) = tree.get(next) {
        tree.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(pid, _)| *pid));
        next += 1;
    }
    tree.into_iter()
        .skip(1)
        .filter_map(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let line = String::from_utf8_lossy(&line).replace('\0', " ");
            line.contains(needle).then_some((pid, line))
        })
        .collect()
}
