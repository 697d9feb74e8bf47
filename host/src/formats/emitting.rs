//! The outbox's side: an emitted event (JSON, as the handler emitted it
//! and the host enveloped it) written in its topic's format with the
//! latest version of the topic's subject (`[[handler.emit]] format`,
//! `subject`). The subject is looked up when the relay first writes to the
//! topic and kept; an event that does not fit it has the subject looked up
//! again (a newer version may fit). idem registers a schema only where the
//! config says so (`register = "<file>"`): then that schema, registered
//! under the subject (or found there), writes the topic's records, as a
//! serializer with automatic registration does; the registry's
//! compatibility rule decides whether it may.

use std::collections::HashMap;
use std::sync::Arc;

use super::protobuf::ProtoWriter;
use super::registry::{Fetched, Lookup, Outage, Registry};
use super::{Sampler, avro};
use crate::config::{Format, HandlerEmit};

/// Why an event cannot be written now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotWritten {
    /// The registry cannot answer: the topic's rows wait.
    #[error(transparent)]
    Outage(#[from] Outage),
    /// The subject has no usable latest version (none registered yet, of
    /// another format, not compiling): the topic's rows wait, as in an
    /// outage, until it has one.
    #[error("{0}")]
    Unavailable(String),
    /// The event does not fit the subject's latest version: the row fails,
    /// with why.
    #[error("{0}")]
    Refused(String),
}

/// The topics written in a registry format, and how.
#[derive(Default)]
pub struct Emitting {
    registry: Option<Arc<Registry>>,
    topics: HashMap<String, Topic>,
}

struct Topic {
    format: Format,
    subject: String,
    /// `register`: the schema file and its text, checked when read.
    register: Option<(String, String)>,
    /// `protobuf`: the message written (default: the schema's first).
    message: Option<String>,
    writer: tokio::sync::Mutex<Option<Arc<Sampler>>>,
}

impl std::fmt::Debug for Emitting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitting").field("topics", &self.topics.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl Emitting {
    /// The emit topics of `emits` written in a registry format; a schema
    /// to register is read and checked now (a file that does not compile
    /// is refused before anything runs).
    pub fn new<'a>(
        emits: impl IntoIterator<Item = &'a HandlerEmit>,
        registry: Option<Arc<Registry>>,
    ) -> anyhow::Result<Self> {
        let mut topics = HashMap::new();
        for e in emits.into_iter().filter(|e| e.format.uses_registry()) {
            let message = e.message.as_deref();
            let register = match &e.register {
                Some(file) => Some(registered(e.format, file, message).map_err(|why| {
                    anyhow::anyhow!("emit topic `{}`: register = {}: {why}", e.topic, file.display())
                })?),
                None => None,
            };
            let topic = Topic {
                format: e.format,
                subject: e.subject(),
                register,
                message: e.message.clone(),
                writer: tokio::sync::Mutex::default(),
            };
            topics.insert(e.topic.clone(), topic);
        }
        Ok(Self { registry, topics })
    }

    /// `json` (an outbox row's value) as `topic`'s record: `None` when the
    /// topic is written as JSON. An event that does not fit the version
    /// kept has the subject looked up again first: a newer version may
    /// have been registered since.
    pub async fn encode(&self, topic: &str, json: &str) -> Result<Option<Vec<u8>>, NotWritten> {
        let Some(rules) = self.topics.get(topic) else { return Ok(None) };
        let (mut writer, fresh) = self.writer(rules, false).await?;
        let mut misfit = match writer.record(json.as_bytes()) {
            Ok(bytes) => return Ok(Some(bytes)),
            Err(why) => why,
        };
        if !fresh {
            (writer, _) = self.writer(rules, true).await?;
            misfit = match writer.record(json.as_bytes()) {
                Ok(bytes) => return Ok(Some(bytes)),
                Err(why) => why,
            };
        }
        let (subject, id) = (&rules.subject, writer.schema_id());
        Err(NotWritten::Refused(format!("the event does not fit subject `{subject}` (schema id {id}): {misfit}")))
    }

    /// The topic's writer, and whether it was looked up just now (`again`:
    /// look it up even if one is kept).
    async fn writer(&self, rules: &Topic, again: bool) -> Result<(Arc<Sampler>, bool), NotWritten> {
        let mut writer = rules.writer.lock().await;
        if let Some(known) = writer.as_ref().filter(|_| !again) {
            return Ok((known.clone(), false));
        }
        let registry = self.registry.as_ref().ok_or_else(|| NotWritten::Unavailable("no [registry]".into()))?;
        let subject = &rules.subject;
        let (id, lookup) = match &rules.register {
            Some((file, text)) => {
                let kind = kind_of(rules.format);
                let id = registry.register(subject, kind, text).await?.map_err(|why| {
                    NotWritten::Unavailable(format!("subject `{subject}`: registering {file} was refused: {why}"))
                })?;
                let fetched = Fetched { kind: kind.to_owned(), text: text.clone(), references: Vec::new() };
                (Some(id), Lookup::Found(fetched))
            }
            None => registry.latest(subject).await?,
        };
        let made = match (id, lookup) {
            (Some(id), Lookup::Found(fetched)) => sampler(rules.format, id, &fetched, rules.message.as_deref()),
            (_, Lookup::Unusable(why) | Lookup::MissingReference(why)) => Err(why),
            _ => Err(format!(
                "subject `{subject}` has no version: register the topic's schema (or let idem: [[handler.emit]] register)"
            )),
        };
        let made = Arc::new(made.map_err(|why| NotWritten::Unavailable(format!("subject `{subject}`: {why}")))?);
        *writer = Some(made.clone());
        Ok((made, true))
    }
}

/// The registry's name of `format`'s schemas.
fn kind_of(format: Format) -> &'static str {
    match format {
        Format::Avro => "AVRO",
        Format::Protobuf => "PROTOBUF",
        Format::JsonSchema | Format::Json => "JSON",
    }
}

/// The schema file to register for a topic written as `format`: its
/// display name and text, once it compiles as `format`'s schema.
fn registered(format: Format, file: &std::path::Path, message: Option<&str>) -> Result<(String, String), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot be read: {e}"))?;
    if format == Format::JsonSchema {
        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| format!("is not JSON: {e}"))?;
    }
    let fetched = Fetched { kind: kind_of(format).to_owned(), text, references: Vec::new() };
    sampler(format, 0, &fetched, message)?;
    Ok((file.display().to_string(), fetched.text))
}

/// What writes `format`'s records with schema `id` (Protobuf's as
/// `message`, else the schema's first).
fn sampler(format: Format, id: u32, fetched: &Fetched, message: Option<&str>) -> Result<Sampler, String> {
    let expected = kind_of(format);
    if fetched.kind != expected {
        return Err(format!("its latest version is a {} schema, not {expected}", fetched.kind));
    }
    match format {
        Format::Avro => avro::Schema::parse(&fetched.text).map(|s| Sampler::Avro(id, s)).map_err(|e| e.0),
        Format::Protobuf => {
            let writer = ProtoWriter::compile(&fetched.text, &fetched.references)?;
            let name = match message {
                Some(name) if writer.declares(name) => name.to_owned(),
                Some(name) => return Err(format!("its .proto declares no top-level message `{name}`")),
                None => writer.first_message().ok_or("its .proto declares no message")?,
            };
            Ok(Sampler::Protobuf(id, writer, name))
        }
        Format::JsonSchema | Format::Json => Ok(Sampler::Json(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::{Fetched, Format, sampler};
    use crate::formats::frame;

    const TWO: &str = "syntax = \"proto3\";\npackage p;\nmessage A { string eventId = 1; }\n\
                       message B { string eventId = 1; int64 n = 2; }\n";

    fn fetched() -> Fetched {
        Fetched { kind: "PROTOBUF".into(), text: TWO.into(), references: Vec::new() }
    }

    #[test]
    fn a_protobuf_topic_writes_the_message_it_names_else_the_first() {
        let indexes = |message: Option<&str>| {
            let written = sampler(Format::Protobuf, 7, &fetched(), message).expect("a writer");
            let bytes = written.record(br#"{"eventId":"x","n":"5"}"#.as_slice()).unwrap_or_else(|e| {
                // A's writer has no field `n`: the first message refuses it.
                assert!(message.is_none(), "{e}");
                written.record(br#"{"eventId":"x"}"#.as_slice()).expect("as A")
            });
            let framed = frame::split(&bytes).expect("framed");
            assert_eq!(framed.schema_id, 7);
            frame::message_indexes(framed.body).expect("indexes").0
        };
        assert_eq!(indexes(Some("p.B")), vec![1], "by full name");
        assert_eq!(indexes(Some("B")), vec![1], "by name");
        assert_eq!(indexes(None), vec![0], "the first message");
        let missing = sampler(Format::Protobuf, 7, &fetched(), Some("C")).err().unwrap_or_default();
        assert!(missing.contains("no top-level message `C`"), "{missing}");
    }
}
