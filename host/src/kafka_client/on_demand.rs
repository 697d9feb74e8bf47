//! A producer made when something is to be sent, dropped after a while
//! without a send: a handler's DLQ producer, an outbox relay's.
//!
//! A producer is not free while it waits. rdkafka's producer has a thread
//! that polls in 100 ms waits, and the rdkafka 0.39 crate hands librdkafka
//! each wait's remaining time in whole milliseconds, rounded down: asked as
//! 99 ms, the wait ends with nearly a millisecond left, spent in a loop of
//! polls that do not wait. About 1% of a core per producer, busy or idle
//! (the benchmark's profile: 1.2% of the host's CPU in `producer polling
//! thread`, in `clock_gettime`). Most handlers dead-letter rarely, and a
//! relay sends only on the host holding its lease: a host of many handlers
//! would burn a core for producers with nothing to send.
//!
//! So a producer lives while it is used and about [`IDLE`] after; the next
//! use makes another (a connection and a producer
//! id: milliseconds, more with TLS). One is made and dropped at once, so a
//! config librdkafka refuses stops the start, not the first send.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rdkafka::ClientConfig;
use tokio::time::Instant;

use crate::kafka_client::{Aside, Producer, Quiet};

/// How long a producer is kept unused (up to a quarter more: the watch
/// looks again at a quarter of it while a use goes on).
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// A producer shared by its users: whichever reference goes last drops it,
/// and the [`Aside`] takes that drop off the runtime.
pub(crate) type Shared = Arc<Aside<Producer>>;

/// A producer made on demand from `client`, kept while it is used.
pub(crate) struct OnDemand {
    client: ClientConfig,
    what: String,
    idle: Duration,
    held: Arc<Mutex<Held>>,
    /// One maker at a time: callers that find none wait for its producer.
    making: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Held {
    producer: Option<Shared>,
    last_use: Option<Instant>,
    /// Whether a task watches for the producer's idleness.
    watched: bool,
}

/// `Held`'s fields are consistent at every step: a panic elsewhere while
/// it was locked leaves nothing to mend.
fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

impl OnDemand {
    /// Makes a producer and drops it (aside): a property librdkafka
    /// refuses fails here, not at the first send.
    pub(crate) fn new(client: ClientConfig, what: String, idle: Duration) -> anyhow::Result<Self> {
        let made: Producer = crate::kafka_client::create(&client, Quiet::default(), &what)?;
        drop(Aside::new(made, "a Kafka producer"));
        Ok(Self { client, what, idle, held: Arc::default(), making: tokio::sync::Mutex::new(()) })
    }

    /// The producer, made if there is none (on a blocking thread: librdkafka
    /// starts its threads and reads the TLS files). The first call after a
    /// drop starts the watch for idleness.
    pub(crate) async fn get(&self) -> anyhow::Result<Shared> {
        if let Some(producer) = self.held() {
            return Ok(producer);
        }
        let _making = self.making.lock().await;
        // Made by the caller this one waited for.
        if let Some(producer) = self.held() {
            return Ok(producer);
        }
        let (client, what) = (self.client.clone(), self.what.clone());
        // In an Aside from the start: a caller that goes away before taking
        // it leaves its drop to a thread of its own too.
        let made = tokio::task::spawn_blocking(move || {
            let made: Producer = crate::kafka_client::create(&client, Quiet::default(), &what)?;
            anyhow::Ok(Arc::new(Aside::new(made, "a Kafka producer")))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{}: making it panicked: {e}", self.what))??;
        let mut held = lock(&self.held);
        held.last_use = Some(Instant::now());
        held.producer = Some(made.clone());
        if !held.watched {
            held.watched = true;
            tokio::spawn(watch(Arc::downgrade(&self.held), self.idle));
        }
        Ok(made)
    }

    /// The producer held, its use noted.
    fn held(&self) -> Option<Shared> {
        let mut held = lock(&self.held);
        held.last_use = Some(Instant::now());
        held.producer.clone()
    }

    /// Drops `failed`, a producer that failed for good, if it is still the
    /// one held (not when another user renewed it already); whether it was.
    /// Its users keep it until they are done; the next [`get`](Self::get)
    /// makes another.
    pub(crate) fn renew(&self, failed: &Shared) -> bool {
        let mut held = lock(&self.held);
        let current = held.producer.as_ref().is_some_and(|p| Arc::ptr_eq(p, failed));
        if current {
            held.producer = None;
        }
        current
    }

    #[cfg(test)]
    fn is_held(&self) -> bool {
        lock(&self.held).producer.is_some()
    }
}

/// Drops the producer once no one uses it and it has gone `idle` since its
/// last use began (looking again at a quarter of `idle` while a use goes
/// on); ends then, or when its [`OnDemand`] is gone.
async fn watch(watched: Weak<Mutex<Held>>, idle: Duration) {
    let mut wait = idle;
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = watched.upgrade() else { return };
        let mut held = lock(&shared);
        let since = held.last_use.map_or(idle, |t| t.elapsed());
        let in_use = held.producer.as_ref().is_some_and(|p| Arc::strong_count(p) > 1);
        if since >= idle && !in_use {
            // The last reference: the Aside drops it on a thread of its own.
            held.producer = None;
            held.watched = false;
            return;
        }
        wait = if in_use { idle / 4 } else { idle.saturating_sub(since) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer's client; librdkafka connects only when it sends.
    fn client() -> ClientConfig {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", "127.0.0.1:1");
        client
    }

    #[tokio::test(start_paused = true)]
    async fn a_producer_unused_for_its_idle_time_is_dropped_and_made_again_when_needed() {
        let idle = Duration::from_secs(60);
        let demand = OnDemand::new(client(), "a test producer".into(), idle).expect("made");
        assert!(!demand.is_held(), "none is held until something is to be sent");
        drop(demand.get().await.expect("made"));
        tokio::time::sleep(idle / 2).await;
        drop(demand.get().await.expect("the same producer"));
        tokio::time::sleep(idle * 3 / 4).await;
        assert!(demand.is_held(), "a use restarts the idle time");
        tokio::time::sleep(idle).await;
        assert!(!demand.is_held(), "dropped after its idle time without a use");
        let again = demand.get().await.expect("made again");
        tokio::time::sleep(idle * 2).await;
        assert!(demand.is_held(), "kept while in use");
        drop(again);
        tokio::time::sleep(idle / 2).await;
        assert!(!demand.is_held(), "the watch of the second goes on like the first's");
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_producer_held_is_renewed_and_one_is_made_for_callers_at_once() {
        let demand = OnDemand::new(client(), "a test producer".into(), IDLE).expect("made");
        let (first, second) = tokio::join!(demand.get(), demand.get());
        let (first, second) = (first.expect("made"), second.expect("made"));
        assert!(Arc::ptr_eq(&first, &second), "callers at once share one producer");
        assert!(demand.renew(&first), "the failed one is held: dropped");
        let replacement = demand.get().await.expect("made again");
        assert!(!Arc::ptr_eq(&first, &replacement));
        assert!(!demand.renew(&second), "a late renewal of the failed one keeps its replacement");
        assert!(demand.is_held());
    }

    #[tokio::test(start_paused = true)]
    async fn a_producer_in_use_is_kept_past_its_idle_time() {
        let idle = Duration::from_secs(60);
        let demand = OnDemand::new(client(), "a test producer".into(), idle).expect("made");
        let sending = demand.get().await.expect("made");
        tokio::time::sleep(idle * 3).await;
        assert!(demand.is_held(), "a send that outlasts the idle time keeps its producer");
        drop(sending);
        tokio::time::sleep(idle * 2).await;
        assert!(!demand.is_held(), "dropped once its last use ended and the idle time passed");
    }

    #[test]
    fn a_property_librdkafka_refuses_fails_the_first_making() {
        let mut client = client();
        client.set("acks", "sometimes");
        let refused = OnDemand::new(client, "the DLQ producer of `h`".into(), IDLE).err();
        let message = format!("{:#}", refused.expect("refused"));
        assert!(message.contains("the DLQ producer of `h`") && message.contains("acks"), "{message}");
    }
}
