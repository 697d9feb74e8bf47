use serde_json::json;

use super::*;

fn recorded() -> Recorded {
    let tape = Tape::recording();
    tape.record_statement(
        "execute",
        "INSERT INTO t VALUES ($1, $2)",
        &[Value::Int64(7), Value::Json(r#"{"a": 1, "b": 2}"#.into())],
        DbAnswer::Affected(1),
    );
    tape.record_statement(
        "query",
        "SELECT n FROM t",
        &[],
        DbAnswer::of_query(&Ok(Ok(Rows { columns: vec!["n".into()], rows: vec![vec![Value::Float64(f64::NAN)]] }))),
    );
    tape.record_request(Exchange {
        method: "POST".into(),
        url: "https://pay.example/v1".into(),
        key: Some("k".into()),
        headers: vec![],
        body: Some(Bytes::of(br#"{"x": 1}"#)),
        answer: HttpAnswer::of(&Ok(Response { status: 201, headers: vec![], body: vec![0xff, 0x00] })),
    });
    tape.take().0
}

#[test]
fn a_recording_survives_its_json_form() {
    let recorded = recorded();
    let text = serde_json::to_string(&recorded).expect("serialises");
    let back: Recorded = serde_json::from_str(&text).expect("reads back");
    assert_eq!(back.statements[0], recorded.statements[0]);
    assert_eq!(back.requests, recorded.requests);
    // NaN has no JSON number: it goes as text and comes back a NaN.
    let Ok(Ok(rows)) = back.statements[1].answer.to_query() else { panic!("rows") };
    assert!(matches!(rows.rows[0][0], Value::Float64(x) if x.is_nan()));
}

#[test]
fn the_same_calls_replay_without_divergence_and_get_the_recorded_answers() {
    let tape = Tape::replaying(recorded());
    // The same JSON document, spaced and ordered differently, is the same value.
    let answer = tape.answer_statement(
        "execute",
        " INSERT INTO t VALUES ($1, $2) ",
        &[Value::Int64(7), Value::Json(r#"{"b":2,"a":1}"#.into())],
    );
    assert!(matches!(answer.to_execute(), Ok(Ok(1))));
    assert!(matches!(tape.answer_statement("query", "SELECT n FROM t", &[]), DbAnswer::Rows { .. }));
    let request = Exchange { body: Some(Bytes::of(br#"{ "x" : 1 }"#)), ..recorded().requests[0].clone() };
    let response = tape.answer_request(&request).expect("the recorded response");
    assert_eq!((response.status, response.body), (201, vec![0xff, 0x00]));
    assert_eq!(tape.take().1, Vec::<String>::new());
}

#[test]
fn each_divergence_is_named() {
    let tape = Tape::replaying(recorded());
    let answer = tape.answer_statement("execute", "INSERT INTO t VALUES ($1, $2)", &[Value::Int64(14), Value::Null]);
    // Answered by position all the same.
    assert!(matches!(answer.to_execute(), Ok(Ok(1))));
    let extra = tape.answer_statement("execute", "DELETE FROM t", &[]);
    assert!(matches!(extra.to_execute(), Ok(Ok(_))), "the second recorded answer, as a count");
    let more = tape.answer_statement("execute", "DELETE FROM u", &[]);
    assert!(matches!(more.to_execute(), Ok(Err(DbError::Other(_)))));
    let divergences = tape.take().1;
    assert_eq!(divergences.len(), 4, "{divergences:#?}");
    assert!(
        divergences[0].starts_with("statement 1 differs")
            && divergences[0].contains("$1=")
            && divergences[0].contains("14")
    );
    assert!(divergences[1].starts_with("statement 2 differs") && divergences[1].contains("DELETE FROM t"));
    assert!(
        divergences[2].starts_with("statement 3 is not in the capture") && divergences[2].contains("DELETE FROM u")
    );
    assert!(divergences[3].starts_with("request 1 was not sent") && divergences[3].contains("pay.example"));
}

#[test]
fn a_changed_request_is_a_divergence_and_a_request_past_the_tape_an_error() {
    let tape = Tape::replaying(recorded());
    let changed = Exchange { body: Some(Bytes::of(br#"{"x": 2}"#)), ..recorded().requests[0].clone() };
    assert!(tape.answer_request(&changed).is_ok());
    assert!(matches!(tape.answer_request(&changed), Err(HttpError::Connection(_))));
    let divergences = tape.take().1;
    assert!(
        divergences[0].starts_with("request 1 differs") && divergences[0].contains(r#"{"x": 2}"#),
        "{divergences:?}"
    );
    assert!(divergences[1].starts_with("request 2 is not in the capture"));
    assert!(divergences.iter().any(|d| d.starts_with("statement 1 was not issued")));
    let _ = json!(null);
}

#[test]
fn a_recording_past_its_cap_keeps_nothing() {
    let tape = Tape::recording();
    let big = "x".repeat(MAX_RECORDED_BYTES / 4);
    for _ in 0..3 {
        tape.record_statement("execute", "SELECT $1", &[Value::Text(big.clone())], DbAnswer::Affected(1));
    }
    assert!(!tape.overflowed(), "three quarters of the cap are kept");
    tape.record_statement("execute", "SELECT $1", &[Value::Text(big.clone())], DbAnswer::Affected(1));
    assert!(tape.overflowed());
    tape.record_statement("execute", "SELECT 1", &[], DbAnswer::Affected(1));
    assert_eq!(tape.take().0, Recorded::default(), "nothing is kept, before or after");
}
