//! Times on the command line (`idem dlq list --since 1h`): what an
//! operator types in an incident, read as a UTC instant.

use chrono::{DateTime, Duration, NaiveDate, Utc};

/// clap's parser for a time argument.
pub(super) fn parse(text: &str) -> Result<DateTime<Utc>, String> {
    parse_at(text, Utc::now())
}

/// `text` as an instant, `now` being now: RFC 3339
/// (`2026-12-03T10:00:00Z`), a date (`2026-12-03`: its midnight UTC),
/// `now`, `today` or `yesterday` (midnight UTC), or a span ago (`90s`,
/// `30m`, `1h`, `2d`, `1w`).
pub(super) fn parse_at(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    let midnight = |day: NaiveDate| day.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
    let found = match text.to_ascii_lowercase().as_str() {
        "now" => Some(now),
        "today" => midnight(now.date_naive()),
        "yesterday" => now.date_naive().pred_opt().and_then(midnight),
        _ => DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .ok()
            .or_else(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(midnight))
            .or_else(|| ago(text).and_then(|span| now.checked_sub_signed(span))),
    };
    found.ok_or_else(|| {
        format!(
            "`{text}` is not a time: give RFC 3339 (2026-12-03T10:00:00Z), a date (2026-12-03, midnight UTC), \
             now, today, yesterday, or a span ago (90s, 30m, 1h, 2d, 1w)"
        )
    })
}

/// `30m` as a span.
fn ago(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits.parse().ok()?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    Duration::try_seconds(n.checked_mul(seconds)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-03T10:30:00Z").expect("time").with_timezone(&Utc)
    }

    fn at(text: &str) -> String {
        parse_at(text, now()).map(|t| t.to_rfc3339()).unwrap_or_else(|e| e)
    }

    #[test]
    fn spans_ago_days_and_instants_are_read_in_utc() {
        assert_eq!(at("1h"), "2026-12-03T09:30:00+00:00");
        assert_eq!(at("90s"), "2026-12-03T10:28:30+00:00");
        assert_eq!(at("2d"), "2026-12-01T10:30:00+00:00");
        assert_eq!(at("1w"), "2026-11-26T10:30:00+00:00");
        assert_eq!(at("yesterday"), "2026-12-02T00:00:00+00:00");
        assert_eq!(at("Today"), "2026-12-03T00:00:00+00:00");
        assert_eq!(at("now"), "2026-12-03T10:30:00+00:00");
        assert_eq!(at("2026-11-30"), "2026-11-30T00:00:00+00:00");
        assert_eq!(at("2026-12-03T12:00:00+02:00"), "2026-12-03T10:00:00+00:00");
    }

    #[test]
    fn anything_else_is_refused_naming_what_is_accepted() {
        for bad in ["", "1y", "h", "-1h", "last tuesday", "2026-13-01", "99999999999999999999d"] {
            let err = parse_at(bad, now()).expect_err(bad);
            assert!(err.contains(&format!("`{bad}`")) && err.contains("RFC 3339") && err.contains("30m"), "{err}");
        }
    }
}
