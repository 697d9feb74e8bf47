//! A handler's dead-letter topic: where a record whose failure is final
//! goes, byte for byte, with headers that say what happened to it and a
//! seal that proves idem wrote it ([`seal`]).
//!
//! The record is written with an idempotent producer (`acks=all`) and its
//! acknowledgement awaited before the source offset may be committed: a
//! record is in the DLQ or still uncommitted, never neither. What a failed
//! write means is in [`refusal`]: an outage is retried, a record the topic
//! will never take is dead-lettered as an [`envelope`], a topic that takes
//! nothing holds the partition with an error until an operator acts.

pub mod discard;
pub mod envelope;
pub mod headers;
pub(crate) mod index;
pub mod seal;
pub mod search;
mod topic;

use std::sync::Arc;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureRecord, Producer as _};

use crate::config::{Config, HandlerConfig};
use crate::error::ErrorClass;
use crate::kafka_client::refusal;
use crate::validate::Record;
pub use refusal::Refusal;

/// The longest `idem.failure.reason` written.
const MAX_REASON_CHARS: usize = 1_024;

/// Why a record is dead-lettered.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub class: ErrorClass,
    pub reason: String,
    /// Executions of the event (0 for an invalid record: it never ran).
    pub attempts: u32,
    /// Replays that failed again before this one (0: the first failure).
    pub replays: u32,
    /// The module version whose execution failed last, when known (a
    /// canary's: the dead letter names its module, not the active one's).
    pub version: Option<i32>,
}

impl Failure {
    /// A first failure (no replay before it) of an unknown version.
    pub(crate) fn first(class: ErrorClass, reason: String, attempts: u32) -> Self {
        Self { class, reason, attempts, replays: 0, version: None }
    }
}

pub(crate) struct DeadLetters {
    /// Made when a record is to be written ([`crate::kafka_client::OnDemand`]).
    producer: crate::kafka_client::OnDemand,
    pub topic: String,
    partitions: i32,
    handler: String,
    group: String,
    keys: Arc<seal::Keys>,
}

/// A record as it goes to the DLQ (sealed at [`DeadLetters::produce`]).
struct Outgoing {
    partition: i32,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// `idem check`'s look at a handler's DLQ topic, creating nothing: a note
/// when `idem run` would create it, an error when it could not.
pub(crate) fn check(config: &Config, handler: &HandlerConfig) -> anyhow::Result<Option<String>> {
    topic::missing(config, handler, &handler.dlq_topic())
}

impl DeadLetters {
    /// The handler's DLQ producer, once its topic exists (created here,
    /// with the source topic's partition count, when it is missing).
    pub(crate) async fn open(config: &Config, handler: &HandlerConfig, keys: Arc<seal::Keys>) -> anyhow::Result<Self> {
        let topic = handler.dlq_topic();
        let partitions = topic::ensure(config, handler, &topic).await?;
        // The handler's own properties too: its credentials, say.
        let mut client =
            crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Producer)?;
        client
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("client.id", format!("idem-{}-dlq", handler.name))
            .set("message.timeout.ms", "30000")
            .set("linger.ms", "5");
        let what = format!("the DLQ producer of handler `{}`", handler.name);
        let producer = crate::kafka_client::OnDemand::new(client, what, crate::kafka_client::IDLE)?;
        let (handler, group) = (handler.name.clone(), handler.group_id.clone());
        Ok(Self { producer, topic, partitions, handler, group, keys })
    }

    /// The keys this handler's records are sealed with (replay verifies).
    pub(crate) fn keys(&self) -> &seal::Keys {
        &self.keys
    }

    /// Writes `record` to the DLQ and waits for the broker's acknowledgement.
    /// `module_sha256`: the module the event failed on. Returns the record
    /// written, as the dead-letter index keeps it.
    pub(crate) async fn send(
        &self,
        record: &Record,
        failure: &Failure,
        module_sha256: &str,
    ) -> Result<index::Entry, Refusal> {
        let mut headers: Vec<_> =
            record.headers.iter().map(|(k, v)| (headers::escaped(k).into_owned(), v.clone())).collect();
        headers.extend(self.idems(record, failure, module_sha256));
        let partition = self.partition_of(record);
        self.produce(Outgoing { partition, key: record.key.clone(), value: record.payload.clone(), headers }).await
    }

    /// Writes the bounded [`envelope`] of a record the topic refused.
    pub(crate) async fn send_envelope(
        &self,
        record: &Record,
        failure: &Failure,
        module_sha256: &str,
        refusal: &str,
    ) -> Result<index::Entry, Refusal> {
        let mut headers = self.idems(record, failure, module_sha256);
        headers.push((headers::ENVELOPE.into(), Some(b"1".to_vec())));
        let value = Some(envelope::value(record, refusal));
        self.produce(Outgoing { partition: self.partition_of(record), key: None, value, headers }).await
    }

    /// The source partition's number where the DLQ has it: a key's dead
    /// letters stay in order.
    fn partition_of(&self, record: &Record) -> i32 {
        record.partition % self.partitions.max(1)
    }

    /// idem's own headers, in the order they are written.
    fn idems(&self, record: &Record, failure: &Failure, module_sha256: &str) -> Vec<(String, Option<Vec<u8>>)> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // Bounded: a guest's message and stderr tail must not make the
        // record too large for the topic.
        let reason: String = failure.reason.chars().take(MAX_REASON_CHARS).collect();
        let mut added = vec![
            (headers::CLASS, failure.class.as_str().to_owned()),
            (headers::REASON, reason),
            (headers::ATTEMPTS, failure.attempts.to_string()),
            (headers::FAILED_AT, now),
            (headers::TOPIC, record.topic.clone()),
            (headers::PARTITION, record.partition.to_string()),
            (headers::OFFSET, record.offset.to_string()),
            (headers::TIMESTAMP, record.timestamp.map(|t| t.to_string()).unwrap_or_default()),
            (headers::HANDLER, self.handler.clone()),
            (headers::MODULE, module_sha256.to_owned()),
            (headers::GROUP, self.group.clone()),
        ];
        if failure.replays > 0 {
            added.push((headers::REPLAY_COUNT, failure.replays.to_string()));
        }
        added.into_iter().map(|(k, v)| (k.to_owned(), Some(v.into_bytes()))).collect()
    }

    /// Seals and writes one record; a failure says what it means.
    async fn produce(&self, out: Outgoing) -> Result<index::Entry, Refusal> {
        let seal = self.keys.seal(
            out.key.as_deref(),
            out.value.as_deref(),
            out.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
        );
        let mut headers = OwnedHeaders::new_with_capacity(out.headers.len() + 1);
        for (key, value) in &out.headers {
            headers = headers.insert(Header { key: key.as_str(), value: value.as_deref() });
        }
        headers = headers.insert(Header { key: headers::SEAL, value: Some(seal.as_bytes()) });
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).partition(out.partition).headers(headers);
        if let Some(key) = &out.key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &out.value {
            record = record.payload(value.as_slice());
        }
        // No original timestamp on the copy (it is in idem.original.timestamp):
        // with time-based retention an old event's copy would be deleted
        // soon after its source offset is committed.
        let producer = self.producer.get().await.map_err(|e| Refusal::Outage(format!("{e:#}")))?;
        let (e, _) = match producer.send(record, Duration::from_secs(30)).await {
            Ok(delivery) => {
                let at = index::Position { topic: self.topic.clone(), partition: delivery.partition, offset: delivery.offset };
                let headers = out.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
                let parts = index::Parts { key: out.key.as_deref(), value: out.value.as_deref(), headers };
                return Ok(index::Entry::of(at, &self.handler, &parts, seal::Authenticity::Sealed));
            }
            Err(failed) => failed,
        };
        // A producer failed for good (fenced, say) refuses every write:
        // the next attempt gets another.
        if let Some((code, why)) = producer.client().fatal_error()
            && self.producer.renew(&producer)
        {
            tracing::error!(handler = %self.handler, "the DLQ producer failed for good ({code}: {why}); making another");
        }
        let timed_out = e.rdkafka_error_code() == Some(rdkafka::error::RDKafkaErrorCode::MessageTimedOut);
        Err(match refusal::classify(&self.topic, &e) {
            // A write that timed out to a topic that no longer exists is
            // the topic's refusal, not an outage (asked only then: the
            // broker's answer costs a round trip).
            Refusal::Outage(m) if timed_out && self.is_gone().await => {
                Refusal::Topic(format!("{m} (the topic does not exist)"))
            }
            other => other,
        })
    }

    /// Whether the broker answers that the DLQ topic does not exist.
    async fn is_gone(&self) -> bool {
        let Ok(producer) = self.producer.get().await else { return false };
        let topic = self.topic.clone();
        let looked = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(Some(&topic), Duration::from_secs(5)).map(|m| {
                m.topics().first().is_none_or(|t| {
                    t.error().is_some_and(|e| {
                        rdkafka::error::RDKafkaErrorCode::from(e)
                            == rdkafka::error::RDKafkaErrorCode::UnknownTopicOrPartition
                    })
                })
            })
        })
        .await;
        matches!(looked, Ok(Ok(true)))
    }
}
