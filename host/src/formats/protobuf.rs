//! Protobuf records: the reader's `.proto` compiled at start-up (protox,
//! with Google's well-known types), a writer's from the registry's text
//! when its id is first seen. A record is decoded with the reader's
//! message, which is Protobuf's own resolution (fields matched by number,
//! unknown ones skipped, missing ones their defaults); the writer's schema
//! says which message the record is (its message indexes) and whether its
//! fields' types can be read as the reader's at all.
//!
//! The JSON the guest reads is Protobuf's canonical JSON mapping: field
//! names in lowerCamelCase, 64-bit integers as strings, enums as names,
//! bytes as base64, `Timestamp` as RFC 3339; fields at their default value
//! are included.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver};

/// The name a writer schema's own file is compiled under.
const WRITER_FILE: &str = "registry-writer.proto";
/// How deep a writer schema's braces may nest.
const MAX_DEPTH: usize = 32;

/// The reader's message.
#[derive(Debug, Clone)]
pub struct ProtoReader {
    message: MessageDescriptor,
}

/// A writer schema: its file's messages, in declaration order at each level.
#[derive(Debug, Clone)]
pub struct ProtoWriter {
    pool: DescriptorPool,
    /// The file the message indexes count in.
    file: String,
    /// Each of its messages checked against the reader's once, by name.
    checked: Arc<Mutex<HashMap<String, Result<(), String>>>>,
}

impl ProtoReader {
    /// Compiles `path` (imports relative to its folder) and picks `message`
    /// (default: the file's first).
    pub fn load(path: &Path, message: Option<&str>) -> anyhow::Result<Self> {
        let folder = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().and_then(|n| n.to_str()).context("a .proto file's name")?;
        let mut resolver = ChainFileResolver::new();
        resolver.add(IncludeFileResolver::new(folder.to_owned()));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.open_file(name).map_err(|e| anyhow::anyhow!("{e}"))?;
        let pool = compiler.descriptor_pool();
        let message = match message {
            Some(full) => pool.get_message_by_name(full).with_context(|| format!("it has no message `{full}`"))?,
            None => {
                let file = pool.get_file_by_name(name).context("the compiled file")?;
                file.messages().next().context("it declares no message")?
            }
        };
        Ok(Self { message })
    }

    /// A writer schema compiled (checked against the reader's message per
    /// message, where their field numbers meet, as records meet it).
    pub fn writer(&self, text: &str, references: &[(String, String)]) -> Result<ProtoWriter, String> {
        ProtoWriter::compile(text, references)
    }

    /// The record's message (`indexes` into the writer's file) decoded as the reader's, as JSON.
    pub fn decode(&self, writer: &ProtoWriter, indexes: &[usize], bytes: &[u8]) -> Result<serde_json::Value, String> {
        let written = writer.message(indexes)?;
        if written.name() != self.message.name() {
            return Err(format!(
                "the record is a `{}`; the handler reads `{}`",
                written.full_name(),
                self.message.full_name()
            ));
        }
        writer.compatible(&written, &self.message)?;
        let message = DynamicMessage::decode(self.message.clone(), bytes).map_err(|e| e.to_string())?;
        // Every present message's fields are written out, defaults too:
        // bounded by the record's size, as Avro's values are.
        let fields = written_fields(&message, 0);
        let most = bytes.len().saturating_mul(4) + 4096;
        if fields > most {
            return Err(format!("it would expand to {fields} fields, more than its {} bytes allow", bytes.len()));
        }
        let options = SerializeOptions::new().skip_default_fields(false);
        message.serialize_with_options(serde_json::value::Serializer, &options).map_err(|e| e.to_string())
    }

    pub fn message_name(&self) -> &str {
        self.message.full_name()
    }

    /// The reader's own schema as a writer (`idem test` without a schema
    /// id), and its message's indexes in its file.
    pub fn as_writer(&self) -> (ProtoWriter, Vec<usize>) {
        let file = self.message.parent_file();
        let writer = ProtoWriter {
            pool: self.message.parent_pool().clone(),
            file: file.name().to_owned(),
            checked: Arc::default(),
        };
        let mut indexes = Vec::new();
        let mut at = self.message.clone();
        while let Some(parent) = at.parent_message() {
            indexes.push(parent.child_messages().position(|m| m.full_name() == at.full_name()).unwrap_or(0));
            at = parent;
        }
        indexes.push(file.messages().position(|m| m.full_name() == at.full_name()).unwrap_or(0));
        indexes.reverse();
        (writer, indexes)
    }

    /// `value` (the canonical JSON mapping) as the reader's message's bytes:
    /// what `idem test` encodes an event with, and what the suite produces.
    pub fn encode(&self, value: &serde_json::Value) -> Result<Vec<u8>, String> {
        use prost::Message as _;
        let message = DynamicMessage::deserialize(self.message.clone(), value).map_err(|e| e.to_string())?;
        Ok(message.encode_to_vec())
    }
}

impl ProtoWriter {
    /// A writer schema (the registry's text and its references) compiled,
    /// its nesting bounded first.
    pub fn compile(text: &str, references: &[(String, String)]) -> Result<ProtoWriter, String> {
        for (name, source) in references.iter().map(|(n, s)| (n.as_str(), s.as_str())).chain([("the schema", text)]) {
            nesting_within_bounds(source).map_err(|e| format!("{name}: {e}"))?;
        }
        let mut files: HashMap<String, String> = references.iter().cloned().collect();
        files.insert(WRITER_FILE.to_owned(), text.to_owned());
        let mut resolver = ChainFileResolver::new();
        resolver.add(Memory(files));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.open_file(WRITER_FILE).map_err(|e| format!("the writer's .proto does not compile: {e}"))?;
        Ok(ProtoWriter { pool: compiler.descriptor_pool(), file: WRITER_FILE.to_owned(), checked: Arc::default() })
    }

    /// [`compatible`] for `written`, worked out once per message.
    fn compatible(&self, written: &MessageDescriptor, reader: &MessageDescriptor) -> Result<(), String> {
        let name = written.full_name();
        if let Some(known) = self.checked.lock().ok().and_then(|c| c.get(name).cloned()) {
            return known;
        }
        let result = compatible(written, reader, &mut HashSet::new());
        if let Ok(mut checked) = self.checked.lock() {
            checked.insert(name.to_owned(), result.clone());
        }
        result
    }

    /// The name of the file's first message (what an emitted event is
    /// written as, unless the topic names another).
    pub fn first_message(&self) -> Option<String> {
        let file = self.pool.get_file_by_name(&self.file)?;
        file.messages().next().map(|m| m.name().to_owned())
    }

    /// Whether the file declares a top-level message `name` (its own name
    /// or its full name).
    pub fn declares(&self, name: &str) -> bool {
        let file = self.pool.get_file_by_name(&self.file);
        file.is_some_and(|f| f.messages().any(|m| m.name() == name || m.full_name() == name))
    }

    /// `value` (the canonical JSON mapping) as the writer's message of the
    /// reader's name, and that message's indexes (`idem test --schema-id`).
    pub fn encode(&self, name: &str, value: &serde_json::Value) -> Result<(Vec<usize>, Vec<u8>), String> {
        use prost::Message as _;
        let file = self.pool.get_file_by_name(&self.file).ok_or("the writer's file")?;
        let (index, message) = file
            .messages()
            .enumerate()
            .find(|(_, m)| m.name() == name || m.full_name() == name)
            .ok_or_else(|| format!("the writer's schema has no top-level message `{name}`"))?;
        let message = DynamicMessage::deserialize(message, value).map_err(|e| e.to_string())?;
        Ok((vec![index], message.encode_to_vec()))
    }

    /// The message at `indexes`: the file's n-th message, then its m-th nested one, …
    fn message(&self, indexes: &[usize]) -> Result<MessageDescriptor, String> {
        let file = self.pool.get_file_by_name(&self.file).ok_or("the writer's file")?;
        let mut at = indexes.iter();
        let first = at.next().copied().unwrap_or(0);
        let mut message = file.messages().nth(first).ok_or_else(|| no_message(indexes))?;
        for index in at {
            let child = message.child_messages().nth(*index);
            message = child.ok_or_else(|| no_message(indexes))?;
        }
        Ok(message)
    }
}

fn no_message(indexes: &[usize]) -> String {
    format!("the writer's schema has no message at indexes {indexes:?}")
}

/// Whether every field number the writer and the reader share has types
/// of one wire family (varints, zig-zag varints, 32-bit, 64-bit, length-
/// delimited), recursively into messages (each pair once); the first that
/// does not is named.
fn compatible(
    writer: &MessageDescriptor,
    reader: &MessageDescriptor,
    seen: &mut HashSet<(String, String)>,
) -> Result<(), String> {
    if !seen.insert((writer.full_name().to_owned(), reader.full_name().to_owned())) {
        return Ok(());
    }
    for field in reader.fields() {
        let Some(written) = writer.get_field(field.number()) else { continue };
        let (w, r) = (written.kind(), field.kind());
        if family(&w) != family(&r) || written.is_map() != field.is_map() {
            return Err(format!(
                "field `{}` (number {}) is {} in the writer's schema and {} in the reader's",
                field.full_name(),
                field.number(),
                kind_name(&w),
                kind_name(&r)
            ));
        }
        if let (Kind::Message(w), Kind::Message(r)) = (&w, &r) {
            compatible(w, r, seen)?;
        }
    }
    Ok(())
}

/// The fields serialising `message` writes (every field of every message
/// present, defaults included), counted without building anything.
fn written_fields(message: &DynamicMessage, depth: usize) -> usize {
    use prost_reflect::{ReflectMessage as _, Value};
    if depth > 100 {
        return 0;
    }
    // An element of a list or a map: a message's fields, or one value.
    let element = |v: &Value| match v {
        Value::Message(m) => written_fields(m, depth + 1),
        _ => 1,
    };
    let mut count = message.descriptor().fields().len();
    for (_, value) in message.fields() {
        count += match value {
            Value::Message(m) => written_fields(m, depth + 1),
            Value::List(items) => items.iter().map(element).sum(),
            Value::Map(entries) => entries.values().map(element).sum(),
            _ => 0,
        };
    }
    count
}

/// A hostile schema's deep option values (`option (x) = { a { a { … } } }`)
/// would recurse in the compiler's text-format parser without bound:
/// braces and angle brackets, outside strings and comments, nest at most
/// [`MAX_DEPTH`] deep.
fn nesting_within_bounds(source: &str) -> Result<(), String> {
    let (mut depth, mut chars) = (0usize, source.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                let mut escaped = false;
                for d in chars.by_ref() {
                    if !escaped && d == c {
                        break;
                    }
                    escaped = !escaped && d == '\\';
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for d in chars.by_ref() {
                    if last == '*' && d == '/' {
                        break;
                    }
                    last = d;
                }
            }
            '{' | '<' | '[' | '(' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("it nests deeper than {MAX_DEPTH} levels"));
                }
            }
            '}' | '>' | ']' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn family(kind: &Kind) -> u8 {
    match kind {
        Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 | Kind::Bool | Kind::Enum(_) => 0,
        Kind::Sint32 | Kind::Sint64 => 1,
        Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => 2,
        Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => 3,
        Kind::String | Kind::Bytes => 4,
        Kind::Message(_) => 5,
    }
}

fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("message `{}`", m.full_name()),
        Kind::Enum(e) => format!("enum `{}`", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The writer's file and its references, by name.
struct Memory(HashMap<String, String>);

impl FileResolver for Memory {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.get(name) {
            Some(source) => File::from_source(name, source),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const V1: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  string event_id = 1;
  google.protobuf.Timestamp occurred_at = 2;
  int64 amount_cents = 3;
  Status status = 4;
  bytes raw = 5;
  enum Status { NEW = 0; PAID = 1; }
}
"#;

    fn reader(text: &str) -> ProtoReader {
        let dir = std::env::temp_dir().join(format!("idem-proto-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("a folder");
        std::fs::write(dir.join("order.proto"), text).expect("written");
        ProtoReader::load(&dir.join("order.proto"), None).expect("compiles")
    }

    #[test]
    fn a_message_reads_as_the_canonical_json_mapping() {
        let reader = reader(V1);
        let value = json!({"eventId": "e1", "occurredAt": "2026-12-06T01:02:03Z", "amountCents": "1234",
                           "status": "PAID", "raw": "AAE="});
        let bytes = reader.encode(&value).expect("encodes");
        let writer = reader.writer(V1, &[]).expect("the writer compiles");
        assert_eq!(reader.decode(&writer, &[0], &bytes).expect("decodes"), value);
    }

    #[test]
    fn a_field_whose_type_changed_is_named() {
        let reader = reader(V1);
        let v3 = V1.replace("int64 amount_cents = 3;", "string amount_cents = 3;");
        let writer = reader.writer(&v3, &[]).expect("compiles");
        let error = reader.decode(&writer, &[0], b"").expect_err("incompatible");
        assert!(error.contains("field `shop.Order.amount_cents` (number 3) is string"), "{error}");
        let error = reader.decode(&writer, &[3], b"").expect_err("no such message");
        assert!(error.contains("no message at indexes [3]"), "{error}");
        let error = reader.decode(&reader.writer(V1, &[]).expect("v1"), &[0], &[0x1a, 0xff]).expect_err("cut short");
        assert!(!error.is_empty());
    }

    #[test]
    fn a_writer_schema_nesting_deeper_than_the_bound_is_refused_before_it_compiles() {
        let reader = reader(V1);
        let deep = format!("{V1}\noption (deep) = {}{};", "{ a ".repeat(5_000), "}".repeat(5_000));
        let error = reader.writer(&deep, &[]).expect_err("too deep");
        assert!(error.contains("nests deeper than 32"), "{error}");
        let quoted = format!("{V1}\n// {}\n", "{".repeat(100));
        assert!(reader.writer(&quoted, &[]).is_ok(), "braces in a comment do not count");
    }
}
