//! Rates: `[handler] max_events_per_second` and `[handler.http.rate]` (a
//! destination host's requests per second), enforced by `crate::throttle`
//! on each host; an operator changes them at run time.

use std::collections::BTreeMap;

use anyhow::bail;
use serde::Deserialize;

/// `[handler.http.rate]`: `"api.example.com" = { per_second = 50, burst = 100 }`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRate {
    /// Requests a second to this host, from this handler on one idem host.
    pub per_second: f64,
    /// Requests that may go at once after a quiet spell (default: one
    /// second's worth).
    #[serde(default)]
    pub burst: Option<u32>,
}

/// The highest rate a throttle takes (above it, use none).
pub const MAX_PER_SECOND: f64 = 1_000_000.0;
/// The lowest: one a quarter of an hour (below it, pause the handler).
pub const MIN_PER_SECOND: f64 = 0.001;

/// Whether `per_second` and `burst` make a rate; the error names `what`.
pub fn check_rate(what: &str, per_second: f64, burst: Option<u32>) -> Result<crate::throttle::Rate, String> {
    if !(per_second.is_finite() && (MIN_PER_SECOND..=MAX_PER_SECOND).contains(&per_second)) {
        return Err(format!(
            "{what}: per_second = {per_second} must be between {MIN_PER_SECOND} and {MAX_PER_SECOND} (to stop it, \
             pause the handler)"
        ));
    }
    let rate = crate::throttle::Rate::per_second(per_second);
    match burst {
        Some(0) => Err(format!("{what}: burst must be at least 1")),
        Some(b) if f64::from(b) > MAX_PER_SECOND => Err(format!("{what}: burst = {b} is more than {MAX_PER_SECOND}")),
        Some(burst) => Ok(crate::throttle::Rate { burst, ..rate }),
        None => Ok(rate),
    }
}

/// The handler's configured rates, by target (`events`, or a host).
pub(super) fn check(
    at: &str,
    max_events_per_second: Option<f64>,
    http: &BTreeMap<String, HttpRate>,
) -> anyhow::Result<BTreeMap<String, crate::throttle::Rate>> {
    let mut rates = BTreeMap::new();
    if let Some(per_second) = max_events_per_second {
        let rate = check_rate(&format!("{at}: max_events_per_second"), per_second, None).map_err(anyhow::Error::msg)?;
        rates.insert(crate::throttle::EVENTS.to_owned(), rate);
    }
    for (host, rate) in http {
        if host.is_empty() || host == crate::throttle::EVENTS || host.contains(['/', ':', ' ']) {
            bail!(
                "{at}: http.rate `{host}`: name a destination host (`api.example.com`), without scheme, port or path"
            );
        }
        let what = format!("{at}: http.rate `{host}`");
        rates.insert(
            host.to_ascii_lowercase(),
            check_rate(&what, rate.per_second, rate.burst).map_err(anyhow::Error::msg)?,
        );
    }
    Ok(rates)
}
