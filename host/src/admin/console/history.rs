//! What the console's live pages show, sampled once a second by one task
//! and kept for [`KEPT`] samples: each handler's counters, latency
//! histogram and partitions' lag. The task also renders the pages' JSON
//! once per sample; a viewer's request copies those bytes, so ten viewers
//! cost what one does, and nothing any viewer asks grows with history.

use std::collections::VecDeque;
use std::sync::Arc;

use super::series::{Point, Series};
use crate::stats::Stats;
use crate::telemetry::{HandlerTelemetry, PartitionView};

/// Samples kept: two minutes at one a second.
pub(super) const KEPT: usize = 120;

/// One handler at one moment.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// Milliseconds since the epoch.
    pub at_ms: i64,
    pub counts: Counts,
    /// The latency histogram's cumulative counts (per bound, then +Inf).
    pub latency: Vec<u64>,
    pub partitions: Vec<PartitionView>,
    pub joined: bool,
}

/// The counters whose rates the console shows.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counts {
    pub processed: u64,
    pub duplicates: u64,
    pub skipped: u64,
    pub failed: u64,
    pub dead_lettered: u64,
    pub retries: u64,
}

impl Counts {
    fn of(stats: &Stats) -> Self {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        Self {
            processed: get(&stats.processed),
            duplicates: get(&stats.duplicates),
            skipped: get(&stats.skipped),
            failed: get(&stats.failed),
            dead_lettered: get(&stats.dead_lettered),
            retries: get(&stats.retries),
        }
    }
}

impl Sample {
    pub(super) fn of(handler: &HandlerTelemetry) -> Self {
        let mut partitions = handler.tap.partitions();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Self {
            at_ms: chrono::Utc::now().timestamp_millis(),
            counts: Counts::of(&handler.stats),
            latency: handler.stats.latency.cumulative(),
            partitions,
            joined: handler.tap.joined(),
        }
    }

    /// Records behind on an assigned partition (`None`: not known yet).
    pub(super) fn lag(p: &PartitionView) -> Option<i64> {
        match (p.assigned, p.position) {
            (true, Some(position)) if p.high_watermark >= 0 => Some((p.high_watermark - position).max(0)),
            _ => None,
        }
    }

    /// Lag summed over the assigned partitions whose lag is known.
    pub(super) fn total_lag(&self) -> i64 {
        self.partitions.iter().filter_map(Self::lag).sum()
    }
}

/// One handler's samples, oldest first, and its lag and throughput over a
/// day for the charts (`series`).
#[derive(Debug, Default)]
pub(super) struct History {
    pub samples: VecDeque<Sample>,
    pub series: Series,
}

impl History {
    pub(super) fn push(&mut self, sample: Sample) {
        let known = sample.partitions.iter().any(|p| Sample::lag(p).is_some());
        let point =
            Point { at_ms: sample.at_ms, lag: known.then(|| sample.total_lag()), processed: sample.counts.processed };
        self.series.push(point);
        if self.samples.len() == KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The sample `back` samples before the newest (or the oldest kept).
    pub(super) fn before(&self, back: usize) -> Option<&Sample> {
        let len = self.samples.len();
        if len == 0 { None } else { self.samples.get(len.saturating_sub(back + 1)) }
    }

    /// Per second between the newest sample and the one `back` before it.
    pub(super) fn rate(&self, back: usize, count: impl Fn(&Counts) -> u64) -> f64 {
        let (Some(now), Some(then)) = (self.samples.back(), self.before(back)) else { return 0.0 };
        let seconds = (now.at_ms - then.at_ms) as f64 / 1e3;
        if seconds <= 0.0 { 0.0 } else { count(&now.counts).saturating_sub(count(&then.counts)) as f64 / seconds }
    }

    /// The latency (ms) under which a share `p` of the records resolved in
    /// the last `back` samples fell, as the histogram's bound (`None`: no
    /// record resolved; past the last bound: that bound).
    pub(super) fn latency_ms(&self, back: usize, p: f64, bounds: &[f64]) -> Option<f64> {
        let (now, then) = (self.samples.back()?, self.before(back)?);
        let delta: Vec<u64> = now.latency.iter().zip(&then.latency).map(|(n, t)| n.saturating_sub(*t)).collect();
        let total = *delta.last()?;
        if total == 0 {
            return None;
        }
        let wanted = (total as f64 * p).ceil() as u64;
        let i = delta.iter().position(|c| *c >= wanted)?;
        Some(bounds.get(i).or(bounds.last()).copied()? * 1e3)
    }
}

/// Every handler's history, keyed by the handler's place in telemetry.
#[derive(Debug, Default)]
pub(super) struct Histories {
    pub by_handler: Vec<(Arc<HandlerTelemetry>, History)>,
}

impl Histories {
    /// Samples every handler of `handlers` (those registered since are added).
    pub(super) fn sample(&mut self, handlers: &[Arc<HandlerTelemetry>]) {
        for handler in handlers {
            let sample = Sample::of(handler);
            match self.by_handler.iter_mut().find(|(h, _)| Arc::ptr_eq(h, handler)) {
                Some((_, history)) => history.push(sample),
                None => {
                    let mut history = History::default();
                    history.push(sample);
                    self.by_handler.push((handler.clone(), history));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Counts, History, KEPT, Sample};

    fn sample(at_ms: i64, processed: u64, latency: Vec<u64>) -> Sample {
        Sample {
            at_ms,
            counts: Counts { processed, ..Counts::default() },
            latency,
            partitions: Vec::new(),
            joined: true,
        }
    }

    #[test]
    fn rates_and_latencies_come_from_the_window() {
        let mut h = History::default();
        for i in 0..(KEPT as i64 + 10) {
            // 100 records a second; all under the first bound until the last
            // two seconds, which resolve 10 each past the second bound.
            let slow = i.saturating_sub(KEPT as i64 + 7).max(0) as u64;
            h.push(sample(i * 1000, i as u64 * 100, vec![i as u64 * 100 - slow * 10, i as u64 * 100, i as u64 * 100]));
        }
        assert_eq!(h.samples.len(), KEPT, "bounded");
        assert!((h.rate(5, |c| c.processed) - 100.0).abs() < 1e-9);
        let bounds = [0.01, 0.1];
        assert_eq!(h.latency_ms(10, 0.5, &bounds), Some(10.0));
        assert_eq!(h.latency_ms(10, 0.99, &bounds), Some(100.0));
        let mut idle = History::default();
        idle.push(sample(0, 0, vec![0, 0, 0]));
        idle.push(sample(1000, 0, vec![0, 0, 0]));
        assert_eq!(idle.latency_ms(10, 0.5, &bounds), None);
        assert_eq!(idle.rate(5, |c| c.processed), 0.0);
    }
}
