//! `[handler.limits] max_emits` and `max_emit_bytes`: an emit past either
//! is refused to the guest, naming the limit, and never reaches the outbox.

use idem_tests::kafka;
use rdkafka::Message as _;

use crate::{Env, Host, emit, wait_rows};

/// README: `max_emits` — "events one invocation may emit" — and
/// `max_emit_bytes` — "payload, key and headers of one event"; the guest's
/// `EmitError::Refused` is for "one of `[handler.limits]`' caps"
/// (`wit/emit.wit`). With `max_emits = 2` and `max_emit_bytes = 300`, an
/// event emitting three gets its third refused naming `limits.max_emits`,
/// and one emitting an event of exactly 300 bytes and one of 301 gets the
/// second refused naming `limits.max_emit_bytes`; the events themselves
/// succeed (the guest handles the refusal), and exactly the three accepted
/// events are written and published. A cap not enforced, or off by one,
/// writes a fourth row or refuses the 300-byte one.
#[tokio::test(flavor = "multi_thread")]
async fn emits_past_max_emits_or_max_emit_bytes_are_refused_to_the_guest_and_never_written() {
    let env = Env::new().await;
    let out = kafka::create_topic(1).await;
    let mut spec = env.emitter(&[&out]);
    spec.extra.push_str("limits = { max_emits = 2, max_emit_bytes = 300 }\n");
    let config = env.config(spec).await;
    // The size the host counts: the payload as the guest serialises it
    // (serde_json, as here) and the key; no headers.
    let sized = |bytes: usize| {
        let base = serde_json::to_string(&serde_json::json!({ "amount": 7, "pad": "" })).expect("json").len() + 1;
        emit(&out, "k", 7, bytes - base)
    };
    let three = env.emit(vec![emit(&out, "k", 1, 0), emit(&out, "k", 2, 0), emit(&out, "k", 3, 0)]).await;
    let sizes = env.emit(vec![sized(300), sized(301)]).await;
    let running = Host::start(&config);
    let rows =
        wait_rows(&env, "three rows published", |rows| rows.len() >= 3 && rows.iter().all(|r| r.published)).await;
    let reports = running.stop();

    assert_eq!((reports[0].processed, reports[0].failed), (2, 0), "both events succeeded: {reports:?}");
    let three_notes = env.notes(three).await;
    assert_eq!(three_notes.len(), 3, "{three_notes:?}");
    assert!(three_notes[0].starts_with("emitted 0 ") && three_notes[1].starts_with("emitted 1 "), "{three_notes:?}");
    assert_eq!(
        three_notes[2],
        "refused 2 emit refused: more than 2 emitted events in one invocation (limits.max_emits)"
    );
    let size_notes = env.notes(sizes).await;
    assert_eq!(size_notes.len(), 2, "{size_notes:?}");
    assert!(size_notes[0].starts_with("emitted 0 "), "300 bytes is within the limit: {size_notes:?}");
    assert_eq!(
        size_notes[1],
        "refused 1 emit refused: 301 bytes of payload, key and headers: more than limits.max_emit_bytes (300)"
    );

    let mut told: Vec<String> = [&three_notes[..2], &size_notes[..1]]
        .concat()
        .iter()
        .map(|n| n.rsplit(' ').next().unwrap_or_default().to_owned())
        .collect();
    told.sort();
    assert_eq!(rows.len(), 3, "only the accepted events were written: {rows:#?}");
    let mut written: Vec<String> =
        sqlx::query_scalar("SELECT event_id::text FROM idem.outbox").fetch_all(&env.db.pool).await.expect("event ids");
    written.sort();
    assert_eq!(written, told, "the rows are the events the guest was told were accepted");
    let mut sent: Vec<String> = kafka::read_all(&out)
        .iter()
        .filter_map(|m| {
            let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).ok()?;
            value["eventId"].as_str().map(str::to_owned)
        })
        .collect();
    sent.sort();
    assert_eq!(sent, told, "and only they were published");
    env.finish().await;
}
