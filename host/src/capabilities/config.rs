//! The `config` import: the key/values the operator set for the handler
//! (`[handler.config]`).

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{After, Call, Capability, HasCapabilities};
use crate::config::HandlerConfig;
use crate::wit::config;

/// The handler's configured key/values, shared by its invocations.
pub(crate) struct ConfigCapability {
    values: Arc<BTreeMap<String, String>>,
}

impl Capability for ConfigCapability {
    const INTERFACE: &'static str = "config";
    type Settings = BTreeMap<String, String>;
    type Left = ();

    /// Keys under `idem.` are idem's own: `idem test --sources` hands a
    /// project to an SDK's quick runner as `idem.test.sources`, and a
    /// config must never hand code to a runner deployed by mistake.
    fn check(handler: &HandlerConfig) -> anyhow::Result<()> {
        if let Some(key) = handler.config.keys().find(|k| k.starts_with("idem.")) {
            anyhow::bail!(
                "handler `{}`: config key `{key}` is reserved: keys under `idem.` are idem's own",
                handler.name
            );
        }
        Ok(())
    }

    fn settings(handler: &HandlerConfig) -> anyhow::Result<Self::Settings> {
        Ok(handler.config.clone())
    }

    fn prepare(settings: &Arc<Self::Settings>, _call: &Call<'_>) -> Self {
        Self { values: settings.clone() }
    }

    fn husk(&self) -> Self {
        Self { values: Arc::default() }
    }

    fn finish(&mut self, _after: &mut After<'_>) {}

    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        config::add_to_linker::<T, HasSelf<Self>>(linker, |t| &mut t.capabilities().config)
    }
}

impl config::Host for ConfigCapability {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.values.get(&key).cloned())
    }
}
