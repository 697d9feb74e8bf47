//! The outbox's side: an emitted event (JSON, as the handler emitted it
//! and the host enveloped it) written in its topic's format with the
//! latest version of the topic's subject (`[[handler.emit]] format`,
//! `subject`). The subject is looked up when the relay first writes to the
//! topic and kept; an event that does not fit it has the subject looked up
//! again (a newer version may fit). idem never registers a schema: a new
//! version is the producer team's to register.

use std::collections::HashMap;
use std::sync::Arc;

use super::protobuf::ProtoWriter;
use super::registry::{Lookup, Outage, Registry};
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
    writer: tokio::sync::Mutex<Option<Arc<Sampler>>>,
}

impl std::fmt::Debug for Emitting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitting").field("topics", &self.topics.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl Emitting {
    /// The emit topics of `emits` written in a registry format.
    pub fn new<'a>(emits: impl IntoIterator<Item = &'a HandlerEmit>, registry: Option<Arc<Registry>>) -> Self {
        let topics = emits
            .into_iter()
            .filter(|e| e.format.uses_registry())
            .map(|e| {
                let topic = Topic { format: e.format, subject: e.subject(), writer: tokio::sync::Mutex::default() };
                (e.topic.clone(), topic)
            })
            .collect();
        Self { registry, topics }
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
        let (id, lookup) = registry.latest(subject).await?;
        let made = match (id, lookup) {
            (Some(id), Lookup::Found(fetched)) => sampler(rules.format, id, &fetched),
            (_, Lookup::Unusable(why) | Lookup::MissingReference(why)) => Err(why),
            _ => Err(format!("subject `{subject}` has no version: register the topic's schema (idem never does)")),
        };
        let made = Arc::new(made.map_err(|why| NotWritten::Unavailable(format!("subject `{subject}`: {why}")))?);
        *writer = Some(made.clone());
        Ok((made, true))
    }
}

/// What writes `format`'s records with schema `id`.
fn sampler(format: Format, id: u32, fetched: &super::registry::Fetched) -> Result<Sampler, String> {
    let expected = match format {
        Format::Avro => "AVRO",
        Format::Protobuf => "PROTOBUF",
        Format::JsonSchema | Format::Json => "JSON",
    };
    if fetched.kind != expected {
        return Err(format!("its latest version is a {} schema, not {expected}", fetched.kind));
    }
    match format {
        Format::Avro => avro::Schema::parse(&fetched.text).map(|s| Sampler::Avro(id, s)).map_err(|e| e.0),
        Format::Protobuf => {
            let writer = ProtoWriter::compile(&fetched.text, &fetched.references)?;
            let name = writer.first_message().ok_or("its .proto declares no message")?;
            Ok(Sampler::Protobuf(id, writer, name))
        }
        Format::JsonSchema | Format::Json => Ok(Sampler::Json(id)),
    }
}
