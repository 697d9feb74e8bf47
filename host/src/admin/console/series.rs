//! Lag and throughput over time for the console's charts: ten minutes at
//! one point a second and a day at one point every ten seconds, kept in the
//! host's memory (bounded: [`FINE_KEPT`] + [`COARSE_KEPT`] points of 24
//! bytes per handler, about 220 KB; a restart starts them again), and the
//! time the lag will take to drain at the pace of the last minute.

use std::collections::VecDeque;

use serde::Serialize;

/// Points a second apart: ten minutes.
const FINE_KEPT: usize = 600;
/// Points ten seconds apart: a day.
const COARSE_KEPT: usize = 8_640;
const COARSE_EVERY_MS: i64 = 10_000;
/// Points a chart draws at most (each a bucket of the kept points).
const DRAWN: usize = 300;
/// The window the drain estimate reads its pace from.
const PACE_OVER_MS: i64 = 60_000;

/// One moment of a handler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Point {
    pub at_ms: i64,
    /// Lag over its assigned partitions (`None`: not known then).
    pub lag: Option<i64>,
    /// Records processed since the host started (a counter).
    pub processed: u64,
}

/// A chart's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Range {
    TenMinutes,
    Hour,
    Day,
}

impl Range {
    pub(super) const ALL: [Range; 3] = [Range::TenMinutes, Range::Hour, Range::Day];

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::TenMinutes => "10m",
            Self::Hour => "1h",
            Self::Day => "24h",
        }
    }

    fn ms(self) -> i64 {
        match self {
            Self::TenMinutes => 600_000,
            Self::Hour => 3_600_000,
            Self::Day => 86_400_000,
        }
    }
}

/// One point drawn: the bucket's end, its highest lag, its mean rate.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct Drawn {
    pub at: i64,
    pub lag: Option<i64>,
    pub rate: Option<f64>,
}

/// When the lag is gone, at the last minute's pace.
#[derive(Debug, Serialize, PartialEq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(super) enum Drain {
    /// No lag.
    CaughtUp,
    /// Falling `per_second`: gone in about `seconds`.
    Draining { seconds: u64, per_second: f64 },
    /// Steady or rising.
    NotDraining { growing_per_second: f64 },
    /// Under a minute kept, or the lag not known.
    Unknown,
}

/// A chart's data, as the console's `…/history?range=` answers it.
#[derive(Debug, Serialize)]
pub(super) struct Chart {
    pub range: &'static str,
    /// Seconds each drawn point stands for.
    pub step_s: f64,
    pub points: Vec<Drawn>,
    pub drain: Drain,
}

/// A handler's kept points.
#[derive(Debug, Default)]
pub(super) struct Series {
    fine: VecDeque<Point>,
    coarse: VecDeque<Point>,
}

impl Series {
    pub(super) fn push(&mut self, point: Point) {
        push_bounded(&mut self.fine, point, FINE_KEPT);
        if self.coarse.back().is_none_or(|last| point.at_ms - last.at_ms >= COARSE_EVERY_MS) {
            push_bounded(&mut self.coarse, point, COARSE_KEPT);
        }
    }

    /// The chart of the last `range`, at most [`DRAWN`] points.
    pub(super) fn chart(&self, range: Range) -> Chart {
        let kept = if range == Range::TenMinutes { &self.fine } else { &self.coarse };
        let since = kept.back().map_or(0, |last| last.at_ms - range.ms());
        let points: Vec<Point> = kept.iter().filter(|p| p.at_ms > since).copied().collect();
        let per = points.len().div_ceil(DRAWN).max(1);
        let mut drawn = Vec::with_capacity(points.len() / per + 1);
        let mut before: Option<Point> = kept.iter().rev().find(|p| p.at_ms <= since).copied();
        for bucket in points.chunks(per) {
            let last = bucket[bucket.len() - 1];
            let lag = bucket.iter().filter_map(|p| p.lag).max();
            // The first bucket, with nothing kept before it: its own span.
            let base = before.or_else(|| bucket.first().copied().filter(|_| bucket.len() > 1));
            let rate = base.and_then(|b| rate(&b, &last));
            drawn.push(Drawn { at: last.at_ms, lag, rate });
            before = Some(last);
        }
        let span_ms = points.last().zip(points.first()).map_or(0, |(l, f)| l.at_ms - f.at_ms);
        let step_s = if drawn.len() > 1 { span_ms as f64 / 1e3 / (drawn.len() - 1) as f64 } else { 0.0 };
        Chart { range: range.name(), step_s: (step_s * 10.0).round() / 10.0, points: drawn, drain: self.drain() }
    }

    /// The drain estimate from the fine points of the last minute.
    fn drain(&self) -> Drain {
        let Some(now) = self.fine.back() else { return Drain::Unknown };
        let Some(lag) = now.lag else { return Drain::Unknown };
        if lag == 0 {
            return Drain::CaughtUp;
        }
        let then = self.fine.iter().find(|p| now.at_ms - p.at_ms <= PACE_OVER_MS && p.lag.is_some());
        let Some(then) = then.filter(|t| now.at_ms - t.at_ms >= PACE_OVER_MS / 2) else { return Drain::Unknown };
        let seconds = (now.at_ms - then.at_ms) as f64 / 1e3;
        let slope = (lag - then.lag.unwrap_or(lag)) as f64 / seconds;
        if slope < 0.0 {
            let per_second = round(-slope);
            Drain::Draining { seconds: (lag as f64 / -slope).ceil() as u64, per_second }
        } else {
            Drain::NotDraining { growing_per_second: round(slope) }
        }
    }
}

fn push_bounded(points: &mut VecDeque<Point>, point: Point, kept: usize) {
    if points.len() == kept {
        points.pop_front();
    }
    points.push_back(point);
}

/// Records a second between two points (`None`: no time between them, or
/// the counter went back: the host restarted its count).
fn rate(from: &Point, to: &Point) -> Option<f64> {
    let seconds = (to.at_ms - from.at_ms) as f64 / 1e3;
    let done = to.processed.checked_sub(from.processed)?;
    (seconds > 0.0).then(|| round(done as f64 / seconds))
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::{COARSE_KEPT, DRAWN, Drain, FINE_KEPT, Point, Range, Series};

    /// `seconds` of points a second apart: 50 records a second, lag from `lag(i)`.
    fn series(seconds: i64, lag: impl Fn(i64) -> Option<i64>) -> Series {
        let mut s = Series::default();
        for i in 0..seconds {
            s.push(Point { at_ms: i * 1000, lag: lag(i), processed: i as u64 * 50 });
        }
        s
    }

    #[test]
    fn charts_are_bounded_and_keep_rate_and_peak_lag() {
        let s = series(2 * 86_400, |i| Some(if i % 600 == 0 { 9_000 } else { 10 }));
        assert_eq!((s.fine.len(), s.coarse.len()), (FINE_KEPT, COARSE_KEPT), "bounded however long it runs");
        for range in Range::ALL {
            let chart = s.chart(range);
            assert!(
                chart.points.len() <= DRAWN && chart.points.len() >= DRAWN / 2,
                "{range:?}: {}",
                chart.points.len()
            );
            assert!(chart.points.iter().all(|p| p.rate == Some(50.0)), "{range:?}: the rate survives bucketing");
        }
        let day = s.chart(Range::Day);
        assert!(day.points.iter().any(|p| p.lag == Some(9_000)), "a peak is kept, not averaged away");
        assert!((280.0..300.0).contains(&day.step_s), "a day in 300 points: {}", day.step_s);
        assert_eq!(s.chart(Range::TenMinutes).step_s, 2.0);
    }

    #[test]
    fn the_drain_is_read_from_the_last_minute() {
        assert_eq!(series(120, |i| Some(12_000 - i * 100)).drain(), Drain::Draining { seconds: 1, per_second: 100.0 });
        let falling = series(120, |i| Some(24_000 - i * 100)).drain();
        assert_eq!(falling, Drain::Draining { seconds: 121, per_second: 100.0 });
        assert_eq!(series(120, |i| Some(100 + i * 5)).drain(), Drain::NotDraining { growing_per_second: 5.0 });
        assert_eq!(series(120, |_| Some(0)).drain(), Drain::CaughtUp);
        assert_eq!(series(10, |i| Some(1_000 - i)).drain(), Drain::Unknown, "under half a minute kept");
        assert_eq!(series(120, |_| None).drain(), Drain::Unknown);
        assert_eq!(Series::default().chart(Range::Hour).points, Vec::new());
    }
}
