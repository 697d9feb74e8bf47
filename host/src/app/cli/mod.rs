//! The command line: `idem run`, `idem check`, `idem new`, `idem test`, `idem migrate`, `idem dlq`,
//! `idem deploy`, `idem handlers`, `idem rollback`, `idem maintenance`,
//! `idem outbox`, `idem status`, `idem token`, `idem audit`. The `idem`
//! binary is [`main`] and nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

use crate::output::outln;
use crate::runtime::NativeHandlers;

mod actions;
mod args;
mod commands;
mod dlq;
mod outbox;
mod signals;
mod when;

use actions::{end_producer, maintenance, migrate};
use commands::{Command, TokenCommand};
use signals::{Stop, StopSignals};

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

/// Most worker threads `IDEM_WORKER_THREADS` may ask for.
const MAX_WORKER_THREADS: usize = 1024;

/// The async runtime every command runs on: one worker thread per core
/// (tokio's default), or `IDEM_WORKER_THREADS` of them. Fewer workers than
/// cores cost a light handler less CPU per event: tokio wakes an idle
/// worker to steal each task woken while another runs, and on two cores
/// shared with PostgreSQL those wake-ups were a tenth of the host's CPU
/// (docs/operating.md has the figures); a handler whose guest does much
/// work per event (Python, TypeScript) needs a worker per core. Kafka's
/// polls and compiles run on blocking threads either way.
fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(text) = crate::env::non_blank(crate::env::WORKER_THREADS) {
        let workers = text.trim().parse::<usize>().ok().filter(|n| (1..=MAX_WORKER_THREADS).contains(n));
        let workers = workers.with_context(|| {
            format!(
                "{} must be a whole number of threads from 1 to {MAX_WORKER_THREADS}: got `{text}`",
                crate::env::WORKER_THREADS
            )
        })?;
        builder.worker_threads(workers);
    }
    builder.build().context("tokio refused to build it")
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
    let runtime = match async_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idem: failed to start the async runtime: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(dispatch(cli, &natives)) {
        Ok(()) => ExitCode::SUCCESS,
        // Its reader has all it wanted (`idem dlq list | head`).
        Err(e) if e.chain().any(|cause| cause.is::<crate::output::Closed>()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem: {e:#}");
            exit_code(&e)
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

/// The exit code of a command that failed with `e`: the admin API's
/// answer when that was the failure (3 unreachable, 4 unauthorised, 5
/// forbidden, 6 not found, 7 invalid, 8 conflict), else 1. clap's usage
/// errors exit 2. docs/commands.md lists them.
fn exit_code(e: &anyhow::Error) -> ExitCode {
    let api = e.chain().find_map(|cause| cause.downcast_ref::<crate::admin::client::ApiError>());
    api.map_or(ExitCode::FAILURE, |api| ExitCode::from(api.exit_code()))
}

/// Logs to stderr (`IDEM_LOG` filters; `IDEM_LOG_FORMAT=json`: one JSON
/// object per line, an event's fields — handler, topic, partition, offset,
/// event_id, … — at its top level), plus OpenTelemetry traces when the
/// environment names an OTLP endpoint (see `traces`).
fn logging() -> anyhow::Result<Option<crate::traces::Provider>> {
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
    let (traces, provider) = match crate::traces::layer()? {
        Some((layer, provider)) => (Some(layer), Some(provider)),
        None => (None, None),
    };
    tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).init();
    Ok(provider)
}

/// `idem pause` or `idem resume` (`action`) of `scope`, through a host's API.
async fn pausing(
    admin: &commands::AdminTarget,
    scope: &commands::PauseScope,
    action: &str,
    reason: Option<String>,
) -> anyhow::Result<()> {
    let mut body = scope.body();
    if let Some(reason) = reason {
        body["reason"] = reason.into();
    }
    let answer = crate::admin::client::pause(&admin.target(), &scope.handler, action, &body).await?;
    admin.print(&answer, |a| format!("idem: {}\n", a["message"].as_str().unwrap_or("")))
}

/// `idem audit`: the trail, newest first, narrowed by the filters given.
async fn audit(
    admin: &commands::AdminTarget,
    handler: Option<String>,
    actor: Option<String>,
    before: Option<i64>,
    limit: u32,
) -> anyhow::Result<()> {
    let mut query = vec![("limit", limit.to_string())];
    query.extend(handler.map(|h| ("handler", h)));
    query.extend(actor.map(|a| ("actor", a)));
    query.extend(before.map(|b| ("before", b.to_string())));
    let trail = crate::admin::client::operators::audit(&admin.reading(), &query).await?;
    admin.print(&trail, crate::admin::client::operators::render_audit)
}

/// `idem deploy`: an upload (made active, a shadow, a canary), or the end
/// of a shadow or a canary, through a host's API.
async fn deploying(args: commands::DeployArgs) -> anyhow::Result<()> {
    use crate::admin::client::{self, DeployAs};
    let commands::DeployArgs {
        admin,
        handler,
        path,
        note,
        shadow,
        activate_shadow,
        stop_shadow,
        canary,
        promote,
        abort,
    } = args;
    let target = admin.target();
    let answer = match path {
        Some(path) if !activate_shadow && !stop_shadow && !promote && !abort => {
            let as_ = match (shadow, canary) {
                (true, _) => DeployAs::Shadow,
                (false, Some(percent)) => DeployAs::Canary(percent),
                (false, None) => DeployAs::Active,
            };
            client::deploy(&target, &handler, &path, note.as_deref(), as_).await?
        }
        _ if promote || abort => client::canary(&target, &handler, promote).await?,
        _ => client::shadow(&target, &handler, activate_shadow).await?,
    };
    admin.print(&answer, |a| format!("idem: {handler}: {}\n", a["message"].as_str().unwrap_or("")))
}

/// `idem rewind`: a rewind (or its dry run), the handler's rewinds, or
/// one's report, through a host's API.
async fn rewinding(args: commands::RewindArgs) -> anyhow::Result<()> {
    use crate::admin::client::rewinds;
    let (admin, handler) = (&args.admin, args.handler.as_str());
    if args.list {
        return admin.print(&rewinds::list(&admin.reading(), handler).await?, rewinds::render_list);
    }
    if let Some(id) = args.report {
        return admin.print(&rewinds::report(&admin.reading(), handler, id).await?, rewinds::render_report);
    }
    let body = serde_json::json!({
        "to": args.to, "topic": args.topic, "partition": args.partition,
        "dry_run": args.dry_run, "force": args.force, "reason": args.reason,
    });
    admin.print(&rewinds::rewind(&admin.target(), handler, &body).await?, rewinds::render_asked)
}

/// `idem quarantine`: the parked keys, or a key released or
/// dead-lettered, through a host's API.
async fn quarantining(args: commands::QuarantineArgs) -> anyhow::Result<()> {
    use crate::admin::client::quarantine;
    let (admin, handler) = (&args.admin, args.handler.as_str());
    let (action, key) = match (args.release, args.dead_letter) {
        (Some(key), None) => ("release", key),
        (None, Some(key)) => ("dead-letter", key),
        _ => {
            let listed = quarantine::list(&admin.reading(), handler, args.limit).await?;
            return admin.print(&listed, quarantine::render_list);
        }
    };
    let named = if args.base64 { "key_base64" } else { "key" };
    let body = serde_json::json!({ named: key, "events": args.events, "reason": args.reason });
    let answer = quarantine::act(&admin.target(), handler, action, &body).await?;
    admin.print(&answer, |a| format!("idem: {}\n", a["message"].as_str().unwrap_or("")))
}

/// `idem throttle`: the handler's rates, or a change of one, through a
/// host's API.
async fn throttling(args: commands::ThrottleArgs) -> anyhow::Result<()> {
    use crate::admin::client::throttles;
    let (admin, handler) = (&args.admin, args.handler.as_str());
    let Some(target) = args.target else {
        return admin.print(&throttles::list(&admin.reading(), handler).await?, throttles::render_list);
    };
    if args.per_second.is_none() && !args.unlimited && !args.reset {
        anyhow::bail!("--target {target}: say --per-second N, --unlimited or --reset");
    }
    let body = serde_json::json!({
        "target": target, "per_second": args.per_second, "burst": args.burst, "reset": args.reset, "reason": args.reason,
    });
    let answer = throttles::change(&admin.target(), handler, &body).await?;
    admin.print(&answer, |a| format!("idem: {}\n", a["message"].as_str().unwrap_or("")))
}

/// `idem test`: a file of events, or captured events replayed.
async fn testing(args: commands::TestArgs) -> anyhow::Result<()> {
    let commands::TestArgs { config, handler, component, commit, no_scratch, http, watch, sources, schema_id, .. } =
        args;
    if args.replay.is_some() || args.from_capture {
        use crate::app::trial::Source;
        let source = match args.replay {
            Some(file) => Source::File(file),
            None => {
                let token = args.token.filter(|t| !t.is_empty()).or_else(commands::read_token);
                let target = crate::admin::client::Target { url: args.url, token };
                Source::Host { target, limit: args.captures, save: args.save }
            }
        };
        let options = crate::app::trial::ReplayOptions { config, handler, component, source };
        if crate::app::trial::replay(options).await? {
            return Ok(());
        }
        anyhow::bail!("the replay diverged from the captures");
    }
    let events = args.events.context("an events file is needed (or --replay FILE, or --from-capture)")?;
    let options = crate::app::trial::Options {
        config,
        handler,
        component,
        events,
        commit,
        http,
        no_scratch,
        built: None,
        sources,
        schema_id,
    };
    if watch {
        return crate::app::trial::watch(options).await;
    }
    if crate::app::trial::test(options).await? { Ok(()) } else { anyhow::bail!("not every event was processed") }
}

async fn dispatch(cli: Cli, natives: &NativeHandlers) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, exit_when_drained } => serve(&config, exit_when_drained, natives).await,
        Command::Check { config } => check(&config, natives).await,
        Command::New { name, lang, format, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let written = crate::scaffold::new_project_reading(&name, lang, format, &dir)?;
            outln!(
                "idem: wrote {} files into {}; next: cd there, ./build.sh, ./test.sh",
                written.len(),
                dir.display()
            )?;
            Ok(())
        }
        Command::Test(args) => testing(args).await,
        Command::Dlq { command } => dlq::dlq(command, natives).await,
        Command::Deploy(args) => deploying(args).await,
        Command::Handlers { admin } => {
            let answer = crate::admin::client::handlers(&admin.reading()).await?;
            admin.print(&answer, crate::admin::client::render_handlers)
        }
        Command::Rollback { admin, handler, named, to } => {
            let handler = handler.or(named).unwrap_or_default();
            let answer = crate::admin::client::rollback(&admin.target(), &handler, to).await?;
            admin.print(&answer, |a| format!("idem: {handler}: {}\n", a["message"].as_str().unwrap_or("")))
        }
        Command::Pause { admin, scope, reason } => pausing(&admin, &scope, "pause", Some(reason)).await,
        Command::Resume { admin, scope } => pausing(&admin, &scope, "resume", None).await,
        Command::Rewind(args) => rewinding(args).await,
        Command::Quarantine(args) => quarantining(args).await,
        Command::Throttle(args) => throttling(args).await,
        Command::Token { command } => token(command).await,
        Command::Audit { admin, handler, actor, before, limit } => audit(&admin, handler, actor, before, limit).await,
        Command::Status { url, token, once } => {
            let token = token.filter(|t| !t.is_empty()).or_else(commands::read_token);
            crate::admin::client::status::show(&url, token.as_deref(), once).await
        }
        Command::Maintenance { config, json } => maintenance(&config, json).await,
        Command::Outbox { url, token, config, producer, failed, redrive, ids, remove_producer, database_url, json } => {
            if let Some(name) = remove_producer {
                return end_producer(&config.unwrap_or_else(|| "idem.toml".into()), &name, database_url).await;
            }
            let query = outbox::OutboxQuery { producer, failed, redrive, ids, json };
            match (url, config) {
                (Some(url), None) => {
                    let token = token.filter(|t| !t.is_empty()).or_else(commands::read_token);
                    outbox::via_host(&crate::admin::client::Target { url, token }, query).await
                }
                (_, config) => outbox::from_database(&config.unwrap_or_else(|| "idem.toml".into()), query).await,
            }
        }
        Command::Migrate { database_url, config } => migrate(database_url, config).await,
    }
}

/// `idem token`.
async fn token(command: TokenCommand) -> anyhow::Result<()> {
    use crate::admin::client::operators;
    match command {
        TokenCommand::Create { admin, name, scope } => {
            let created = operators::create(&admin.target(), &name, &scope).await?;
            admin.print(&created, operators::render_created)
        }
        TokenCommand::List { admin } => {
            let listing = operators::list(&admin.reading()).await?;
            admin.print(&listing, operators::render_list)
        }
        TokenCommand::Revoke { admin, name } => {
            let answer = operators::revoke(&admin.target(), &name).await?;
            let said = |a: &serde_json::Value| match a["revoked"].as_bool() {
                Some(true) => format!("idem: {name}'s token is revoked (every host refuses it within 2 s)\n"),
                _ => format!("idem: {name}'s token was already revoked\n"),
            };
            admin.print(&answer, said)
        }
    }
}

/// `idem run`. The stop signals are listened for first (`signals`): one
/// during start-up ends the process there, before anything is consumed.
async fn serve(config: &std::path::Path, exit_when_drained: bool, natives: &NativeHandlers) -> anyhow::Result<()> {
    crate::fd_limit::raise();
    let starting = StopSignals::listen().guard_start_up();
    let prepared = crate::app::startup::prepare_with(config, natives).await;
    let signals = starting.over().await?;
    let prepared = prepared?;
    let options = crate::app::RunOptions { exit_when_drained, ..Default::default() };
    let bound = prepared.config.shutdown.timeout.0;
    let stopping = shutdown_signal(signals, options.leave.clone(), bound);
    let reports = crate::app::run(prepared, options, stopping).await?;
    report(&reports)
}

/// `idem run`'s last word on stdout, one JSON line: what happened to every
/// handler's records (none, when stopped during start-up).
fn report(reports: &[crate::stats::HandlerReport]) -> anyhow::Result<()> {
    outln!("{}", serde_json::json!({ "handlers": reports }))?;
    Ok(())
}

/// `idem check`.
async fn check(config: &std::path::Path, natives: &NativeHandlers) -> anyhow::Result<()> {
    let loaded = crate::app::loading::load_config(config)?;
    let prepared = crate::app::startup::prepare_as(loaded, natives, crate::app::startup::Seed::No).await?;
    for warning in &prepared.warnings {
        outln!("idem: warning: {warning}")?;
    }
    if !prepared.unreadable.is_empty() {
        anyhow::bail!(
            "the contract check failed: {}\n(records written with such a schema are dead-lettered: make the reader \
             schema able to read it; a version no producer writes any more can be deleted from the registry, and an id \
             seen on the topic leaves the check once unused for the handler's dedup retention)",
            prepared.unreadable.join("\n")
        );
    }
    outln!("idem: {} checked: {} handler(s) ready", config.display(), prepared.handlers.len())?;
    Ok(())
}
/// Resolves on SIGINT or SIGTERM (a restart is expected: static members
/// keep their partitions) or SIGUSR1 (scale-in: `leave` is set, the host
/// leaves its groups). From then on a watchdog ends the process at `bound`
/// whatever is still running: the shutdown itself ends a little before.
async fn shutdown_signal(
    mut signals: StopSignals,
    leave: std::sync::Arc<std::sync::atomic::AtomicBool>,
    bound: std::time::Duration,
) {
    if signals.next().await == Stop::Leave {
        tracing::info!("SIGUSR1: leaving the consumer groups (scale-in)");
        leave.store(true, std::sync::atomic::Ordering::SeqCst);
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
