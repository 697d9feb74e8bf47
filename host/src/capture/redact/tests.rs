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
    let stored = redaction().apply(capture());
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
    let back: Capture = serde_json::from_value(redaction.apply(c)).expect("a capture");
    assert_eq!(back.recorded.statements[0].params[0], json!({ "int64": MARK }));
    assert_eq!(back.recorded.statements[0].params[1], json!({ "text": "7 items, 17 left" }));
}

#[test]
fn nothing_configured_still_redacts_credentials_headers_only() {
    let back: Capture = serde_json::from_value(Redaction::new(&[], &[]).expect("valid").apply(capture())).expect("c");
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
