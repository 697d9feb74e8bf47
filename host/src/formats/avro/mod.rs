//! Avro records: the reader's `.avsc` parsed at start-up, each writer
//! schema resolved against it once (`resolve`), records decoded by the
//! plan into JSON (`decode`). Written here rather than taken from a crate:
//! the bytes are a stranger's, and every bound (nesting, lengths, values
//! per byte) and every mapping to JSON is ours to state.

pub mod decode;
pub mod encode;
pub mod resolve;
pub mod schema;

pub use resolve::Resolved;
pub use schema::Schema;
