//! Every value found at a redacted place, removed from the rest of the
//! capture: replaced by the mark where it is a whole string or number,
//! and inside longer strings when it has [`SUBSTRING_FROM`] characters or
//! more. A string that is a JSON document (a body, a payload, a `json`
//! value) is scrubbed as the document it is, so that an escaped form of a
//! value (`Jos\u00e9`) is found too, and then as text (its member names).
//! One pass per string over every secret at once (Aho-Corasick, leftmost
//! longest), so that a replacement never feeds the next and a guest's
//! many values cost one scan. Bytes the capture keeps as base64 (a body
//! or header that is not UTF-8, a `db` `bytes` value) are scrubbed as the
//! bytes they are: a value (as written or URL-encoded, not JSON-escaped)
//! inside a binary body is found there too.

use std::collections::HashSet;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value as Json;

use super::MARK;

/// Shorter secrets are scrubbed only where they are a whole value: a
/// 4-digit year or a CVV replaced inside every string would ruin the
/// capture (every timestamp) and protect little.
const SUBSTRING_FROM: usize = 6;

/// Distinct secrets one capture may carry; past it the capture is not
/// kept (scrubbing more would cost the host more than a capture is worth).
pub(super) const MAX_SECRETS: usize = 1_000;

/// The secrets of one capture.
pub(super) struct Secrets {
    whole: HashSet<String>,
    /// Those scrubbed inside strings too (`None`: none is long enough).
    inner: Option<AhoCorasick>,
}

impl Secrets {
    /// `found`, each also in its URL-encoded forms; `None` when there are
    /// more than [`MAX_SECRETS`] distinct ones.
    pub(super) fn new(found: Vec<String>) -> Option<Self> {
        let distinct: HashSet<String> =
            found.into_iter().filter(|s| !s.is_empty() && !MARK.contains(s.as_str())).collect();
        if distinct.len() > MAX_SECRETS {
            return None;
        }
        let mut whole = HashSet::new();
        for secret in distinct {
            let encoded = percent(&secret);
            for form in [encoded.replace("%20", "+"), encoded.to_ascii_lowercase(), encoded, secret] {
                if !MARK.contains(form.as_str()) {
                    whole.insert(form);
                }
            }
        }
        let long: Vec<&String> = whole.iter().filter(|s| s.chars().count() >= SUBSTRING_FROM).collect();
        let inner = if long.is_empty() {
            None
        } else {
            Some(AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(long).ok()?)
        };
        Some(Self { whole, inner })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.whole.is_empty()
    }

    /// A string of the capture: whole, as a JSON document, and inside.
    pub(super) fn text(&self, s: &mut String) {
        if self.whole.contains(s.as_str()) {
            *s = MARK.into();
            return;
        }
        if s.trim_start().starts_with(['{', '['])
            && let Ok(mut doc) = serde_json::from_str::<Json>(s)
            && self.document(&mut doc)
        {
            *s = doc.to_string();
        }
        if let Some(inner) = &self.inner
            && inner.is_match(s.as_str())
        {
            *s = inner.replace_all(s, &vec![MARK; inner.patterns_len()]);
        }
    }

    /// A JSON document: its strings, and its numbers that are secrets.
    /// Whether anything changed.
    pub(super) fn document(&self, doc: &mut Json) -> bool {
        match doc {
            Json::String(s) => {
                let was = s.clone();
                self.text(s);
                *s != was
            }
            Json::Number(n) if self.whole.contains(&n.to_string()) => {
                *doc = Json::String(MARK.into());
                true
            }
            // Every member is scrubbed (no short circuit).
            Json::Object(map) => map.values_mut().map(|v| self.document(v)).filter(|c| *c).count() > 0,
            Json::Array(items) => items.iter_mut().map(|v| self.document(v)).filter(|c| *c).count() > 0,
            _ => false,
        }
    }

    /// A stored capture's part: its strings, and the numbers that are a
    /// `db` value's (`{"int64": …}`, `{"float64": …}`; `under` names the
    /// member a value is in). Counts and positions are left alone.
    pub(super) fn stored(&self, part: &mut Json, under: Option<&str>) {
        match part {
            Json::String(s) => self.text(s),
            Json::Number(n) if matches!(under, Some("int64" | "float64")) && self.whole.contains(&n.to_string()) => {
                *part = Json::String(MARK.into());
            }
            Json::Object(map) => map.iter_mut().for_each(|(k, v)| match (k.as_str(), v) {
                ("base64" | "bytes", Json::String(encoded)) => self.binary(encoded),
                (k, v) => self.stored(v, Some(k)),
            }),
            Json::Array(items) => items.iter_mut().for_each(|v| self.stored(v, None)),
            _ => {}
        }
    }

    /// Bytes kept as base64: decoded, scrubbed as bytes (whole, and inside
    /// as a string is), encoded again. The base64 text is a value too (a
    /// secret the handler decoded is its own base64): one found there makes
    /// the bytes the mark. Base64 that does not decode is scrubbed as text.
    fn binary(&self, encoded: &mut String) {
        let Ok(bytes) = STANDARD.decode(encoded.as_bytes()) else { return self.text(encoded) };
        let whole = |text: &str| self.whole.contains(text);
        let inside = |text: &[u8]| self.inner.as_ref().is_some_and(|inner| inner.is_match(text));
        let scrubbed = if std::str::from_utf8(&bytes).is_ok_and(whole) || whole(encoded) || inside(encoded.as_bytes()) {
            MARK.as_bytes().to_vec()
        } else if let Some(inner) = self.inner.as_ref().filter(|_| inside(&bytes)) {
            inner.replace_all_bytes(&bytes, &vec![MARK.as_bytes(); inner.patterns_len()])
        } else {
            return;
        };
        *encoded = STANDARD.encode(scrubbed);
    }
}

/// `s` as a URL's query or path carries it: every byte but letters,
/// digits and `-_.~` as `%XX`.
fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
