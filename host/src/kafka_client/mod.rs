//! How idem's Kafka clients are configured: the brokers, the operator's
//! librdkafka properties (TLS, SASL, timeouts, …), and the secrets among
//! them, which come from environment variables only.
//!
//! A secret (`sasl.password`, `ssl.key.password`, a private key, an OAuth
//! client secret, …) is refused in `[kafka.properties]`: a config file is
//! copied, committed and printed, the environment of one process is not.
//! `[kafka.properties_env]` maps a property to the variable holding its
//! value; the config keeps only the variable's name, so nothing idem prints
//! (the config, a start-up error) can carry the value. librdkafka redacts
//! its sensitive properties in its own logs.

mod aside;
mod on_demand;
pub mod refusal;

pub(crate) use aside::{Aside, drop_aside};
pub(crate) use on_demand::{IDLE, OnDemand, Shared};

use std::sync::Mutex;

use anyhow::bail;
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::{Config, HandlerConfig};

/// Creates a client from `config`. librdkafka's refusal of a property
/// names the property and its value; the value is left out here, since it
/// may be a secret (a misspelt `properties_env` key, say).
pub fn create<T, C>(config: &ClientConfig, context: C, what: &str) -> anyhow::Result<T>
where
    T: rdkafka::config::FromClientConfigAndContext<C>,
    C: ClientContext,
{
    config.create_with_context(context).map_err(|e| match e {
        KafkaError::ClientConfig(_, description, key, _) => {
            anyhow::anyhow!("failed to create {what}: librdkafka refused property `{key}`: {description}")
        }
        other => anyhow::anyhow!("failed to create {what}: {other}"),
    })
}

/// What a client is, for the properties it takes: `[kafka.properties]`
/// hold consumer and producer settings alike, and librdkafka warns (a
/// `CONFWARN` line per client) about every property of the other kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// The handlers' consumers, the replay reader, metadata probes.
    Consumer,
    /// The DLQ producer, and admin clients (librdkafka makes those producers).
    Producer,
}

/// librdkafka's consumer-only properties (`C` in its CONFIGURATION.md),
/// left out of producers' and admin clients' configuration.
const CONSUMER_ONLY: &[&str] = &[
    "group.id",
    "group.instance.id",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.protocol.type",
    "group.protocol",
    "group.remote.assignor",
    "coordinator.query.interval.ms",
    "max.poll.interval.ms",
    "max.poll.records",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.wait.max.ms",
    "fetch.queue.backoff.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.error.backoff.ms",
    "offset.store.method",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "auto.offset.reset",
    "consume.callback.max.messages",
];

/// librdkafka's producer-only properties (`P`), left out of consumers'.
const PRODUCER_ONLY: &[&str] = &[
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.ms",
    "linger.ms",
    "message.send.max.retries",
    "retries",
    "queue.buffering.backpressure.threshold",
    "compression.codec",
    "compression.type",
    "compression.level",
    "batch.num.messages",
    "batch.size",
    "delivery.report.only.error",
    "sticky.partitioning.linger.ms",
    "request.required.acks",
    "acks",
    "request.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "partitioner",
    "queuing.strategy",
    "produce.offset.report",
];

/// Whether `key` is a property of the other kind of client than `kind`.
fn foreign(kind: ClientKind, key: &str) -> bool {
    match kind {
        ClientKind::Consumer => PRODUCER_ONLY.contains(&key),
        ClientKind::Producer => CONSUMER_ONLY.contains(&key),
    }
}

/// The client configuration every idem client starts from: the brokers,
/// `[kafka]` properties, then the handler's own (which win), secrets read
/// from the environment now; properties of the other `kind` of client are
/// left out.
pub fn client_config(
    config: &Config,
    handler: Option<&HandlerConfig>,
    kind: ClientKind,
) -> anyhow::Result<ClientConfig> {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", &config.kafka.brokers);
    let mut layers = vec![(&config.kafka.properties, &config.kafka.properties_env)];
    if let Some(h) = handler {
        layers.push((&h.properties, &h.properties_env));
    }
    for (properties, from_env) in layers {
        for (key, value) in properties.iter().filter(|(key, _)| !foreign(kind, key)) {
            client.set(key, value);
        }
        for (key, variable) in from_env.iter().filter(|(key, _)| !foreign(kind, key)) {
            let Some(value) = crate::env::get(variable) else {
                bail!("Kafka property `{key}`: the environment variable {variable} is not set");
            };
            client.set(key, value);
        }
    }
    Ok(client)
}

/// The context of short-lived clients (start-up checks): it keeps the last
/// error librdkafka logged, which says why a broker could not be reached
/// (connection refused, TLS handshake, SASL authentication) where the
/// failed request itself only says "transport failure".
#[derive(Debug, Default)]
pub struct ProbeContext {
    /// The message, and whether it is a connection's failure (librdkafka's
    /// `FAIL` facility: it names the cause, which later summaries such as
    /// "1/1 brokers are down" do not).
    last_error: Mutex<Option<(String, bool)>>,
    refused: std::sync::atomic::AtomicBool,
}

impl ProbeContext {
    /// The last error librdkafka reported, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.as_ref().map(|(message, _)| message.clone()))
    }

    /// Whether a broker refused this client (TLS handshake or SASL
    /// authentication): waiting longer will not change the answer.
    pub fn refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Notes an error that came back from polling the client.
    pub fn note(&self, error: &KafkaError) {
        if matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL)) {
            self.refused.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn remember(&self, reason: &str, cause: bool) {
        if let Ok(mut last) = self.last_error.lock()
            && (cause || !last.as_ref().is_some_and(|(_, had_cause)| *had_cause))
        {
            *last = Some((reason.to_owned(), cause));
        }
    }
}

impl ClientContext for ProbeContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel::*;
        if matches!(level, Emerg | Alert | Critical | Error) {
            self.remember(message, fac == "FAIL");
        }
        log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", "{error}: {reason}");
        self.note(&error);
        self.remember(reason, false);
    }
}

impl rdkafka::consumer::ConsumerContext for ProbeContext {}

/// A group-less client for metadata look-ups off the polling thread, with
/// the handler's own properties (its credentials) when one is given.
pub fn probe(
    config: &Config,
    handler: Option<&HandlerConfig>,
) -> anyhow::Result<rdkafka::consumer::BaseConsumer<ProbeContext>> {
    let client = client_config(config, handler, ClientKind::Consumer)?;
    create(&client, ProbeContext::default(), "a Kafka client")
}

/// The context of idem's producers (dead-letter writes, the outbox relay):
/// librdkafka's lines into idem's log, and its client errors, which an
/// outage repeats many times a second, each said once a while
/// ([`crate::repeats`]).
#[derive(Default)]
pub struct Quiet {
    repeats: crate::repeats::Repeats,
}

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(line) = self.repeats.client_error(&error, reason) {
            tracing::error!(target: "librdkafka", "{line}");
        }
    }
}

/// A producer of idem's own.
pub type Producer = rdkafka::producer::FutureProducer<Quiet>;

/// librdkafka's log lines, into idem's log.
pub fn log(level: RDKafkaLogLevel, fac: &str, message: &str) {
    use RDKafkaLogLevel::*;
    match level {
        Emerg | Alert | Critical | Error => tracing::error!(target: "librdkafka", fac, "{message}"),
        Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
        Notice | Info => tracing::info!(target: "librdkafka", fac, "{message}"),
        Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_client_takes_only_its_own_and_the_shared_properties() {
        for key in ["session.timeout.ms", "heartbeat.interval.ms", "fetch.wait.max.ms", "max.poll.interval.ms"] {
            assert!(foreign(ClientKind::Producer, key) && !foreign(ClientKind::Consumer, key), "{key}");
        }
        for key in ["linger.ms", "acks", "enable.idempotence", "compression.type"] {
            assert!(foreign(ClientKind::Consumer, key) && !foreign(ClientKind::Producer, key), "{key}");
        }
        for key in ["security.protocol", "sasl.mechanism", "ssl.ca.location", "socket.timeout.ms", "client.rack"] {
            assert!(!foreign(ClientKind::Consumer, key) && !foreign(ClientKind::Producer, key), "{key}");
        }
        assert!(CONSUMER_ONLY.iter().all(|k| !PRODUCER_ONLY.contains(k)), "no property is both");
    }
}
