//! `[[handler]] format`, `message` and `[handler.envelope]`: how a
//! handler's records are read (docs/formats.md).

use anyhow::bail;
use serde::Deserialize;

/// How a handler's records are encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// JSON text, unframed (the default); `schema` is a JSON Schema.
    #[default]
    Json,
    /// Avro, framed for the registry; `schema` is the reader's `.avsc`.
    Avro,
    /// Protobuf, framed for the registry; `schema` is the reader's `.proto`
    /// and `message` the message it reads.
    Protobuf,
    /// JSON framed for the registry; `schema` is a JSON Schema.
    JsonSchema,
}

impl Format {
    /// Whether records carry a schema id the registry answers for.
    pub fn uses_registry(self) -> bool {
        self != Self::Json
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
            Self::JsonSchema => "json-schema",
        }
    }
}

/// Where the envelope's fields are in the (decoded) record: dotted paths
/// into nested objects, e.g. `"meta.id"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    #[serde(default = "default_event_id")]
    pub event_id: String,
    #[serde(default = "default_event_type")]
    pub event_type: String,
    #[serde(default = "default_occurred_at")]
    pub occurred_at: String,
}

impl Default for Envelope {
    fn default() -> Self {
        Self { event_id: default_event_id(), event_type: default_event_type(), occurred_at: default_occurred_at() }
    }
}

fn default_event_id() -> String {
    "eventId".into()
}

fn default_event_type() -> String {
    "eventType".into()
}

fn default_occurred_at() -> String {
    "occurredAt".into()
}

/// A handler's format keys: a registry when the format needs one, a
/// message only for Protobuf, paths that are paths.
pub(super) fn check(
    at: &str,
    format: Format,
    message: Option<&str>,
    envelope: &Envelope,
    registry: bool,
) -> anyhow::Result<()> {
    if format.uses_registry() && !registry {
        bail!("{at}: format = \"{}\" reads schema ids from the records: it needs a [registry]", format.as_str());
    }
    if message.is_some() && format != Format::Protobuf {
        bail!("{at}: `message` names a Protobuf message; format is \"{}\"", format.as_str());
    }
    for (key, path) in
        [("event_id", &envelope.event_id), ("event_type", &envelope.event_type), ("occurred_at", &envelope.occurred_at)]
    {
        if path.is_empty() || path.len() > 200 || path.split('.').any(str::is_empty) {
            bail!("{at}: envelope.{key} = `{path}` is not a dotted path of field names (e.g. `meta.id`)");
        }
    }
    Ok(())
}
