//! `idem test`'s events in a registry format: each JSON line encoded and
//! framed as a producer's serializer would, so that it goes through the
//! same decoding as the topic's records. Without a schema id the reader
//! schema itself is the writer (no registry needed: the edit–test loop
//! works offline), framed under [`READER_ID`]; with one (`--schema-id`),
//! the registry's schema of that id (an older or newer version: its
//! resolution is tested too).

use std::sync::Arc;

use super::avro;
use super::frame;
use super::protobuf::ProtoWriter;
use super::reading::{Reader, Reading, Writer};
use super::registry::Outage;

/// The id `idem test` frames events encoded with the reader schema
/// under: the largest an id can be; its writer is the reader, installed
/// in the handler's cache for the run.
pub const READER_ID: u32 = i32::MAX as u32;

/// How `idem test`'s events become records.
pub enum Sampler {
    Avro(u32, avro::Schema),
    /// The writer, the reader's message name, and (for the reader's own
    /// file) the message's indexes.
    Protobuf(u32, ProtoWriter, String),
    Json(u32),
}

impl Sampler {
    /// `json` (one event) as a framed record.
    pub fn record(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        let value = || serde_json::from_slice::<serde_json::Value>(json).map_err(|e| format!("not JSON: {e}"));
        match self {
            Self::Avro(id, schema) => Ok(frame::frame(*id, None, &avro::encode::encode(schema, &value()?)?)),
            Self::Protobuf(id, writer, name) => {
                let (indexes, body) = writer.encode(name, &value()?)?;
                Ok(frame::frame(*id, Some(&indexes), &body))
            }
            Self::Json(id) => Ok(frame::frame(*id, None, json)),
        }
    }

    pub fn schema_id(&self) -> u32 {
        match self {
            Self::Avro(id, _) | Self::Protobuf(id, ..) | Self::Json(id) => *id,
        }
    }
}

impl Reading {
    /// The sampler for `idem test` (see the module's docs).
    pub async fn sampler(&self, id: Option<u32>) -> Result<Result<Sampler, String>, Outage> {
        let Some(id) = id else { return Ok(Ok(self.reader_sampler())) };
        let writer = self.fetch(id).await?;
        let super::registry::Lookup::Found(fetched) = self.registry().schema(id).await? else {
            return Ok(Err(format!("schema id {id} is not in the registry, or not usable")));
        };
        Ok(match (&*writer, self.reader()) {
            (Writer::Avro(_), _) => avro::Schema::parse(&fetched.text).map(|s| Sampler::Avro(id, s)).map_err(|e| e.0),
            (Writer::Protobuf(written), Reader::Protobuf(reader)) => {
                let name = reader.message_name().rsplit('.').next().unwrap_or_default().to_owned();
                Ok(Sampler::Protobuf(id, written.clone(), name))
            }
            (Writer::Json, _) => Ok(Sampler::Json(id)),
            (Writer::Unknown, _) => Err(format!("schema id {id} is not in the registry")),
            (Writer::Unusable(why), _) => Err(format!("schema id {id}: {why}")),
            (Writer::Protobuf(_), _) => Err(format!("schema id {id} is not the handler's format")),
        })
    }

    /// The reader schema as its own writer, installed under [`READER_ID`].
    fn reader_sampler(&self) -> Sampler {
        let (writer, sampler) = match self.reader() {
            Reader::Avro(schema) => match avro::resolve::resolve(schema, schema) {
                Ok(resolved) => (Writer::Avro(resolved), Sampler::Avro(READER_ID, schema.clone())),
                Err(e) => (Writer::Unusable(e.0), Sampler::Avro(READER_ID, schema.clone())),
            },
            Reader::Protobuf(reader) => {
                let (written, _) = reader.as_writer();
                let name = reader.message_name().rsplit('.').next().unwrap_or_default().to_owned();
                (Writer::Protobuf(written.clone()), Sampler::Protobuf(READER_ID, written, name))
            }
            Reader::JsonSchema => (Writer::Json, Sampler::Json(READER_ID)),
        };
        self.install(READER_ID, Arc::new(writer));
        sampler
    }
}
