//! The events a transaction's guests emitted, written into `idem.outbox`
//! in that transaction, just before it commits.
//!
//! Each row carries the host's vouch (`idem.vouch`): an HMAC-SHA256 keyed
//! by `idem.outbox_key` (a secret of idem's schema, which no handler role
//! can read) over the event id, its cause, topic, key, event type and the
//! provenance headers the host set. `idem_api.emit_events` recomputes it
//! and refuses a row without a valid one, so a caller that got past the
//! statement guard can neither choose an event id nor set idem's headers
//! (migration `20261203000001_outbox_rules.sql` says why this, not ids
//! minted by the database). The key is read with idem's own role when the
//! host checks the database (`load_key`), and kept per database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use sqlx::PgPool;
use uuid::Uuid;

use super::Emitted;
use crate::error::ExecError;
use crate::event::Event;
use crate::transaction::{EventTx, within};

/// The header the host's vouch travels in to `emit_events` (dropped there).
const VOUCH: &str = "idem.vouch";
/// The domain of the vouched message (its version).
const DOMAIN: &[u8] = b"idem.emit.v1";

/// What `load_key` found of one database's outbox key: the key, or why it
/// could not be read.
type Found = Result<Arc<[u8]>, String>;

/// [`Found`] of each database, by name.
static KEYS: Mutex<Option<HashMap<String, Found>>> = Mutex::new(None);

/// Reads the outbox's key of the database `pool` (idem's own role) is
/// connected to, for the writes of every handler on that database. Never
/// fails: a key it cannot read is remembered with the reason, which
/// `key_of` names (the start-up check, `outbox::provision::check`, refuses
/// a config with emitting handlers then).
pub async fn load_key(pool: &PgPool) {
    let database: Result<String, sqlx::Error> =
        sqlx::query_scalar("SELECT pg_catalog.current_database()::text").fetch_one(pool).await;
    let Ok(database) = database else { return };
    let key: Result<Option<Vec<u8>>, sqlx::Error> =
        sqlx::query_scalar("SELECT key FROM idem.outbox_key").fetch_optional(pool).await;
    let found = match key {
        Ok(Some(key)) => Ok(Arc::from(key)),
        Ok(None) => Err("idem.outbox_key has no row: run `idem migrate`".to_owned()),
        Err(e) => Err(format!(
            "idem's role cannot read idem.outbox_key ({}): grant it SELECT on that table",
            e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_owned())
        )),
    };
    KEYS.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(HashMap::new).insert(database, found);
}

/// The outbox key of `database`, or why there is none.
pub fn key_of(database: &str) -> Found {
    let keys = KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    match keys.as_ref().and_then(|k| k.get(database)) {
        Some(found) => found.clone(),
        None => Err(format!("the outbox key of database {database} was not read (idem checks the database at start)")),
    }
}

/// The host's vouch for one emitted row: HMAC-SHA256 under `key` of
/// `DOMAIN`, the ids' bytes, then each text as its length (4 bytes,
/// big-endian) and bytes, an absent one as `ffffffff`; hex. The database
/// computes the same (`idem.outbox_vouch`).
fn vouch(key: &[u8], event_id: Uuid, cause: Uuid, fields: [Option<&str>; 5]) -> Result<String, String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|e| format!("the outbox key: {e}"))?;
    mac.update(DOMAIN);
    mac.update(event_id.as_bytes());
    mac.update(cause.as_bytes());
    for field in fields {
        match field {
            None => mac.update(&[0xff; 4]),
            Some(text) => {
                let len = u32::try_from(text.len()).map_err(|_| "a field longer than 4 GiB".to_owned())?;
                mac.update(&len.to_be_bytes());
                mac.update(text.as_bytes());
            }
        }
    }
    Ok(hex::encode(mac.finalize().into_bytes()))
}

/// The host's provenance headers for the events `event`'s invocation
/// emits. `trust_input` is the handler's `trust_input_trace_headers`:
/// - false (default): `idem.correlation-id` is `event`'s own id (its emits
///   start a chain of their own), and `traceparent` is the current span's
///   when tracing is on and that span does not continue a trace `event`
///   carried — never the input's: whoever produces a handler's input must
///   not make its emits claim another chain;
/// - true: `idem.correlation-id` is the one `event` carries (if a UUID,
///   else its own id: a chain keeps the id of its first event), and
///   `traceparent` the current span's, else the one `event` carried (if
///   well formed).
///
/// `idem.causation-id` is the database's to set.
pub fn provenance(event: &Event, trust_input: bool) -> Vec<(String, String)> {
    let traced = crate::traces::propagation_headers(&tracing::Span::current());
    provenance_with(event, trust_input, traced.into_iter().next())
}

/// [`provenance`], the current span's `traceparent` header given.
fn provenance_with(event: &Event, trust_input: bool, traced: Option<(String, String)>) -> Vec<(String, String)> {
    let header = |name: &str| {
        event
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let input_correlation = header("idem.correlation-id").and_then(|v| Uuid::try_parse(v).ok());
    let correlation = if trust_input { input_correlation.unwrap_or(event.id) } else { event.id }.hyphenated();
    let mut headers = vec![("idem.correlation-id".to_owned(), correlation.to_string())];
    let input_trace = header("traceparent").filter(|v| is_traceparent(v));
    // The trace id: a traceparent's second field.
    let trace_id = |v: &str| v.split('-').nth(1).map(str::to_owned);
    match traced {
        Some((name, value)) if trust_input || input_trace.and_then(trace_id) != trace_id(&value) => {
            headers.push((name, value));
        }
        Some(_) => {}
        None => {
            if trust_input && let Some(v) = input_trace {
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
/// `tx`, in one statement, each row with the host's vouch.
pub(crate) async fn write(tx: &mut EventTx, emits: &[(Uuid, &Vec<Emitted>)]) -> Result<(), ExecError> {
    let deadline = tx.statement_deadline();
    let database = sqlx::query_scalar::<_, String>("SELECT pg_catalog.current_database()::text").fetch_one(tx.conn());
    let database = within(deadline, "writing the outbox", database).await?;
    let key = key_of(&database).map_err(ExecError::Infrastructure)?;
    let rows = emits.iter().flat_map(|(cause, emitted)| emitted.iter().map(move |e| (*cause, e)));
    let mut columns = Columns::default();
    for (cause, e) in rows {
        let provenance = |name: &str| e.headers.get(name).and_then(serde_json::Value::as_str);
        let fields = [
            Some(e.topic.as_str()),
            Some(e.key.as_str()),
            Some(e.event_type.as_str()),
            provenance("idem.correlation-id"),
            provenance("traceparent"),
        ];
        let vouched = vouch(&key, e.event_id, cause, fields).map_err(ExecError::Infrastructure)?;
        let mut headers = e.headers.clone();
        headers.insert(VOUCH.to_owned(), vouched.into());
        columns.ids.push(e.event_id);
        columns.topics.push(e.topic.clone());
        columns.keys.push(e.key.clone());
        columns.types.push(e.event_type.clone());
        columns.payloads.push(serde_json::Value::Object(e.payload.clone()));
        columns.headers.push(serde_json::Value::Object(headers));
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
    use super::{is_traceparent, provenance_with, vouch};
    use uuid::Uuid;

    const INPUT_TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// An event whose record carried another chain's correlation id and trace.
    fn event_from_another_chain() -> (crate::event::Event, Uuid) {
        let other = Uuid::now_v7();
        let headers = vec![
            ("idem.correlation-id".to_owned(), Some(other.to_string().into_bytes())),
            ("traceparent".to_owned(), Some(INPUT_TRACE.as_bytes().to_vec())),
        ];
        let event = crate::event::Event {
            id: Uuid::now_v7(),
            event_type: "t".into(),
            occurred_at: String::new(),
            topic: "in".into(),
            partition: 0,
            offset: 0,
            key: None,
            headers,
            payload: "{}".into(),
            payload_sha256: [0; 32],
            origin: None,
        };
        (event, other)
    }

    fn get<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn an_untrusted_input_neither_names_the_chain_nor_the_trace_of_what_is_emitted() {
        let (event, other) = event_from_another_chain();
        let own = event.id.to_string();
        let untrusted = provenance_with(&event, false, None);
        assert_eq!(get(&untrusted, "idem.correlation-id"), Some(own.as_str()), "a chain of its own");
        assert_eq!(get(&untrusted, "traceparent"), None, "never the input's trace");
        // Tracing on, the span continuing the input's trace: not carried on.
        let continued =
            ("traceparent".to_owned(), "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01".to_owned());
        assert_eq!(get(&provenance_with(&event, false, Some(continued.clone())), "traceparent"), None);
        // A trace of the host's own: carried.
        let own_trace =
            ("traceparent".to_owned(), "00-11111111111111111111111111111111-1111111111111111-01".to_owned());
        let traced = provenance_with(&event, false, Some(own_trace.clone()));
        assert_eq!(get(&traced, "traceparent"), Some(own_trace.1.as_str()));

        let trusted = provenance_with(&event, true, None);
        assert_eq!(get(&trusted, "idem.correlation-id"), Some(other.to_string().as_str()), "the input's chain");
        assert_eq!(get(&trusted, "traceparent"), Some(INPUT_TRACE));
        assert_eq!(
            get(&provenance_with(&event, true, Some(continued.clone())), "traceparent"),
            Some(continued.1.as_str())
        );
    }

    #[test]
    fn a_vouch_covers_every_field_and_tells_absent_from_empty() {
        let key = [7u8; 32];
        let (id, cause) = (Uuid::now_v7(), Uuid::now_v7());
        let fields = [Some("out"), Some("k"), Some("t"), Some("c"), None];
        let base = vouch(&key, id, cause, fields).unwrap_or_default();
        assert_eq!(base.len(), 64);
        let mut differ = vec![
            vouch(&[8u8; 32], id, cause, fields),
            vouch(&key, Uuid::now_v7(), cause, fields),
            vouch(&key, id, Uuid::now_v7(), fields),
            vouch(&key, id, cause, [Some("out"), Some("k"), Some("t"), Some("c"), Some("")]),
            vouch(&key, id, cause, [Some("outk"), Some(""), Some("t"), Some("c"), None]),
        ];
        for (i, other) in differ.drain(..).enumerate() {
            assert_ne!(other.unwrap_or_default(), base, "change {i}");
        }
    }

    #[test]
    fn only_a_well_formed_traceparent_is_carried_on() {
        assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "an all-zero trace");
        assert!(!is_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "uppercase");
        assert!(!is_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "another version");
        assert!(!is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nx"), "a line break");
    }
}
