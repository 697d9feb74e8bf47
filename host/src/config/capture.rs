//! `[handler.capture]`: a sample of live events kept with what each
//! statement returned and each HTTP answer (`crate::capture`), for `idem
//! test --replay` to run a new version against.

use anyhow::bail;
use serde::Deserialize;

use super::Span;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerCapture {
    /// The share of events captured, from 0 (none, the default) to 1
    /// (every one). Which events is decided by their id, so every host
    /// captures the same ones.
    #[serde(default)]
    pub sample: f64,
    /// JSON paths whose values are never kept (`$.card.number`,
    /// `$.items[*].iban`), in every JSON document of a capture.
    #[serde(default)]
    pub redact: Vec<String>,
    /// Headers whose values are never kept (besides those that always
    /// carry credentials), on the event, the requests and the responses.
    #[serde(default)]
    pub redact_headers: Vec<String>,
    /// How long a capture is kept.
    #[serde(default = "default_retention")]
    pub retention: Span,
    /// Captures kept for the handler at most (the oldest go first).
    #[serde(default = "default_max_events")]
    pub max_events: u32,
}

impl Default for HandlerCapture {
    fn default() -> Self {
        Self {
            sample: 0.0,
            redact: Vec::new(),
            redact_headers: Vec::new(),
            retention: default_retention(),
            max_events: default_max_events(),
        }
    }
}

fn default_retention() -> Span {
    Span::days(7)
}

fn default_max_events() -> u32 {
    10_000
}

/// `[handler.capture]`'s ranges and paths.
pub(super) fn check(at: &str, capture: &HandlerCapture) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&capture.sample) {
        bail!("{at}: capture.sample = {} must be between 0 and 1 (0.01 captures one event in 100)", capture.sample);
    }
    if !(1..=1_000_000).contains(&capture.max_events) {
        bail!("{at}: capture.max_events = {} must be between 1 and 1000000", capture.max_events);
    }
    if capture.retention.0 < std::time::Duration::from_secs(60) {
        bail!("{at}: capture.retention = {} is shorter than a minute", capture.retention);
    }
    if let Some(bad) =
        capture.redact_headers.iter().find(|h| reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err())
    {
        bail!("{at}: capture.redact_headers: `{bad}` is not a header name");
    }
    for path in &capture.redact {
        redact_path(path).map_err(|e| anyhow::anyhow!("{at}: capture.{e}"))?;
    }
    Ok(())
}

/// One step of a redacted path: a member's name, or `*` (every member or
/// element).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedactStep {
    Name(String),
    Any,
}

/// `$.a.b`, `$.items[*].card` or `$.*.secret` as steps, or why it is not
/// a path.
pub fn redact_path(path: &str) -> Result<Vec<RedactStep>, String> {
    let Some(rest) = path.strip_prefix("$.") else {
        return Err(format!("redact path `{path}` must start with `$.` (e.g. `$.card.number`)"));
    };
    let mut steps = Vec::new();
    for part in rest.split('.') {
        let (name, any) = match part.strip_suffix("[*]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        if name.is_empty() || name.contains(['[', ']', '$', ' ']) {
            return Err(format!(
                "redact path `{path}`: `{part}` is not a member name, `*` or `name[*]` (paths are `$.a.b`, \
                 `$.items[*].card`)"
            ));
        }
        steps.push(if name == "*" { RedactStep::Any } else { RedactStep::Name(name.to_owned()) });
        if any {
            steps.push(RedactStep::Any);
        }
    }
    Ok(steps)
}
