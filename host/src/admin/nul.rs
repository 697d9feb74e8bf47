//! A NUL byte where PostgreSQL would be handed it as text is refused:
//! PostgreSQL refuses NUL in text, which would otherwise turn a bad
//! request into a database error (503). In a URL's path (`%00`) it names
//! nothing there is (404: the middleware, before any handler); in a JSON
//! string (`\u0000`) it is a bad request (400: `body::json`); in a query
//! parameter that is a name or a note, 400 ([`refused_in`]). A dead-letter
//! search by key is the exception: a Kafka key may hold NUL bytes, and the
//! index searches them as bytes.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use serde_json::Value;

use super::answer::error;

/// Whether `text` (a URL's path or query) holds an encoded NUL byte.
fn holds(text: &str) -> bool {
    text.as_bytes().windows(3).any(|w| w.eq_ignore_ascii_case(b"%00"))
}

/// Whether any string of `value`, or any key, holds a NUL character.
pub(super) fn in_json(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(in_json),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || in_json(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// The middleware: a path with `%00` is answered 404.
pub(super) async fn refuse(request: Request, next: Next) -> Response {
    if holds(request.uri().path()) {
        let message = "the path holds a NUL byte (%00): nothing here is named with one";
        return error(StatusCode::NOT_FOUND, message).into_response();
    }
    next.run(request).await
}

/// The refusal of query parameter `name` if its (decoded) `value` holds a
/// NUL character: no name or note here can.
pub(super) fn refused_in(name: &str, value: Option<&str>) -> Option<Response> {
    value.filter(|v| v.contains('\0')).map(|_| {
        let message = format!("{name}: holds a NUL character (%00), which no name or note here can contain");
        error(StatusCode::BAD_REQUEST, message).into_response()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{holds, in_json};

    #[test]
    fn a_nul_is_found_wherever_it_is_encoded() {
        for (text, found) in [
            ("producer=a%00b", true),
            ("producer=a%00", true),
            ("/handlers/a%00/pauses", true),
            ("producer=%2500", false),
            ("producer=a%20b", false),
            ("/outbox", false),
        ] {
            assert_eq!(holds(text), found, "{text}");
        }
        assert!(in_json(&json!({ "reason": "a\u{0}b" })));
        assert!(in_json(&json!({ "ids": [1, { "x": ["\u{0}"] }] })));
        assert!(in_json(&json!({ "a\u{0}": 1 })));
        assert!(!in_json(&json!({ "reason": "a\\u0000b", "n": 1, "b": true, "z": null })));
    }
}
