//! A NUL byte in a request's URL (`%00`) or in a string of its JSON body
//! (`\u0000`) is refused before any handler sees it: no name, filter or
//! reason here can hold one, and PostgreSQL refuses it in text, which
//! would otherwise turn a bad request into a database error (503). In the
//! path it names nothing there is (404); in the query or the body it is a
//! bad request (400).

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

/// The middleware: a path with `%00` is answered 404, a query 400.
pub(super) async fn refuse(request: Request, next: Next) -> Response {
    if holds(request.uri().path()) {
        let message = "the path holds a NUL byte (%00): nothing here is named with one";
        return error(StatusCode::NOT_FOUND, message).into_response();
    }
    if request.uri().query().is_some_and(holds) {
        let message = "the query holds a NUL byte (%00), which no filter here can contain";
        return error(StatusCode::BAD_REQUEST, message).into_response();
    }
    next.run(request).await
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
