//! JSON as idem reads event payloads: like `serde_json`, except that an
//! object with the same key twice is invalid. Readers disagree on which
//! copy wins (serde_json and most take the last, others the first), so a
//! payload with two `eventId`s or two `eventType`s would be one event to
//! idem and another to a guest's library, an auditor or a downstream
//! consumer.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes`, refusing duplicate keys at any depth (naming the key).
pub fn from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = deserializer.deserialize_any(Strict)?;
    deserializer.end()?;
    Ok(value)
}

struct Strict;

impl<'de> de::DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let shown: String = key.chars().take(64).flat_map(char::escape_default).collect();
                return Err(de::Error::custom(format!("the key `{shown}` appears twice in one object")));
            }
            let value = map.next_value_seed(Strict)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn duplicate_keys_are_refused_at_any_depth_and_the_rest_parses_as_serde_json_does() {
        let e = super::from_slice(br#"{"eventId": "a", "x": 1, "eventId": "b"}"#).expect_err("twice");
        assert!(e.to_string().contains("the key `eventId` appears twice"), "{e}");
        let e = super::from_slice(br#"{"a": [{"k": 1, "k": 2}]}"#).expect_err("nested");
        assert!(e.to_string().contains("`k`"), "{e}");
        let text = br#"{"a": [1, -2, 3.5, true, null, "s", {"b": {}}], "c": 18446744073709551615}"#;
        assert_eq!(
            super::from_slice(text).expect("valid"),
            serde_json::from_slice::<serde_json::Value>(text).expect("v")
        );
        assert!(super::from_slice(br#"{"a": 1} trailing"#).is_err());
    }
}
