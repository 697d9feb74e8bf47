//! The dead-letter topic itself: found, or created like its source topic.

use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::Consumer as _;

use crate::config::{Config, HandlerConfig};

/// The DLQ topic's partition count; the topic is created when missing.
pub(super) async fn ensure(config: &Config, handler: &HandlerConfig, topic: &str) -> anyhow::Result<i32> {
    match look_up(config, handler, topic)? {
        Found::Exists(n) => Ok(n),
        Found::Missing { source } => create(config, handler, topic, source).await,
    }
}

/// What `idem check` says of the DLQ topic, creating nothing: `Some` when
/// `idem run` would create it.
pub(super) fn missing(config: &Config, handler: &HandlerConfig, topic: &str) -> anyhow::Result<Option<String>> {
    Ok(match look_up(config, handler, topic)? {
        Found::Exists(_) => None,
        Found::Missing { source } => Some(format!(
            "handler `{}`: its dead-letter topic {topic} does not exist; `idem run` creates it with {source} \
             partition(s), as {}",
            handler.name, handler.topic
        )),
    })
}

/// The DLQ topic as the broker has it.
enum Found {
    Exists(i32),
    /// Missing; the source topic has `source` partitions.
    Missing {
        source: i32,
    },
}

fn look_up(config: &Config, handler: &HandlerConfig, topic: &str) -> anyhow::Result<Found> {
    let at = format!("handler `{}`", handler.name);
    let probe = crate::kafka_client::probe(config, Some(handler))?;
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
        return Ok(Found::Exists(n));
    }
    let Some(source) = partitions(&handler.topic)? else {
        bail!(
            "{at}: the dead-letter topic {topic} does not exist, and neither does {} whose partition count it \
             would take; create both",
            handler.topic
        );
    };
    Ok(Found::Missing { source })
}

/// Creates the DLQ topic with the source topic's `source` partitions.
async fn create(config: &Config, handler: &HandlerConfig, topic: &str, source: i32) -> anyhow::Result<i32> {
    let at = format!("handler `{}`", handler.name);
    let admin: AdminClient<DefaultClientContext> = crate::kafka_client::create(
        &crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Producer)?,
        DefaultClientContext,
        "a Kafka admin client",
    )?;
    // Dropped aside: an admin client's drop joins its polling thread.
    let admin = crate::kafka_client::Aside::new(admin, "a Kafka admin client");
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
        if let Found::Exists(n) = look_up(config, handler, topic)? {
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
