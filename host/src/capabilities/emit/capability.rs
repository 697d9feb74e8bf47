//! The `emit` import as a [`Capability`]: its settings (`[[handler.emit]]`
//! and the caps), its state per invocation, and its hook before COMMIT,
//! which writes what the transaction's invocations emitted into
//! `idem.outbox` (`write`).

use std::sync::Arc;

use uuid::Uuid;
use wasmtime::component::{HasSelf, Linker};

use super::{EmitCapability, EmitPolicy, Emitted};
use crate::capabilities::{After, Call, Capability, HasCapabilities};
use crate::config::{HandlerConfig, HandlerLimits};
use crate::error::ExecError;
use crate::transaction::EventTx;

/// What an operator configures of a handler's emits.
#[derive(Debug, Clone)]
pub struct EmitSettings {
    /// Its topics, event types and schemas (`[[handler.emit]]`), compiled.
    pub policy: Arc<EmitPolicy>,
    /// Events one invocation may emit (`[handler.limits] max_emits`).
    pub max_emits: u32,
    /// Bytes of one emitted event's payload, key and headers together.
    pub max_bytes: usize,
}

impl Default for EmitSettings {
    fn default() -> Self {
        let limits = HandlerLimits::default();
        Self { policy: Arc::default(), max_emits: limits.max_emits, max_bytes: limits.max_emit_bytes }
    }
}

impl Capability for EmitCapability {
    const INTERFACE: &'static str = "emit";
    type Settings = EmitSettings;
    /// The events it emitted, written if its transaction commits.
    type Left = Vec<Emitted>;
    const BEFORE_COMMIT: bool = true;

    fn check(handler: &HandlerConfig) -> anyhow::Result<()> {
        let limits = &handler.limits;
        if !(1..=1_000_000).contains(&limits.max_emits) || !(1..=(1 << 20)).contains(&limits.max_emit_bytes) {
            anyhow::bail!(
                "handler `{}`: limits.max_emits must be 1 to 1000000 and limits.max_emit_bytes 1 to 1048576 \
                 (got {} and {})",
                handler.name,
                limits.max_emits,
                limits.max_emit_bytes
            );
        }
        Ok(())
    }

    /// Reads and compiles the emit topics' schemas.
    fn settings(handler: &HandlerConfig) -> anyhow::Result<EmitSettings> {
        Ok(EmitSettings {
            policy: Arc::new(EmitPolicy::load(&handler.emit)?),
            max_emits: handler.limits.max_emits,
            max_bytes: handler.limits.max_emit_bytes,
        })
    }

    fn prepare(settings: &Arc<EmitSettings>, call: &Call<'_>) -> Self {
        let policy = settings.policy.clone();
        Self::new(policy, settings.max_emits, settings.max_bytes, call.provenance.clone())
    }

    fn husk(&self) -> Self {
        Self::new(Arc::default(), 0, 0, None)
    }

    fn finish(&mut self, _after: &mut After<'_>) -> Vec<Emitted> {
        std::mem::take(&mut self.emitted)
    }

    /// The events the transaction's invocations emitted, into the outbox,
    /// each naming its cause.
    async fn before_commit<'a>(tx: &'a mut EventTx, left: &'a [(Uuid, &'a Vec<Emitted>)]) -> Result<(), ExecError> {
        let emits: Vec<(Uuid, &Vec<Emitted>)> =
            left.iter().filter(|(_, emitted)| !emitted.is_empty()).map(|(id, emitted)| (*id, *emitted)).collect();
        if emits.is_empty() {
            return Ok(());
        }
        super::write::write(tx, &emits).await
    }

    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::emit::add_to_linker::<T, HasSelf<Self>>(linker, |t| &mut t.capabilities().emit)
    }
}
