//! Records routed to their partition's worker, fetching paused while a
//! queue is full, offset resets reported, committed offsets looked up.

use super::*;

/// Records one handler's queues may hold in all before its partitions'
/// fetching pauses, shared among its busy partitions (those holding
/// records, or paused full): a partition's queue pauses at its share,
/// 2,000 to 10,000 records, and resumes at half of it. Resuming early is
/// what keeps a busy partition's worker fed: librdkafka's fetcher notices a resume only when its broker thread next
/// wakes on its own (a resume does not wake it: up to a second, 0.35 to
/// 0.45 s measured here), and a pause drops what it had fetched ahead. With
/// 2,000 and 500 the benchmark's workers waited for records a third of
/// their time; with 10,000 and 5,000 they did not, and the drain ran 1.5
/// times as fast. The share shrinks as partitions get busy: up to 30 busy
/// partitions a handler holds about 60,000 records, past that 2,000 per
/// busy partition (or 16 MiB each, whichever comes first). Shared among
/// the busy ones, not the assigned ones, so one hot partition among a
/// hundred quiet ones gets 10,000, not 2,000, and is not starved the same
/// way. (A partition filled while few were busy holds more than its new
/// share until its worker drains it: at most 60,000 records more in all.)
const HANDLER_RECORDS: usize = 60_000;
const PAUSE_AT_LEAST: usize = 2_000;
const PAUSE_AT_MOST: usize = 10_000;
/// The same in bytes: records of 1 MB on many partitions must not exhaust
/// memory.
const PAUSE_AT_BYTES: usize = 16 << 20;
const RESUME_AT_BYTES: usize = 8 << 20;

/// The queue length at which each of `partitions` busy partitions pauses
/// (see [`HANDLER_RECORDS`]).
fn pause_at(partitions: usize) -> usize {
    (HANDLER_RECORDS / partitions.max(1)).clamp(PAUSE_AT_LEAST, PAUSE_AT_MOST)
}

/// The queue length at which partitions pause, given each one's queue
/// length and whether it is paused full: a share among the busy ones.
fn pause_at_among(queues: impl Iterator<Item = (usize, bool)>) -> usize {
    pause_at(queues.filter(|&(queued, full)| queued > 0 || full).count())
}

/// The topic and partition of librdkafka's "offset reset" log line.
fn reset_partition(message: &str) -> Option<(&str, i32)> {
    let (head, _) = message.split_once(": offset reset (at ")?;
    let (left, partition) = head.rsplit_once(" [")?;
    let partition = partition.strip_suffix(']')?.parse().ok()?;
    Some((left.rsplit("]: ").next().unwrap_or(left), partition))
}

/// Whether a partition's fetching should be paused (`Some(true)`) or
/// resumed (`Some(false)`), given its queue in records and bytes and the
/// length it pauses at.
fn pause_change(paused: bool, (queued, bytes): (usize, usize), pause_at: usize) -> Option<bool> {
    if !paused && (queued >= pause_at || bytes >= PAUSE_AT_BYTES) {
        Some(true)
    } else if paused && queued <= pause_at / 2 && bytes <= RESUME_AT_BYTES {
        Some(false)
    } else {
        None
    }
}

impl IdemContext {
    /// Hands `record` to its partition's worker.
    pub(crate) fn route(&self, record: Record) {
        let state = self.partitions().get(&(record.topic.clone(), record.partition)).cloned();
        let Some(state) = state else {
            // Not ours (any more): leave it uncommitted for the owner.
            tracing::debug!(topic = %record.topic, partition = record.partition, offset = record.offset, "record for an unassigned partition dropped");
            return;
        };
        Stats::add(&self.shared.stats.delivered);
        state.start().first.get_or_insert(record.offset);
        self.report_reset(&state);
        state.push(record);
    }

    /// Logs how `state` started, once it is known. A new group starting at
    /// `auto.offset.reset` is ordinary (info); a partition that did not
    /// resume at its committed offset (out of range after retention, a
    /// reset by hand) skipped or repeated records: a warning, counted.
    fn report_reset(&self, state: &PartitionState) {
        let Some(reset) = state.start().check() else { return };
        let (handler, topic, partition) = (&self.shared.name, &state.topic, state.partition);
        match reset {
            Reset::NoCommittedOffset => tracing::info!(
                %handler, %topic, partition, reset = %self.reset_policy,
                "no committed offset for this group: starting at auto.offset.reset"
            ),
            Reset::Moved { committed, resumed_at } => {
                tracing::warn!(
                    %handler, %topic, partition, committed, resumed_at,
                    "offset reset: the partition did not resume at its committed offset"
                );
                Stats::add(&self.shared.stats.offset_resets);
            }
        }
    }

    /// An offset reset librdkafka made in the middle of an assignment (the
    /// fetch position fell out of range, e.g. retention deleted records
    /// before they were fetched): records between were skipped and will
    /// never be processed. librdkafka reports it only in its log, as
    /// `<topic> [<partition>]: offset reset (at …) to …`. A reset before the
    /// partition's first record is left to the start check (`report_reset`).
    pub(super) fn note_offset_reset(&self, message: &str) {
        let Some((topic, partition)) = reset_partition(message) else { return };
        let Some(state) = self.partitions().get(&(topic.to_owned(), partition)).cloned() else { return };
        if state.start().first.is_none() {
            return;
        }
        tracing::error!(
            handler = %self.shared.name, %topic, partition,
            "offset reset in the middle of the assignment: records between were skipped and will not be \
             processed ({message})"
        );
        Stats::add(&self.shared.stats.offset_resets);
    }

    /// Looks up the committed offsets of partitions assigned since the last
    /// call; a partition without one starts at `auto.offset.reset`.
    pub(crate) fn look_up_starts(&self, consumer: &HandlerConsumer) {
        if !self.lookups_pending.swap(false, Ordering::SeqCst) {
            return;
        }
        let fresh: Vec<Arc<PartitionState>> =
            self.states().into_iter().filter(|s| s.start().committed.is_none()).collect();
        if fresh.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for s in &fresh {
            tpl.add_partition(&s.topic, s.partition);
        }
        let committed = match consumer.committed_offsets(tpl, Duration::from_secs(10)) {
            Ok(tpl) => tpl,
            Err(e) => {
                tracing::warn!(handler = %self.shared.name, "failed to read committed offsets: {e}");
                self.lookups_pending.store(true, Ordering::SeqCst);
                return;
            }
        };
        for s in &fresh {
            let offset = match committed.find_partition(&s.topic, s.partition).map(|e| e.offset()) {
                Some(Offset::Offset(n)) => Some(n),
                _ => None,
            };
            s.start().committed = Some(offset);
            self.report_reset(s);
        }
    }

    /// Pauses the fetching of partitions whose queue is long or that an
    /// operator paused ([`crate::pipeline::pauses`]), resumes the others.
    pub(crate) fn flow_control(&self, consumer: &HandlerConsumer) {
        let states = self.states();
        let pause_at = pause_at_among(
            states.iter().map(|s| (s.queued.load(Ordering::SeqCst), s.full.load(Ordering::SeqCst))),
        );
        for state in states {
            let held = self.shared.pauses.holds(&self.shared.name, &state.topic, state.partition);
            state.hold(held);
            let queued = state.queued.load(Ordering::SeqCst);
            let bytes = state.queued_bytes.load(Ordering::SeqCst);
            let was_full = state.full.load(Ordering::SeqCst);
            let full = pause_change(was_full, (queued, bytes), pause_at).unwrap_or(was_full);
            state.full.store(full, Ordering::SeqCst);
            if full && !was_full {
                Stats::add(&self.shared.stats.pauses);
            }
            let pause = full || held;
            // The first pass tells librdkafka either way: a partition held
            // from its assignment must have its fetching paused, whatever
            // `paused` assumed.
            if pause == state.paused.load(Ordering::SeqCst) && state.told.load(Ordering::SeqCst) {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&state.topic, state.partition);
            let result = if pause { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
            match result {
                Ok(()) => {
                    state.paused.store(pause, Ordering::SeqCst);
                    state.told.store(true, Ordering::SeqCst);
                }
                Err(e) => tracing::warn!("failed to pause/resume {}/{}: {e}", state.topic, state.partition),
            }
        }
    }

    /// Every assigned partition is resolved up to its high watermark, as
    /// `probe` (a client of its own: its broker round trips never hold up
    /// the polling thread) sees them. A partition that ends in a control
    /// record (transaction marker) never counts as drained.
    pub(crate) fn drained(&self, probe: &BaseConsumer<crate::kafka_client::ProbeContext>) -> bool {
        let states = self.states();
        if states.is_empty() {
            return false;
        }
        states.iter().all(|s| {
            if s.is_busy() || s.queued.load(Ordering::SeqCst) > 0 || !s.tracker().is_settled() {
                return false;
            }
            let Ok((low, high)) = probe.fetch_watermarks(&s.topic, s.partition, Duration::from_secs(5)) else {
                return false;
            };
            // A partition that delivered nothing yet is drained if its
            // committed offset is exactly the end (one past it is out of
            // range: librdkafka is about to reset and deliver).
            let committed = s.start().committed.flatten();
            high == low || s.tracker().position().is_some_and(|p| p >= high) || committed == Some(high)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{PAUSE_AT_BYTES, RESUME_AT_BYTES, pause_at, pause_at_among, pause_change, reset_partition};

    #[test]
    fn librdkafkas_offset_reset_line_names_its_partition() {
        let line = "[thrd:127.0.0.1:40001/bootstrap]: orders.v1 [3]: offset reset (at offset 80 (leader epoch 0), \
                    broker 1) to offset 125 (leader epoch -1): fetch failed due to requested offset not available \
                    on the broker: Broker: Offset out of range";
        assert_eq!(reset_partition(line), Some(("orders.v1", 3)));
        assert_eq!(
            reset_partition("orders.v1 [0]: offset reset (at offset 1, broker 1) to BEGINNING"),
            Some(("orders.v1", 0))
        );
        assert_eq!(reset_partition("something else"), None);
    }

    #[test]
    fn a_queue_is_bounded_in_bytes_as_well_as_in_records() {
        let at = pause_at(6);
        assert_eq!(pause_change(false, (20, 20 << 20), at), Some(true), "20 records of 1 MB pause the partition");
        assert_eq!(pause_change(false, (at, 0), at), Some(true));
        assert_eq!(pause_change(false, (at - 1, 0), at), None);
        assert_eq!(pause_change(true, (3, RESUME_AT_BYTES + 1), at), None, "few records, still too many bytes");
        assert_eq!(pause_change(true, (3, 1 << 10), at), Some(false));
        assert_eq!(pause_change(false, (10, PAUSE_AT_BYTES - 1), at), None);
    }

    #[test]
    fn a_queue_resumes_at_half_its_bound_and_the_bound_is_a_share_of_the_handlers() {
        assert_eq!(pause_at(6), 10_000, "few partitions: the most each");
        assert_eq!(pause_at(60), 2_000, "many: the least each");
        assert_eq!(pause_at(12), 5_000, "a share of 60,000 in between");
        assert_eq!(pause_at(0), 10_000);
        let one_hot = (0..100).map(|p| (if p == 7 { 4_000 } else { 0 }, false));
        assert_eq!(pause_at_among(one_hot), 10_000, "one busy partition among 100: the most");
        let all_busy = (0..100).map(|p| (if p == 7 { 0 } else { 10 }, p == 7));
        assert_eq!(pause_at_among(all_busy), 2_000, "100 busy (one of them paused full, empty): the least");
        assert_eq!(pause_at_among((0..12).map(|_| (1, false))), 5_000);
        let at = pause_at(6);
        assert_eq!(pause_change(true, (at / 2 + 1, 0), at), None, "still more than half full");
        assert_eq!(pause_change(true, (at / 2, 0), at), Some(false), "resumed while half its records remain");
    }
}
