//! Untrusted text on its way to an operator: a guest's log message, a
//! record's field in a reason, a DLQ header. Wherever it is shown (text and
//! JSON logs, `idem status`, metric labels, trace attributes, DLQ headers)
//! it is data: it cannot start a line, move the cursor, reorder what
//! follows it, or be of any length.

/// `text` with every control character escaped (`\n`, `\u{1b}`, …), the
/// invisible ones that reorder or hide text too (bidirectional overrides,
/// zero-width characters), and at most `max` characters of it, saying how
/// many there were when it was cut.
pub fn shown(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 2));
    let mut total = 0usize;
    for c in text.chars() {
        total += 1;
        if total <= max {
            push_escaped(&mut out, c);
        }
    }
    if total > max {
        out.push_str(&format!("… ({total} characters)"));
    }
    out
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

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        c if is_hidden(c) => out.extend(c.escape_default()),
        c => out.push(c),
    }
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
        assert_eq!(shown("héllo wörld", 5), "héllo… (11 characters)");
        assert_eq!(
            shown(&"x".repeat(10_000_000), 200).chars().count(),
            200 + "… (10000000 characters)".chars().count()
        );
    }
}
