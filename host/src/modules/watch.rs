//! Keeps every handler of this process on its active module version (and
//! its shadow version, if it has one): a
//! `LISTEN idem_module` (the store's trigger notifies on every change) for
//! speed, and a poll every [`POLL`] for what a notification cannot carry:
//! one sent while this host's connection was down is lost.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use super::Slot;

/// How often the active versions are read even without a notification;
/// well inside the 5 s within which every host must have switched.
pub const POLL: Duration = Duration::from_secs(2);

/// Runs until `stop` turns true.
pub async fn follow_activations(pool: PgPool, slots: Vec<Arc<Slot>>, mut stop: watch::Receiver<bool>) {
    if slots.iter().all(|s| s.version().is_none()) {
        return;
    }
    let mut listener = listen(&pool).await;
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let notified = async {
            match listener.as_mut() {
                Some(l) => l.recv().await.map(|n| Some(n.payload().to_owned())),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = poll.tick() => check_all(&pool, &slots).await,
            received = notified => match received {
                Ok(Some(handler)) => {
                    for slot in slots.iter().filter(|s| s.name() == handler) {
                        refresh(&pool, slot).await;
                        refresh_shadow(&pool, slot).await;
                        refresh_canary(&pool, slot).await;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    // PgListener reconnects on the next recv; the poll
                    // covers what was missed meanwhile.
                    tracing::warn!("module notifications interrupted: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            },
        }
    }
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    let listener = async {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen("idem_module").await?;
        Ok::<_, sqlx::Error>(listener)
    };
    match listener.await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!("cannot LISTEN for module changes ({e}); polling every {POLL:?}");
            None
        }
    }
}

/// Refreshes every slot whose running version is not the active one.
async fn check_all(pool: &PgPool, slots: &[Arc<Slot>]) {
    let active = match super::store::active_versions(pool).await {
        Ok(active) => active,
        Err(e) => {
            tracing::warn!("cannot read the active module versions: {e}");
            return;
        }
    };
    for slot in slots {
        let wanted = active.iter().find(|(h, _)| h == slot.name()).map(|(_, v)| *v);
        if slot.version().is_some() && wanted.is_some() && wanted != slot.version() {
            refresh(pool, slot).await;
        }
        refresh_shadow(pool, slot).await;
        refresh_canary(pool, slot).await;
    }
}

/// Follows the store's canary row of `slot`, and judges the canary
/// (`canary`): rolled back here when it fails more than the active version.
async fn refresh_canary(pool: &PgPool, slot: &Slot) {
    if let Err(e) = slot.refresh_canary(pool).await {
        tracing::warn!(handler = %slot.name(), "cannot follow the canary: {e:#}");
    }
    if let Err(e) = slot.judge_canary(pool).await {
        tracing::warn!(handler = %slot.name(), "cannot roll the canary back: {e:#}");
    }
}

/// Follows the store's shadow row of `slot` (`crate::shadow`).
async fn refresh_shadow(pool: &PgPool, slot: &Slot) {
    if let Err(e) = slot.refresh_shadow(pool).await {
        tracing::warn!(handler = %slot.name(), "cannot follow the shadow version: {e:#}");
    }
}

async fn refresh(pool: &PgPool, slot: &Slot) {
    if let Err(e) = slot.refresh(pool).await {
        tracing::error!(handler = %slot.name(), "cannot switch to the active module version: {e:#}");
    }
}
