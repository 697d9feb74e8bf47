//! The transactional outbox (docs/outbox.md): events written in the
//! transaction that decides them, published to Kafka by a relay after it
//! commits.
//!
//! - `write`: what the executor does with the events a transaction's
//!   guests emitted, just before COMMIT (`idem_api.emit_events`);
//! - `relay`: a producer's committed rows published with librdkafka's
//!   idempotent producer, one holder of a lease at a time;
//! - `store`: reading, counting and re-driving rows (`idem outbox`).

pub mod lease;
pub mod provision;
pub mod relay;
mod holds;
mod send;
pub mod store;
/// (The executor imports from here directly: `outbox/mod.rs` reaches the
/// relay, which the executor must not depend on.)
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Notify, watch};

use crate::config::Config;
pub use relay::{Relay, RelayStats};

/// The producers whose rows this config's hosts publish: every handler
/// with `[[handler.emit]]`, and every `[[outbox.producer]]`.
pub fn producers(config: &Config) -> Vec<String> {
    let handlers = config.handlers.iter().filter(|h| !h.emit.is_empty()).map(|h| h.name.clone());
    handlers.chain(config.outbox.producers.iter().map(|p| p.name.clone())).collect()
}

/// A start-up check (`idem check`, `idem run`): the relays' producer can
/// be made from the config's `[kafka]` properties.
pub fn check_producer(config: &Config) -> anyhow::Result<()> {
    match producers(config).first() {
        Some(producer) => send::kafka_producer(config, producer).map(drop),
        None => Ok(()),
    }
}

/// The relays' tasks on a host, and each relay's stats by producer.
pub type Started = (Vec<tokio::task::JoinHandle<()>>, Vec<(String, Arc<RelayStats>)>);

/// Every producer's relay on this host, and the listener that wakes them
/// on NOTIFY; each a task that ends on `stop`.
pub fn start(config: &Config, pool: &PgPool, stop: &watch::Receiver<bool>) -> anyhow::Result<Started> {
    let producers = producers(config);
    if producers.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    // Unique among hosts, and among restarts of this one.
    let holder = format!(
        "{}-{}-{}",
        crate::identity::hostname().unwrap_or_else(|| "host".into()),
        std::process::id(),
        // The random tail of a v7 id.
        &uuid::Uuid::now_v7().simple().to_string()[24..]
    );
    let mut wakes = HashMap::new();
    let (mut tasks, mut stats) = (Vec::new(), Vec::new());
    for producer in producers {
        if relay::fault_no_relay() {
            continue;
        }
        let wake = Arc::new(Notify::new());
        let relay = Relay::new(config, pool.clone(), &producer, &holder, wake.clone())?;
        stats.push((producer.clone(), relay.stats.clone()));
        wakes.insert(producer, wake);
        tasks.push(tokio::spawn(relay.serve(stop.clone())));
    }
    tasks.push(tokio::spawn(listen(pool.clone(), wakes, stop.clone())));
    Ok((tasks, stats))
}

/// Wakes a producer's relay when a commit NOTIFYs `idem_outbox` with its
/// name. Any role may NOTIFY: a wake-up only ends a relay's wait early (a
/// `Notify` holds one at most), and names it does not know are ignored.
async fn listen(pool: PgPool, wakes: HashMap<String, Arc<Notify>>, mut stop: watch::Receiver<bool>) {
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!("outbox: cannot LISTEN ({e}); the relays poll meanwhile");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                }
            }
        };
        if let Err(e) = listener.listen("idem_outbox").await {
            tracing::warn!("outbox: cannot LISTEN ({e}); the relays poll meanwhile");
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
            }
        }
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                received = listener.recv() => match received {
                    Ok(notification) => {
                        if let Some(wake) = wakes.get(notification.payload()) {
                            wake.notify_one();
                        }
                    }
                    Err(e) => {
                        tracing::warn!("outbox: LISTEN failed ({e}); listening again");
                        break;
                    }
                },
            }
        }
    }
}
