//! A registry format's records, decoded before anything runs: each
//! pending record's writer schema fetched if the handler has not met it.
//! The registry's outage is the lane's wait, like the database's: the
//! record is not attempted, not dead-lettered, and its offset not
//! committed; other lanes and handlers do not wait with it (each fetch is
//! its own request, under `[registry] timeout_ms`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Worker;

/// The first wait after a failed fetch; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(250);
const MAX_WAIT: Duration = Duration::from_secs(5);

impl Worker {
    /// Validates every pending record not validated yet, fetching writer
    /// schemas as needed; `false`: the partition was stopped meanwhile.
    pub(super) async fn decode_pending(&mut self) -> bool {
        let (shared, state) = (self.shared.clone(), self.state.clone());
        for taken in self.pending.iter_mut().filter(|t| t.event.is_none()) {
            let mut wait = FIRST_WAIT;
            let mut waiting = None;
            loop {
                let Some(checked) = state.until_stopped(shared.validator.check(&taken.record)).await else {
                    return false;
                };
                match checked {
                    Ok(result) => {
                        taken.event = Some(result.map(std::sync::Arc::new));
                        break;
                    }
                    Err(outage) => {
                        if waiting.is_none() {
                            tracing::warn!(
                                handler = %shared.name, topic = %state.topic, partition = state.partition,
                                offset = taken.record.offset, "{outage}: the record waits"
                            );
                            waiting = Some(Waiting::new(&shared.stats.registry_waiting));
                        }
                        if state.until_stopped(tokio::time::sleep(wait)).await.is_none() {
                            return false;
                        }
                        wait = (wait * 2).min(MAX_WAIT);
                    }
                }
            }
        }
        true
    }
}

/// One lane counted in `idem_registry_waiting` while it lives.
struct Waiting<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Waiting<'a> {
    fn new(gauge: &'a std::sync::atomic::AtomicU64) -> Self {
        gauge.fetch_add(1, Ordering::SeqCst);
        Self(gauge)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
