//! The Kafka record the event being handled was read from, as it arrived.
//! [`Event::value_bytes`](crate::Event::value_bytes) is the usual way in.

use crate::bindings::idem::handler::origin as wit;

/// The record's value byte for byte when the payload was decoded from it
/// (the registry's frame of an Avro, Protobuf or JSON Schema topic);
/// `None` on a JSON topic, whose value is the payload text itself.
pub fn value() -> Option<Vec<u8>> {
    wit::value()
}

/// The registry's id of the schema the record was written with, for a
/// framed record.
pub fn schema_id() -> Option<u32> {
    wit::schema_id()
}
