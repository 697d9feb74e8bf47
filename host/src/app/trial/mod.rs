//! `idem test`: a handler against a file of events, before `idem deploy`.
//!
//! The events run as `idem run` would run them (the handler's schema and
//! event types, its sandbox and limits, its own role and schema, the
//! claim, savepoints, the outbox) but in one PostgreSQL transaction, which
//! is rolled back at the end unless `--commit` asks to keep it; each event
//! under a savepoint of its own, so the next sees what the earlier ones
//! left (a repeated event is a duplicate). Its HTTP requests go to a local
//! recorder (`--http record`, the default) or to their hosts under the
//! handler's allowlist (`--http allowlist`). For each event it prints the
//! statements, requests, emitted events, the outcome and the time. An id
//! older than the dedup retention gets a fresh one (a test file's ids age;
//! see `events::read`). With `--commit`, the events that succeeded are kept
//! even when others failed (their savepoints undid only the failed ones),
//! and only the component `idem run` would run may be committed.
//!
//! One transaction holds its locks and the server's oldest snapshot until
//! it ends, and each event adds subtransactions: point it at a staging
//! database, not at production.

mod events;
mod recorder;
mod replay;
mod scratch;
mod sources;
mod watch;

pub use replay::{ReplayOptions, Source, replay};
pub use watch::watch;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};

use crate::config::Config;
use crate::executor::{Executor, Pins, Trial};
use crate::output::outln;
use crate::runtime::{Handler, HandlerSettings};
use crate::validate::Validator;
use recorder::Recorder;

/// Where a handler's HTTP requests go under `idem test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HttpMode {
    /// To a local recorder, which prints them and answers `200 {}`.
    Record,
    /// To their hosts, under the handler's allowlist, as `idem run` sends them.
    Allowlist,
}

/// What `idem test` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: PathBuf,
    pub handler: String,
    /// The component to run instead of the handler's `component` file.
    pub component: Option<PathBuf>,
    pub events: PathBuf,
    pub commit: bool,
    pub http: HttpMode,
    /// Run on the config's database instead of a scratch one.
    pub no_scratch: bool,
    /// The component built from a project folder (`--component DIR`, or a
    /// folder as the handler's `component`), by [`test()`].
    pub built: Option<PathBuf>,
    /// A project's sources for its SDK's quick runner (`sources`).
    pub sources: Option<PathBuf>,
    /// A registry format's events encoded with this writer schema (from
    /// the registry) instead of the reader schema (`formats::Sampler`).
    pub schema_id: Option<u32>,
}

/// Runs the events; `Ok(true)` when every one was processed or a duplicate.
/// They run in a scratch database made for the run ([`scratch`]) unless
/// `--commit` or `--no-scratch` asks for the config's, or the server
/// refuses to make one (then the reason is printed).
pub async fn test(mut o: Options) -> anyhow::Result<bool> {
    let config = crate::app::loading::load_config(&o.config)?;
    // The component first: a project is built before anything else is
    // opened (the build sees none of it).
    let configured = config.handlers.iter().find(|h| h.name == o.handler).and_then(|h| h.component.clone());
    if let Some(project) = o.component.clone().or(configured).filter(|c| c.is_dir()) {
        o.built = Some(build(&project)?);
    }
    let own = |why: &str| {
        outln!("idem test: on the config's database ({why}): its migrations must be applied (idem migrate)")
    };
    let scratch = if o.commit {
        own("--commit keeps the results there")?;
        None
    } else if o.no_scratch {
        own("--no-scratch")?;
        None
    } else {
        match scratch::Scratch::make(&config).await? {
            Ok(made) => {
                outln!("idem test: in the scratch database {} (made for this run, dropped after)", made.name)?;
                Some(made)
            }
            Err(why) => {
                own(&why)?;
                None
            }
        }
    };
    let run = match &scratch {
        Some(s) => run(&s.config, &o).await,
        None => run(&config, &o).await,
    };
    if let Some(s) = scratch {
        s.drop().await;
    }
    run
}

/// [`test()`] on `config`'s database.
async fn run(config: &Config, o: &Options) -> anyhow::Result<bool> {
    let Some(h) = config.handlers.iter().find(|h| h.name == o.handler) else {
        let names: Vec<&str> = config.handlers.iter().map(|h| h.name.as_str()).collect();
        bail!("{} has no handler `{}` (it has: {})", o.config.display(), o.handler, names.join(", "));
    };
    let mut lines = events::read(&o.events, &h.topic, h.dedup_retention.0)?;
    let registry = config.registry.as_ref().map(crate::formats::Registry::new).transpose()?.map(std::sync::Arc::new);
    let validator = Validator::for_handler(h, registry.as_ref()).with_context(|| format!("handler `{}`", h.name))?;
    let unencoded = encode(&validator, &mut lines, o.schema_id).await?;
    let recorder = match o.http {
        HttpMode::Record => Some(Recorder::start().await.context("failed to start the HTTP recorder")?),
        HttpMode::Allowlist => None,
    };
    let exec = executor(config, h, o, recorder.as_ref()).await?;
    let mut tx = Some(exec.begin().await.context("failed to begin the test's transaction")?);
    let (mut failed, mut as_marked) = (0, 0);
    for events::Line { number: line, record, was, expect, .. } in &lines {
        if let Some(was) = was {
            outln!("line {line}: its eventId {was} is older than the dedup retention: it runs with a fresh one")?;
        }
        let Some(open) = tx.take() else {
            outln!("line {line}: not run: the transaction was closed after an earlier failure")?;
            failed += 1;
            continue;
        };
        let checked = match unencoded.iter().find(|(at, _)| at == line) {
            Some((_, why)) => Err(crate::validate::Invalid::NotJson(why.clone())),
            None => validator.check(record).await.context("cannot decode the event")?,
        };
        let came_to = match checked {
            Ok(event) => {
                let started = Instant::now();
                let trial = exec.execute_within(open, &event).await;
                let took = started.elapsed().as_secs_f64() * 1e3;
                print_event(*line, &event, &trial, took, recorder.as_ref())?;
                tx = trial.tx;
                match trial.result {
                    Ok(crate::executor::Outcome::Duplicate) => events::Outcome::Duplicate,
                    Ok(_) => events::Outcome::Processed,
                    Err(_) => events::Outcome::Failed,
                }
            }
            Err(invalid) => {
                outln!("line {line}: invalid: {invalid} (idem run would dead-letter it)")?;
                tx = Some(open);
                events::Outcome::Invalid
            }
        };
        let bad = matches!(came_to, events::Outcome::Invalid | events::Outcome::Failed);
        match expect {
            Some(wanted) if *wanted == came_to => {
                outln!("line {line}: {} as the file expects", came_to.as_str())?;
                as_marked += usize::from(bad);
            }
            Some(wanted) => {
                outln!("line {line}: the file expects {}, it came to {}", wanted.as_str(), came_to.as_str())?;
                failed += 1;
            }
            None => failed += usize::from(bad),
        }
    }
    let kept = match tx {
        Some(tx) if o.commit => {
            tx.commit().await.context("COMMIT failed")?;
            "committed"
        }
        Some(tx) => {
            tx.rollback().await;
            "rolled back"
        }
        None => "closed after a failure, nothing kept",
    };
    let expected =
        if as_marked > 0 { format!(" ({as_marked} more failed as the file expects)") } else { String::new() };
    outln!("{} event(s), {failed} failed{expected}; the transaction was {kept}", lines.len())?;
    Ok(failed == 0)
}

/// A registry format's events encoded and framed as the topic's records
/// (`formats::Sampler`); the lines that do not fit the writer schema, with why.
async fn encode(
    validator: &Validator,
    lines: &mut [events::Line],
    schema_id: Option<u32>,
) -> anyhow::Result<Vec<(usize, String)>> {
    let Some(reading) = validator.reading() else {
        if schema_id.is_some() {
            bail!("--schema-id is for a handler whose format is avro, protobuf or json-schema");
        }
        return Ok(Vec::new());
    };
    let sampler = reading.sampler(schema_id).await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    let id = sampler.schema_id();
    let mut unencoded = Vec::new();
    for line in lines.iter_mut().filter(|l| !l.raw) {
        let json = line.record.payload.take().unwrap_or_default();
        match sampler.record(&json) {
            Ok(framed) => line.record.payload = Some(framed),
            Err(why) => unencoded.push((line.number, format!("it cannot be encoded with schema id {id}: {why}"))),
        }
    }
    Ok(unencoded)
}

/// Components compiled by `idem test` kept at most (the newest), each tens
/// of MB for an interpreter's.
const TESTED_KEPT: usize = 8;

/// The runtime `idem test` compiles with: `idem run`'s, but with the
/// function cache (a rebuilt component compiles only what changed: a
/// language's runtime is found there), and its compiled components kept
/// apart from `idem run`'s (`tested/` beside them, the newest
/// [`TESTED_KEPT`]): what the function cache produced is never loaded by
/// `idem run`, and a second test of the same build still starts at once.
fn tested_runtime(config: &Config) -> anyhow::Result<crate::runtime::Runtime> {
    let Some(dir) = config.runtime.cache_dir() else { return super::startup::open_runtime(config) };
    crate::runtime::compiler::cache_functions(dir.join("functions"));
    let tested = dir.join("tested");
    prune(&tested, TESTED_KEPT);
    let mut config = config.clone();
    config.runtime.cache_dir = Some(tested.display().to_string());
    super::startup::open_runtime(&config)
}

/// Removes all but the `kept` newest files of `dir` (a cache: a failure
/// costs only space).
fn prune(dir: &std::path::Path, kept: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    for (_, path) in files.into_iter().skip(kept) {
        let _ = std::fs::remove_file(path);
    }
}

/// The handler's executor as `idem run` builds it, on its own role, with
/// the component under test, keeping a line per statement.
async fn executor(
    config: &Config,
    h: &crate::config::HandlerConfig,
    o: &Options,
    rec: Option<&Recorder>,
) -> anyhow::Result<Executor> {
    // A project folder is built already (by `test`).
    let Some(component) = o.built.clone().or_else(|| o.component.clone()).or_else(|| h.component.clone()) else {
        bail!("handler `{}` has no component file; name the one to test with --component", h.name);
    };
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&config.database.url)
        .await
        .with_context(|| format!("database unreachable at {}", super::startup::redact(&config.database.url)))?;
    crate::migrate::check(&admin).await?;
    let place = crate::sandbox::Place::of(h, &config.database_name()?)?;
    let pool = crate::sandbox::pool::connect(&config.database.url, &place, 2).await?;
    let settings = match &o.sources {
        // The runner reads the project's modules from its config.
        Some(dir) => {
            let mut h = h.clone();
            h.config.insert(sources::KEY.to_owned(), sources::collect(dir)?);
            HandlerSettings::of(&h)?
        }
        None => HandlerSettings::of(h)?,
    };
    let http = match rec {
        Some(r) => crate::capabilities::http::client_via(&settings.caps.http, &r.url, r.ca())?,
        None => crate::capabilities::http::client(&settings.caps.http)?,
    };
    let mut handler = Handler::load(&tested_runtime(config)?, &component, settings)?;
    // A store that holds versions only takes claims that name the active
    // one: the test runs under it, and keeps nothing unless it is the same
    // module.
    if let Some((version, sha256)) = crate::modules::store::active_version(&admin, &h.name).await? {
        if o.commit && sha256 != handler.sha256() {
            bail!(
                "--commit: {} is not the active module of `{}` (version {version}); deploy it first, or test without --commit",
                component.display(),
                h.name
            );
        }
        handler = handler.with_version(version);
    } else if o.commit
        && let (Some(_), Some(configured)) = (&o.component, &h.component)
        && sha256_of(&component)? != sha256_of(configured)?
    {
        bail!(
            "--commit: {} is not the handler's component ({}), which `idem run` would run; test without --commit",
            component.display(),
            configured.display()
        );
    }
    let pins = Pins { schema: place.schema.clone(), synchronous_commit: config.database.synchronous_commit.clone() };
    Ok(Executor::new(handler, pool, http, pins).transcribing())
}

/// A source project given as `--component` (an `idem new` project): built
/// with its own `build.sh`; its newest `.wasm` is the component.
///
/// The build is the project's code (build.rs, npm scripts, whatever
/// build.sh runs), as hostile as the component: it runs in an empty
/// environment ([`build_environment`]: none of the operator's secrets
/// such as `IDEM_ADMIN_TOKEN`, `IDEM_DLQ_KEY` or `DATABASE_URL`) with a
/// scratch `HOME`, and never as root: as root, idem refuses and asks for
/// the built component (a build dropped to `nobody` could not reach
/// toolchains installed under root's home, as they usually are).
fn build(project: &std::path::Path) -> anyhow::Result<PathBuf> {
    let script = project.join("build.sh");
    if !script.is_file() {
        bail!("{} is a directory without a build.sh (an `idem new` project has one)", project.display());
    }
    if rustix::process::geteuid().is_root() {
        bail!(
            "refusing to run {} as root: a project's build runs the project's own code with the rights of whoever \
             runs it. Build it as an unprivileged user (`./build.sh` in {}) and test the component it writes: \
             --component {}",
            script.display(),
            project.display(),
            project.join("NAME.wasm").display()
        );
    }
    let scratch = Scratch::new()?;
    eprintln!("idem: building {} with its build.sh, in an empty environment", project.display());
    let status = std::process::Command::new("bash")
        .arg(&script)
        .current_dir(project)
        .env_clear()
        .envs(build_environment(std::env::vars_os(), &scratch.0))
        .status()
        .with_context(|| format!("failed to run {}", script.display()))?;
    if !status.success() {
        bail!(
            "{} failed: {status} (it ran in an empty environment: only {} and a scratch HOME)",
            script.display(),
            BUILD_ENV.join(", ")
        );
    }
    let newest = std::fs::read_dir(project)?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    newest
        .map(|(_, path)| path)
        .with_context(|| format!("{} built no .wasm in {}", script.display(), project.display()))
}

/// What a project's build may see of the operator's environment: where the
/// toolchains are (Rust, npm, Python) and how to reach their registries
/// (trust roots, proxies). Nothing else: no idem setting or secret, no
/// database or cloud credentials.
const BUILD_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    // Rust: the scaffold's build.sh honours CARGO_TARGET_DIR.
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "RUSTUP_AUTO_INSTALL",
    "CARGO_TARGET_DIR",
    // TypeScript: npm ci of the SDK's tools.
    "npm_config_cache",
    "npm_config_registry",
    "npm_config_cafile",
    "NODE_EXTRA_CA_CERTS",
    // Python: componentize-py in IDEM_TOOLS, python3 (pyenv), pip.
    "IDEM_TOOLS",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "PIP_INDEX_URL",
    "PIP_CERT",
    // Registries: trust roots and proxies.
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// The build's environment: the [`BUILD_ENV`] variables the operator has,
/// `HOME` and `TMPDIR` in `scratch`, and the toolchain homes that default
/// to the operator's home (`~/.cargo`, `~/.rustup`, `~/.npm`, `~/.pyenv`)
/// named explicitly when they exist, so that a scratch `HOME` still finds
/// the installed toolchains and caches.
fn build_environment(
    operator: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    scratch: &std::path::Path,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let operator: Vec<_> = operator.collect();
    let mut env: Vec<_> =
        operator.iter().filter(|(k, _)| k.to_str().is_some_and(|k| BUILD_ENV.contains(&k))).cloned().collect();
    if let Some((_, home)) = operator.iter().find(|(k, _)| k == "HOME") {
        for (name, dir) in [
            ("CARGO_HOME", ".cargo"),
            ("RUSTUP_HOME", ".rustup"),
            ("npm_config_cache", ".npm"),
            ("PYENV_ROOT", ".pyenv"),
        ] {
            let default = std::path::Path::new(home).join(dir);
            if !env.iter().any(|(k, _)| k == name) && default.is_dir() {
                env.push((name.into(), default.into_os_string()));
            }
        }
    }
    env.push(("HOME".into(), scratch.as_os_str().to_owned()));
    env.push(("TMPDIR".into(), scratch.as_os_str().to_owned()));
    env
}

/// A fresh directory of the build's own (its `HOME` and `TMPDIR`),
/// removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("idem-build-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("failed to create the build's scratch directory {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sha256_of(path: &std::path::Path) -> anyhow::Result<String> {
    let bytes = crate::files::read_bounded(path, crate::runtime::MAX_COMPONENT_BYTES)
        .with_context(|| format!("failed to read {}", path.display()))?;
    Ok(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)))
}

/// `text` (at most `max` characters) with each of its lines escaped and
/// indented, so that a guest's multi-line message (a Python traceback)
/// reads as lines and none of them can pass for a line of this report.
fn lines(text: &str, max: usize) -> String {
    let kept: String = text.chars().take(max).collect();
    let cut = if kept.len() < text.len() { format!("… ({} bytes)", text.len()) } else { String::new() };
    let shown: Vec<String> =
        kept.split('\n').map(|l| crate::text::controls_escaped(l.trim_end_matches('\r'), max)).collect();
    shown.join("\n      ") + &cut
}

fn print_event(
    line: usize,
    event: &crate::event::Event,
    trial: &Trial,
    took_ms: f64,
    rec: Option<&Recorder>,
) -> anyhow::Result<()> {
    let outcome = match &trial.result {
        Ok(outcome) => format!("{outcome:?}").to_lowercase(),
        // Its text may hold the guest's words or the server's: escaped,
        // but a traceback's lines as lines (indented under the event's).
        Err(e) => format!("failed ({}): {}", format!("{:?}", e.class()).to_lowercase(), lines(&e.to_string(), 2_000)),
    };
    outln!("line {line}: {} {}: {outcome} in {took_ms:.1} ms", event.id, event.event_type)?;
    for statement in &trial.statements {
        outln!("  sql  {statement}")?;
    }
    match rec {
        Some(rec) => rec.take().iter().try_for_each(|r| outln!("  http {r}"))?,
        None => {
            for (host, status) in &trial.requests {
                let status = status.map_or("no answer".to_owned(), |s| s.to_string());
                outln!("  http {host} -> {status}")?;
            }
        }
    }
    for e in &trial.emitted {
        let payload = serde_json::Value::Object(e.payload.clone());
        let (key, payload) =
            (crate::text::shown(&e.key, 200), crate::text::controls_escaped(&payload.to_string(), 2_000));
        outln!("  emit {} to {} key {key}: {payload}", e.event_type, e.topic)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    #[test]
    fn the_build_sees_the_toolchains_and_no_secret() {
        let home = std::env::temp_dir().join(format!("idem-build-env-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".cargo")).expect("home");
        let operator = [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", home.to_str().expect("utf-8")),
            ("IDEM_ADMIN_TOKEN", "admin-secret"),
            ("IDEM_DLQ_KEY", "dlq-secret"),
            ("DATABASE_URL", "postgres://u:p@db/x"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("IDEM_TOOLS", "/opt/tools"),
            ("RUSTUP_HOME", "/opt/rustup"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = super::build_environment(operator.into_iter(), std::path::Path::new("/scratch"));
        let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.to_string_lossy().into_owned());
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin:/bin"));
        assert_eq!(get("HOME").as_deref(), Some("/scratch"));
        assert_eq!(get("TMPDIR").as_deref(), Some("/scratch"));
        assert_eq!(get("IDEM_TOOLS").as_deref(), Some("/opt/tools"));
        assert_eq!(get("RUSTUP_HOME").as_deref(), Some("/opt/rustup"), "the operator's choice kept");
        assert_eq!(get("CARGO_HOME"), Some(home.join(".cargo").to_string_lossy().into_owned()), "the default, named");
        assert_eq!(get("PYENV_ROOT"), None, "no ~/.pyenv: not named");
        for secret in ["IDEM_ADMIN_TOKEN", "IDEM_DLQ_KEY", "DATABASE_URL", "AWS_SECRET_ACCESS_KEY"] {
            assert!(!names.iter().any(|n| n == secret), "{secret} reached the build: {names:?}");
        }
        let _ = std::fs::remove_dir_all(&home);
    }
}
