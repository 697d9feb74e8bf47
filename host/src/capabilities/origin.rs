//! The `origin` import: the record's value as it arrived, for a handler
//! that needs the bytes its producer wrote rather than the JSON idem made
//! of them (a signature over the Avro body, a record forwarded unchanged).

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{After, Call, Capability, HasCapabilities};
use crate::config::HandlerConfig;
use crate::event::Origin;
use crate::wit::origin;

/// One invocation's record: shared with the event (kept beside its JSON
/// since it was validated), copied into the guest only when it asks.
pub(crate) struct OriginCapability {
    origin: Option<Origin>,
}

impl Capability for OriginCapability {
    const INTERFACE: &'static str = "origin";
    /// Nothing to configure: the record is the event's.
    type Settings = ();
    type Left = ();

    fn settings(_handler: &HandlerConfig) -> anyhow::Result<()> {
        Ok(())
    }

    fn prepare(_settings: &Arc<()>, call: &Call<'_>) -> Self {
        Self { origin: call.origin.cloned() }
    }

    fn husk(&self) -> Self {
        Self { origin: None }
    }

    fn finish(&mut self, _after: &mut After<'_>) {}

    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        origin::add_to_linker::<T, HasSelf<Self>>(linker, |t| &mut t.capabilities().origin)
    }
}

impl origin::Host for OriginCapability {
    async fn value(&mut self) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.origin.as_ref().map(|o| o.value.to_vec()))
    }

    async fn schema_id(&mut self) -> wasmtime::Result<Option<u32>> {
        Ok(self.origin.as_ref().map(|o| o.schema_id))
    }
}
