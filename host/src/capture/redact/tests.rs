use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value as Json, json};

use super::*;
use crate::capabilities::tape::{Exchange, Recorded, Statement};
use crate::capture::{CapturedEmit, CapturedEvent, Outcome};

const CARD: &str = "4111111111111111";
const TOKEN: &str = "tok_9f8e7d6c5b";

fn capture() -> Capture {
    let payload = json!({ "orderId": 7, "card": { "number": CARD, "cvc": "123" }, "items": [{ "iban": "DE89" }] });
    Capture {
        handler: "billing".into(),
        version: Some(3),
        captured_at: "2026-12-06T10:00:00Z".into(),
        event: CapturedEvent {
            id: uuid::Uuid::now_v7(),
            event_type: "order.confirmed.v1".into(),
            occurred_at: "2026-12-06T10:00:00Z".into(),
            topic: "orders".into(),
            partition: 0,
            offset: 123,
            key: Some(Bytes::of(b"7")),
            headers: vec![("Authorization".into(), Some(Bytes::of(b"Bearer abcdef"))), ("x-trace".into(), None)],
            payload: payload.to_string(),
        },
        recorded: Recorded {
            statements: vec![Statement {
                call: "execute".into(),
                sql: "INSERT INTO card (number, note) VALUES ($1, $2)".into(),
                params: vec![json!({ "text": CARD }), json!({ "text": format!("card {CARD} charged") })],
                answer: DbAnswer::Affected(123),
            }],
            requests: vec![Exchange {
                method: "POST".into(),
                url: "https://pay.example/v1/charges".into(),
                key: Some("k".into()),
                headers: vec![("x-api-key".into(), "secret-key-1".into())],
                body: Some(Bytes::of(json!({ "card": { "number": CARD }, "amount": 10 }).to_string().as_bytes())),
                answer: HttpAnswer::Response {
                    status: 201,
                    headers: vec![("set-cookie".into(), "s=1".into())],
                    body: Bytes::of(json!({ "token": TOKEN }).to_string().as_bytes()),
                },
            }],
        },
        emits: vec![CapturedEmit {
            topic: "payments".into(),
            key: "7".into(),
            event_type: "payment.requested.v1".into(),
            payload: json!({ "token": TOKEN, "amount": 10 }).as_object().cloned().unwrap_or_default(),
        }],
        outcome: Outcome::ok(),
    }
}

fn redaction() -> Redaction {
    Redaction::new(&["$.card.number".into(), "$.items[*].iban".into(), "$.token".into()], &["X-Trace".into()])
        .expect("valid paths")
}

#[test]
fn no_redacted_value_is_kept_anywhere_and_the_rest_is() {
    let stored = redaction().apply(capture()).expect("kept");
    let text = stored.to_string();
    for secret in [CARD, TOKEN, "DE89", "Bearer abcdef", "secret-key-1", "s=1"] {
        assert!(!text.contains(secret), "`{secret}` was kept: {text}");
    }
    // What was not redacted is there, and the capture reads back.
    let back: Capture = serde_json::from_value(stored).expect("a capture still");
    let payload: Json = serde_json::from_str(&back.event.payload).expect("JSON still");
    assert_eq!(payload["card"]["cvc"], "123");
    assert_eq!(payload["card"]["number"], MARK);
    assert_eq!(back.event.offset, 123);
    assert_eq!(back.recorded.statements[0].answer, DbAnswer::Affected(123));
    // A value that travelled from the payload into a parameter is scrubbed there.
    assert_eq!(back.recorded.statements[0].params[0], json!({ "text": MARK }));
    assert_eq!(back.recorded.statements[0].params[1], json!({ "text": format!("card {MARK} charged") }));
    assert_eq!(back.emits[0].payload["amount"], 10);
}

#[test]
fn a_short_secret_is_scrubbed_only_where_it_is_whole() {
    let redaction = Redaction::new(&["$.orderId".into()], &[]).expect("valid");
    let mut c = capture();
    c.recorded.statements[0].params = vec![json!({ "int64": 7 }), json!({ "text": "7 items, 17 left" })];
    let back: Capture = serde_json::from_value(redaction.apply(c).expect("kept")).expect("a capture");
    assert_eq!(back.recorded.statements[0].params[0], json!({ "int64": MARK }));
    assert_eq!(back.recorded.statements[0].params[1], json!({ "text": "7 items, 17 left" }));
}

#[test]
fn nothing_configured_still_redacts_credentials_headers_only() {
    let stored = Redaction::new(&[], &[]).expect("valid").apply(capture()).expect("kept");
    let back: Capture = serde_json::from_value(stored).expect("c");
    assert_eq!(back.event.headers[0].1, Some(Bytes::Text(MARK.into())));
    assert!(back.event.payload.contains(CARD));
    assert_eq!(back.recorded.requests[0].headers[0].1, MARK);
}

#[test]
fn a_path_that_is_not_one_is_refused_naming_it() {
    for bad in ["card.number", "$.", "$.a..b", "$.a[0]", "$"] {
        let e = Redaction::new(&[bad.into()], &[]).expect_err(bad);
        assert!(e.contains(bad), "{e}");
    }
}

#[test]
fn a_redacted_value_is_found_escaped_url_encoded_after_its_scheme_and_as_an_echoed_credential() {
    let mut c = capture();
    c.event.payload = json!({ "name": "José Müller", "token": TOKEN }).to_string();
    let request = &mut c.recorded.requests[0];
    request.url = "https://pay.example/v1/lookup?name=Jos%C3%A9+M%C3%BCller".into();
    // The same name escaped, as a serializer that escapes non-ASCII writes it.
    request.body = Some(Bytes::Text(r#"{"holder":"Jos\u00e9 M\u00fcller"}"#.into()));
    request.headers = vec![("authorization".into(), "Bearer tok_live_abcdef".into())];
    c.recorded.statements[0].params = vec![json!({ "text": "tok_live_abcdef" }), json!({ "text": "key-from-env-123" })];
    let redaction =
        Redaction::new(&["$.name".into()], &[]).expect("valid").with_secrets(vec!["key-from-env-123".into()]);
    let text = redaction.apply(c).expect("kept").to_string();
    for kept in ["José", "Jos%C3%A9", "Jos\\u00e9", "tok_live_abcdef", "key-from-env-123"] {
        assert!(!text.contains(kept), "`{kept}` was kept: {text}");
    }
}

#[test]
fn a_guest_feeding_the_scrub_many_secrets_gets_its_capture_dropped_quickly() {
    let mut c = capture();
    let many: Vec<String> = (0..5_000).map(|i| format!("acte{i}")).collect();
    c.event.payload = json!({ "card": many }).to_string();
    c.recorded.statements[0].params = vec![json!({ "text": "acte".repeat(50_000) })];
    let redaction = Redaction::new(&["$.card".into()], &[]).expect("valid");
    let started = std::time::Instant::now();
    assert!(redaction.apply(c).is_none(), "more distinct values than a capture may carry: dropped");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn a_redacted_value_inside_bytes_that_are_not_utf8_is_scrubbed_there_too() {
    let mut c = capture();
    let binary = |around: &str| [&[0xff, 0xfe][..], around.as_bytes(), &[0x00, 0x9f]].concat();
    let request = &mut c.recorded.requests[0];
    request.body = Some(Bytes::of(&binary(&format!("card={CARD};"))));
    request.answer = HttpAnswer::Response { status: 200, headers: vec![], body: Bytes::of(&binary(TOKEN)) };
    c.recorded.statements[0].params = vec![json!({ "bytes": STANDARD.encode(binary(CARD)) })];
    let stored = redaction().apply(c).expect("kept");
    let back: Capture = serde_json::from_value(stored.clone()).expect("a capture still");
    let exchange = &back.recorded.requests[0];
    assert!(matches!(exchange.body, Some(Bytes::Base64 { .. })), "still bytes: {:?}", exchange.body);
    let body = exchange.body.as_ref().map(Bytes::bytes).unwrap_or_default();
    assert_eq!(body, binary(&format!("card={MARK};")), "the card scrubbed, the other bytes kept");
    let HttpAnswer::Response { body: answer, .. } = &exchange.answer else { panic!("a response") };
    assert_eq!(answer.bytes(), binary(MARK));
    let param = stored["statements"][0]["params"][0]["bytes"].as_str().expect("bytes");
    assert_eq!(STANDARD.decode(param).expect("base64"), binary(MARK));
}

#[test]
fn a_redacted_value_that_is_base64_is_scrubbed_where_the_handler_bound_its_bytes() {
    let secret = STANDARD.encode([0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02, 0x03, 0xff]);
    let mut c = capture();
    c.event.payload = json!({ "token": secret }).to_string();
    let decoded = STANDARD.decode(&secret).expect("base64");
    c.recorded.statements[0].params = vec![json!({ "bytes": STANDARD.encode(&decoded) })];
    let stored = redaction().apply(c).expect("kept");
    assert!(!stored.to_string().contains(&secret), "the secret's own base64 was kept: {stored}");
    let param = stored["statements"][0]["params"][0]["bytes"].as_str().expect("bytes");
    assert_eq!(STANDARD.decode(param).expect("still base64"), MARK.as_bytes(), "the mark, as bytes");
}
