//! What a store holds while one event runs: the WASI context the guest's std
//! needs, and the capabilities bound to this event.

use std::sync::Arc;

use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::handler::{HandlerSettings, StateSeed};
use crate::capabilities::db::DbCapability;
use crate::capabilities::http::HttpCapability;

/// Bytes of guest stderr kept per invocation, to explain a trap (a panic
/// message lands there). A guest that writes more traps.
const STDERR_CAPACITY: usize = 1 << 20;

pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: MemoryOutputPipe,
    pub(crate) limits: StoreLimits,
    pub(crate) settings: Arc<HandlerSettings>,
    pub(crate) event_id: String,
    pub(crate) db: DbCapability,
    pub(crate) http: HttpCapability,
}

impl HostState {
    pub(crate) fn new(seed: StateSeed, event_id: String, db: DbCapability, http: HttpCapability) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let wasi = WasiCtx::builder().stderr(stderr.clone()).build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stderr,
            limits: seed.limits,
            settings: seed.settings,
            event_id,
            db,
            http,
        }
    }

    /// The tail of what the guest wrote to stderr, for error messages.
    pub(crate) fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        let start = text.char_indices().rev().nth(1999).map_or(0, |(i, _)| i);
        text[start..].to_owned()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The `types` interface only defines types; its `Host` trait is empty.
impl super::bindings::types::Host for HostState {}
