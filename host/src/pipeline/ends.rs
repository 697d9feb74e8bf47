//! The end of each partition this host holds paused, looked up every few
//! seconds. librdkafka learns a partition's end from its fetches, and a
//! paused partition (an operator's pause, a queue that is full) fetches
//! nothing: without this its lag would stand still while its producers go
//! on, and an operator watching a paused handler would see nothing wrong.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};

use rdkafka::ClientConfig;

use super::consumer::IdemContext;

/// How often the ends of paused partitions are asked for.
const EVERY: Duration = Duration::from_secs(5);

/// How long one pass may wait for answers, all partitions together (the
/// thread also watches for stalls).
const PASS: Duration = Duration::from_secs(3);

/// How long the client is kept with nothing paused (a queue's pauses come
/// and go; a client made each time would connect each time).
const KEPT: Duration = Duration::from_secs(60);

/// The looker-up: one client of its own, kept while anything is paused
/// (the polling thread never waits on it).
pub(super) struct PausedEnds {
    probe: Option<BaseConsumer<Quiet>>,
    /// When the last pass asked; `None`: nothing was paused then.
    last: Option<Instant>,
    /// Since when nothing has been paused.
    idle: Option<Instant>,
}

impl PausedEnds {
    pub(super) fn new() -> Self {
        Self { probe: None, last: None, idle: None }
    }

    /// Called every second on the watcher's thread: every [`EVERY`] while
    /// partitions are paused (at once for a new pause), their ends, as a
    /// consumer of the group's isolation level reads them.
    pub(super) fn tick(&mut self, context: &IdemContext, config: &ClientConfig) {
        let states = context.states();
        let paused: Vec<_> = states.iter().filter(|s| s.paused.load(Ordering::SeqCst)).collect();
        if paused.is_empty() {
            self.last = None;
            let idle = *self.idle.get_or_insert_with(Instant::now);
            if idle.elapsed() >= KEPT {
                self.probe = None;
            }
            return;
        }
        self.idle = None;
        if self.last.is_some_and(|at| at.elapsed() < EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        if self.probe.is_none() {
            // No client, no lookup: the lag then shows the last end seen.
            self.probe = crate::kafka_client::create(config, Quiet, "a Kafka client").ok();
        }
        let Some(probe) = &self.probe else { return };
        let deadline = Instant::now() + PASS;
        for state in paused {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Ok((_, end)) = probe.fetch_watermarks(&state.topic, state.partition, left) {
                context.paused_end(&state.topic, state.partition, end);
            }
        }
    }
}

/// A probe's client context (the stall probe's, [`PausedEnds`]'s): librdkafka's lines are dropped (a
/// probe made every ten seconds through an outage would say each
/// connection's failure again; the consumer's own client says them once).
pub(super) struct Quiet;

impl rdkafka::ClientContext for Quiet {
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, _: &str) {}
    fn error(&self, _: rdkafka::error::KafkaError, _: &str) {}
}

impl rdkafka::consumer::ConsumerContext for Quiet {}
