//! A handler's dead-letter topic: where a record whose failure is final
//! goes, byte for byte, with headers that say what happened to it.
//!
//! The record is written with an idempotent producer (`acks=all`) and its
//! acknowledgement awaited before the source offset may be committed: a
//! record is in the DLQ or still uncommitted, never neither. A write that
//! fails is the infrastructure's failure (class *unavailable*): the worker
//! retries it and the partition does not advance meanwhile.

use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::Consumer as _;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::{Config, HandlerConfig};
use crate::error::ErrorClass;
use crate::validate::Record;

/// Header names idem adds to a dead-lettered record (the original headers
/// come first, unchanged but for [`escaped`] names).
pub mod headers {
    pub const CLASS: &str = "idem.failure.class";
    pub const REASON: &str = "idem.failure.reason";
    pub const ATTEMPTS: &str = "idem.failure.attempts";
    pub const FAILED_AT: &str = "idem.failure.at";
    pub const TOPIC: &str = "idem.original.topic";
    pub const PARTITION: &str = "idem.original.partition";
    pub const OFFSET: &str = "idem.original.offset";
    pub const TIMESTAMP: &str = "idem.original.timestamp";
    pub const HANDLER: &str = "idem.handler";
    pub const MODULE: &str = "idem.module.sha256";
    pub const GROUP: &str = "idem.consumer.group";
}

/// A source header's name as the DLQ copy carries it: names idem's own
/// headers could have (`idem.…`) and the escaped ones (`source.…`) get a
/// `source.` prefix, so that a producer's forged `idem.failure.reason` or
/// `idem.original.offset` is never read as idem's; [`unescaped`] undoes it.
pub fn escaped(name: &str) -> std::borrow::Cow<'_, str> {
    if name.starts_with("idem.") || name.starts_with("source.") {
        std::borrow::Cow::Owned(format!("source.{name}"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// The source header's name back from a DLQ copy's (see [`escaped`]).
pub fn unescaped(name: &str) -> &str {
    name.strip_prefix("source.").unwrap_or(name)
}

/// The longest `idem.failure.reason` written.
const MAX_REASON_CHARS: usize = 1_024;

/// Why a record is dead-lettered.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub class: ErrorClass,
    pub reason: String,
    /// Executions of the event (0 for an invalid record: it never ran).
    pub attempts: u32,
}

pub(crate) struct DeadLetters {
    producer: FutureProducer,
    pub topic: String,
    partitions: i32,
    handler: String,
    group: String,
}

impl DeadLetters {
    /// The handler's DLQ producer, once its topic exists (created here,
    /// with the source topic's partition count, when it is missing).
    pub(crate) async fn open(config: &Config, handler: &HandlerConfig) -> anyhow::Result<Self> {
        let topic = handler.dlq_topic();
        let partitions = ensure_topic(config, handler, &topic).await?;
        // The handler's own properties too: its credentials, say.
        let mut client =
            crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Producer)?;
        client
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("client.id", format!("idem-{}-dlq", handler.name))
            .set("message.timeout.ms", "30000")
            .set("linger.ms", "5");
        let producer: FutureProducer = crate::kafka_client::create(
            &client,
            rdkafka::client::DefaultClientContext,
            &format!("the DLQ producer of handler `{}`", handler.name),
        )?;
        Ok(Self { producer, topic, partitions, handler: handler.name.clone(), group: handler.group_id.clone() })
    }

    /// Writes `record` to the DLQ and waits for the broker's acknowledgement.
    /// `module_sha256`: the module the event failed on.
    pub(crate) async fn send(&self, record: &Record, failure: &Failure, module_sha256: &str) -> Result<(), String> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 11);
        for (key, value) in &record.headers {
            headers = headers.insert(Header { key: escaped(key).as_ref(), value: value.as_deref() });
        }
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (partition, offset, attempts) =
            (record.partition.to_string(), record.offset.to_string(), failure.attempts.to_string());
        let timestamp = record.timestamp.map(|t| t.to_string()).unwrap_or_default();
        // Bounded: a guest's message and stderr tail must not make the
        // record too large for the topic.
        let reason: String = failure.reason.chars().take(MAX_REASON_CHARS).collect();
        let added: [(&str, &str); 11] = [
            (headers::CLASS, failure.class.as_str()),
            (headers::REASON, &reason),
            (headers::ATTEMPTS, &attempts),
            (headers::FAILED_AT, &now),
            (headers::TOPIC, &record.topic),
            (headers::PARTITION, &partition),
            (headers::OFFSET, &offset),
            (headers::TIMESTAMP, &timestamp),
            (headers::HANDLER, &self.handler),
            (headers::MODULE, module_sha256),
            (headers::GROUP, &self.group),
        ];
        for (key, value) in added {
            headers = headers.insert(Header { key, value: Some(value) });
        }
        // The source partition's number where the DLQ has it: a key's
        // dead letters stay in order.
        let mut out = FutureRecord::<[u8], [u8]>::to(&self.topic)
            .partition(record.partition % self.partitions.max(1))
            .headers(headers);
        if let Some(key) = &record.key {
            out = out.key(key.as_slice());
        }
        if let Some(payload) = &record.payload {
            out = out.payload(payload.as_slice());
        }
        // No original timestamp on the copy (it is in idem.original.timestamp):
        // with time-based retention an old event's copy would be deleted
        // soon after its source offset is committed.
        match self.producer.send(out, Duration::from_secs(30)).await {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(format!("failed to write to the DLQ topic {}: {e}", self.topic)),
        }
    }
}

/// The DLQ topic's partition count; the topic is created when missing.
async fn ensure_topic(config: &Config, handler: &HandlerConfig, topic: &str) -> anyhow::Result<i32> {
    let at = format!("handler `{}`", handler.name);
    let probe = super::probe_client(config, Some(handler))?;
    let partitions = |name: &str| -> anyhow::Result<Option<i32>> {
        let metadata = probe
            .fetch_metadata(Some(name), Duration::from_secs(10))
            .with_context(|| format!("{at}: failed to look up topic {name}"))?;
        Ok(metadata
            .topics()
            .first()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .map(|t| i32::try_from(t.partitions().len()).unwrap_or(i32::MAX)))
    };
    if let Some(n) = partitions(topic)? {
        return Ok(n);
    }
    let Some(source) = partitions(&handler.topic)? else {
        bail!(
            "{at}: the dead-letter topic {topic} does not exist, and neither does {} whose partition count it \
             would take; create both",
            handler.topic
        );
    };
    let admin: AdminClient<DefaultClientContext> = crate::kafka_client::create(
        &crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Producer)?,
        DefaultClientContext,
        "a Kafka admin client",
    )?;
    let new = NewTopic::new(topic, source, TopicReplication::Fixed(-1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = admin.create_topics([&new], &options).await;
    let refused = match created {
        Ok(results) => results
            .into_iter()
            .find_map(|r| r.err())
            // Another host created it between the look-up and the request.
            .filter(|(_, code)| *code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)
            .map(|(_, code)| code.to_string()),
        Err(e) => Some(e.to_string()),
    };
    if let Some(why) = refused {
        // Another host may have created it meanwhile.
        if let Some(n) = partitions(topic)? {
            return Ok(n);
        }
        bail!(
            "{at}: the dead-letter topic {topic} does not exist and could not be created ({why}); create it \
             (e.g. with {source} partitions, as {}) or set [handler.retry] dlq_topic",
            handler.topic
        );
    }
    tracing::info!(handler = %handler.name, topic, partitions = source, "created the dead-letter topic");
    Ok(source)
}

#[cfg(test)]
mod escape_tests {
    use super::{escaped, unescaped};

    #[test]
    fn source_header_names_never_pass_for_idems_and_come_back_exactly() {
        for name in ["traceparent", "idem.failure.reason", "source.idem.x", "source.", "idem.", "x.idem.y"] {
            let written = escaped(name);
            assert!(!written.starts_with("idem."), "{name} → {written}");
            assert_eq!(unescaped(&written), name);
        }
        assert_eq!(escaped("traceparent"), "traceparent", "other names unchanged");
    }
}
