//! Compiling a component is host work whose cost its author chooses: an
//! uploaded component can take minutes of CPU to compile. In the `idem`
//! binary every compilation runs in a child process of its own (`idem
//! __compile-component`), never on the threads that process events, under
//! a limit of CPU seconds (`RLIMIT_CPU`, which counts every compiler
//! thread, set by the child on itself before it reads a byte) and a
//! wall-clock deadline twice as long; past either, the kernel or the parent
//! kills it, so the work stops, not only the waiting. The child gets an
//! empty environment (no secret reaches it) and the bytes on stdin, and
//! writes the compiled artifact on stdout.
//!
//! A program that embeds idem as a library compiles in its own process
//! unless it calls [`compile_in_children`] (as `cli::main` does).
//!
//! `idem test` also calls [`cache_functions`]: its children then keep each
//! compiled function in a private folder ([`super::functions`]) and reuse
//! the unchanged ones, so a rebuilt component compiles in a fraction of
//! the time.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::functions::FunctionCache;

/// A compilation stopped at its limit (the component's cost, not its form).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OverLimit(String);

/// The argument that makes `idem` a compiling child.
pub const CHILD_COMMAND: &str = "__compile-component";

static CHILD: OnceLock<PathBuf> = OnceLock::new();

/// The folder of compiled functions the children use, if any.
static FUNCTIONS: OnceLock<PathBuf> = OnceLock::new();

/// The child's environment variable naming [`FUNCTIONS`] (its only one).
const FUNCTIONS_ENV: &str = "IDEM_FUNCTION_CACHE";

/// From now on, compile components in children running `exe` (the `idem`
/// binary itself).
pub fn compile_in_children(exe: PathBuf) {
    let _ = CHILD.set(exe);
}

/// From now on, compiling children keep the functions they compile in
/// `dir` and reuse them (`idem test`).
pub fn cache_functions(dir: PathBuf) {
    let _ = FUNCTIONS.set(dir);
}

/// Compiles `bytes` for `engine`, within `cpu` seconds of CPU.
pub(crate) fn compile(engine: &Engine, bytes: &[u8], cpu: Duration) -> anyhow::Result<Component> {
    match CHILD.get() {
        None => Ok(Component::new(engine, bytes)?),
        Some(exe) => in_child(engine, exe, bytes, cpu),
    }
}

/// The compiler processes running now, by process id: a host stopped
/// during start-up ends them as it exits ([`kill_running`]), rather than
/// leaving them to compile for nobody until their CPU limit.
static RUNNING: std::sync::Mutex<Compilers> = std::sync::Mutex::new(Compilers { exiting: false, pids: Vec::new() });

struct Compilers {
    /// Set by [`kill_running`]: no compiler starts after it.
    exiting: bool,
    pids: Vec<u32>,
}

fn compilers() -> std::sync::MutexGuard<'static, Compilers> {
    RUNNING.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kills every compiler process still running, and refuses to start any
/// more: the host is exiting.
pub fn kill_running() {
    let mut compilers = compilers();
    compilers.exiting = true;
    for pid in compilers.pids.iter().filter_map(|pid| rustix::process::Pid::from_raw(i32::try_from(*pid).ok()?)) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// A compiler process in [`RUNNING`] until this is dropped.
struct Running(u32);

impl Running {
    /// Starts `command`, registered before the lock is let go: a
    /// [`kill_running`] either comes first (and nothing starts) or finds
    /// it, never in between.
    fn spawn(command: &mut Command) -> anyhow::Result<(Child, Self)> {
        let mut compilers = compilers();
        if compilers.exiting {
            bail!("the host is exiting: no compiler process is started");
        }
        let child = command.spawn()?;
        let id = child.id();
        compilers.pids.push(id);
        Ok((child, Self(id)))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        compilers().pids.retain(|pid| *pid != self.0);
    }
}

fn in_child(engine: &Engine, exe: &PathBuf, bytes: &[u8], cpu: Duration) -> anyhow::Result<Component> {
    let seconds = cpu.as_secs().max(1);
    let mut command = Command::new(exe);
    command.arg(CHILD_COMMAND).arg(seconds.to_string()).env_clear();
    if let Some(dir) = FUNCTIONS.get() {
        command.env(FUNCTIONS_ENV, dir);
    }
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let (mut child, running) = Running::spawn(&mut command)
        .with_context(|| format!("failed to start a compiler process ({})", exe.display()))?;
    let (Some(mut stdin), Some(mut stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        bail!("the compiler process has no pipes");
    };
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let reader = std::thread::spawn(move || {
        let mut artifact = Vec::new();
        stdout.read_to_end(&mut artifact).map(|_| artifact)
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.take(16 << 10).read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(seconds * 2 + 5);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "compiling it took longer than {}s of wall-clock time (max_compile_seconds = {seconds})",
                seconds * 2 + 5
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(running);
    let _ = writer.join();
    let artifact = reader.join().map_err(|_| anyhow::anyhow!("the compiler's output was lost"))??;
    let said = errors.join().unwrap_or_default();
    if !status.success() {
        use std::os::unix::process::ExitStatusExt as _;
        if compilers().exiting {
            bail!("the host is exiting: the compile was stopped");
        }
        if matches!(status.signal(), Some(libc::SIGXCPU | libc::SIGKILL)) {
            return Err(
                OverLimit(format!("compiling it took more than {seconds} CPU seconds (max_compile_seconds)")).into()
            );
        }
        bail!("{}", said.trim());
    }
    #[expect(
        unsafe_code,
        reason = "deserialising runs compiled code as is; the artifact was produced a moment ago by this very \
                  binary's compiler, for an engine of the same configuration, and came straight through a pipe"
    )]
    // SAFETY: the child is this executable, compiling with the same engine
    // configuration (`super::engine_config`) and serialising with
    // `Engine::precompile_component`; a mismatch is refused by wasmtime's
    // own compatibility check. Trusting its output is trusting the
    // compiler, as compiling in this process would.
    let component = unsafe { Component::deserialize(engine, &artifact) };
    component.map_err(|e| anyhow::anyhow!("the compiled component does not load: {e:#}"))
}

/// `idem __compile-component SECONDS`: the child's side.
pub fn child_main() -> ExitCode {
    match child() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn child() -> anyhow::Result<()> {
    let seconds: u64 =
        std::env::args().nth(2).and_then(|s| s.parse().ok()).context("usage: __compile-component SECONDS")?;
    // Before anything else: the kernel stops this process at the limit.
    let limit = rustix::process::Rlimit { current: Some(seconds), maximum: Some(seconds + 1) };
    rustix::process::setrlimit(rustix::process::Resource::Cpu, limit)
        .context("failed to limit the compiler's CPU time")?;
    let mut bytes = Vec::new();
    std::io::stdin().take(super::MAX_COMPONENT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > super::MAX_COMPONENT_BYTES {
        bail!("larger than {} bytes", super::MAX_COMPONENT_BYTES);
    }
    let mut config = super::engine_config();
    // A cache that cannot be opened costs a full compilation, nothing more.
    if let Some(cache) = std::env::var_os(FUNCTIONS_ENV).and_then(|d| FunctionCache::open(Path::new(&d)).ok()) {
        config.enable_incremental_compilation(Arc::new(cache)).map_err(anyhow::Error::from)?;
    }
    let engine = Engine::new(&config).map_err(anyhow::Error::from)?;
    let artifact = engine.precompile_component(&bytes).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    std::io::stdout().write_all(&artifact)?;
    Ok(())
}
