//! A Prometheus histogram: fixed upper bounds, one atomic counter each, so
//! observing is a few relaxed atomic adds and never takes a lock.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds (`le`), ascending; `+Inf` is implied.
    bounds: &'static [f64],
    /// Observations ≤ each bound (not cumulative), then the overflow.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum, an `f64` in its bits (a compare-and-swap adds to it: it
    /// never wraps, whatever is observed).
    sum: AtomicU64,
}

/// Seconds, from 1 ms to 2 minutes.
pub const SECONDS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];
/// Events per batch.
pub const EVENTS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10000.0];

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    pub fn observe(&self, value: f64) {
        let value = if value.is_finite() { value.max(0.0) } else { 0.0 };
        let i = self.bounds.iter().position(|b| value <= *b).unwrap_or(self.bounds.len());
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some((f64::from_bits(bits) + value).to_bits()));
    }

    pub fn observe_duration(&self, d: std::time::Duration) {
        self.observe(d.as_secs_f64());
    }

    /// The cumulative count per bound, then `+Inf`'s (the count).
    pub fn cumulative(&self) -> Vec<u64> {
        let mut total = 0;
        self.buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect()
    }

    /// The upper bounds (`+Inf` implied after them).
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// `(le, cumulative count)` per bound, then `+Inf`; the count; the sum.
    pub fn snapshot(&self) -> (Vec<(String, u64)>, u64, f64) {
        let mut cumulative = 0;
        let mut out = Vec::with_capacity(self.buckets.len());
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            out.push((le, cumulative));
        }
        // +Inf equals the count by construction; read it from the buckets so
        // that a scrape never shows a count below a bucket.
        let count = cumulative;
        (out, count, f64::from_bits(self.sum.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_at_the_count() {
        let h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 3.0, f64::NAN] {
            h.observe(v);
        }
        let (buckets, count, sum) = h.snapshot();
        assert_eq!(buckets, vec![("0.1".into(), 3), ("1".into(), 4), ("+Inf".into(), 5)]);
        assert_eq!(count, 5);
        assert!((sum - 3.65).abs() < 1e-6, "{sum}");
    }
}
