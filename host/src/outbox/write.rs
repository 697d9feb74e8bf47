//! The events a transaction's guests emitted, written into `idem.outbox`
//! in that transaction, just before it commits.

use uuid::Uuid;

use crate::capabilities::emit::Emitted;
use crate::error::ExecError;
use crate::event::Event;
use crate::transaction::{EventTx, within};

/// The host's provenance headers for the events `event`'s invocation
/// emits: `idem.correlation-id` (the one `event` carries, if a UUID, else
/// its own id: a chain keeps the id of its first event) and `traceparent`
/// (the current span's when tracing is on, else the one `event` carried, if
/// well formed). `idem.causation-id` is the database's to set.
pub fn provenance(event: &Event) -> Vec<(String, String)> {
    let header = |name: &str| {
        event
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let correlation =
        header("idem.correlation-id").and_then(|v| Uuid::try_parse(v).ok()).unwrap_or(event.id).hyphenated();
    let mut headers = vec![("idem.correlation-id".to_owned(), correlation.to_string())];
    let traced = crate::telemetry::traces::propagation_headers(&tracing::Span::current());
    match traced.into_iter().next() {
        Some(traceparent) => headers.push(traceparent),
        None => {
            if let Some(v) = header("traceparent").filter(|v| is_traceparent(v)) {
                headers.push(("traceparent".to_owned(), v.to_owned()));
            }
        }
    }
    headers
}

/// A W3C `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero.
fn is_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    matches!(parts.as_slice(), [version, trace, span, flags]
        if *version == "00" && hex(trace, 32) && hex(span, 16) && hex(flags, 2)
            && trace.bytes().any(|b| b != b'0') && span.bytes().any(|b| b != b'0'))
}

/// Writes `emits` (each event's id, the cause, with what it emitted) in
/// `tx`, in one statement.
pub(crate) async fn write(tx: &mut EventTx, emits: &[(Uuid, Vec<Emitted>)]) -> Result<(), ExecError> {
    let rows = emits.iter().flat_map(|(cause, emitted)| emitted.iter().map(move |e| (*cause, e)));
    let mut columns = Columns::default();
    for (cause, e) in rows {
        columns.ids.push(e.event_id);
        columns.topics.push(e.topic.clone());
        columns.keys.push(e.key.clone());
        columns.types.push(e.event_type.clone());
        columns.payloads.push(serde_json::Value::Object(e.payload.clone()));
        columns.headers.push(serde_json::Value::Object(e.headers.clone()));
        columns.causes.push(cause);
    }
    let deadline = tx.statement_deadline();
    let Columns { ids, topics, keys, types, payloads, headers, causes } = columns;
    let statement = sqlx::query("SELECT idem_api.emit_events($1, $2, $3, $4, $5, $6, $7)")
        .bind(ids)
        .bind(topics)
        .bind(keys)
        .bind(types)
        .bind(payloads)
        .bind(headers)
        .bind(causes)
        .execute(tx.conn());
    within(deadline, "writing the outbox", statement).await.map(drop)
}

#[derive(Default)]
struct Columns {
    ids: Vec<Uuid>,
    topics: Vec<String>,
    keys: Vec<String>,
    types: Vec<String>,
    payloads: Vec<serde_json::Value>,
    headers: Vec<serde_json::Value>,
    causes: Vec<Uuid>,
}

#[cfg(test)]
mod tests {
    use super::is_traceparent;

    #[test]
    fn only_a_well_formed_traceparent_is_carried_on() {
        assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "an all-zero trace");
        assert!(!is_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "uppercase");
        assert!(!is_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "another version");
        assert!(!is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nx"), "a line break");
    }
}
