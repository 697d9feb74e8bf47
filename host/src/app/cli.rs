//! The command line: `idem run`, `idem check`, `idem new`, `idem test`, `idem migrate`, `idem dlq`,
//! `idem deploy`, `idem handlers`, `idem rollback`, `idem maintenance`,
//! `idem outbox`, `idem status`. The `idem`
//! binary is [`main`] and nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::runtime::NativeHandlers;

#[derive(Parser)]
#[command(
    name = "idem",
    version,
    about = "Kafka consumers as WebAssembly components, each event's effect exactly once"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Consumes every configured topic until SIGINT/SIGTERM.
    Run {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// Exit once every assigned partition is consumed and committed to its end.
        #[arg(long)]
        exit_when_drained: bool,
    },
    /// Writes a new handler project: its source, schema, migration, config,
    /// sample events, build and test commands, and the SDK and WIT it builds
    /// against (it builds outside this repository).
    New {
        /// The handler's name (lowercase letters, digits, `-`, `_`).
        name: String,
        #[arg(long, value_enum)]
        lang: crate::scaffold::Lang,
        /// Where to write it (default: ./NAME); must not exist.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Runs a handler against a file of events (JSON lines) in a PostgreSQL
    /// transaction rolled back at the end, printing each event's statements,
    /// requests, outcome and time; exits non-zero unless every event was
    /// processed or a duplicate.
    Test {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        #[arg(long)]
        handler: String,
        /// The component to test (default: the handler's `component` file),
        /// or a project directory with a build.sh (`idem new`), built first.
        #[arg(long)]
        component: Option<PathBuf>,
        /// Keep what the events did (the claims too): commit instead of rolling back.
        #[arg(long)]
        commit: bool,
        /// Where HTTP requests go: a local recorder that prints them, or their hosts.
        #[arg(long, value_enum, default_value = "record")]
        http: crate::app::trial::HttpMode,
        /// One event's payload per line.
        events: PathBuf,
    },
    /// Runs every start-up check of `run`, consumes nothing, exits non-zero on a problem.
    Check {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
    },
    /// A handler's dead-letter topic: what it holds, and replaying it.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Uploads a component as a handler's next module version and activates
    /// it on every host (through the admin API of a running host).
    Deploy {
        #[command(flatten)]
        admin: AdminTarget,
        #[arg(long)]
        handler: String,
        /// The component (.wasm).
        path: PathBuf,
        /// Stored with the version (what changed, a ticket).
        #[arg(long)]
        note: Option<String>,
    },
    /// Each handler's module versions: active, running here, counts per version.
    Handlers {
        #[command(flatten)]
        admin: AdminTarget,
    },
    /// Activates an older version: `--to N`, or else the newest stored
    /// version older than the active one.
    Rollback {
        #[command(flatten)]
        admin: AdminTarget,
        handler: String,
        #[arg(long)]
        to: Option<i32>,
    },
    /// A running host's handlers and partitions from its /metrics: lag,
    /// rate, outcomes, the module running; refreshed in place on a terminal.
    Status {
        /// The host's admin listener (`[admin] listen`).
        #[arg(long, env = "IDEM_ADMIN_URL", default_value = "http://127.0.0.1:7700")]
        url: String,
        /// Its bearer token, if it has one.
        #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// One frame (with the rate over one second), then exit.
        #[arg(long)]
        once: bool,
    },
    /// Runs one retention pass on idem.processed_event (what every host runs
    /// on `[retention] interval`): creates windows ahead, drops expired ones
    /// (or deletes expired rows), and prints what it did.
    Maintenance {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// One JSON line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The outbox: each producer's pending, published and failed rows and
    /// its relay's holder; the rows the broker refused; re-driving them.
    Outbox {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// Only this producer (a handler, or an [[outbox.producer]]).
        #[arg(long)]
        producer: Option<String>,
        /// Also list the failed rows (at most 100).
        #[arg(long)]
        failed: bool,
        /// Make the failed rows pending again (`--id` some of them only):
        /// the relay publishes them (after the cause is fixed).
        #[arg(long)]
        redrive: bool,
        #[arg(long = "id")]
        ids: Vec<i64>,
        /// End an `[[outbox.producer]]` removed from the configs: its topics,
        /// its role's mapping and its grant go (with `--database-url` of an
        /// administrator, as for `idem migrate`).
        #[arg(long)]
        remove_producer: Option<String>,
        /// The database URL for `--remove-producer` (else the config's).
        #[arg(long)]
        database_url: Option<String>,
        /// One JSON line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Applies idem's migrations (schema `idem`) to the database; with
    /// `--config`, also creates or updates each handler's role, schema,
    /// migrations and grants. Needs an administrator's URL.
    Migrate {
        /// PostgreSQL URL of an administrator; defaults to IDEM_DATABASE_URL,
        /// then DATABASE_URL, then (with --config) the config's [database] url.
        #[arg(long)]
        database_url: Option<String>,
        /// The handlers to provision.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Counts the records of a handler's DLQ by class and reason, oldest and newest.
    List {
        #[command(flatten)]
        target: DlqTarget,
    },
    /// Runs DLQ records through that handler only (never into the shared
    /// source topic); events processed meanwhile are skipped as duplicates.
    Replay {
        #[command(flatten)]
        target: DlqTarget,
        /// Count what would be applied and skipped; execute nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also run records whose event is older than the handler's
        /// dedup_retention (refused otherwise: their dedup rows may be gone,
        /// so one may have been processed already).
        #[arg(long)]
        force: bool,
        /// Also run records without a seal: those dead-lettered before idem
        /// sealed its DLQ records. Anyone who could produce to the topic
        /// could have written such a record; use it once, after an upgrade.
        #[arg(long)]
        trust_unsigned: bool,
    },
}

#[derive(clap::Args)]
struct DlqTarget {
    #[arg(long, default_value = "idem.toml")]
    config: PathBuf,
    #[arg(long)]
    handler: String,
    /// Records that failed at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Records that failed before this time (RFC 3339).
    #[arg(long)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many records.
    #[arg(long)]
    limit: Option<usize>,
    /// One JSON line instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct AdminTarget {
    /// The admin API of a running host (`[admin] listen`).
    #[arg(long, env = "IDEM_ADMIN_URL", default_value = "http://127.0.0.1:7700")]
    url: String,
    /// Its bearer token, if it has one.
    #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The API's JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl AdminTarget {
    fn target(&self) -> crate::admin::client::Target {
        crate::admin::client::Target { url: self.url.clone(), token: self.token.clone().filter(|t| !t.is_empty()) }
    }

    fn print(&self, answer: &serde_json::Value, human: impl FnOnce(&serde_json::Value) -> String) {
        if self.json {
            println!("{answer}");
        } else {
            print!("{}", human(answer));
        }
    }
}

impl DlqTarget {
    fn window(&self) -> crate::pipeline::replay::Window {
        crate::pipeline::replay::Window { since: self.since, until: self.until, limit: self.limit }
    }
}

/// Parses the arguments, runs the command, and returns the exit code.
pub fn main() -> ExitCode {
    main_with(NativeHandlers::default())
}

/// As [`main`], for a program that embeds idem with native handlers of its
/// own (a config names one with `native = "<name>"`).
pub fn main_with(natives: NativeHandlers) -> ExitCode {
    // A compiling child of this very binary (see `runtime::compiler`).
    if std::env::args().nth(1).as_deref() == Some(crate::runtime::compiler::CHILD_COMMAND) {
        return crate::runtime::compiler::child_main();
    }
    match std::env::current_exe() {
        Ok(exe) => crate::runtime::compiler::compile_in_children(exe),
        Err(e) => eprintln!("idem: cannot name this executable ({e}): compiling components in this process"),
    }
    let provider = match logging() {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("idem: failed to set up tracing: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idem: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(dispatch(cli, &natives)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem: {e:#}");
            ExitCode::FAILURE
        }
    };
    // Spans still batched are exported before the process ends.
    if let Some(provider) = provider
        && let Err(e) = provider.shutdown()
    {
        eprintln!("idem: failed to export the last spans: {e}");
    }
    code
}

/// Logs to stderr (`IDEM_LOG` filters; `IDEM_LOG_FORMAT=json`: one JSON
/// object per line, an event's fields — handler, topic, partition, offset,
/// event_id, … — at its top level), plus OpenTelemetry traces when the
/// environment names an OTLP endpoint (see `telemetry::traces`).
fn logging() -> anyhow::Result<Option<crate::telemetry::traces::Provider>> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG").unwrap_or_else(|_| "info".into());
    // rust-rdkafka's consumer drop closes the queue a second time after
    // idem's bounded close (`pipeline::shutdown`) and logs the refusal.
    let filter = match "rdkafka::consumer::base_consumer=off".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = if crate::env::get(crate::env::LOG_FORMAT).is_some_and(|f| f.eq_ignore_ascii_case("json")) {
        fmt.json().flatten_event(true).with_current_span(false).with_span_list(false).boxed()
    } else {
        fmt.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).boxed()
    };
    let (traces, provider) = match crate::telemetry::traces::layer()? {
        Some((layer, provider)) => (Some(layer), Some(provider)),
        None => (None, None),
    };
    tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).init();
    Ok(provider)
}

async fn dispatch(cli: Cli, natives: &NativeHandlers) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, exit_when_drained } => serve(&config, exit_when_drained, natives).await,
        Command::Check { config } => check(&config, natives).await,
        Command::New { name, lang, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let written = crate::scaffold::new_project(&name, lang, &dir)?;
            println!(
                "idem: wrote {} files into {}; next: cd there, ./build.sh, ./test.sh",
                written.len(),
                dir.display()
            );
            Ok(())
        }
        Command::Test { config, handler, component, commit, http, events } => {
            let options = crate::app::trial::Options { config, handler, component, events, commit, http };
            if crate::app::trial::run(options).await? { Ok(()) } else { anyhow::bail!("not every event was processed") }
        }
        Command::Dlq { command: DlqCommand::List { target } } => dlq_list(&target),
        Command::Dlq { command: DlqCommand::Replay { target, dry_run, force, trust_unsigned } } => {
            let options = crate::pipeline::replay::ReplayOptions { dry_run, force, trust_unsigned };
            dlq_replay(&target, options, natives).await
        }
        Command::Deploy { admin, handler, path, note } => {
            let answer = crate::admin::client::deploy(&admin.target(), &handler, &path, note.as_deref()).await?;
            admin.print(&answer, |a| format!("idem: {handler}: {}\n", a["message"].as_str().unwrap_or("")));
            Ok(())
        }
        Command::Handlers { admin } => {
            let answer = crate::admin::client::handlers(&admin.target()).await?;
            admin.print(&answer, crate::admin::client::render_handlers);
            Ok(())
        }
        Command::Rollback { admin, handler, to } => {
            let answer = crate::admin::client::rollback(&admin.target(), &handler, to).await?;
            admin.print(&answer, |a| format!("idem: {handler}: {}\n", a["message"].as_str().unwrap_or("")));
            Ok(())
        }
        Command::Status { url, token, once } => {
            crate::telemetry::status::show(&url, token.as_deref().filter(|t| !t.is_empty()), once).await
        }
        Command::Maintenance { config, json } => maintenance(&config, json).await,
        Command::Outbox { config, producer, failed, redrive, ids, remove_producer, database_url, json } => {
            if let Some(name) = remove_producer {
                return end_producer(&config, &name, database_url).await;
            }
            outbox(&config, OutboxQuery { producer, failed, redrive, ids, json }).await
        }
        Command::Migrate { database_url, config } => migrate(database_url, config).await,
    }
}

/// `idem run`.
async fn serve(config: &std::path::Path, exit_when_drained: bool, natives: &NativeHandlers) -> anyhow::Result<()> {
    crate::fd_limit::raise();
    let prepared = crate::app::startup::prepare_with(config, natives).await?;
    let options = crate::app::RunOptions { exit_when_drained, ..Default::default() };
    let bound = prepared.config.shutdown.timeout.0;
    let stopping = shutdown_signal(options.leave.clone(), bound);
    let reports = crate::app::run(prepared, options, stopping).await?;
    // One JSON line on stdout: what happened to every record.
    println!("{}", serde_json::json!({ "handlers": reports }));
    Ok(())
}

/// `idem check`.
async fn check(config: &std::path::Path, natives: &NativeHandlers) -> anyhow::Result<()> {
    let loaded = crate::config::Config::load(config)?;
    let prepared = crate::app::startup::prepare_as(loaded, natives, crate::app::startup::Seed::No).await?;
    for warning in &prepared.warnings {
        println!("idem: warning: {warning}");
    }
    println!("idem: {} checked: {} handler(s) ready", config.display(), prepared.handlers.len());
    Ok(())
}

/// `idem dlq list`.
fn dlq_list(target: &DlqTarget) -> anyhow::Result<()> {
    let config = crate::config::Config::load(&target.config)?;
    let handler = config
        .handlers
        .iter()
        .find(|h| h.name == target.handler)
        .with_context(|| format!("no handler `{}` in {}", target.handler, target.config.display()))?;
    let listing = crate::pipeline::replay::list(&config, handler, &target.window())?;
    if target.json {
        println!("{}", serde_json::to_string(&listing)?);
    } else {
        println!("{}: {} record(s)", listing.topic, listing.records);
        for (reason, n) in &listing.by_reason {
            println!("  {n:>6}  {reason}");
        }
        if listing.envelopes > 0 {
            println!("  {} of them envelopes (the topic refused the record as it was)", listing.envelopes);
        }
        if listing.unauthenticated > 0 {
            println!(
                "  {:>6}  unauthenticated: no valid seal (not written by idem, or before seals); not shown",
                listing.unauthenticated
            );
        }
        if let (Some(oldest), Some(newest)) = (&listing.oldest, &listing.newest) {
            println!("  failed between {oldest} and {newest}");
        }
    }
    Ok(())
}

/// `idem dlq replay`.
async fn dlq_replay(
    target: &DlqTarget,
    options: crate::pipeline::replay::ReplayOptions,
    natives: &NativeHandlers,
) -> anyhow::Result<()> {
    let dry_run = options.dry_run;
    let prepared = crate::app::startup::prepare_with(&target.config, natives).await?;
    let handler = prepared
        .handlers
        .iter()
        .find(|h| h.config.name == target.handler)
        .with_context(|| format!("no handler `{}` in {}", target.handler, target.config.display()))?;
    let report =
        crate::pipeline::replay::replay(&prepared.config, handler, &prepared.pool, &target.window(), options).await?;
    if target.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let verb = if dry_run { "would apply" } else { "applied" };
        println!(
            "idem: {} DLQ record(s) read: {verb} {}, skipped {} already processed, {} failed again",
            report.read, report.applied, report.duplicates, report.failed_again
        );
        if report.stale > 0 {
            println!(
                "idem: {} record(s) left in the DLQ: older than the handler's dedup_retention, so they may \
                 have been processed already (--force runs them)",
                report.stale
            );
        }
        if report.unauthenticated > 0 {
            println!(
                "idem: {} record(s) left in the DLQ: their seal is missing or does not verify, so idem did \
                 not write them (or wrote them before seals: --trust-unsigned runs those)",
                report.unauthenticated
            );
        }
        if report.envelopes > 0 {
            println!(
                "idem: {} envelope(s) left in the DLQ: the topic refused those records as they were; each \
                 names where the record is on its source topic",
                report.envelopes
            );
        }
    }
    Ok(())
}

/// `idem maintenance`.
/// What `idem outbox` was asked.
struct OutboxQuery {
    producer: Option<String>,
    failed: bool,
    redrive: bool,
    ids: Vec<i64>,
    json: bool,
}

/// The config at `path` and idem's own pool on its database, its
/// migrations checked: what the commands that read idem's tables start with.
async fn config_and_pool(path: &std::path::Path) -> anyhow::Result<(crate::config::Config, sqlx::PgPool)> {
    let config = crate::config::Config::load(path)?;
    let shown = crate::app::startup::redact(&config.database.url);
    let pool = sqlx::PgPool::connect(&config.database.url)
        .await
        .with_context(|| format!("database unreachable at {shown}"))?;
    crate::migrate::check(&pool).await?;
    Ok((config, pool))
}

/// `idem outbox`.
async fn outbox(config: &std::path::Path, q: OutboxQuery) -> anyhow::Result<()> {
    let (config, pool) = config_and_pool(config).await?;
    let producer = q.producer.as_deref();
    let redriven = if q.redrive { Some(crate::outbox::store::redrive(&pool, producer, &q.ids).await?) } else { None };
    let mut summary = crate::outbox::store::summary(&pool, &crate::outbox::producers(&config)).await?;
    summary.retain(|s| producer.is_none_or(|p| p == s.producer));
    let failed = if q.failed { crate::outbox::store::failed(&pool, producer, 100).await? } else { Vec::new() };
    if q.json {
        let answer = serde_json::json!({ "producers": summary, "failed": failed, "redriven": redriven });
        println!("{answer}");
        return Ok(());
    }
    if let Some(n) = redriven {
        println!("idem: outbox: {n} failed row(s) made pending again");
    }
    for s in &summary {
        let oldest = s.oldest_pending_s.map_or(String::new(), |a| format!(" (oldest {a:.1} s)"));
        let holder = s.holder.as_deref().unwrap_or("no relay");
        println!(
            "{}: {} pending{oldest}, {} published, {} failed; relay: {holder}",
            s.producer, s.pending, s.published, s.failed
        );
    }
    for f in &failed {
        let reason = crate::text::shown(f.failure.as_deref().unwrap_or(""), 500);
        println!(
            "  failed #{} {} key {} event {} at {}: {reason}",
            f.id,
            f.topic,
            crate::text::shown(&f.key, 100),
            f.event_id,
            f.failed_at.to_rfc3339()
        );
    }
    Ok(())
}

/// `idem outbox --remove-producer`.
async fn end_producer(config: &std::path::Path, name: &str, database_url: Option<String>) -> anyhow::Result<()> {
    let config = crate::config::Config::load(config)?;
    if crate::outbox::producers(&config).iter().any(|p| p == name) {
        anyhow::bail!("`{name}` is a producer of this config: remove it from the config first");
    }
    let url = database_url.unwrap_or_else(|| config.database.url.clone());
    let shown = crate::app::startup::redact(&url);
    let pool = sqlx::PgPool::connect(&url).await.with_context(|| format!("database unreachable at {shown}"))?;
    for line in crate::outbox::provision::remove(&pool, name).await? {
        println!("idem: outbox: {line}");
    }
    Ok(())
}

async fn maintenance(config: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let (config, pool) = config_and_pool(config).await?;
    crate::retention::check_mode(&pool, &config.retention).await?;
    // As a host starting with this config would.
    crate::retention::record(&pool, &config).await?;
    let report = crate::retention::Maintenance::new(pool, config.retention.clone()).pass().await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let lines = report.lines();
        if lines.is_empty() {
            println!("idem: maintenance: nothing to do");
        }
        for line in lines {
            println!("idem: maintenance: {line}");
        }
    }
    Ok(())
}

/// `idem migrate`.
async fn migrate(database_url: Option<String>, config: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let config = config.map(|path| crate::config::Config::load(&path)).transpose()?;
    let url = database_url
        .or_else(|| crate::env::get(crate::env::DATABASE_URL))
        .or_else(|| crate::env::get(crate::env::FALLBACK_DATABASE_URL))
        .or_else(|| config.as_ref().map(|c| c.database.url.clone()))
        .context("no database: pass --database-url or --config, or set IDEM_DATABASE_URL")?;
    let shown = crate::app::startup::redact(&url);
    let pool = sqlx::PgPool::connect(&url).await.with_context(|| format!("failed to connect to {shown}"))?;
    let mode = config.as_ref().map_or(crate::config::RetentionMode::Partition, |c| c.retention.mode);
    crate::migrate::apply_for(&pool, mode).await?;
    println!("idem: idem's migrations applied");
    if let Some(config) = config {
        for line in crate::migrate::provision(&pool, &config).await? {
            println!("idem: {line}");
        }
        // Before any maintenance pass: a pass keeps windows for the
        // retentions recorded, and upgraded rows count as 7 days.
        crate::retention::record(&pool, &config).await?;
        println!("idem: dedup retentions recorded");
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM (a restart is expected: static members
/// keep their partitions) or SIGUSR1 (scale-in: `leave` is set, the host
/// leaves its groups). From then on a watchdog ends the process at `bound`
/// whatever is still running: the shutdown itself ends a little before.
async fn shutdown_signal(leave: std::sync::Arc<std::sync::atomic::AtomicBool>, bound: std::time::Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let (term, usr1) = (signal(SignalKind::terminate()), signal(SignalKind::user_defined1()));
    let (mut term, mut usr1) = match (term, usr1) {
        (Ok(term), Ok(usr1)) => (term, usr1),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!("cannot listen for SIGTERM or SIGUSR1 ({e}); only SIGINT stops idem");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = usr1.recv() => {
            tracing::info!("SIGUSR1: leaving the consumer groups (scale-in)");
            leave.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let watchdog = std::thread::Builder::new().name("idem-shutdown-watchdog".into()).spawn(move || {
        std::thread::sleep(bound);
        tracing::error!(
            "shutdown did not finish within {bound:?} ([shutdown] timeout): exiting now; records whose commit \
             was not confirmed are redelivered and skipped as duplicates"
        );
        std::process::exit(1);
    });
    if let Err(e) = watchdog {
        tracing::error!("cannot start the shutdown watchdog: {e}");
    }
}
