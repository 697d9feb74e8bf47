//! What a handler can reach, one module per interface of the world
//! (`wit/`). As in wasmtime-wasi, a capability owns its state (one per
//! invocation) and implements its interface's `Host` trait on that state,
//! or on a view of it with what the invocation shares (the transaction):
//! it never names the store's type. [`Capabilities`] is one invocation's
//! set, built by the executor; [`add_to_linker`] links each interface with
//! a projection from any store state that holds a set
//! ([`HasCapabilities`]).
//!
//! Adding a capability: its interface in `wit/` (and `import` it in
//! `world.wit`); its module here, with its state and `Host` impl; its
//! field, its construction in [`Capabilities::new`], its line in
//! [`add_to_linker`] and its name in [`INTERFACES`] below (what it needs of
//! the handler's settings arrives in [`Grants`], which the executor fills).

mod allowance;
pub(crate) mod config;
pub(crate) mod db;
pub(crate) mod emit;
mod fault;
pub(crate) mod http;
pub(crate) mod log;

pub use fault::HostFault;

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use crate::transaction::Lent;
use crate::wit;

/// The `idem:handler` interfaces served here: what a component may import
/// of idem's world (`runtime::imports`, module uploads).
pub(crate) const INTERFACES: &[&str] = &["types", "db", "http", "config", "log", "emit"];

/// One invocation's capabilities, and the transaction they share.
pub(crate) struct Capabilities {
    /// The event's transaction, lent for the invocation: the executor
    /// hands it (or a share of it) in here and takes it back after.
    pub(crate) tx: Lent,
    pub(crate) db: db::DbCapability,
    pub(crate) http: http::HttpCapability,
    pub(crate) config: config::ConfigCapability,
    pub(crate) log: log::LogCapability,
    pub(crate) emit: emit::EmitCapability,
}

/// What one invocation's capabilities are built from: the executor fills
/// it for each event from the handler's settings.
pub(crate) struct Grants {
    pub(crate) handler: String,
    pub(crate) event_id: String,
    /// In a batch (see `db`).
    pub(crate) batched: bool,
    pub(crate) max_db_statements: u32,
    pub(crate) max_http_requests: u32,
    pub(crate) http_client: reqwest::Client,
    pub(crate) http_policy: Arc<http::HttpPolicy>,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    pub(crate) emit_policy: Arc<emit::EmitPolicy>,
    pub(crate) max_emits: u32,
    pub(crate) max_emit_bytes: usize,
    /// The provenance headers every event this invocation emits carries
    /// (`idem.correlation-id`, `traceparent`); `None`: it may emit nothing
    /// (its event runs without a dedup row).
    pub(crate) provenance: Option<Vec<(String, String)>>,
    /// Keep a line per statement (`idem test`).
    pub(crate) transcript: bool,
    /// What the handler sent under each key, when its events run side by
    /// side in a transaction (`http::SentKeys`).
    pub(crate) sent_keys: Option<Arc<http::SentKeys>>,
}

impl Capabilities {
    /// Every capability's state for one invocation in `tx`.
    pub(crate) fn new(tx: Lent, grants: Grants) -> Self {
        let Grants { handler, event_id, batched, max_db_statements, max_http_requests, .. } = grants;
        let http = http::HttpCapability::new(
            grants.http_client,
            grants.http_policy,
            event_id.clone(),
            max_http_requests,
            tx.deadline(),
        )
        .checking(grants.sent_keys);
        let emit =
            emit::EmitCapability::new(grants.emit_policy, grants.max_emits, grants.max_emit_bytes, grants.provenance);
        let db = db::DbCapability::new(handler.clone(), max_db_statements, batched);
        Self {
            db: if grants.transcript { db.transcribing() } else { db },
            http,
            emit,
            config: config::ConfigCapability::new(grants.config),
            log: log::LogCapability::new(handler, event_id),
            tx,
        }
    }

    /// What a kept instance's store holds between two invocations
    /// (`runtime::warm`): no transaction, and no allowance of any kind,
    /// so that nothing could be done with it even if guest code ran.
    pub(crate) fn husk(&self) -> Self {
        Self {
            tx: Lent::Returned,
            db: db::DbCapability::new(String::new(), 0, false),
            http: self.http.husk(),
            config: config::ConfigCapability::new(Arc::default()),
            log: log::LogCapability::new(String::new(), String::new()),
            emit: emit::EmitCapability::new(Arc::default(), 0, 0, None),
        }
    }

    /// The `db` interface's view: its state, and the transaction.
    pub(crate) fn db(&mut self) -> db::DbView<'_> {
        db::DbView { ctx: &mut self.db, tx: &mut self.tx }
    }
}

/// A store's state that holds an invocation's [`Capabilities`].
pub(crate) trait HasCapabilities: Send + 'static {
    fn capabilities(&mut self) -> &mut Capabilities;
}

/// Links every interface of [`INTERFACES`], each on its capability's own
/// state or view, projected from `T`.
pub(crate) fn add_to_linker<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wit::types::add_to_linker::<T, HasSelf<Capabilities>>(linker, |t| t.capabilities())?;
    wit::db::add_to_linker::<T, db::Db>(linker, |t| t.capabilities().db())?;
    wit::http::add_to_linker::<T, HasSelf<http::HttpCapability>>(linker, |t| &mut t.capabilities().http)?;
    wit::config::add_to_linker::<T, HasSelf<config::ConfigCapability>>(linker, |t| &mut t.capabilities().config)?;
    wit::log::add_to_linker::<T, HasSelf<log::LogCapability>>(linker, |t| &mut t.capabilities().log)?;
    wit::emit::add_to_linker::<T, HasSelf<emit::EmitCapability>>(linker, |t| &mut t.capabilities().emit)?;
    Ok(())
}

/// The `types` interface only defines types; its `Host` trait is empty.
impl wit::types::Host for Capabilities {}
