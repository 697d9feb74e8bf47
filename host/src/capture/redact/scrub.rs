//! Every value found at a redacted place, removed from the rest of the
//! capture: replaced by the mark where it is a whole string or number,
//! and inside longer strings when it has [`SUBSTRING_FROM`] characters or
//! more. A string that is a JSON document (a body, a payload, a `json`
//! value) is scrubbed as the document it is, so that an escaped form of a
//! value (`Jos\u00e9`) is found too. One pass per string, whatever the
//! number of secrets, so that a replacement never feeds the next.

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
    whole: Vec<String>,
    /// Those scrubbed inside strings too, longest first.
    inner: Vec<String>,
}

impl Secrets {
    /// `found`, each also in its URL-encoded forms; `None` when there are
    /// more than [`MAX_SECRETS`].
    pub(super) fn new(found: Vec<String>) -> Option<Self> {
        let mut whole: Vec<String> = Vec::new();
        for secret in found {
            let encoded = percent(&secret);
            let plus = encoded.replace("%20", "+");
            for form in [secret, encoded, plus] {
                if !form.is_empty() && !MARK.contains(form.as_str()) && !whole.contains(&form) {
                    whole.push(form);
                }
            }
            if whole.len() > MAX_SECRETS * 3 {
                return None;
            }
        }
        let mut inner: Vec<String> = whole.iter().filter(|s| s.chars().count() >= SUBSTRING_FROM).cloned().collect();
        inner.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Some(Self { whole, inner })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.whole.is_empty()
    }

    /// A string of the capture: whole, as a JSON document, or inside.
    pub(super) fn text(&self, s: &mut String) {
        if self.whole.contains(s) {
            *s = MARK.into();
            return;
        }
        if s.trim_start().starts_with(['{', '['])
            && let Ok(mut doc) = serde_json::from_str::<Json>(s)
        {
            if self.document(&mut doc) {
                *s = doc.to_string();
            }
            return;
        }
        if let Some(replaced) = self.inside(s) {
            *s = replaced;
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
            Json::Object(map) => map.iter_mut().for_each(|(k, v)| self.stored(v, Some(k))),
            Json::Array(items) => items.iter_mut().for_each(|v| self.stored(v, None)),
            _ => {}
        }
    }

    /// `s` with every inner secret replaced, in one pass (`None`: none in it).
    fn inside(&self, s: &str) -> Option<String> {
        let present: Vec<&String> = self.inner.iter().filter(|x| s.contains(x.as_str())).collect();
        if present.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            match present.iter().find(|x| rest.starts_with(x.as_str())) {
                Some(x) => {
                    out.push_str(MARK);
                    rest = &rest[x.len()..];
                }
                None => {
                    out.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        Some(out)
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
