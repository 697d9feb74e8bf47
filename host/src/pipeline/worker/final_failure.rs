//! What becomes of a record whose failure is final: the DLQ takes it, or
//! with `on_failure = "block"` the partition stops at it.
//!
//! A record is always resolved in bounded time unless an operator must act,
//! and then it says so at error level and in a metric:
//! - the DLQ is unavailable (an outage): retried, no attempt spent;
//! - the DLQ refuses *this record* (too large with idem's headers, invalid):
//!   its bounded envelope is written instead (`dlq::envelope`);
//! - the DLQ refuses *every record* (the topic is gone, not authorised):
//!   the partition waits, retrying with the handler's backoff up to
//!   [`REFUSED_RETRY`] apart, each time with
//!   an error and `idem_dlq_refused_total` one up, until an operator
//!   restores the topic or its ACLs; then it proceeds by itself.

use std::time::Duration;

use super::decide::MAX_OUTAGE_BACKOFF;
use crate::pipeline::HandlerContext;
use crate::pipeline::dlq::{Failure, Refusal};
use crate::pipeline::partition::PartitionState;
use crate::stats::Stats;
use crate::validate::Record;

/// The longest wait between tries of a partition whose DLQ refuses everything.
const REFUSED_RETRY: Duration = Duration::from_secs(30);

/// Resolves a final failure; `false`: the partition stopped first.
pub(super) async fn resolve(
    shared: &HandlerContext,
    state: &PartitionState,
    record: &Record,
    failure: Failure,
) -> bool {
    let (name, stats) = (&shared.name, &shared.stats);
    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
    stats.note_failure(crate::stats::FailureNote {
        at: chrono::Utc::now(),
        topic: topic.clone(),
        partition,
        offset,
        class: failure.class.as_str(),
        reason: failure.reason.clone(),
        attempts: failure.attempts,
    });
    let Some(dead_letters) = &shared.dead_letters else {
        tracing::error!(
            handler = %name, %topic, partition, offset, class = failure.class.as_str(), reason = %failure.reason,
            "on_failure = block: the partition stops at this record; nothing after it is processed or committed \
             until it is resolved and idem restarted"
        );
        Stats::add(&stats.blocked);
        state.until_stopped(std::future::pending::<()>()).await;
        return false;
    };
    // The module that failed it: the canary's when its execution did,
    // though the canary may have ended since.
    let module = shared.slot.module_of(failure.version);
    let (mut outages, mut refusals, mut envelope): (u32, u32, Option<String>) = (0, 0, None);
    loop {
        let sent = match &envelope {
            None => dead_letters.send(record, &failure, &module).await,
            Some(why) => dead_letters.send_envelope(record, &failure, &module, why).await,
        };
        let wait = match sent {
            Ok(entry) => {
                dead_lettered(shared, record, &failure, &entry, envelope.is_some()).await;
                return true;
            }
            Err(Refusal::Record(why)) if envelope.is_none() => {
                tracing::error!(
                    handler = %name, %topic, partition, offset, dlq = %dead_letters.topic,
                    "{why}: writing its envelope instead (position, key, hashes and a prefix of the value)"
                );
                envelope = Some(why);
                continue;
            }
            Err(refusal @ (Refusal::Record(_) | Refusal::Topic(_))) => {
                refusals += 1;
                let wait = shared.config.backoff(refusals).min(REFUSED_RETRY);
                tracing::error!(
                    handler = %name, %topic, partition, offset, dlq = %dead_letters.topic,
                    retry_in_ms = wait.as_millis() as u64,
                    "{refusal}: the partition waits at this record until the DLQ topic takes it (restore the topic \
                     or its ACLs, or raise its max.message.bytes)"
                );
                Stats::add(&stats.dlq_refused);
                wait
            }
            Err(Refusal::Outage(e)) => {
                outages += 1;
                tracing::warn!(handler = %name, %topic, partition, offset, outages, "{e}; retrying (the partition does not advance)");
                Stats::add(&stats.unavailable);
                shared.config.backoff(outages).min(MAX_OUTAGE_BACKOFF)
            }
        };
        if !state.sleep(wait).await {
            return false;
        }
    }
}

/// A record the DLQ topic acknowledged (`enveloped`: as its envelope):
/// indexed, logged, counted. The record is in the topic: a row the index
/// misses is found by `idem dlq reindex`.
async fn dead_lettered(
    shared: &HandlerContext,
    record: &Record,
    failure: &Failure,
    entry: &crate::pipeline::dlq::index::Entry,
    enveloped: bool,
) {
    let (name, stats) = (&shared.name, &shared.stats);
    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
    let dlq = &entry.at.topic;
    if let Err(e) = crate::pipeline::dlq::index::write(&shared.idem_pool, entry).await {
        tracing::warn!(
            handler = %name, %topic, partition, offset, %dlq,
            "the dead letter is not in idem.dead_letter ({e}): `idem dlq reindex` adds it"
        );
    }
    let what = if enveloped { "record dead-lettered as an envelope" } else { "record dead-lettered" };
    tracing::warn!(handler = %name, %topic, partition, offset, class = failure.class.as_str(), %dlq, "{what}");
    Stats::add(&stats.dead_lettered);
    if enveloped {
        Stats::add(&stats.enveloped);
    }
}
