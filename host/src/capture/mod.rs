//! `[handler.capture]`: a sample of a handler's live events kept with
//! everything the handler got from the world while it ran them (each
//! statement's answer, each HTTP answer: `capabilities::tape`), redacted
//! (`redact`), in `idem.capture`, so that `idem test --replay` can run a
//! new version against real traffic with no database or network.
//!
//! The executor asks [`Capturing::sampled`] before an invocation (a tape
//! costs the events not sampled nothing) and hands the capture to
//! [`Capturing::keep`] after it; redaction and the write happen on a task
//! of their own, behind a bounded queue: when the database is slower than
//! the sample, captures are dropped (and counted), never waited for.

pub mod record;
mod redact;
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;
use uuid::Uuid;

pub use record::{Capture, CapturedEmit, CapturedEvent, Outcome};
pub use redact::Redaction;
pub use store::{Pruning, latest};

/// Captures waiting for the writer, at most (each at most
/// `tape::MAX_RECORDED_BYTES` besides its event).
const QUEUE: usize = 64;

/// A handler's capture: which events, how redacted, where they go.
#[derive(Debug)]
pub struct Capturing {
    handler: String,
    /// An event is sampled when its id's random bits fall below this.
    threshold: u64,
    redaction: Redaction,
    queue: mpsc::Sender<Capture>,
    /// Captures dropped because the writer was behind.
    pub dropped: AtomicU64,
}

impl Capturing {
    /// `handler`'s capture writing through `pool` (the host's), or `None`
    /// when it samples nothing. Spawns the writer.
    pub fn start(pool: sqlx::PgPool, handler: &crate::config::HandlerConfig) -> anyhow::Result<Option<Arc<Self>>> {
        let settings = &handler.capture;
        let pruning = Pruning { retention: settings.retention.0, max_events: settings.max_events };
        if settings.sample <= 0.0 {
            // What it captured before keeps its retention all the same.
            let (pool, name) = (pool.clone(), handler.name.clone());
            tokio::spawn(async move {
                if let Err(e) = store::prune(&pool, &name, pruning).await {
                    tracing::warn!(handler = %name, "old captures were not pruned: {e}");
                }
            });
            return Ok(None);
        }
        // The credentials the host injects never appear in a capture, even
        // when a destination echoes them back.
        let credentials = crate::capabilities::http::HttpPolicy::of(&handler.http, handler.limits.max_http_requests)
            .credentials
            .into_iter()
            .map(|c| c.value)
            .collect();
        let redaction = Redaction::new(&settings.redact, &settings.redact_headers)
            .map_err(|e| anyhow::anyhow!("capture: {e}"))?
            .with_secrets(credentials);
        let (queue, captures) = mpsc::channel(QUEUE);
        let capturing = Arc::new(Self {
            handler: handler.name.clone(),
            threshold: threshold(settings.sample),
            redaction,
            queue,
            dropped: AtomicU64::new(0),
        });
        tokio::spawn(store::write(pool, Arc::downgrade(&capturing), captures, pruning));
        Ok(Some(capturing))
    }

    /// Whether `id`'s event is captured: its last 8 bytes (random in a
    /// UUID v7) below the share, the same answer on every host.
    pub fn sampled(&self, id: &Uuid) -> bool {
        let mut low = [0u8; 8];
        low.copy_from_slice(&id.as_bytes()[8..]);
        u64::from_be_bytes(low) & RANDOM_BITS < self.threshold
    }

    /// Queues `capture` for redaction and storage; drops it when the
    /// writer is behind.
    pub fn keep(&self, capture: Capture) {
        if self.queue.try_send(capture).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A sampled event's capture outgrew what one may hold (its
    /// exchanges, its size, its redacted values): not kept.
    pub fn too_large(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(handler = %self.handler, "a captured event holds more than a capture keeps: dropped");
    }

    pub fn handler(&self) -> &str {
        &self.handler
    }
}

/// The bits of a UUID v7's last 8 bytes that are random (the variant's 2
/// are not).
const RANDOM_BITS: u64 = (1 << 62) - 1;

/// `sample` of [`RANDOM_BITS`]'s range (1 takes every id).
fn threshold(sample: f64) -> u64 {
    if sample >= 1.0 { u64::MAX } else { (sample * (1u64 << 62) as f64) as u64 }
}
