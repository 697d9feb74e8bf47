//! Records in the registry formats (`format = "avro" | "protobuf" |
//! "json-schema"`, docs/formats.md): the frame (`frame`), the writer
//! schema fetched by id (`registry`), decoded and resolved against the
//! handler's reader schema (`avro`, `protobuf`), into the JSON payload
//! every later check and the guest read. `Reading` is one handler's: its
//! reader schema and the writer schemas it has met, each resolved once.

pub mod avro;
mod emitting;
pub mod frame;
pub mod protobuf;
mod reading;
pub mod registry;
mod sample;

pub use emitting::{Emitting, NotWritten};
pub use reading::{Decoded, Reading, Writer};
pub use registry::{Outage, Registry};
pub use sample::{READER_ID, Sampler};

/// Why a registry format's record cannot be read: the record is invalid
/// (dead-lettered byte for byte, this as its reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("the payload is not framed for the schema registry: {0}")]
    Frame(String),
    #[error("schema id {0} is not in the schema registry")]
    UnknownSchema(u32),
    #[error("schema id {id} cannot be read as the handler's reader schema: {reason}")]
    Unresolvable { id: u32, reason: String },
    #[error("the payload does not decode with schema id {id}: {reason}")]
    Undecodable { id: u32, reason: String },
}
