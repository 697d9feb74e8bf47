//! The WebAssembly side of the host: one [`Runtime`] (engine and linker) per
//! process, one [`Handler`] per configured handler (its component compiled
//! and pre-instantiated once), and a fresh `Store` per event (or per
//! `events_per_instance` events, see [`warm`]).

/// The generated bindings, where native handlers have always found them.
pub use crate::wit as bindings;
mod cache;
pub mod compiler;
mod functions;
mod handler;
pub mod imports;
mod limits;
pub mod native;
mod policy;
mod pool;
mod settings;
mod state;
mod warm;

use state::HostState;

use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

pub use crate::capabilities::http::{Credential, HttpPolicy};
pub use cache::ArtifactCache;
pub use handler::{Handler, LoadError};
pub(crate) use handler::{Invocation, Returned};
pub use native::{NativeContext, NativeHandler, NativeHandlers, NativeResult};
pub use pool::PoolSize;
pub use settings::HandlerSettings;

/// The largest component file idem reads from disk: `max_module_mib`'s
/// own ceiling (256 MiB); a handler's upload limit is checked on top.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// How often the epoch advances. A running guest yields to the async runtime
/// at every tick, so the invocation's wall-clock limit can fire even inside a
/// tight loop, and a busy guest never starves the other partitions.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The engine and the linker every handler is instantiated with.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<ArtifactCache>,
}

impl Runtime {
    /// A runtime whose pool fits a few handlers ([`PoolSize::default`]).
    pub fn new() -> anyhow::Result<Self> {
        Self::with_pool(PoolSize::default())
    }

    /// A runtime whose instance pool is sized by `pool` (see [`pool`]).
    pub fn with_pool(pool: PoolSize) -> anyhow::Result<Self> {
        Self::with_pool_and_cache(pool, None)
    }

    /// As [`Runtime::with_pool`], keeping compiled components in `cache`.
    pub fn with_pool_and_cache(pool: PoolSize, cache: Option<ArtifactCache>) -> anyhow::Result<Self> {
        let mut config = engine_config();
        config.allocation_strategy(pool.strategy());
        let engine = match Engine::new(&config) {
            Ok(engine) => engine,
            // The pool reserves its address space up front; where that is
            // refused (a `ulimit -v`, say), run on demand, slower but right.
            Err(e) => {
                tracing::warn!("the instance pool could not be reserved ({e}); instantiating on demand (slower)");
                config.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
                Engine::new(&config).map_err(anyhow::Error::from).context("failed to create the wasmtime engine")?
            }
        };

        let mut linker = Linker::new(&engine);
        // A Rust guest built with std imports WASI's cli/io interfaces even if
        // it never uses them; they get an empty context (no files, no env, no
        // sockets), and stderr is captured to explain traps.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(anyhow::Error::from)?;
        crate::capabilities::add_to_linker(&mut linker).map_err(anyhow::Error::from)?;

        let inner = Arc::new(Inner { engine, linker, cache });
        spawn_epoch_ticker(Arc::downgrade(&inner)).context("failed to start the epoch thread")?;
        Ok(Self { inner })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    /// Compiles `bytes` (whose SHA-256 is `sha256`) within `cpu` seconds
    /// of CPU ([`compiler`]), or loads the result of an earlier
    /// compilation from the cache.
    pub(crate) fn compile(&self, bytes: &[u8], sha256: &str, cpu: std::time::Duration) -> anyhow::Result<Component> {
        let engine = &self.inner.engine;
        let Some(cache) = &self.inner.cache else { return compiler::compile(engine, bytes, cpu) };
        if let Some(component) = cache.load(engine, sha256) {
            return Ok(component);
        }
        let component = compiler::compile(engine, bytes, cpu)?;
        cache.store(engine, sha256, &component);
        Ok(component)
    }
}

/// What every engine of idem compiles with: the compiling child's
/// ([`compiler`]) and the runtime's, whose artifacts must be compatible.
fn engine_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // For `perf`: guest functions named in /tmp/perf-<pid>.map (docs/perf).
    if std::env::var_os("IDEM_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// Advances the engine's epoch until the runtime is dropped.
fn spawn_epoch_ticker(inner: Weak<Inner>) -> std::io::Result<()> {
    thread::Builder::new().name("idem-epoch".into()).spawn(move || {
        while let Some(inner) = inner.upgrade() {
            inner.engine.increment_epoch();
            drop(inner);
            thread::sleep(EPOCH_TICK);
        }
    })?;
    Ok(())
}
