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
//! every string of the capture: replaced wherever it occurs when it has
//! 4 characters or more, and where it is a whole string or number when
//! shorter (replacing every `7` in a capture would say nothing and ruin
//! it). What replaces it is [`MARK`]; a replay hands the handler the same
//! marks, so a handler that only carries a redacted value along replays
//! without divergence, and one that computes on it (its last 4 digits)
//! diverges there.

use serde_json::Value as Json;

use super::record::Capture;
use crate::capabilities::tape::{Bytes, DbAnswer, HttpAnswer};
use crate::config::RedactStep as Step;

/// What a redacted value becomes.
pub const MARK: &str = "[redacted]";

/// Headers whose values are never kept, whatever the config says.
const ALWAYS: &[&str] = &["authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"];

/// Shorter secrets are scrubbed only where they are a whole value.
const SUBSTRING_FROM: usize = 4;

/// A handler's redaction, parsed once.
#[derive(Debug, Clone, Default)]
pub struct Redaction {
    paths: Vec<Vec<Step>>,
    headers: Vec<String>,
}

impl Redaction {
    /// `paths` as `$.a.b`, `$.items[*].card` or `$.*.secret`; `headers` by
    /// name, in any case. Why a path is not one, naming it.
    pub fn new(paths: &[String], headers: &[String]) -> Result<Self, String> {
        let paths = paths.iter().map(|p| crate::config::redact_path(p)).collect::<Result<_, _>>()?;
        let mut headers: Vec<String> = headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        headers.extend(ALWAYS.iter().map(|h| (*h).to_owned()));
        Ok(Self { paths, headers })
    }

    /// `capture` redacted, in its stored form.
    pub fn apply(&self, mut capture: Capture) -> Json {
        let mut secrets = Vec::new();
        self.redact_parts(&mut capture, &mut secrets);
        let mut stored = serde_json::to_value(&capture).unwrap_or(Json::Null);
        secrets.retain(|s| !s.is_empty() && s != MARK);
        if !secrets.is_empty() {
            // What the handler saw and did; the capture's own fields (its
            // event's id, partition, offset, a row count) are left alone.
            for part in ["statements", "requests", "emits", "outcome"] {
                if let Some(part) = stored.get_mut(part) {
                    scrub(part, &secrets, None);
                }
            }
            for part in ["payload", "headers", "key"] {
                if let Some(part) = stored.get_mut("event").and_then(|e| e.get_mut(part)) {
                    scrub(part, &secrets, None);
                }
            }
        }
        stored
    }

    /// The configured places, each value kept in `secrets`.
    fn redact_parts(&self, c: &mut Capture, secrets: &mut Vec<String>) {
        self.text(&mut c.event.payload, secrets);
        for (name, value) in &mut c.event.headers {
            if self.header(name) && value.is_some() {
                secrets.extend(value.as_ref().map(|b| String::from_utf8_lossy(&b.bytes()).into_owned()));
                *value = Some(Bytes::Text(MARK.into()));
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
        for (name, value) in headers.iter_mut().filter(|(n, _)| self.header(n)) {
            let _ = name;
            secrets.push(std::mem::replace(value, MARK.into()));
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

fn collect(value: &Json, secrets: &mut Vec<String>) {
    match value {
        Json::Null => {}
        Json::String(s) => secrets.push(s.clone()),
        Json::Object(map) => map.values().for_each(|v| collect(v, secrets)),
        Json::Array(items) => items.iter().for_each(|v| collect(v, secrets)),
        scalar => secrets.push(scalar.to_string()),
    }
}

/// Every string of `stored`, and every number that is a `db` value's
/// (`{"int64": …}`, `{"float64": …}`: `under` names the member it is in),
/// with each of `secrets` replaced.
fn scrub(stored: &mut Json, secrets: &[String], under: Option<&str>) {
    match stored {
        Json::String(s) => {
            if secrets.iter().any(|secret| s == secret) {
                *s = MARK.into();
                return;
            }
            for secret in secrets.iter().filter(|x| x.chars().count() >= SUBSTRING_FROM) {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), MARK);
                }
            }
        }
        Json::Number(n) if matches!(under, Some("int64" | "float64")) => {
            let text = n.to_string();
            if secrets.contains(&text) {
                *stored = Json::String(MARK.into());
            }
        }
        Json::Object(map) => map.iter_mut().for_each(|(k, v)| scrub(v, secrets, Some(k))),
        Json::Array(items) => items.iter_mut().for_each(|v| scrub(v, secrets, None)),
        Json::Number(_) | Json::Bool(_) | Json::Null => {}
    }
}

#[cfg(test)]
mod tests;
