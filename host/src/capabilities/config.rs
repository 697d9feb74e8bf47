//! The `config` import: the key/values the operator set for the handler
//! (`[handler.config]`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::wit::config;

/// The handler's configured key/values, shared by its invocations.
pub(crate) struct ConfigCapability {
    values: Arc<BTreeMap<String, String>>,
}

impl ConfigCapability {
    pub(crate) fn new(values: Arc<BTreeMap<String, String>>) -> Self {
        Self { values }
    }
}

impl config::Host for ConfigCapability {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.values.get(&key).cloned())
    }
}
