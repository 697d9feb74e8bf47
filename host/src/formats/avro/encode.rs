//! JSON written as Avro, the inverse of `decode`'s mapping: what `idem
//! test` encodes an event with, the outbox writes, and what the test
//! suite produces. A union takes its first branch the value fits; a
//! record's field missing from the object takes its default; a key the
//! record has no field for is an error (nothing is dropped silently).

use base64::Engine as _;
use serde_json::Value;

use super::schema::{Logical, NamedKind, Node, Schema};

/// `value` in Avro's binary encoding under `schema`.
pub fn encode(schema: &Schema, value: &Value) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    Writer { schema, out: &mut out }.value(&schema.root, value, 0)?;
    Ok(out)
}

struct Writer<'a> {
    schema: &'a Schema,
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn value(&mut self, node: &Node, value: &Value, depth: usize) -> Result<(), String> {
        if depth > super::decode::MAX_NESTING * 4 {
            return Err("nested too deep".into());
        }
        let wrong = || format!("{} is not a {}", shown(value), super::schema::type_name(node, &self.schema.named));
        match node {
            Node::Null => value.is_null().then_some(()).ok_or_else(wrong)?,
            Node::Boolean => self.out.push(u8::from(value.as_bool().ok_or_else(wrong)?)),
            Node::Int(logical) | Node::Long(logical) => {
                let n = number(value, *logical).ok_or_else(wrong)?;
                if matches!(node, Node::Int(_)) && i32::try_from(n).is_err() {
                    return Err(wrong());
                }
                self.long(n);
            }
            #[expect(clippy::cast_possible_truncation, reason = "a float is what the schema asks for")]
            Node::Float => self.out.extend_from_slice(&(value.as_f64().ok_or_else(wrong)? as f32).to_le_bytes()),
            Node::Double => self.out.extend_from_slice(&value.as_f64().ok_or_else(wrong)?.to_le_bytes()),
            Node::Bytes(logical) => {
                let bytes = bytes(value, *logical, None).ok_or_else(wrong)?;
                self.sized(&bytes);
            }
            Node::String => self.sized(value.as_str().ok_or_else(wrong)?.as_bytes()),
            Node::Array(items) => {
                let list = value.as_array().ok_or_else(wrong)?;
                if !list.is_empty() {
                    self.long(i64::try_from(list.len()).map_err(|_| wrong())?);
                    for item in list {
                        self.value(items, item, depth + 1)?;
                    }
                }
                self.long(0);
            }
            Node::Map(values) => {
                let map = value.as_object().ok_or_else(wrong)?;
                if !map.is_empty() {
                    self.long(i64::try_from(map.len()).map_err(|_| wrong())?);
                    for (key, item) in map {
                        self.sized(key.as_bytes());
                        self.value(values, item, depth + 1)?;
                    }
                }
                self.long(0);
            }
            Node::Union(branches) => {
                for (i, branch) in branches.iter().enumerate() {
                    let mut attempt = Vec::new();
                    if (Writer { schema: self.schema, out: &mut attempt }).value(branch, value, depth + 1).is_ok() {
                        self.long(i64::try_from(i).map_err(|_| wrong())?);
                        self.out.extend(attempt);
                        return Ok(());
                    }
                }
                return Err(format!("{} fits none of the union's branches", shown(value)));
            }
            Node::Named(index) => self.named(*index, value, depth)?,
        }
        Ok(())
    }

    fn named(&mut self, index: usize, value: &Value, depth: usize) -> Result<(), String> {
        let named = &self.schema.named[index];
        match &named.kind {
            NamedKind::Record(fields) => {
                let object = value.as_object().ok_or_else(|| format!("{} is not a `{}`", shown(value), named.name))?;
                // Nothing is dropped on the way: a key the schema lacks is an error.
                if let Some(extra) = object.keys().find(|k| !fields.iter().any(|f| f.name == **k)) {
                    return Err(format!("`{}` has no field `{}`", named.name, crate::text::shown(extra, 60)));
                }
                for field in fields {
                    let item = object.get(&field.name).or(field.default.as_ref()).ok_or_else(|| {
                        format!("`{}` has no field `{}` (and it has no default)", named.name, field.name)
                    })?;
                    self.value(&field.node, item, depth + 1).map_err(|e| format!("{}: {e}", field.name))?;
                }
            }
            NamedKind::Enum { symbols, .. } => {
                let at = value.as_str().and_then(|s| symbols.iter().position(|x| x == s));
                let at = at.ok_or_else(|| format!("{} is not a symbol of `{}`", shown(value), named.name))?;
                self.long(i64::try_from(at).unwrap_or(0));
            }
            NamedKind::Fixed { size, logical } => {
                let bytes = bytes(value, *logical, Some(*size))
                    .filter(|b| b.len() == *size)
                    .ok_or_else(|| format!("{} is not {size} bytes of `{}`", shown(value), named.name))?;
                self.out.extend(bytes);
            }
        }
        Ok(())
    }

    fn sized(&mut self, bytes: &[u8]) {
        self.long(i64::try_from(bytes.len()).unwrap_or(0));
        self.out.extend_from_slice(bytes);
    }

    fn long(&mut self, n: i64) {
        #[expect(clippy::cast_sign_loss, reason = "zig-zag encoding works on the bits")]
        let mut v = ((n << 1) ^ (n >> 63)) as u64;
        while v >= 0x80 {
            self.out.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
            v >>= 7;
        }
        self.out.push(u8::try_from(v).unwrap_or(0));
    }
}

fn shown(value: &Value) -> String {
    crate::text::shown(&value.to_string(), 60)
}

/// An int or long: a number, or the text of its logical type.
fn number(value: &Value, logical: Option<Logical>) -> Option<i64> {
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    let text = value.as_str()?;
    match logical? {
        Logical::Date => {
            let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
            Some(date.signed_duration_since(chrono::NaiveDate::default()).num_days())
        }
        Logical::TimestampMillis => Some(chrono::DateTime::parse_from_rfc3339(text).ok()?.timestamp_millis()),
        Logical::TimestampMicros => chrono::DateTime::parse_from_rfc3339(text).ok()?.timestamp_micros().into(),
        _ => None,
    }
}

/// Bytes or fixed: base64, or a decimal's text as its unscaled two's complement.
fn bytes(value: &Value, logical: Option<Logical>, size: Option<usize>) -> Option<Vec<u8>> {
    let text = value.as_str()?;
    let Some(Logical::Decimal { scale }) = logical else {
        return base64::engine::general_purpose::STANDARD.decode(text).ok();
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let scale = usize::try_from(scale).ok()?;
    if fraction.len() > scale {
        return None;
    }
    let digits = format!("{whole}{fraction:0<scale$}");
    let unscaled: i128 = digits.parse().ok()?;
    let all = unscaled.to_be_bytes();
    // The shortest two's complement that keeps the sign, or `size` bytes.
    let keep = match size {
        Some(size) => size.min(16),
        None => (1..=16).find(|n| i128::from_be_bytes(sign_extend(&all[16 - n..])) == unscaled).unwrap_or(16),
    };
    Some(all[16 - keep..].to_vec())
}

fn sign_extend(bytes: &[u8]) -> [u8; 16] {
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    let mut out = [fill; 16];
    out[16 - bytes.len()..].copy_from_slice(bytes);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::formats::avro::{decode::decode, resolve::resolve};

    #[test]
    fn what_is_encoded_decodes_to_the_same_json() {
        let schema = Schema::parse(
            r#"{"type":"record","name":"Order","fields":[
                {"name":"eventId","type":"string"},
                {"name":"occurredAt","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
                {"name":"qty","type":"int"},
                {"name":"note","type":["null","string"],"default":null},
                {"name":"tags","type":{"type":"map","values":"long"}},
                {"name":"day","type":{"type":"int","logicalType":"date"}}]}"#,
        )
        .expect("a schema");
        let value = json!({"eventId": "e", "occurredAt": "2026-12-06T01:02:03.456Z", "amount": "-1234.50",
                           "qty": 3, "note": null, "tags": {"a": 1}, "day": "2026-12-06"});
        let bytes = encode(&schema, &value).expect("encodes");
        let resolved = resolve(&schema, &schema).expect("resolves");
        assert_eq!(decode(&resolved, &bytes).expect("decodes"), value);
        let error = encode(&schema, &json!({"eventId": "e"})).expect_err("fields missing");
        assert!(error.contains("has no field `occurredAt`"), "{error}");
        let mut extra = value.clone();
        extra["channel"] = json!("web");
        let error = encode(&schema, &extra).expect_err("a key the schema lacks");
        assert!(error.contains("`Order` has no field `channel`"), "{error}");
    }
}
