//! The outbox's configuration: what a handler may emit (`[[handler.emit]]`),
//! which other applications may publish through idem
//! (`[[outbox.producer]]`), and how long published rows are kept
//! (`[outbox]`). See docs/outbox.md.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;

use super::Span;
use super::ranges::is_topic_name;

/// A topic a handler may emit to: `[[handler.emit]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerEmit {
    pub topic: String,
    /// The event types it may emit there.
    pub event_types: Vec<String>,
    /// JSON Schema (draft 2020-12) an emitted event must pass, the host's
    /// `eventId`, `eventType` and `occurredAt` included (what a consumer of
    /// the topic validates), relative to the config file.
    pub schema: PathBuf,
    /// How the relay writes the topic's records: `json` (default), or
    /// `avro`, `protobuf`, `json-schema` with the latest version of
    /// `subject` in `[registry]` (looked up, never registered by idem).
    #[serde(default)]
    pub format: super::Format,
    /// The subject whose latest version encodes them (default: `<topic>-value`).
    #[serde(default)]
    pub subject: Option<String>,
    /// A schema file (relative to the config file) idem registers under
    /// `subject` before it writes the topic, and writes with: what a
    /// serializer's automatic registration does, opted into per topic.
    /// Without it the subject's latest version writes, and idem never
    /// registers anything.
    #[serde(default)]
    pub register: Option<PathBuf>,
    /// `protobuf`: the top-level message an event is written as (its name
    /// or full name; default: the schema's first message).
    #[serde(default)]
    pub message: Option<String>,
}

impl HandlerEmit {
    /// The registry subject its records are written with.
    pub fn subject(&self) -> String {
        self.subject.clone().unwrap_or_else(|| format!("{}-value", self.topic))
    }
}

/// `[outbox]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// How long a published row stays in `idem.outbox` (for `idem outbox`
    /// and re-drives) before the maintenance pass deletes it.
    #[serde(default = "default_retention")]
    pub retention: Span,
    /// Another application's producer: `[[outbox.producer]]`.
    #[serde(default, rename = "producer")]
    pub producers: Vec<OutboxProducer>,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        Self { retention: default_retention(), producers: Vec::new() }
    }
}

fn default_retention() -> Span {
    Span(std::time::Duration::from_secs(86_400))
}

/// An application that publishes through `idem_api.publish` in its own
/// transactions, and whose rows idem's relay publishes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxProducer {
    /// The producer's name: its rows' and relay lease's, and the
    /// `idem.producer` header of its records.
    pub name: String,
    /// The login role its transactions run as (it must exist; `idem migrate
    /// --config` grants it `idem_api.publish` and nothing else of idem's).
    pub role: String,
    /// The topics and event types it may publish.
    #[serde(rename = "topic")]
    pub topics: Vec<ProducerTopic>,
}

/// `[[outbox.producer.topic]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerTopic {
    pub topic: String,
    pub event_types: Vec<String>,
}

/// `at`'s topics: Kafka topic names, each once, with event types.
/// The format keys of a handler's emit topics: a registry for a registry
/// format, `register` only with one, `message` only for Protobuf.
pub(super) fn check_emit_formats(at: &str, emits: &[HandlerEmit], registry: bool) -> anyhow::Result<()> {
    if let Some(e) = emits.iter().find(|e| e.format.uses_registry() && !registry) {
        anyhow::bail!("{at}: emit topic `{}` is written as {}: it needs a [registry]", e.topic, e.format.as_str());
    }
    if let Some(e) = emits.iter().find(|e| e.register.is_some() && !e.format.uses_registry()) {
        anyhow::bail!("{at}: emit topic `{}` registers a schema but is written as json: set its format", e.topic);
    }
    if let Some(e) = emits.iter().find(|e| e.message.is_some() && e.format != super::Format::Protobuf) {
        anyhow::bail!(
            "{at}: emit topic `{}` names a Protobuf message; its format is \"{}\"",
            e.topic,
            e.format.as_str()
        );
    }
    Ok(())
}

pub(super) fn check_topics<'a>(at: &str, topics: impl Iterator<Item = (&'a str, &'a [String])>) -> anyhow::Result<()> {
    let mut seen = HashSet::new();
    for (topic, event_types) in topics {
        if !is_topic_name(topic) {
            bail!("{at}: emit topic `{topic}` is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, `.`, `_`, `-`)");
        }
        if !seen.insert(topic) {
            bail!("{at}: emit topic `{topic}` is named twice");
        }
        if event_types.is_empty() || event_types.iter().any(|t| t.trim().is_empty()) {
            bail!("{at}: emit topic `{topic}` needs event_types, none empty");
        }
    }
    Ok(())
}

impl OutboxConfig {
    /// Producers named once each, not as a handler (`handlers`), with
    /// valid roles and topics.
    pub(super) fn check(&self, handlers: &[String]) -> anyhow::Result<()> {
        if !(std::time::Duration::from_secs(60)..=std::time::Duration::from_secs(3_650 * 86_400))
            .contains(&self.retention.0)
        {
            bail!("[outbox] retention = \"{}\" must be between 1m and 3650d", self.retention);
        }
        let mut names = HashSet::new();
        let mut roles = HashSet::new();
        for p in &self.producers {
            let at = format!("[[outbox.producer]] `{}`", p.name);
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
                bail!("{at}: a name is letters, digits, `-`, `_` or `.`");
            }
            if handlers.contains(&p.name) || !names.insert(p.name.as_str()) {
                bail!(
                    "{at}: the name is taken (a handler's, or another producer's): producers and handlers share one namespace"
                );
            }
            super::identifiers::check_identifier(&at, "role", &p.role)?;
            if !roles.insert(p.role.as_str()) {
                bail!("{at}: role `{}` is another producer's", p.role);
            }
            if p.topics.is_empty() {
                bail!("{at}: no [[outbox.producer.topic]]: it could publish nothing");
            }
            check_topics(&at, p.topics.iter().map(|t| (t.topic.as_str(), t.event_types.as_slice())))?;
        }
        Ok(())
    }
}
