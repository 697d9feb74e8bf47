//! The tape's JSON forms of what crosses the `db` and `http` interfaces:
//! a value as `{"<variant>": …}` (`null` as `null`), an error as its
//! variant and words, bytes as text when they are UTF-8 and as
//! `{"base64": …}` when not.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::wit::db::{DbError, SqlError, Value};
use crate::wit::http::HttpError;

/// Bytes as the tape keeps them: text when they are UTF-8 (the common
/// case, and readable), else base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Bytes {
    Text(String),
    Base64 { base64: String },
}

impl Bytes {
    pub fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::Text(text.to_owned()),
            Err(_) => Self::Base64 { base64: STANDARD.encode(bytes) },
        }
    }

    /// The bytes back; a base64 text that does not decode gives none.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Self::Text(text) => text.as_bytes().to_vec(),
            Self::Base64 { base64 } => STANDARD.decode(base64).unwrap_or_default(),
        }
    }
}

/// A `db` value as JSON.
pub fn value(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Boolean(b) => json!({ "boolean": b }),
        Value::Int64(n) => json!({ "int64": n }),
        // JSON has no NaN nor infinities: those go as text.
        Value::Float64(x) => match serde_json::Number::from_f64(*x) {
            Some(n) => json!({ "float64": n }),
            None => json!({ "float64": x.to_string() }),
        },
        Value::Text(s) => json!({ "text": s }),
        Value::Bytes(b) => json!({ "bytes": STANDARD.encode(b) }),
        Value::Json(s) => json!({ "json": s }),
        Value::Uuid(s) => json!({ "uuid": s }),
        Value::Timestamp(s) => json!({ "timestamp": s }),
        Value::Numeric(s) => json!({ "numeric": s }),
    }
}

/// A `db` value back from its JSON form, or why not.
pub fn value_of(j: &Json) -> Result<Value, String> {
    let Some((variant, inner)) = j.as_object().and_then(|o| o.iter().next().filter(|_| o.len() == 1)) else {
        return if j.is_null() { Ok(Value::Null) } else { Err(format!("not a value: {j}")) };
    };
    let text = || inner.as_str().map(str::to_owned).ok_or_else(|| format!("`{variant}` wants text: {inner}"));
    Ok(match variant.as_str() {
        "boolean" => Value::Boolean(inner.as_bool().ok_or_else(|| format!("not a boolean: {inner}"))?),
        "int64" => Value::Int64(inner.as_i64().ok_or_else(|| format!("not an int64: {inner}"))?),
        "float64" => Value::Float64(match inner {
            Json::String(s) => s.parse().map_err(|_| format!("not a float64: {s}"))?,
            n => n.as_f64().ok_or_else(|| format!("not a float64: {n}"))?,
        }),
        "text" => Value::Text(text()?),
        "bytes" => Value::Bytes(STANDARD.decode(text()?).map_err(|e| format!("bytes: {e}"))?),
        "json" => Value::Json(text()?),
        "uuid" => Value::Uuid(text()?),
        "timestamp" => Value::Timestamp(text()?),
        "numeric" => Value::Numeric(text()?),
        other => return Err(format!("no value variant `{other}`")),
    })
}

/// Two values' JSON forms are the same value: `json` values compare as
/// the documents they are (their spacing and key order aside).
pub fn same_value(a: &Json, b: &Json) -> bool {
    let document = |j: &Json| j.get("json").and_then(Json::as_str).and_then(|s| serde_json::from_str::<Json>(s).ok());
    match (document(a), document(b)) {
        (Some(x), Some(y)) => same_json(&x, &y),
        _ => same_json(a, b),
    }
}

/// Two JSON values are the same: numbers compared as the numbers they are
/// (`1e16` written by one serializer and `10000000000000000` by another,
/// as PostgreSQL's jsonb writes it back, are one number).
pub fn same_json(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x == y || x.as_f64().is_some_and(|x| Some(x) == y.as_f64()),
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        (Json::Array(x), Json::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_json(v, w)),
        _ => a == b,
    }
}

/// A `db` error as JSON.
pub fn db_error(e: &DbError) -> Json {
    let sql = |s: &SqlError| json!({ "code": s.code, "message": s.message, "constraint": s.constraint });
    match e {
        DbError::UniqueViolation(s) => json!({ "unique_violation": sql(s) }),
        DbError::Transient(s) => json!({ "transient": sql(s) }),
        DbError::Other(s) => json!({ "other": sql(s) }),
        DbError::Refused(why) => json!({ "refused": why }),
        DbError::InvalidValue(why) => json!({ "invalid_value": why }),
    }
}

/// A `db` error back from its JSON form (an unreadable one as `other`).
pub fn db_error_of(j: &Json) -> DbError {
    let sql = |s: &Json| SqlError {
        code: s["code"].as_str().unwrap_or_default().to_owned(),
        message: s["message"].as_str().unwrap_or_default().to_owned(),
        constraint: s["constraint"].as_str().map(str::to_owned),
    };
    let words = |s: &Json| s.as_str().map_or_else(|| s.to_string(), str::to_owned);
    match j.as_object().and_then(|o| o.iter().next()) {
        Some((k, v)) if k == "unique_violation" => DbError::UniqueViolation(sql(v)),
        Some((k, v)) if k == "transient" => DbError::Transient(sql(v)),
        Some((k, v)) if k == "other" => DbError::Other(sql(v)),
        Some((k, v)) if k == "refused" => DbError::Refused(words(v)),
        Some((k, v)) if k == "invalid_value" => DbError::InvalidValue(words(v)),
        _ => {
            DbError::Other(SqlError { code: String::new(), message: format!("unreadable error {j}"), constraint: None })
        }
    }
}

/// An `http` error as JSON.
pub fn http_error(e: &HttpError) -> Json {
    match e {
        HttpError::Denied(w) => json!({ "denied": w }),
        HttpError::InvalidRequest(w) => json!({ "invalid_request": w }),
        HttpError::Timeout(w) => json!({ "timeout": w }),
        HttpError::Connection(w) => json!({ "connection": w }),
    }
}

/// An `http` error back from its JSON form (an unreadable one as a
/// connection error).
pub fn http_error_of(j: &Json) -> HttpError {
    let (kind, words) = match j.as_object().and_then(|o| o.iter().next()) {
        Some((k, v)) => (k.as_str(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
        None => ("", format!("unreadable error {j}")),
    };
    match kind {
        "denied" => HttpError::Denied(words),
        "invalid_request" => HttpError::InvalidRequest(words),
        "timeout" => HttpError::Timeout(words),
        _ => HttpError::Connection(words),
    }
}
