//! Untrusted text on its way to an operator: a guest's log message, a
//! record's field in a reason, a DLQ header. Wherever it is shown (text and
//! JSON logs, `idem status`, metric labels, trace attributes, DLQ headers)
//! it is data: it cannot start a line, move the cursor, reorder what
//! follows it, or be of any length.

/// `text` with every control character escaped (`\n`, `\u{1b}`, …), the
/// invisible ones that reorder or hide text too (bidirectional overrides,
/// zero-width characters), and at most `max` characters of it, saying how
/// many bytes there were when it was cut. Its work is bounded by `max`,
/// whatever the text's length.
pub fn shown(text: &str, max: usize) -> String {
    capped(text, max, true)
}

/// [`shown`], and when `text` is longer than `max` characters a digest of
/// the whole after it: two texts that differ past the cap still read
/// differently (a shadow run's comparison, `crate::shadow`).
pub fn shown_whole(text: &str, max: usize) -> String {
    let shown = shown(text, max);
    if text.chars().nth(max).is_none() {
        return shown;
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(text.as_bytes());
    format!("{shown} #{}", hex::encode(&digest[..8]))
}

/// [`shown`] for text that may hold some already: control characters are
/// escaped, backslashes left as they are (so nothing is escaped twice).
pub fn controls_escaped(text: &str, max: usize) -> String {
    capped(text, max, false)
}

fn capped(text: &str, max: usize, backslashes: bool) -> String {
    let mut out = String::with_capacity(text.len().min(max.saturating_mul(2)));
    let mut chars = text.chars();
    for c in chars.by_ref().take(max) {
        match c {
            '\\' if backslashes => out.push_str("\\\\"),
            c if is_hidden(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    if chars.next().is_some() {
        out.push_str(&format!("… ({} bytes)", text.len()));
    }
    out
}

/// [`shown`] when displayed, for a field recorded only if its span or
/// event is enabled (the text is escaped then, not before).
pub struct Shown<'a>(pub &'a str, pub usize);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&shown(self.0, self.1))
    }
}

/// Whether `c` must not reach an operator's terminal or log viewer as is.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}' // zero-width spaces and joiners, LRM/RLM
            | '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{202a}'..='\u{202e}' // bidirectional embeddings and overrides
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' // isolates
            | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn control_and_invisible_characters_are_escaped_and_length_capped() {
        let forged = "ok\n2026-12-01T00:00:00Z  INFO idem::executor: event committed";
        let out = shown(forged, 1_000);
        assert!(!out.contains('\n') && out.contains("\\n"), "{out}");
        assert_eq!(shown("a\u{1b}[2Jb\r\u{202e}c\u{0}", 100), "a\\u{1b}[2Jb\\r\\u{202e}c\\u{0}");
        assert_eq!(shown("\\n", 10), "\\\\n", "a backslash is escaped too, so an escape cannot be forged");
        assert_eq!(super::controls_escaped("a\\nb\nc", 10), "a\\nb\\nc", "escaped once");
        assert_eq!(shown("héllo wörld", 5), "héllo… (13 bytes)");
        assert_eq!(shown("héllo", 5), "héllo", "not cut");
        assert_eq!(shown(&"x".repeat(10_000_000), 200).chars().count(), 200 + "… (10000000 bytes)".chars().count());
    }
}
