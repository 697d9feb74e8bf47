//! What every capability is, as Spin's factors are: one module that owns
//! what its part of the handler's config means (its settings, compiled
//! once per handler), its state for one invocation, what it leaves after
//! the call, and what it does just before COMMIT. The executor knows the
//! set only through `Capabilities` (generated from the list in `mod.rs`),
//! so the path of an event (alone, in a batch, in `idem test`) is the same
//! for every capability, and adding one touches no executor code.

use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;
use wasmtime::component::Linker;

use super::HasCapabilities;
use crate::config::HandlerConfig;
use crate::error::ExecError;
use crate::stats::Stats;
use crate::transaction::EventTx;

/// One capability of idem's world: an interface of `wit/` and its host.
pub(crate) trait Capability: Sized + Send + 'static {
    /// Its interface's name in `wit/` (`import <name>;` in `world.wit`).
    const INTERFACE: &'static str;

    /// What its part of a handler's config comes to, compiled once per
    /// handler (credentials read, schemas compiled). Its `Default` is what
    /// a handler configured with every default gets.
    type Settings: Clone + std::fmt::Debug + Default + Send + Sync + 'static;

    /// What it leaves after a call, for the commit ([`Capability::before_commit`])
    /// or for `idem test` to show.
    type Left: Default + Send + 'static;

    /// The ranges of its part of a handler's `[[handler]]` section: a value
    /// that would panic the host, fail every event or be refused later in
    /// words that do not name its key is refused here, naming the key, the
    /// value and what is accepted. Run when the config loads
    /// (`app::loading::load_config`) and first in `startup::prepare_as`,
    /// before anything connects.
    fn check(handler: &HandlerConfig) -> anyhow::Result<()> {
        let _ = handler;
        Ok(())
    }

    /// Its settings from a handler's `[[handler]]` section (checked).
    fn settings(handler: &HandlerConfig) -> anyhow::Result<Self::Settings>;

    /// Its state for one invocation.
    fn prepare(settings: &Arc<Self::Settings>, call: &Call<'_>) -> Self;

    /// What a kept instance's store holds between two invocations
    /// (`runtime::warm`): nothing could be done with it even if guest
    /// code ran.
    fn husk(&self) -> Self;

    /// After the call: its counters into `after.stats`, a veto of the
    /// commit into `after.veto` (whatever the guest answered), and what it
    /// leaves.
    fn finish(&mut self, after: &mut After<'_>) -> Self::Left;

    /// Whether it has a [`Capability::before_commit`] (the executor skips
    /// the others' at no cost).
    const BEFORE_COMMIT: bool = false;

    /// Just before COMMIT, inside the transaction: what each event that
    /// ran in it left, in the events' order. An error fails the commit (a
    /// batch's then runs its events alone).
    fn before_commit<'a>(
        tx: &'a mut EventTx,
        left: &'a [(Uuid, &'a Self::Left)],
    ) -> impl Future<Output = Result<(), ExecError>> + Send + 'a {
        let _ = (tx, left);
        async { Ok(()) }
    }

    /// Links its interface, on its state (or a view of it) projected from
    /// any store state that holds an invocation's capabilities.
    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()>;
}

/// What one invocation's capabilities are built from besides their
/// settings: the event, how it runs, and what the executor shares between
/// invocations.
pub(crate) struct Call<'a> {
    pub handler: &'a str,
    pub event_id: &'a str,
    /// The record's value, when the payload was decoded from it (`origin`).
    pub origin: Option<&'a crate::event::Origin>,
    /// In a batch (see `db`).
    pub batched: bool,
    /// The end of the invocation's budget.
    pub deadline: tokio::time::Instant,
    /// The provenance headers every event this invocation emits carries
    /// (`idem.correlation-id`, `traceparent`); `None`: it may emit nothing
    /// (its event runs without a dedup row, or its handler has no emit
    /// topic: every emit is refused by its topic first).
    pub provenance: Option<Vec<(String, String)>>,
    /// Keep what each call did, to show it (`idem test`).
    pub transcript: bool,
    /// The invocation's tape (`super::tape`): a captured event's, or a
    /// replay's.
    pub tape: Option<Arc<super::tape::Tape>>,
    pub shared: &'a Shared,
}

/// What a handler's executor shares between its invocations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared {
    /// The HTTP client (its connections kept alive between events).
    pub http_client: reqwest::Client,
    /// What the handler sent under each key, when its events run side by
    /// side in a transaction (`http::SentKeys`).
    pub sent_keys: Option<Arc<super::http::SentKeys>>,
    /// The handler's rates on this host (`crate::throttle`), kept across
    /// module versions.
    pub throttles: Arc<crate::throttle::Throttles>,
    /// A shadow run's executor: requests are recorded, never sent
    /// (`crate::shadow`).
    pub recording: bool,
}

/// What the capabilities said of an invocation, after it.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// The event must not commit, for this reason.
    pub veto: Option<ExecError>,
    /// A retryable failure of the guest's was really this.
    pub excuse: Option<ExecError>,
}

/// What [`Capability::finish`] may say besides what it leaves.
pub(crate) struct After<'a> {
    /// Where the handler's counters go (`idem run`).
    pub stats: Option<&'a Stats>,
    /// The first capability's reason the event must not commit.
    pub veto: Option<ExecError>,
    /// What a retryable failure of the guest's really was, when a
    /// capability knows better (a destination that asked to be left
    /// alone): it replaces the guest's failure.
    pub excuse: Option<ExecError>,
}

impl After<'_> {
    /// Vetoes the commit, unless another capability did first.
    pub(crate) fn veto(&mut self, error: ExecError) {
        self.veto.get_or_insert(error);
    }

    /// Names what a retryable failure of the guest's really was.
    pub(crate) fn excuse(&mut self, error: ExecError) {
        self.excuse.get_or_insert(error);
    }
}
