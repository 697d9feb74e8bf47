//! What a capture never keeps: the values at the configured JSON paths
//! (`[handler.capture] redact`) of every JSON document in it (the event's
//! payload, request and response bodies, emits, `json` parameters and
//! columns), and the values of the configured headers (and of those that
//! carry credentials: `authorization`, `proxy-authorization`, `cookie`,
//! `set-cookie`, `x-api-key`), on the event, the requests and the
//! responses.
//!
//! A redacted value may travel: a card number read from the payload and
//! bound to a statement, a token from one response sent in the next
//! request. So each value found at a redacted place is then scrubbed from
//! every string of the capture (`scrub`): replaced wherever it occurs
//! when it has 6 characters or more, and where it is a whole string or
//! number when shorter (replacing every `7` in a capture would say nothing
//! and ruin it). What replaces it is [`MARK`]; a replay hands the handler the same
//! marks, so a handler that only carries a redacted value along replays
//! without divergence, and one that computes on it (its last 4 digits)
//! diverges there.

use serde_json::Value as Json;

use super::record::Capture;
use crate::capabilities::tape::{Bytes, DbAnswer, HttpAnswer};
use crate::config::RedactStep as Step;
use scrub::Secrets;

mod scrub;

/// What a redacted value becomes.
pub const MARK: &str = "[redacted]";

/// Headers whose values are never kept, whatever the config says.
const ALWAYS: &[&str] = &["authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"];

/// The largest capture kept, in bytes of its stored form: the admin API
/// hands out up to 1,000 at once.
pub const MAX_STORED_BYTES: usize = 256 << 10;

/// The deepest a capture may nest: what a reader of it (serde_json, 128)
/// still follows, with room for the file that holds it.
const MAX_DEPTH: usize = 100;

/// A handler's redaction, parsed once.
#[derive(Debug, Clone, Default)]
pub struct Redaction {
    paths: Vec<Vec<Step>>,
    headers: Vec<String>,
    /// Values scrubbed from every capture (`with_secrets`).
    always: Vec<String>,
}

impl Redaction {
    /// `paths` as `$.a.b`, `$.items[*].card` or `$.*.secret`; `headers` by
    /// name, in any case. Why a path is not one, naming it.
    pub fn new(paths: &[String], headers: &[String]) -> Result<Self, String> {
        let paths = paths.iter().map(|p| crate::config::redact_path(p)).collect::<Result<_, _>>()?;
        let mut headers: Vec<String> = headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        headers.extend(ALWAYS.iter().map(|h| (*h).to_owned()));
        Ok(Self { paths, headers, always: Vec::new() })
    }

    /// The same, with `secrets` (the credentials the host injects into
    /// the handler's requests) scrubbed from every capture as well.
    #[must_use]
    pub fn with_secrets(mut self, secrets: Vec<String>) -> Self {
        self.always.clear();
        for secret in secrets {
            header_secrets(&secret, &mut self.always);
        }
        self
    }

    /// `capture` redacted, in its stored form; `None` when it cannot be
    /// kept: more distinct redacted values than a capture may carry, larger
    /// than [`MAX_STORED_BYTES`], or nested deeper than a reader follows.
    pub fn apply(&self, mut capture: Capture) -> Option<Json> {
        let mut found = self.always.clone();
        self.redact_parts(&mut capture, &mut found);
        let mut stored = serde_json::to_value(&capture).ok()?;
        let secrets = Secrets::new(found)?;
        if !secrets.is_empty() {
            // What the handler saw and did; the capture's own fields (its
            // event's id, partition, offset, a row count) are left alone.
            for part in ["statements", "requests", "outcome"] {
                if let Some(part) = stored.get_mut(part) {
                    secrets.stored(part, None);
                }
            }
            if let Some(emits) = stored.get_mut("emits") {
                secrets.document(emits);
            }
            for part in ["payload", "headers", "key"] {
                if let Some(part) = stored.get_mut("event").and_then(|e| e.get_mut(part)) {
                    secrets.stored(part, None);
                }
            }
        }
        let size = serde_json::to_vec(&stored).map_or(usize::MAX, |b| b.len());
        (size <= MAX_STORED_BYTES && depth(&stored) <= MAX_DEPTH).then_some(stored)
    }

    /// The configured places, each value kept in `secrets`.
    fn redact_parts(&self, c: &mut Capture, secrets: &mut Vec<String>) {
        self.text(&mut c.event.payload, secrets);
        for (name, value) in &mut c.event.headers {
            if self.header(name)
                && let Some(kept) = value.replace(Bytes::Text(MARK.into()))
            {
                header_secrets(&String::from_utf8_lossy(&kept.bytes()), secrets);
            }
        }
        for request in &mut c.recorded.requests {
            self.headers(&mut request.headers, secrets);
            self.body(&mut request.body, secrets);
            if let HttpAnswer::Response { headers, body, .. } = &mut request.answer {
                self.headers(headers, secrets);
                let mut kept = Some(body.clone());
                self.body(&mut kept, secrets);
                *body = kept.unwrap_or(Bytes::Text(String::new()));
            }
        }
        for emit in &mut c.emits {
            let mut doc = Json::Object(std::mem::take(&mut emit.payload));
            self.document(&mut doc, secrets);
            if let Json::Object(map) = doc {
                emit.payload = map;
            }
        }
        for statement in &mut c.recorded.statements {
            statement.params.iter_mut().for_each(|p| self.value(p, secrets));
            if let DbAnswer::Rows { rows, .. } = &mut statement.answer {
                rows.iter_mut().flatten().for_each(|v| self.value(v, secrets));
            }
        }
    }

    fn header(&self, name: &str) -> bool {
        self.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    fn headers(&self, headers: &mut [(String, String)], secrets: &mut Vec<String>) {
        for (_, value) in headers.iter_mut().filter(|(n, _)| self.header(n)) {
            header_secrets(&std::mem::replace(value, MARK.into()), secrets);
        }
    }

    fn body(&self, body: &mut Option<Bytes>, secrets: &mut Vec<String>) {
        if let Some(Bytes::Text(text)) = body {
            self.text(text, secrets);
        }
    }

    /// A `json` value (`{"json": "<text>"}`) redacted as the document it is.
    fn value(&self, value: &mut Json, secrets: &mut Vec<String>) {
        if let Some(Json::String(text)) = value.get_mut("json") {
            self.text(text, secrets);
        }
    }

    /// JSON text redacted in place (rewritten only when a path matched;
    /// text that is not JSON is left to the scrub).
    fn text(&self, text: &mut String, secrets: &mut Vec<String>) {
        if self.paths.is_empty() {
            return;
        }
        let Ok(mut doc) = serde_json::from_str::<Json>(text) else { return };
        let before = secrets.len();
        self.document(&mut doc, secrets);
        if secrets.len() > before {
            *text = doc.to_string();
        }
    }

    fn document(&self, doc: &mut Json, secrets: &mut Vec<String>) {
        for path in &self.paths {
            redact_at(doc, path, secrets);
        }
    }
}

/// Replaces what `path` reaches in `doc` with [`MARK`], keeping each
/// scalar it held (an object or array reached whole: each scalar in it).
fn redact_at(doc: &mut Json, path: &[Step], secrets: &mut Vec<String>) {
    let Some((step, rest)) = path.split_first() else {
        if *doc != Json::String(MARK.into()) {
            collect(doc, secrets);
            *doc = Json::String(MARK.into());
        }
        return;
    };
    match (step, doc) {
        (Step::Name(name), Json::Object(map)) => {
            if let Some(inner) = map.get_mut(name) {
                redact_at(inner, rest, secrets);
            }
        }
        (Step::Any, Json::Object(map)) => map.values_mut().for_each(|v| redact_at(v, rest, secrets)),
        (Step::Any, Json::Array(items)) => items.iter_mut().for_each(|v| redact_at(v, rest, secrets)),
        _ => {}
    }
}

/// A redacted header's value, and the parts of it that travel alone: a
/// token after its scheme (`Bearer …`), each cookie's value.
fn header_secrets(value: &str, secrets: &mut Vec<String>) {
    secrets.push(value.to_owned());
    if let Some((_, token)) = value.trim().split_once(' ') {
        secrets.push(token.trim().to_owned());
    }
    for pair in value.split(';') {
        if let Some((_, v)) = pair.split_once('=') {
            secrets.push(v.trim().to_owned());
        }
    }
}

fn collect(value: &Json, secrets: &mut Vec<String>) {
    match value {
        Json::Null => {}
        Json::String(s) => secrets.push(s.clone()),
        Json::Object(map) => map.values().for_each(|v| collect(v, secrets)),
        Json::Array(items) => items.iter().for_each(|v| collect(v, secrets)),
        scalar => secrets.push(scalar.to_string()),
    }
}

/// How deep `value` nests.
fn depth(value: &Json) -> usize {
    match value {
        Json::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Json::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
