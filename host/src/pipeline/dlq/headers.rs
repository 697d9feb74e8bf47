//! The headers of a dead-letter record: the source record's (names that
//! could pass for idem's escaped), then idem's own, then the seal.

/// Header names idem adds to a dead-lettered record.
pub const CLASS: &str = "idem.failure.class";
pub const REASON: &str = "idem.failure.reason";
pub const ATTEMPTS: &str = "idem.failure.attempts";
pub const FAILED_AT: &str = "idem.failure.at";
pub const TOPIC: &str = "idem.original.topic";
pub const PARTITION: &str = "idem.original.partition";
pub const OFFSET: &str = "idem.original.offset";
pub const TIMESTAMP: &str = "idem.original.timestamp";
pub const HANDLER: &str = "idem.handler";
pub const MODULE: &str = "idem.module.sha256";
pub const GROUP: &str = "idem.consumer.group";
/// How often the record was replayed and failed again (absent: never).
pub const REPLAY_COUNT: &str = "idem.replay.count";
/// Present on an envelope: the broker refused the record itself (the
/// value says why), so the DLQ holds a bounded description of it instead.
pub const ENVELOPE: &str = "idem.envelope";
/// The MAC over the record (`super::seal`); always the last header.
pub const SEAL: &str = "idem.seal";

/// A source header's name as the DLQ copy carries it: names idem's own
/// headers could have (`idem.…`) and the escaped ones (`source.…`) get a
/// `source.` prefix, so that a producer's forged `idem.failure.reason` or
/// `idem.original.offset` is never read as idem's; [`unescaped`] undoes it.
pub fn escaped(name: &str) -> std::borrow::Cow<'_, str> {
    if name.starts_with("idem.") || name.starts_with("source.") {
        std::borrow::Cow::Owned(format!("source.{name}"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// The source header's name back from a DLQ copy's (see [`escaped`]).
pub fn unescaped(name: &str) -> &str {
    name.strip_prefix("source.").unwrap_or(name)
}

/// Whether a DLQ copy's header is idem's (every name idem writes starts
/// with `idem.`; a source header never does once [`escaped`]).
pub fn is_idems(name: &str) -> bool {
    name.starts_with("idem.")
}

#[cfg(test)]
mod tests {
    use super::{escaped, is_idems, unescaped};

    #[test]
    fn source_header_names_never_pass_for_idems_and_come_back_exactly() {
        for name in ["traceparent", "idem.failure.reason", "source.idem.x", "source.", "idem.", "x.idem.y", "idem.seal"]
        {
            let written = escaped(name);
            assert!(!is_idems(&written), "{name} → {written}");
            assert_eq!(unescaped(&written), name);
        }
        assert_eq!(escaped("traceparent"), "traceparent", "other names unchanged");
    }
}
