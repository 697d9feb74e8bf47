//! A loaded handler: its component compiled and linked once, instantiated
//! afresh in a new `Store` for every event, or for every
//! `events_per_instance` events ([`super::warm`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;

use super::Runtime;
use super::native::{NativeContext, NativeHandler, NativeResult};
use super::settings::HandlerSettings;
use super::state::HostState;
use super::warm::{Kept, Shelf};
use crate::capabilities::{Capabilities, Policies};
use crate::wit::{HandlerPre, types};

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("failed to read component {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not a WebAssembly component (a core module or another file?): {reason}")]
    NotAComponent { path: String, reason: String },
    #[error("{path} does not implement the idem:handler@0.1.0 world: {reason}")]
    WrongWorld { path: String, reason: String },
    #[error("{path} {reason}")]
    ForbiddenImport { path: String, reason: String },
    #[error("{path} was refused: {reason}")]
    TooCostly { path: String, reason: String },
}

/// A handler ready to run events.
#[derive(Clone)]
pub struct Handler {
    runtime: Runtime,
    body: Body,
    settings: Arc<HandlerSettings>,
    /// The capabilities' settings as every invocation shares them.
    policies: Arc<Policies>,
    /// SHA-256 of the component's bytes (hex): which module processed an
    /// event; `native:<name>` for a native handler.
    sha256: Arc<str>,
    /// Its version in the module store; `None`: not from the store (a
    /// native handler, or a component loaded directly).
    version: Option<i32>,
    /// Its idle kept instances (none unless `events_per_instance` > 1).
    shelf: Arc<Shelf>,
}

/// What runs an event.
#[derive(Clone)]
enum Body {
    /// A component, compiled and linked once.
    Component(HandlerPre<HostState>),
    /// Code compiled into the program (see [`super::native`]).
    Native(Arc<dyn NativeHandler>),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler").field("name", &self.settings.name).finish_non_exhaustive()
    }
}

impl Handler {
    /// Compiles the component at `path` and checks it against the world.
    pub fn load(runtime: &Runtime, path: &Path, settings: HandlerSettings) -> Result<Self, LoadError> {
        let shown = path.display().to_string();
        let bytes = crate::files::read_bounded(path, super::MAX_COMPONENT_BYTES)
            .map_err(|source| LoadError::Read { path: shown.clone(), source })?;
        Self::from_bytes(runtime, &shown, &bytes, settings)
    }

    pub fn from_bytes(
        runtime: &Runtime,
        what: &str,
        bytes: &[u8],
        settings: HandlerSettings,
    ) -> Result<Self, LoadError> {
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
        let component = runtime.compile(bytes, &sha256, settings.max_compile).map_err(|e| {
            let (path, reason) = (what.to_owned(), format!("{e:#}"));
            if e.is::<super::compiler::OverLimit>() {
                LoadError::TooCostly { path, reason }
            } else {
                LoadError::NotAComponent { path, reason }
            }
        })?;
        for (import, _) in component.component_type().imports(runtime.engine()) {
            super::imports::check(import)
                .map_err(|reason| LoadError::ForbiddenImport { path: what.to_owned(), reason })?;
        }
        let wrong_world =
            |e: wasmtime::Error| LoadError::WrongWorld { path: what.to_owned(), reason: format!("{e:#}") };
        let instance_pre = runtime.linker().instantiate_pre(&component).map_err(wrong_world)?;
        let pre = HandlerPre::new(instance_pre).map_err(wrong_world)?;
        let mut settings = settings;
        settings.events_per_instance =
            super::policy::events_per_instance(settings.events_per_instance, bytes, &settings.name);
        Ok(Self::new(runtime, Body::Component(pre), settings, sha256.into()))
    }

    /// A handler whose `handle` is `native`, registered as `name`.
    pub fn native(runtime: &Runtime, name: &str, native: Arc<dyn NativeHandler>, settings: HandlerSettings) -> Self {
        Self::new(runtime, Body::Native(native), settings, format!("native:{name}").into())
    }

    fn new(runtime: &Runtime, body: Body, settings: HandlerSettings, sha256: Arc<str>) -> Self {
        let policies = settings.caps.shared();
        // 0 (not configured) reaches here only for a native handler.
        let shelf = Shelf::shared(settings.events_per_instance.max(1));
        Self { runtime: runtime.clone(), body, settings: Arc::new(settings), policies, sha256, version: None, shelf }
    }

    /// The capabilities' settings, shared by the handler's invocations.
    pub(crate) fn policies(&self) -> &Policies {
        &self.policies
    }

    pub fn settings(&self) -> &HandlerSettings {
        &self.settings
    }

    pub fn is_native(&self) -> bool {
        matches!(self.body, Body::Native(_))
    }

    /// The same handler, as `version` of the module store.
    #[must_use]
    pub fn with_version(mut self, version: i32) -> Self {
        self.version = Some(version);
        self
    }

    /// The same handler with no kept instance in common with this one: a
    /// shadow run's (`crate::shadow`), so that no guest memory passes
    /// between a rehearsal and a live run.
    #[must_use]
    pub(crate) fn with_own_shelf(&self) -> Self {
        // Short-lived (a shadow offer, a start-up check): not swept.
        let shelf = Arc::new(Shelf::new(self.settings.events_per_instance.max(1)));
        Self { shelf, ..self.clone() }
    }

    /// An event trapped on an instance kept from earlier events (the
    /// executor's `KeptTrapped`): the version's idle instances go too, and
    /// after [`super::warm::MOST_KEPT_TRAPS`] it keeps none (said once).
    pub(crate) fn kept_trapped(&self) {
        if self.shelf.kept_trapped() {
            tracing::error!(
                handler = %self.settings.name, version = ?self.version,
                "{} events trapped on instances kept from earlier events: this version now runs every event on a \
                 fresh instance (its memory does not stay the same from event to event; fix it, or set \
                 events_per_instance = 1)",
                super::warm::MOST_KEPT_TRAPS
            );
        }
    }

    /// Its version in the module store (see [`Handler::with_version`]).
    pub fn version(&self) -> Option<i32> {
        self.version
    }

    /// SHA-256 of the component's bytes, hex (`native:<name>` for a native handler).
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Calls `handle(event)` with `caps` lent to the store: on a kept
    /// instance if one is idle (unless `fresh`), or on a fresh one. Hands the
    /// capabilities (and the transaction with them) back whatever happened,
    /// with the guest's answer or the trap, and whether the instance had
    /// served earlier events. The call ends at `deadline` (the event's
    /// transaction's budget), not a full timeout after the claim.
    pub(crate) async fn invoke(
        &self,
        caps: Capabilities,
        event: &types::Event,
        deadline: tokio::time::Instant,
        fresh: bool,
    ) -> Returned {
        let pre = match &self.body {
            Body::Component(pre) => pre,
            Body::Native(native) => return self.invoke_native(native, caps, event, deadline).await,
        };
        let kept = if fresh { None } else { self.shelf.take() };
        let (mut store, instance, served, husk) = match kept {
            Some(Kept { mut store, instance, served, .. }) => {
                let husk = store.data_mut().lend(caps);
                (store, Some(instance), served, Some(husk))
            }
            None => (self.store(caps), None, 0, None),
        };
        let call = async {
            let instance = match instance {
                Some(instance) => instance,
                None => pre.instantiate_async(&mut store).await?,
            };
            let answer = instance.call_handle(&mut store, event).await?;
            Ok((instance, answer))
        };
        let called = tokio::time::timeout_at(deadline, call).await;
        let stderr = store.data_mut().settle_output();
        match called {
            // It returned: it may serve another event.
            Ok(Ok((instance, answer))) if self.shelf.keeps() => {
                let husk = husk.unwrap_or_else(|| store.data().caps.husk());
                let caps = store.data_mut().lend(husk);
                self.shelf.put(Kept { store, instance, served: served + 1, since: std::time::Instant::now() });
                Returned { caps, invocation: self.answer(Ok(Ok(answer))), stderr, kept: served > 0 }
            }
            // A trap or an overrun leaves the instance in no state to reuse.
            called => {
                let invocation = self.answer(called.map(|r| r.map(|(_, answer)| answer)));
                Returned { caps: store.into_data().caps, invocation, stderr, kept: served > 0 }
            }
        }
    }

    async fn invoke_native(
        &self,
        native: &Arc<dyn NativeHandler>,
        mut caps: Capabilities,
        event: &types::Event,
        deadline: tokio::time::Instant,
    ) -> Returned {
        let mut cx = NativeContext { caps: &mut caps };
        let invocation = self.answer(tokio::time::timeout_at(deadline, native.handle(event, &mut cx)).await);
        Returned { caps, invocation, stderr: String::new(), kept: false }
    }

    fn answer(&self, call: Result<NativeResult, tokio::time::error::Elapsed>) -> Invocation {
        match call {
            Ok(Ok(Ok(()))) => Invocation::Ok,
            Ok(Ok(Err(types::HandlerError::Retryable(m)))) => Invocation::Failed { retryable: true, message: m },
            Ok(Ok(Err(types::HandlerError::Permanent(m)))) => Invocation::Failed { retryable: false, message: m },
            Ok(Err(trap)) => Invocation::Trapped(trap),
            Err(_) => Invocation::TimedOut(self.settings.timeout),
        }
    }

    /// Instantiates the component once in a store like an event's, without
    /// calling it. A start-up check: it finds what would otherwise fail
    /// every event (a memory limit below the guest's initial memory, say).
    /// A handler that keeps instances keeps this one for its first event.
    pub(crate) async fn try_instantiate(&self, caps: Capabilities) -> (Capabilities, wasmtime::Result<()>) {
        let pre = match &self.body {
            Body::Component(pre) => pre,
            Body::Native(_) => return (caps, Ok(())),
        };
        let mut store = self.store(caps);
        // A start function that never returns must not hang start-up.
        let instantiated = match tokio::time::timeout(self.settings.timeout, pre.instantiate_async(&mut store)).await {
            Ok(instantiated) => instantiated,
            Err(_) => Err(wasmtime::Error::msg(format!("instantiation took longer than {:?}", self.settings.timeout))),
        };
        match instantiated {
            Ok(instance) if self.shelf.keeps() => {
                // What its start wrote is no event's output.
                store.data_mut().mark_output();
                let husk = store.data().caps.husk();
                let caps = store.data_mut().lend(husk);
                self.shelf.put(Kept { store, instance, served: 0, since: std::time::Instant::now() });
                (caps, Ok(()))
            }
            instantiated => (store.into_data().caps, instantiated.map(drop)),
        }
    }

    /// A fresh store holding `caps`, with the handler's limits; its pipes
    /// hold two invocations' output if it may be kept (see `warm`).
    fn store(&self, caps: Capabilities) -> Store<HostState> {
        let invocations = if self.shelf.keeps() { 2 } else { 1 };
        let state = HostState::new(self.limits(), caps, invocations);
        let mut store = Store::new(self.runtime.engine(), state);
        store.limiter(|s| &mut s.limits);
        // Yield at every epoch tick: lets the invocation's wall-clock limit
        // fire inside a guest that never calls the host.
        store.epoch_deadline_async_yield_and_update(1);
        store
    }

    /// The limits of a new store.
    fn limits(&self) -> super::limits::GuestLimits {
        super::limits::GuestLimits::new(self.settings.max_memory_bytes)
    }
}

/// What an invocation hands back: the capabilities it was lent (the
/// transaction with them), what came of the call, the tail of what the
/// guest wrote to stderr meanwhile (its output is already logged), and
/// whether the instance had served earlier events (`kept`: a trap there may
/// be theirs, see `executor`).
pub(crate) struct Returned {
    pub(crate) caps: Capabilities,
    pub(crate) invocation: Invocation,
    pub(crate) stderr: String,
    pub(crate) kept: bool,
}

/// What one call of `handle` came to.
#[derive(Debug)]
pub(crate) enum Invocation {
    Ok,
    Failed { retryable: bool, message: String },
    Trapped(wasmtime::Error),
    TimedOut(Duration),
}
