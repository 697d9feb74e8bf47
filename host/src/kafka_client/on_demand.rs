//! A producer made when something is to be sent, dropped after a while
//! without a send: a handler's DLQ producer, an outbox relay's.
//!
//! A producer is not free while it waits. rdkafka's producer has a thread
//! that polls in 100 ms waits, and rdkafka 0.39 hands librdkafka each
//! wait's remaining time in whole milliseconds, rounded down: the last
//! fraction of a millisecond of every wait becomes a loop of zero-timeout
//! polls. About 1% of a core per producer, busy or idle (the benchmark's
//! profile: 1.2% of the host's CPU in `producer polling thread`, spent in
//! `clock_gettime`). Most handlers dead-letter rarely, and a relay sends
//! only on the host holding its lease: a host of many handlers would burn
//! a core for producers with nothing to send.
//!
//! So a producer lives while it sends and [`IDLE`] after its last use; the
//! next send makes another (a connection and a producer id: a few
//! milliseconds). One is made and dropped at once, so a config librdkafka
//! refuses stops the start, not the first send.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;

use crate::kafka_client::{Aside, Producer, Quiet};

/// How long a producer is kept after its last use. Longer than any one use
/// (a write's `message.timeout.ms` is 30 s, a topic look-up 5 s): a clone
/// handed out is dropped before its producer can be, so the last reference
/// is always the [`Aside`]'s, dropped off the runtime.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// A producer made on demand from `client`, kept while it is used.
pub(crate) struct OnDemand {
    client: ClientConfig,
    what: String,
    idle: Duration,
    held: Arc<Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    producer: Option<Aside<Producer>>,
    last_use: Option<Instant>,
    /// Whether a task watches for the producer's idleness.
    watched: bool,
}

impl OnDemand {
    /// Makes a producer and drops it (aside): a property librdkafka
    /// refuses fails here, not at the first send.
    pub(crate) fn new(client: ClientConfig, what: String, idle: Duration) -> anyhow::Result<Self> {
        let made: Producer = crate::kafka_client::create(&client, Quiet::default(), &what)?;
        drop(Aside::new(made, "a Kafka producer"));
        Ok(Self { client, what, idle, held: Arc::default() })
    }

    /// The producer, made if there is none; the first call after a drop
    /// starts the watch for idleness.
    pub(crate) fn get(&self) -> anyhow::Result<Producer> {
        // Held's fields are consistent at every step: a panic elsewhere
        // while it was locked leaves nothing to mend.
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.last_use = Some(Instant::now());
        if held.producer.is_none() {
            let made: Producer = crate::kafka_client::create(&self.client, Quiet::default(), &self.what)?;
            held.producer = Some(Aside::new(made, "a Kafka producer"));
        }
        // Outside a runtime nothing watches: the producer is kept.
        if let (false, Ok(runtime)) = (held.watched, tokio::runtime::Handle::try_current()) {
            held.watched = true;
            runtime.spawn(watch(Arc::downgrade(&self.held), self.idle));
        }
        // Some: made above when it was not.
        held.producer.as_ref().map(|p| Producer::clone(p)).ok_or_else(|| anyhow::anyhow!("{}: not made", self.what))
    }

    /// Drops the producer (aside): one that failed for good. The next
    /// [`get`](Self::get) makes another.
    pub(crate) fn renew(&self) {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).producer = None;
    }

    #[cfg(test)]
    fn is_held(&self) -> bool {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).producer.is_some()
    }
}

/// Drops the producer once it has gone `idle` unused; ends then, or when
/// its [`OnDemand`] is gone.
async fn watch(watched: Weak<Mutex<Held>>, idle: Duration) {
    let mut wait = idle;
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = watched.upgrade() else { return };
        let mut held = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = held.last_use.map_or(idle, |t| t.elapsed());
        if since >= idle {
            // Dropped aside (the Aside's drop), never on this worker.
            held.producer = None;
            held.watched = false;
            return;
        }
        wait = idle.saturating_sub(since);
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

    #[tokio::test]
    async fn a_producer_unused_for_its_idle_time_is_dropped_and_made_again_when_needed() {
        let idle = Duration::from_millis(200);
        let demand = OnDemand::new(client(), "a test producer".into(), idle).expect("made");
        assert!(!demand.is_held(), "none is held until something is to be sent");
        drop(demand.get().expect("made"));
        tokio::time::sleep(idle / 2).await;
        drop(demand.get().expect("the same producer"));
        tokio::time::sleep(idle * 3 / 4).await;
        assert!(demand.is_held(), "a use restarts the idle time");
        tokio::time::sleep(idle).await;
        assert!(!demand.is_held(), "dropped after its idle time without a use");
        drop(demand.get().expect("made again"));
        assert!(demand.is_held());
        demand.renew();
        assert!(!demand.is_held(), "renewing drops the failed one");
        drop(demand.get().expect("made after a renewal"));
        assert!(demand.is_held());
    }

    #[test]
    fn a_property_librdkafka_refuses_fails_the_first_making() {
        let mut client = client();
        client.set("acks", "sometimes");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        let refused = runtime.block_on(async { OnDemand::new(client, "the DLQ producer of `h`".into(), IDLE).err() });
        let message = format!("{:#}", refused.expect("refused"));
        assert!(message.contains("the DLQ producer of `h`") && message.contains("acks"), "{message}");
    }
}
