//! A slot's shadow version (`crate::shadow`): loaded, checked and swapped
//! as the active version is, from the store's `shadow` row.

use std::sync::{Arc, PoisonError};

use sqlx::PgPool;

use super::{Failed, RETRY_FAILED, Slot, UploadError, store};
use crate::runtime::Handler;
use crate::shadow::Shadow;

impl Slot {
    /// The shadow version this host runs beside the active one, if any.
    pub fn shadow(&self) -> Option<Arc<Shadow>> {
        self.shadow.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Runs `handler` (validated, with its store version) as the shadow
    /// from the next batch on.
    pub fn install_shadow(&self, handler: &Handler) {
        let Some(version) = handler.version() else { return };
        let executor = self.executor().with_handler(handler.clone());
        let shadow = Shadow::new(version, handler.sha256().to_owned(), &executor);
        *self.shadow.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(shadow));
        tracing::info!(handler = %self.name, version, "shadow version running beside the active one");
    }

    /// No shadow from the next batch on.
    pub fn end_shadow(&self) {
        if let Some(was) = self.shadow.write().unwrap_or_else(PoisonError::into_inner).take() {
            tracing::info!(handler = %self.name, version = was.version(), "shadow run ended");
        }
    }

    /// Follows the store's shadow row: loads and checks a new shadow
    /// version, drops one the store no longer names. Nothing here holds
    /// the lock of the active version's swaps: compiling a shadow never
    /// delays an activation.
    pub async fn refresh_shadow(&self, pool: &PgPool) -> anyhow::Result<()> {
        if self.executor().handler().is_native() {
            return Ok(());
        }
        let Some((version, sha256)) = store::shadow_version(pool, &self.name).await? else {
            self.end_shadow();
            return Ok(());
        };
        if self.shadow().is_some_and(|s| s.version() == version && s.sha256() == sha256) {
            return Ok(());
        }
        let failed = self.shadow_failed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if failed.is_some_and(|f| f.version == version && f.sha256 == sha256 && f.at.elapsed() < RETRY_FAILED) {
            return Ok(());
        }
        let Some(module) = store::shadow(pool, &self.name).await? else { return Ok(()) };
        match self.validate(&module.bytes, &format!("{} shadow version {version}", self.name)).await {
            Ok(handler) => {
                self.install_shadow(&handler.with_version(module.version));
                Ok(())
            }
            Err(e @ UploadError::Unavailable(_)) => Err(e.into()),
            Err(e) => {
                let reason = e.to_string();
                tracing::error!(handler = %self.name, version, "the shadow version cannot run on this host: {reason}");
                let at = std::time::Instant::now();
                *self.shadow_failed.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(Failed { version, sha256: module.sha256, reason, at });
                Err(e.into())
            }
        }
    }
}
