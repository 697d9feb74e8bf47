//! `[retention]` and the handler keys of R-KFK-IDEM-2: how long dedup rows
//! are kept, how maintenance keeps them, and what becomes of an event older
//! than that (see docs/retention.md).

use std::fmt;
use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

/// A duration written `<number><unit>`, unit one of `ms`, `s`, `m`, `h`, `d`
/// (`"7d"`, `"90m"`, `"2s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

impl Span {
    pub const fn days(n: u64) -> Self {
        Self(Duration::from_secs(n * 86_400))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let n: u64 =
            number.parse().map_err(|_| format!("`{text}` is not a duration such as \"7d\", \"12h\" or \"2s\""))?;
        let ms = match unit {
            "ms" => Some(n),
            "s" => n.checked_mul(1_000),
            "m" => n.checked_mul(60_000),
            "h" => n.checked_mul(3_600_000),
            "d" => n.checked_mul(86_400_000),
            _ => return Err(format!("`{text}`: the unit is one of ms, s, m, h, d (as in \"7d\")")),
        };
        ms.map(|ms| Self(Duration::from_millis(ms))).ok_or_else(|| format!("`{text}` is too long"))
    }

    /// As PostgreSQL reads an interval.
    pub fn as_interval(self) -> String {
        format!("{} milliseconds", self.0.as_millis())
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
            if ms >= size && ms.is_multiple_of(size) {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// How `idem.processed_event` sheds expired rows. Chosen when `idem
/// migrate --config` creates the table; the host checks it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionMode {
    /// One partition per UTC day of the event id's time; expired days are
    /// dropped whole.
    Partition,
    /// A plain table; expired rows are deleted in small chunks.
    Delete,
}

impl RetentionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Partition => "partition",
            Self::Delete => "delete",
        }
    }
}

/// What becomes of an event whose id is older than its handler's
/// retention and that has no dedup row (it may have had one, dropped since).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StalePolicy {
    /// Dead-lettered with the reason (default): an operator decides, and
    /// `idem dlq replay --force` runs it.
    #[default]
    Dlq,
    /// Run anyway: a dedup row is claimed where its window still exists,
    /// else it runs without one.
    Process,
    /// Skipped, counted and logged; the offset moves on.
    Skip,
    // A future id is dead-lettered under every policy: it was never
    // processed, so skipping it would lose it and running it has no window.
}

impl StalePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dlq => "dlq",
            Self::Process => "process",
            Self::Skip => "skip",
        }
    }
}

/// `[retention]`: maintenance of `idem.processed_event`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// `"partition"` (default) or `"delete"`; read by `idem migrate --config`
    /// when it creates the table, checked against the table at start-up.
    /// (`retention_mode`, the name for it, is accepted too.)
    #[serde(default = "default_mode", alias = "retention_mode")]
    pub mode: RetentionMode,
    /// How often a host runs a maintenance pass (also at start-up).
    #[serde(default = "default_interval")]
    pub interval: Span,
    /// Days created ahead of today (partition mode).
    #[serde(default = "default_windows_ahead")]
    pub windows_ahead: u32,
    /// How long a pass waits for a lock before it gives up until its next
    /// try: claims queue behind a waiting DROP for at most this long.
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout: Span,
    /// How far in the future an event id's time may lie (producers' clocks
    /// run ahead); further is refused like a stale event. Below
    /// `windows_ahead` days, so an accepted id always has its window.
    #[serde(default = "default_future_skew")]
    pub future_skew: Span,
    /// Rows per DELETE (delete mode): each chunk is a short transaction.
    #[serde(default = "default_delete_chunk")]
    pub delete_chunk: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            mode: default_mode(),
            interval: default_interval(),
            windows_ahead: default_windows_ahead(),
            lock_timeout: default_lock_timeout(),
            future_skew: default_future_skew(),
            delete_chunk: default_delete_chunk(),
        }
    }
}

fn default_mode() -> RetentionMode {
    RetentionMode::Partition
}
fn default_interval() -> Span {
    Span(Duration::from_secs(600))
}
fn default_windows_ahead() -> u32 {
    3
}
fn default_lock_timeout() -> Span {
    Span(Duration::from_secs(2))
}
fn default_future_skew() -> Span {
    Span(Duration::from_secs(3_600))
}
fn default_delete_chunk() -> u32 {
    1_000
}
/// 7 days: the seed's figure; handlers whose DLQ is replayed later want more.
pub fn default_dedup_retention() -> Span {
    Span::days(7)
}

impl RetentionConfig {
    pub fn check(&self) -> anyhow::Result<()> {
        let at = "[retention]";
        if !(Duration::from_secs(1)..=Duration::from_secs(6 * 3_600)).contains(&self.interval.0) {
            bail!("{at} interval = \"{}\" must be between 1s and 6h (windows are created a day ahead)", self.interval);
        }
        if !(2..=60).contains(&self.windows_ahead) {
            bail!("{at} windows_ahead = {} must be between 2 and 60", self.windows_ahead);
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&self.lock_timeout.0) {
            bail!("{at} lock_timeout = \"{}\" must be between 10ms and 60s", self.lock_timeout);
        }
        let horizon = Span::days(u64::from(self.windows_ahead) - 1);
        if self.future_skew > horizon {
            bail!(
                "{at} future_skew = \"{}\" reaches past the windows created ahead: at most \"{horizon}\" with \
                 windows_ahead = {}",
                self.future_skew,
                self.windows_ahead
            );
        }
        if !(1..=100_000).contains(&self.delete_chunk) {
            bail!("{at} delete_chunk = {} must be between 1 and 100000", self.delete_chunk);
        }
        Ok(())
    }
}

/// A handler's `dedup_retention`: at least an hour (rebalances redeliver
/// within minutes), at most ten years.
pub fn check_dedup_retention(at: &str, retention: Span) -> anyhow::Result<()> {
    if !(Duration::from_secs(3_600)..=Span::days(3_650).0).contains(&retention.0) {
        bail!("{at}: dedup_retention = \"{retention}\" must be between 1h and 3650d");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_parse_and_print() {
        assert_eq!(Span::parse("7d"), Ok(Span::days(7)));
        assert_eq!(Span::parse("90m").map(|s| s.0), Ok(Duration::from_secs(5_400)));
        assert_eq!(Span::parse("250ms").map(|s| s.0), Ok(Duration::from_millis(250)));
        assert_eq!(Span::days(30).to_string(), "30d");
        assert_eq!(Span(Duration::from_secs(5_400)).to_string(), "90m");
        for bad in ["", "7", "d", "7 weeks", "-1d", "1.5h", "7D"] {
            assert!(Span::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_skew_stays_inside_the_windows_created_ahead() {
        let ok = RetentionConfig::default();
        assert!(ok.check().is_ok());
        let far = RetentionConfig { future_skew: Span::days(3), ..RetentionConfig::default() };
        assert!(far.check().expect_err("3d with 3 windows ahead").to_string().contains("future_skew"));
        let more = RetentionConfig { future_skew: Span::days(3), windows_ahead: 5, ..RetentionConfig::default() };
        assert!(more.check().is_ok());
    }
}
