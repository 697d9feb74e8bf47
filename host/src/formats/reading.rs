//! One handler's reading of registry-framed records: its reader schema,
//! and the writer schemas met so far, each fetched and resolved against
//! the reader once (ids never change meaning), kept up to
//! `[registry] cached_schemas` (the oldest goes first).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;

use super::Unreadable;
use super::avro;
use super::frame;
use super::protobuf::{ProtoReader, ProtoWriter};
use super::registry::{Fetched, Lookup, Outage, Registry};
use crate::config::Format;

pub(super) enum Reader {
    Avro(avro::Schema),
    Protobuf(ProtoReader),
    /// The reader's JSON Schema is the validator's, as for `json`.
    JsonSchema,
}

/// A writer schema as this handler can use it.
#[derive(Debug)]
pub enum Writer {
    /// The registry has no such id.
    Unknown,
    /// The id's schema is of another format, does not parse, or cannot be
    /// read as the reader's: why.
    Unusable(String),
    Avro(avro::Resolved),
    Protobuf(ProtoWriter),
    Json,
}

/// What decoding made of a record's body.
pub enum Decoded<'a> {
    /// Avro and Protobuf: the reader's JSON.
    Value(serde_json::Value),
    /// JSON Schema: the JSON text, checked later as `json` is.
    Text(&'a [u8]),
}

pub struct Reading {
    format: Format,
    reader: Reader,
    registry: Arc<Registry>,
    writers: Mutex<Cache>,
    capacity: usize,
}

#[derive(Default)]
struct Cache {
    by_id: HashMap<u32, Arc<Writer>>,
    order: VecDeque<u32>,
    /// The ids records asked for since `met` last took them.
    hit: std::collections::HashSet<u32>,
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reading").field("format", &self.format).finish_non_exhaustive()
    }
}

impl Reading {
    /// The reader schema at `path` in `format` (not `json`).
    pub fn load(format: Format, path: &Path, message: Option<&str>, registry: Arc<Registry>) -> anyhow::Result<Self> {
        let capacity = registry.cached_schemas();
        let reader = match format {
            Format::Avro => {
                let text =
                    crate::files::read_text(path).with_context(|| format!("failed to read {}", path.display()))?;
                let schema =
                    avro::Schema::parse(&text).with_context(|| format!("{} is not an Avro schema", path.display()))?;
                Reader::Avro(schema)
            }
            Format::Protobuf => Reader::Protobuf(
                ProtoReader::load(path, message).with_context(|| format!("the Protobuf schema {}", path.display()))?,
            ),
            Format::JsonSchema | Format::Json => Reader::JsonSchema,
        };
        Ok(Self { format, reader, registry, writers: Mutex::new(Cache::default()), capacity })
    }

    /// The writer schema ids records asked for since the last call (not
    /// `idem test`'s stand-in for the reader schema), for `idem.schema_seen`.
    pub fn met(&self) -> Vec<u32> {
        let Ok(mut cache) = self.writers.lock() else { return Vec::new() };
        cache.hit.drain().filter(|id| *id != super::READER_ID).collect()
    }

    /// Writer schema `id`, if this handler has it (a record asks: it is met).
    pub fn cached(&self, id: u32) -> Option<Arc<Writer>> {
        let mut cache = self.writers.lock().ok()?;
        let found = cache.by_id.get(&id).cloned();
        if found.is_some() && !cache.hit.contains(&id) {
            cache.hit.insert(id);
        }
        found
    }

    /// Writer schema `id` from the registry, resolved and kept.
    /// An id the registry does not have (yet) is not kept: the next
    /// record with it asks again.
    pub async fn fetch(&self, id: u32) -> Result<Arc<Writer>, Outage> {
        let writer = match self.registry.schema(id).await? {
            Lookup::Missing => return Ok(Arc::new(Writer::Unknown)),
            Lookup::MissingReference(why) => return Ok(Arc::new(Writer::Unusable(why))),
            Lookup::Unusable(why) => Writer::Unusable(why),
            Lookup::Found(fetched) => self.resolve(&fetched),
        };
        let writer = Arc::new(writer);
        self.install(id, writer.clone());
        Ok(writer)
    }

    pub(super) fn reader(&self) -> &Reader {
        &self.reader
    }

    pub(super) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Keeps `writer` as schema `id`'s, the oldest going past the capacity.
    pub(super) fn install(&self, id: u32, writer: Arc<Writer>) {
        if let Ok(mut cache) = self.writers.lock() {
            cache.hit.insert(id);
            if cache.by_id.insert(id, writer.clone()).is_none() {
                cache.order.push_back(id);
            }
            while cache.order.len() > self.capacity {
                if let Some(old) = cache.order.pop_front() {
                    cache.by_id.remove(&old);
                }
            }
        }
    }

    fn resolve(&self, fetched: &Fetched) -> Writer {
        let expected = match self.format {
            Format::Avro => "AVRO",
            Format::Protobuf => "PROTOBUF",
            Format::JsonSchema | Format::Json => "JSON",
        };
        if fetched.kind != expected {
            return Writer::Unusable(format!("it is a {} schema; the handler reads {expected}", fetched.kind));
        }
        match &self.reader {
            Reader::Avro(reader) => match avro::Schema::parse(&fetched.text) {
                Err(e) => Writer::Unusable(format!("the writer's schema does not parse: {e}")),
                Ok(writer) => match avro::resolve::resolve(&writer, reader) {
                    Ok(resolved) => Writer::Avro(resolved),
                    Err(e) => Writer::Unusable(format!("the reader's schema cannot read it: {e}")),
                },
            },
            Reader::Protobuf(reader) => match reader.writer(&fetched.text, &fetched.references) {
                Ok(writer) => Writer::Protobuf(writer),
                Err(e) => Writer::Unusable(e),
            },
            Reader::JsonSchema => Writer::Json,
        }
    }

    /// `body` (what follows schema `id` in the frame) decoded with `writer`.
    pub fn decode<'a>(&self, id: u32, writer: &Writer, body: &'a [u8]) -> Result<Decoded<'a>, Unreadable> {
        let undecodable = |reason: String| Unreadable::Undecodable { id, reason: crate::text::shown(&reason, 300) };
        match (writer, &self.reader) {
            (Writer::Unknown, _) => Err(Unreadable::UnknownSchema(id)),
            (Writer::Unusable(why), _) => Err(Unreadable::Unresolvable { id, reason: why.clone() }),
            (Writer::Avro(resolved), _) => {
                avro::decode::decode(resolved, body).map(Decoded::Value).map_err(|e| undecodable(e.to_string()))
            }
            (Writer::Protobuf(written), Reader::Protobuf(reader)) => {
                let (indexes, message) = frame::message_indexes(body)?;
                reader.decode(written, &indexes, message).map(Decoded::Value).map_err(undecodable)
            }
            (Writer::Json, _) => Ok(Decoded::Text(body)),
            (Writer::Protobuf(_), _) => Err(undecodable("a Protobuf writer for another format".into())),
        }
    }

    /// The contract check: every version of `subject` the reader schema
    /// cannot read, each named with its schema id and why (the first
    /// incompatibility, with its field).
    /// `seen`: the ids met on the topic (`idem.schema_seen`), read too
    /// when no version of the subject has them.
    pub async fn unreadable_versions(&self, subject: &str, seen: &[u32]) -> Result<Vec<String>, Outage> {
        let mut refused = Vec::new();
        let versions = self.registry.versions(subject).await?;
        for id in seen.iter().filter(|id| !versions.iter().any(|(_, v)| v == *id)) {
            let writer = match self.cached(*id) {
                Some(writer) => writer,
                None => self.fetch(*id).await?,
            };
            match &*writer {
                Writer::Unknown => {
                    refused.push(format!("schema id {id}, seen on the topic: it is not in the registry"))
                }
                Writer::Unusable(why) => refused.push(format!("schema id {id}, seen on the topic: {why}")),
                _ => {}
            }
        }
        for (version, id) in versions {
            let writer = match self.cached(id) {
                Some(writer) => writer,
                None => self.fetch(id).await?,
            };
            match &*writer {
                Writer::Unknown => refused
                    .push(format!("subject `{subject}` version {version}: schema id {id} is not in the registry")),
                Writer::Unusable(why) => {
                    refused.push(format!("subject `{subject}` version {version} (schema id {id}): {why}"))
                }
                _ => {}
            }
        }
        Ok(refused)
    }
}
