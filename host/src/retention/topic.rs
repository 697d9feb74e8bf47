//! Whether a handler's dedup rows outlive its topic's records: a record the
//! topic still holds can be redelivered (an offset reset, a new group), and
//! if its dedup row is gone by then only the stale-event guard stands
//! between it and a second effect.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

use crate::config::{Config, Span, StalePolicy};

/// One warning per handler whose `dedup_retention` is shorter than its
/// topic's `retention.ms` (or whose topic keeps records for ever), and one
/// per topic whose retention could not be read.
pub async fn warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    for h in &config.handlers {
        let at = format!("handler `{}`", h.name);
        let retention = match topic_retention_ms(config, h).await {
            Ok(Some(ms)) => ms,
            Ok(None) => continue,
            Err(e) => {
                warnings.push(format!(
                    "{at}: could not read retention.ms of topic {} to compare it with dedup_retention = \"{}\": {e}",
                    h.topic, h.dedup_retention
                ));
                continue;
            }
        };
        if let Some(warning) = shorter(&h.topic, h.dedup_retention, h.stale_events, retention) {
            warnings.push(format!("{at}: {warning}"));
        }
    }
    warnings
}

/// Why dedup rows kept for `dedup_retention` may go before the records of
/// `topic` do (`retention`: its `retention.ms`, -1 for ever), if they may.
pub fn shorter(topic: &str, dedup_retention: Span, stale: StalePolicy, retention: i64) -> Option<String> {
    let topic_says = if retention < 0 {
        "keeps records for ever (retention.ms = -1)".to_owned()
    } else {
        let topic = Duration::from_millis(u64::try_from(retention).unwrap_or(0));
        if topic <= dedup_retention.0 {
            return None;
        }
        format!("keeps records for {} (retention.ms = {retention})", Span(topic))
    };
    Some(format!(
        "dedup_retention = \"{}\" is shorter than topic {}, which {topic_says}: a record redelivered after its \
         dedup row is dropped meets stale_events = \"{}\" instead of dedup",
        dedup_retention,
        topic,
        stale.as_str()
    ))
}

/// The topic's `retention.ms`; `None` when the topic does not exist.
async fn topic_retention_ms(config: &Config, h: &crate::config::HandlerConfig) -> anyhow::Result<Option<i64>> {
    let admin: AdminClient<DefaultClientContext> = crate::kafka_client::create(
        &crate::kafka_client::client_config(config, Some(h), crate::kafka_client::ClientKind::Producer)?,
        DefaultClientContext,
        "a Kafka admin client",
    )?;
    // Dropped aside: an admin client's drop joins its polling thread.
    let admin = crate::kafka_client::Aside::new(admin, "a Kafka admin client");
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(2)));
    let results = admin.describe_configs([&ResourceSpecifier::Topic(&h.topic)], &options).await?;
    let Some(result) = results.into_iter().next() else { return Ok(None) };
    let resource = match result {
        Ok(resource) => resource,
        Err(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition) => return Ok(None),
        Err(code) => anyhow::bail!("{code}"),
    };
    let value = resource.get("retention.ms").and_then(|e| e.value.clone());
    match value {
        Some(v) => Ok(Some(v.parse().map_err(|_| anyhow::anyhow!("retention.ms = `{v}` is not a number"))?)),
        None => anyhow::bail!("the broker did not report retention.ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_shorter_than_the_topics_is_named() {
        let week = Span::days(7);
        assert_eq!(shorter("orders", week, StalePolicy::Dlq, 604_800_000), None, "equal is enough");
        assert_eq!(shorter("orders", week, StalePolicy::Dlq, 3_600_000), None);
        let longer = shorter("orders", week, StalePolicy::Dlq, 30 * 86_400_000).expect("30 days");
        assert!(longer.contains("dedup_retention = \"7d\" is shorter than topic orders"), "{longer}");
        assert!(longer.contains("30d") && longer.contains("stale_events = \"dlq\""), "{longer}");
        let forever = shorter("orders", week, StalePolicy::Skip, -1).expect("for ever");
        assert!(forever.contains("for ever"), "{forever}");
    }
}
