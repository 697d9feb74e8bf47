//! Handlers compiled into the program that embeds idem, instead of loaded
//! as components: no wasm at all, the same capabilities.
//!
//! A native handler is trusted code (it runs in the host's process, with
//! no memory or CPU sandbox and no fresh instance per event), so the `idem`
//! binary has none: a program that embeds the host registers its own with
//! [`NativeHandlers`] and [`crate::app::cli::main_with`], and a handler's config
//! names one with `native = "<name>"` instead of `component`. Everything
//! else is the same as for a component: the executor claims, batches and
//! commits; its statements go through the handler's own role, the same
//! statement checks, savepoints and limits; its HTTP requests through the
//! same allowlist and `Idempotency-Key`s. The benchmark's variant (c) races
//! one against the same logic as a component, which measures what wasm
//! costs.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::capabilities::Capabilities;
use crate::wit::{config, db, emit, http, types};

/// What a native handler's `handle` returns: the outer error is a host
/// fault (as for a component, it fails the event the way a trap does); the
/// inner one is the handler's own answer.
pub type NativeResult = wasmtime::Result<Result<(), types::HandlerError>>;

/// One native handler. `handle` is called once per event, inside the
/// event's transaction, exactly where a component's `handle` would be.
pub trait NativeHandler: Send + Sync + 'static {
    fn handle<'a>(
        &'a self,
        event: &'a types::Event,
        cx: &'a mut NativeContext<'_>,
    ) -> Pin<Box<dyn Future<Output = NativeResult> + Send + 'a>>;
}

/// The capabilities of one event, as a component's imports see them.
pub struct NativeContext<'s> {
    pub(crate) caps: &'s mut Capabilities,
}

impl NativeContext<'_> {
    /// As the `emit.send` import.
    pub async fn emit(&mut self, message: emit::Message) -> wasmtime::Result<Result<String, emit::EmitError>> {
        emit::Host::send(&mut self.caps.emit, message).await
    }

    /// As the `db.execute` import.
    pub async fn execute(
        &mut self,
        statement: &str,
        params: Vec<db::Value>,
    ) -> wasmtime::Result<Result<u64, db::DbError>> {
        db::Host::execute(&mut self.caps.db(), statement.to_owned(), params).await
    }

    /// As the `db.query` import.
    pub async fn query(
        &mut self,
        statement: &str,
        params: Vec<db::Value>,
    ) -> wasmtime::Result<Result<db::Rows, db::DbError>> {
        db::Host::query(&mut self.caps.db(), statement.to_owned(), params).await
    }

    /// As the `http.send` import (the host adds the `Idempotency-Key`).
    pub async fn send(&mut self, request: http::Request) -> wasmtime::Result<Result<http::Response, http::HttpError>> {
        http::Host::send(&mut self.caps.http, request).await
    }

    /// As the `config.get` import.
    pub async fn config(&mut self, key: &str) -> wasmtime::Result<Option<String>> {
        config::Host::get(&mut self.caps.config, key.to_owned()).await
    }
}

/// The native handlers a program registers, by the name a config gives.
#[derive(Clone, Default)]
pub struct NativeHandlers {
    by_name: BTreeMap<String, Arc<dyn NativeHandler>>,
}

impl NativeHandlers {
    pub fn new() -> Self {
        Self::default()
    }

    #[must_use]
    pub fn with(mut self, name: impl Into<String>, handler: impl NativeHandler) -> Self {
        self.by_name.insert(name.into(), Arc::new(handler));
        self
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn NativeHandler>> {
        self.by_name.get(name).cloned()
    }

    /// The registered names, for a refusal's message.
    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }
}

impl fmt::Debug for NativeHandlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}
