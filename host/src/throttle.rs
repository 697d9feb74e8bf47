//! Throttles: how fast one handler may go, per host process — its events
//! (`[handler] max_events_per_second`) and its HTTP requests to each
//! destination host (`[handler.http.rate]`) — as token buckets, and a
//! destination's own `Retry-After` holding every request to it until
//! then. An operator changes a rate at run time (`idem throttle`, the API,
//! the console): every host reads the changes each second
//! (`pipeline::throttles`) and applies them here, over the config's.
//!
//! A bucket holds `burst` tokens and gains `per_second` a second; taking
//! one that is not there *reserves* it (the count goes below zero), and
//! the taker waits until its token would have come. So waiters are served
//! in the order they asked, and the rate holds however many ask at once.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A rate: tokens per second and the most that may be saved up.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    /// `per_second` with a burst of one second's worth (at least 1).
    pub fn per_second(per_second: f64) -> Self {
        Self { per_second, burst: per_second.ceil().max(1.0) as u32 }
    }
}

/// One token bucket, and the time before which nothing may pass.
#[derive(Debug)]
struct Bucket {
    /// `None`: unlimited (only a `Retry-After` holds it).
    rate: Option<Rate>,
    tokens: f64,
    at: Instant,
    held_until: Option<Instant>,
}

impl Bucket {
    fn new(rate: Option<Rate>, now: Instant) -> Self {
        Self { rate, tokens: rate.map_or(0.0, |r| f64::from(r.burst)), at: now, held_until: None }
    }

    /// Takes `n` tokens at `now`: how long their taker waits.
    fn take(&mut self, now: Instant, n: u32) -> Duration {
        let held = self.held_until.map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        let Some(rate) = self.rate else { return held };
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst));
        self.at = now;
        self.tokens -= f64::from(n);
        let owed = if self.tokens >= 0.0 { 0.0 } else { -self.tokens / rate.per_second };
        let wait = Duration::try_from_secs_f64(owed).unwrap_or(MAX_WAIT);
        wait.max(held)
    }

    fn set(&mut self, rate: Option<Rate>, now: Instant) {
        if self.rate != rate {
            // Waiters already queued keep their turns; the new rate counts from now.
            let owed = self.tokens.min(0.0);
            *self = Self { held_until: self.held_until, ..Self::new(rate, now) };
            if rate.is_some() {
                self.tokens = owed.max(-f64::from(rate.map_or(1, |r| r.burst)));
            }
        }
    }
}

/// What one target's rate is: the config's, an operator's over it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Effective {
    /// `events`, or a destination host.
    pub target: String,
    pub configured: Option<Rate>,
    /// An operator's rate at run time (`None` inside: no limit).
    pub changed: Option<Option<Rate>>,
    /// Seconds requests or events waited for this target, in all.
    pub waited_seconds: f64,
}

/// One handler's throttles on this host.
#[derive(Debug, Default)]
pub struct Throttles {
    configured: BTreeMap<String, Rate>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<String, Bucket>,
    changed: BTreeMap<String, Option<Rate>>,
    waited: BTreeMap<String, Duration>,
}

/// The longest a destination's `Retry-After` holds it.
pub const MAX_HOLD: Duration = Duration::from_secs(60);

/// The longest wait a bucket computes (a rate's floor keeps real ones far
/// below it).
const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// The target of the handler's events.
pub const EVENTS: &str = "events";

impl Throttles {
    /// The config's rates: `events` and each destination host's.
    pub fn new(configured: BTreeMap<String, Rate>) -> Self {
        Self { configured, state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rate_of(&self, state: &State, target: &str) -> Option<Rate> {
        match state.changed.get(target) {
            Some(changed) => *changed,
            None => self.configured.get(target).copied(),
        }
    }

    /// Waits for `target`'s turn (no wait when it has no rate and is not
    /// held), unless that would end past `deadline`: then `Err` with the
    /// wait it would have needed, and no token taken.
    pub async fn pass(&self, target: &str, deadline: Option<Instant>) -> Result<(), Duration> {
        self.pass_many(target, 1, deadline).await
    }

    /// [`Throttles::pass`] for `n` at once (a batch's events).
    pub async fn pass_many(&self, target: &str, n: u32, deadline: Option<Instant>) -> Result<(), Duration> {
        let wait = {
            let mut state = self.state();
            let now = Instant::now();
            let rate = self.rate_of(&state, target);
            if rate.is_none() && !state.buckets.contains_key(target) {
                return Ok(());
            }
            let bucket = state.buckets.entry(target.to_owned()).or_insert_with(|| Bucket::new(rate, now));
            let wait = bucket.take(now, n);
            if deadline.is_some_and(|d| now.checked_add(wait).is_none_or(|at| at > d)) {
                // Given back: this taker does not wait.
                if bucket.rate.is_some() {
                    bucket.tokens += f64::from(n);
                }
                return Err(wait);
            }
            *state.waited.entry(target.to_owned()).or_default() += wait;
            wait
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        // A `Retry-After` that came while this taker waited holds it too.
        while let Some(until) = self.held_until(target).filter(|until| *until > Instant::now()) {
            if deadline.is_some_and(|d| until > d) {
                return Err(until.saturating_duration_since(Instant::now()));
            }
            tokio::time::sleep_until(until).await;
        }
        Ok(())
    }

    fn held_until(&self, target: &str) -> Option<Instant> {
        self.state().buckets.get(target).and_then(|b| b.held_until)
    }

    /// `target` asked to be left alone for `wait` (`Retry-After`): nothing
    /// passes to it before then, or before [`MAX_HOLD`] if it asked for
    /// more (a destination cannot stop the handler's calls to it for good).
    pub fn hold(&self, target: &str, wait: Duration) {
        let wait = wait.min(MAX_HOLD);
        let mut state = self.state();
        let now = Instant::now();
        let rate = self.rate_of(&state, target);
        let bucket = state.buckets.entry(target.to_owned()).or_insert_with(|| Bucket::new(rate, now));
        let until = now.checked_add(wait).unwrap_or(now);
        bucket.held_until = Some(bucket.held_until.map_or(until, |held| held.max(until)));
    }

    /// The operators' rates now (every host's reading of `idem.throttle`):
    /// each replaces the config's for its target; a target no longer named
    /// goes back to the config's.
    pub fn set_changed(&self, changed: BTreeMap<String, Option<Rate>>) {
        let mut state = self.state();
        if state.changed == changed {
            return;
        }
        state.changed = changed;
        let now = Instant::now();
        let targets: Vec<String> = state.buckets.keys().cloned().chain(state.changed.keys().cloned()).collect();
        for target in targets {
            let rate = self.rate_of(&state, &target);
            state.buckets.entry(target).or_insert_with(|| Bucket::new(rate, now)).set(rate, now);
        }
    }

    /// Every target with a rate or a wait, as configured and changed.
    pub fn effective(&self) -> Vec<Effective> {
        let state = self.state();
        let mut targets: Vec<&String> =
            self.configured.keys().chain(state.changed.keys()).chain(state.buckets.keys()).collect();
        targets.sort();
        targets.dedup();
        targets
            .into_iter()
            .map(|t| Effective {
                target: t.clone(),
                configured: self.configured.get(t).copied(),
                changed: state.changed.get(t).copied(),
                waited_seconds: state.waited.get(t).map_or(0.0, Duration::as_secs_f64),
            })
            .collect()
    }

    /// The most events one batch may hold under the events' rate: a tenth
    /// of a second's worth (at least one, at most the burst). A batch takes
    /// its tokens at once and then runs its events together, so a larger
    /// one would pace them in lumps (50 a second as one lump of 50 each
    /// second); a tenth keeps what reaches a downstream even.
    pub fn batch_cap(&self, max_events: usize) -> usize {
        self.rate(EVENTS).map_or(max_events, |r| {
            let tenth = (r.per_second / 10.0).ceil().max(1.0) as usize;
            max_events.min(tenth).min(r.burst.max(1) as usize)
        })
    }

    /// The rate in force for `target` (`None`: no limit).
    pub fn rate(&self, target: &str) -> Option<Rate> {
        self.rate_of(&self.state(), target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(pairs: &[(&str, f64)]) -> BTreeMap<String, Rate> {
        pairs.iter().map(|(t, r)| ((*t).to_owned(), Rate::per_second(*r))).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_spaces_takers_after_the_burst_in_the_order_they_asked() {
        let throttles = Throttles::new(rates(&[("api", 10.0)]));
        let start = Instant::now();
        for _ in 0..10 {
            throttles.pass("api", None).await.expect("no deadline");
        }
        assert!(start.elapsed() < Duration::from_millis(5), "the burst passes at once");
        for _ in 0..20 {
            throttles.pass("api", None).await.expect("no deadline");
        }
        let took = start.elapsed().as_secs_f64();
        assert!((1.9..2.1).contains(&took), "20 more at 10/s take 2 s: {took}");
        throttles.pass("elsewhere", None).await.expect("unlimited");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_holds_the_target_and_a_deadline_refuses_a_wait_past_it() {
        let throttles = Throttles::default();
        throttles.hold("api", Duration::from_secs(1));
        let start = Instant::now();
        let refused = throttles.pass("api", Some(start + Duration::from_millis(500))).await;
        assert!(refused.is_err_and(|w| w > Duration::from_millis(900)), "{refused:?}");
        throttles.pass("api", Some(start + Duration::from_secs(5))).await.expect("within the deadline");
        assert!(start.elapsed() >= Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_operators_rate_replaces_the_configs_and_its_removal_restores_it() {
        let throttles = Throttles::new(rates(&[("api", 10.0)]));
        throttles.set_changed([("api".to_owned(), Some(Rate::per_second(100.0)))].into());
        assert_eq!(throttles.rate("api"), Some(Rate::per_second(100.0)));
        throttles.set_changed([("api".to_owned(), None)].into());
        assert_eq!(throttles.rate("api"), None, "an operator lifted the limit");
        throttles.set_changed(BTreeMap::new());
        assert_eq!(throttles.rate("api"), Some(Rate::per_second(10.0)), "back to the config's");
        throttles.set_changed([(EVENTS.to_owned(), Some(Rate::per_second(5.0)))].into());
        let start = Instant::now();
        for _ in 0..15 {
            throttles.pass(EVENTS, None).await.expect("no deadline");
        }
        let took = start.elapsed().as_secs_f64();
        assert!((1.9..2.1).contains(&took), "5 at once, 10 more at 5/s: {took}");
    }

    #[test]
    fn a_batch_holds_a_tenth_of_a_seconds_events_at_most() {
        let throttles = Throttles::new(rates(&[("events", 50.0)]));
        assert_eq!(throttles.batch_cap(100), 5, "50/s: batches of 5, ten a second");
        assert_eq!(throttles.batch_cap(3), 3, "never more than the batch's own cap");
        throttles.set_changed([(EVENTS.to_owned(), Some(Rate { per_second: 1000.0, burst: 20 }))].into());
        assert_eq!(throttles.batch_cap(1000), 20, "never more than the burst");
        throttles.set_changed([(EVENTS.to_owned(), Some(Rate::per_second(0.5)))].into());
        assert_eq!(throttles.batch_cap(100), 1, "at least one");
        throttles.set_changed([(EVENTS.to_owned(), None)].into());
        assert_eq!(throttles.batch_cap(100), 100, "no rate: the batch's own cap");
    }
}
