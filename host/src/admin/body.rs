//! A request's body (an upload, a small JSON request), read against its
//! limit and the listener's `body_timeout`: a client that never finishes
//! its body (a slow chunked upload, a `Content-Length` it never fills) is
//! answered 408 and loses its slot, and a body declared or found larger
//! than the limit is answered 413 without reading the rest.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use futures::StreamExt as _;

use super::answer::error;

/// Bytes of a small JSON request body (a login, a replay's selection).
const JSON_LIMIT: usize = 64 * 1024;

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    #[error("the body is {declared} bytes (Content-Length), larger than {limit} bytes, the limit of {what}")]
    Declared { declared: u64, limit: usize, what: String },
    #[error("the body is larger than {limit} bytes, the limit of {what}")]
    TooLarge { limit: usize, what: String },
    #[error("the body did not arrive within {0:?} ([admin] body_timeout)")]
    TimedOut(Duration),
    #[error("the body could not be read: {0}")]
    Broken(axum::Error),
}

impl BodyError {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Self::Declared { .. } | Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Refuses a declared length over `limit` before anything is read (`what`
/// names the limit in the answer).
pub(super) fn check_declared(headers: &HeaderMap, limit: usize, what: &str) -> Result<(), BodyError> {
    // hyper has refused a malformed Content-Length already.
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match declared {
        Some(declared) if declared > u64::try_from(limit).unwrap_or(u64::MAX) => {
            Err(BodyError::Declared { declared, limit, what: what.to_owned() })
        }
        _ => Ok(()),
    }
}

/// The whole body, if it is at most `limit` bytes and arrives within `timeout`.
pub(super) async fn read(body: Body, limit: usize, timeout: Duration, what: &str) -> Result<Vec<u8>, BodyError> {
    let mut stream = body.into_data_stream();
    let read = async {
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(BodyError::Broken)?;
            if bytes.len() + chunk.len() > limit {
                return Err(BodyError::TooLarge { limit, what: what.to_owned() });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    tokio::time::timeout(timeout, read).await.unwrap_or(Err(BodyError::TimedOut(timeout)))
}

/// A small JSON request's body (at most 64 KiB), read within `timeout`
/// and parsed (a key twice is refused: readers disagree on which copy
/// wins), or the answer that names what was wrong with it. A NUL character
/// in any of its strings is refused: each is a name, a reason or a filter
/// PostgreSQL would be handed as text, which cannot hold one.
pub(super) async fn json<T: serde::de::DeserializeOwned>(body: Body, timeout: Duration) -> Result<T, Response> {
    let value = parsed(body, timeout).await?;
    if super::nul::in_json(&value) {
        let message = "the request's JSON holds a NUL character (\\u0000), which no name or reason here can contain";
        return Err(error(StatusCode::BAD_REQUEST, message).into_response());
    }
    from_object(value).map_err(|(status, message)| error(status, message).into_response())
}

/// [`json`] for a dead-letter search, whose strings may hold NUL: a Kafka
/// key is bytes, and the index keeps a NUL as `␀` and searches it so.
pub(super) async fn search_json<T: serde::de::DeserializeOwned>(body: Body, timeout: Duration) -> Result<T, Response> {
    let value = parsed(body, timeout).await?;
    from_object(value).map_err(|(status, message)| error(status, message).into_response())
}

async fn parsed(body: Body, timeout: Duration) -> Result<serde_json::Value, Response> {
    let bytes = read(body, JSON_LIMIT, timeout, "a JSON request (64 KiB)")
        .await
        .map_err(|e| error(e.status(), e.to_string()).into_response())?;
    crate::strict_json::from_slice(&bytes)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("the request's JSON: {e}")).into_response())
}

/// A request read from JSON `value`: an object (serde reads a struct from
/// an array too, so `[null, null]` would be a request of defaults), whole
/// numbers written `3.0` read as integers; or the status and message that
/// name what was wrong.
pub(super) fn from_object<T: serde::de::DeserializeOwned>(
    mut value: serde_json::Value,
) -> Result<T, (StatusCode, String)> {
    if !value.is_object() {
        let message = "the request's JSON is not an object: send {…} with the fields the operation names";
        return Err((StatusCode::BAD_REQUEST, message.to_owned()));
    }
    whole_numbers(&mut value);
    T::deserialize(value).map_err(|e| (StatusCode::BAD_REQUEST, format!("the request's JSON: {e}")))
}

/// JSON Schema's `integer` is any number without a fraction: `3.0` and
/// `3e2` are integers there, and serde would refuse them for an `i32`.
/// Only below 2^53 in size, where a float is exact: `1e16` stays a float
/// (and is refused where an integer is asked), as no offset, id or count
/// here is read from a number a float cannot hold exactly.
fn whole_numbers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) => {
            let whole = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15);
            #[expect(clippy::cast_possible_truncation, reason = "a whole number below 2^53 in size, exact as i64")]
            if let Some(f) = whole {
                *n = serde_json::Number::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{HeaderMap, HeaderValue, StatusCode};

    use super::{BodyError, check_declared, json, read};

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_reading() {
        let mut headers = HeaderMap::new();
        assert!(check_declared(&headers, 10, "`h`").is_ok(), "chunked: checked while reading");
        headers.insert("content-length", HeaderValue::from_static("10"));
        assert!(check_declared(&headers, 10, "`h`").is_ok());
        headers.insert("content-length", HeaderValue::from_static("18446744073709551615"));
        let err = check_declared(&headers, 10, "`h`").expect_err("too large");
        assert_eq!(err.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(err.to_string().contains("18446744073709551615 bytes (Content-Length), larger than 10 bytes"), "{err}");
    }

    #[tokio::test]
    async fn a_body_is_read_whole_within_its_limit_and_time() {
        let wait = Duration::from_secs(5);
        assert_eq!(read(Body::from("0123456789"), 10, wait, "`h`").await.expect("read"), b"0123456789");
        let err = read(Body::from("0123456789!"), 10, wait, "`h`").await.expect_err("too large");
        assert!(matches!(err, BodyError::TooLarge { limit: 10, .. }), "{err}");
        // A body that never ends.
        let endless = Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>());
        let err = read(endless, 10, Duration::from_millis(50), "`h`").await.expect_err("timed out");
        assert_eq!(err.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(err.to_string().contains("body_timeout"), "{err}");
    }

    #[tokio::test]
    async fn whole_numbers_written_with_a_fraction_are_integers() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Asked {
            partition: Option<i32>,
        }
        let wait = Duration::from_secs(5);
        for (sent, read) in [("2", 2), ("165201.0", 165_201), ("3e2", 300), ("-1.0", -1)] {
            let asked = json::<Asked>(Body::from(format!("{{\"partition\": {sent}}}")), wait).await;
            assert_eq!(asked.ok(), Some(Asked { partition: Some(read) }), "{sent}");
        }
        for sent in ["2.5", "1e10", "\"2\""] {
            let asked = json::<Asked>(Body::from(format!("{{\"partition\": {sent}}}")), wait).await;
            assert_eq!(asked.expect_err(sent).status(), StatusCode::BAD_REQUEST, "{sent}");
        }
    }

    #[tokio::test]
    async fn a_json_request_is_an_object_or_refused() {
        #[derive(serde::Deserialize, Debug)]
        struct Asked {
            #[serde(default)]
            #[expect(dead_code, reason = "only its parsing is under test")]
            topic: Option<String>,
        }
        let wait = Duration::from_secs(5);
        assert!(json::<Asked>(Body::from(" {\"topic\": \"t\"}"), wait).await.is_ok());
        for sent in [
            "[null]",
            "[]",
            "null",
            "\"t\"",
            "",
            "  ",
            "{\"topic\": \"a\\u0000\"}",
            "{\"topic\": \"a\", \"topic\": \"b\"}",
        ] {
            let answer = json::<Asked>(Body::from(sent), wait).await.expect_err(sent);
            assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{sent}");
        }
    }
}
