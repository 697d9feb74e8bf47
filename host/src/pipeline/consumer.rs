//! One handler's Kafka consumer: its rebalance hooks and the thread that
//! polls it.
//!
//! The consumer is owned by a dedicated blocking thread, and every call on it
//! happens there: polling, routing records to partition queues, pausing and
//! resuming, committing. rust-rdkafka runs rebalance callbacks inside `poll`,
//! so they run on that thread too, and while one waits no partition of the
//! handler is fed or committed: a revocation waits only [`REVOKE_GRACE`] for
//! the revoked partitions' in-flight events.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Headers as _, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use tokio::sync::mpsc;

use super::HandlerContext;
use super::partition::{PartitionState, Reset};
use super::stall::StallWatch;
use crate::stats::Stats;
use crate::validate::Record;

/// Queue length at which a partition's fetching is paused, and resumed.
const PAUSE_AT: usize = 2_000;
const RESUME_AT: usize = 500;
/// The same in bytes: 2,000 records of 1 MB on many partitions must not
/// exhaust memory.
const PAUSE_AT_BYTES: usize = 16 << 20;
const RESUME_AT_BYTES: usize = 4 << 20;

type Key = (String, i32);

/// How long a revocation waits for the revoked partitions' in-flight events
/// before it lets them go. Short, because the wait blocks routing and
/// commits of the partitions the handler keeps. An event still running
/// then is abandoned, not committed: the partition's next owner redelivers
/// it, and its claim waits on this execution's uncommitted claim row, so it
/// finds a duplicate if this execution commits and runs the event if it
/// rolls back. Dedup absorbs the overlap; nothing runs twice.
pub(crate) const REVOKE_GRACE: Duration = Duration::from_millis(250);

/// The topic and partition of librdkafka's "offset reset" log line.
fn reset_partition(message: &str) -> Option<(&str, i32)> {
    let (head, _) = message.split_once(": offset reset (at ")?;
    let (left, partition) = head.rsplit_once(" [")?;
    let partition = partition.strip_suffix(']')?.parse().ok()?;
    Some((left.rsplit("]: ").next().unwrap_or(left), partition))
}

/// Whether a partition's fetching should be paused (`Some(true)`) or
/// resumed (`Some(false)`), given its queue in records and bytes.
fn pause_change(paused: bool, queued: usize, bytes: usize) -> Option<bool> {
    if !paused && (queued >= PAUSE_AT || bytes >= PAUSE_AT_BYTES) {
        Some(true)
    } else if paused && queued <= RESUME_AT && bytes <= RESUME_AT_BYTES {
        Some(false)
    } else {
        None
    }
}

pub(crate) struct IdemContext {
    shared: Arc<HandlerContext>,
    partitions: Mutex<HashMap<Key, Arc<PartitionState>>>,
    generation: AtomicU64,
    runtime: tokio::runtime::Handle,
    /// How long a revocation waits for in-flight events before abandoning them.
    revoke_grace: Duration,
    /// `auto.offset.reset`, for the log of a reset.
    reset_policy: String,
    /// Partitions were assigned whose committed offsets are not looked up yet.
    lookups_pending: AtomicBool,
    /// The group gave this consumer an assignment (possibly empty) at least once.
    pub(crate) joined: AtomicBool,
    /// Every partition ever assigned, with its high watermark as the last
    /// statistics said (-1 unknown): metrics report revoked ones as such.
    pub(crate) watermarks: Mutex<std::collections::BTreeMap<(String, i32), i64>>,
    /// Shutting down: an assignment that arrives now starts no worker.
    pub(crate) closing: AtomicBool,
    /// Client errors an outage repeats on every poll, said once a while.
    pub(crate) repeats: crate::repeats::Repeats,
    /// Its signs of health, for the polling thread (`stall`).
    pub(crate) stall: Mutex<StallWatch>,
}

impl IdemContext {
    pub(crate) fn new(
        shared: Arc<HandlerContext>,
        runtime: tokio::runtime::Handle,
        revoke_grace: Duration,
        reset_policy: String,
    ) -> Self {
        let (partitions, generation) = (Mutex::new(HashMap::new()), AtomicU64::new(0));
        let lookups_pending = AtomicBool::new(false);
        Self {
            shared,
            partitions,
            generation,
            runtime,
            revoke_grace,
            reset_policy,
            lookups_pending,
            joined: AtomicBool::new(false),
            watermarks: Mutex::default(),
            closing: AtomicBool::new(false),
            repeats: Default::default(),
            stall: Mutex::new(StallWatch::new(Instant::now())),
        }
    }

    fn partitions(&self) -> MutexGuard<'_, HashMap<Key, Arc<PartitionState>>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current assignment's states (a snapshot; the lock is not held).
    pub(crate) fn states(&self) -> Vec<Arc<PartitionState>> {
        self.partitions().values().cloned().collect()
    }

    /// Forgets the assignment, at shutdown once its positions are
    /// committed: the revocation the consumer's close causes then has
    /// nothing to wait for or commit.
    pub(crate) fn release_all(&self) {
        self.partitions().clear();
    }

    /// The handler whose consumer this is.
    pub(crate) fn handler(&self) -> &HandlerContext {
        &self.shared
    }

    /// Starts the worker of `state`'s `lane`, and watches it: a worker that
    /// panics must not leave a partition silently dead while the consumer
    /// keeps fetching into its queue: it is the handler's incident, loudly
    /// (its consumer is made again), and nothing past the record is committed.
    fn start_worker(&self, state: &Arc<PartitionState>, lane: usize, queue: mpsc::UnboundedReceiver<Record>) {
        let worker = super::worker::Worker::new(self.shared.clone(), state.clone(), lane, queue);
        let worker = self.runtime.spawn(worker.work());
        let (shared, watched) = (self.shared.clone(), state.clone());
        self.runtime.spawn(async move {
            if let Err(e) = worker.await
                && e.is_panic()
            {
                watched.worker_died(lane);
                let (topic, partition) = (&watched.topic, watched.partition);
                tracing::error!(handler = %shared.name, %topic, partition, lane, "partition worker panicked: {e}");
                let account = format!("the worker of {topic}/{partition} panicked");
                shared.incident(crate::stats::IncidentKind::WorkerPanicked, account);
            }
        });
    }

    fn assign(&self, tpl: &TopicPartitionList) {
        if self.closing.load(Ordering::SeqCst) {
            tracing::debug!(handler = %self.shared.name, partitions = ?keys(tpl), "assigned while shutting down: not started");
            return;
        }
        Stats::add(&self.shared.stats.rebalances);
        let mut map = self.partitions();
        for element in tpl.elements() {
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            let config = &self.shared.config;
            let (state, queues) =
                PartitionState::with_lanes(element.topic(), element.partition(), config.ordering, config.lanes());
            tracing::debug!(
                topic = element.topic(),
                partition = element.partition(),
                generation,
                lanes = queues.len(),
                "partition worker started"
            );
            for (lane, queue) in queues.into_iter().enumerate() {
                self.start_worker(&state, lane, queue);
            }
            map.insert((element.topic().to_owned(), element.partition()), state);
        }
        self.lookups_pending.store(true, Ordering::SeqCst);
        tracing::info!(handler = %self.shared.name, partitions = ?keys(tpl), "partitions assigned");
    }

    /// Stops the revoked partitions, gives in-flight events [`REVOKE_GRACE`]
    /// to finish and commits what is done before the partitions are released.
    fn revoke(&self, consumer: &HandlerConsumer, tpl: &TopicPartitionList) {
        let revoked: Vec<Arc<PartitionState>> = {
            let mut map = self.partitions();
            tpl.elements().iter().filter_map(|e| map.remove(&(e.topic().to_owned(), e.partition()))).collect()
        };
        tracing::info!(handler = %self.shared.name, partitions = ?keys(tpl), "partitions revoked");
        if !settle(&revoked, self.revoke_grace) {
            tracing::info!(
                handler = %self.shared.name,
                "an event of a revoked partition is still in flight: it is released uncommitted, and its \
                 next owner's claim waits for this execution's outcome"
            );
        }
        if consumer.assignment_lost() {
            // The group gave these partitions to another generation (this
            // member's session ended, in a broker outage say): a commit is
            // refused, and a synchronous one waits for a coordinator that
            // may be unreachable, blocking this thread. It is still sent,
            // asynchronously: librdkafka looks the coordinator up again on
            // it, as it did on the synchronous one.
            let positions = unconfirmed(&revoked);
            if !positions.is_empty() {
                tracing::error!(
                    handler = %self.shared.name, ?positions,
                    "partitions lost (the group's session ended) with these positions' commit not confirmed: the records \
                     before them since the last confirmed commit will be redelivered (and skipped as duplicates)"
                );
            }
            commit(consumer, &revoked, CommitMode::Async, Positions::All);
            return;
        }
        commit(consumer, &revoked, CommitMode::Sync, Positions::All);
    }
}

/// The positions of `states` not yet confirmed committed, as
/// `topic/partition at Offset(n)`.
pub(crate) fn unconfirmed(states: &[Arc<PartitionState>]) -> Vec<String> {
    states
        .iter()
        .filter_map(|s| {
            s.tracker().to_recommit().map(|p| format!("{}/{} at {:?}", s.topic, s.partition, Offset::Offset(p)))
        })
        .collect()
}

fn keys(tpl: &TopicPartitionList) -> Vec<String> {
    tpl.elements().iter().map(|e| format!("{}/{}", e.topic(), e.partition())).collect()
}

/// Stops `states` and waits until none is executing an event, or
/// `timeout`. Returns whether they all finished.
pub(crate) fn settle(states: &[Arc<PartitionState>], timeout: Duration) -> bool {
    for state in states {
        state.stop();
    }
    let deadline = Instant::now() + timeout;
    while states.iter().any(|s| s.is_busy()) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Which positions a commit carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Positions {
    /// Those that moved since they were last handed to a commit.
    Moved,
    /// All of them: a periodic refresh, revocation and shutdown, so that a
    /// position whose asynchronous commit failed unseen goes out again.
    All,
}

/// Commits the resolved positions of `states`. Returns whether the broker
/// accepted them (an asynchronous commit: whether it was queued).
pub(crate) fn commit(
    consumer: &HandlerConsumer,
    states: &[Arc<PartitionState>],
    mode: CommitMode,
    which: Positions,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    let mut positions = Vec::new();
    for state in states {
        let position = match which {
            Positions::Moved => state.tracker().to_commit(),
            Positions::All => state.tracker().to_recommit(),
        };
        if let Some(position) = position {
            if let Err(e) = tpl.add_partition_offset(&state.topic, state.partition, Offset::Offset(position)) {
                tracing::warn!("cannot commit {}/{}: {e}", state.topic, state.partition);
                continue;
            }
            positions.push((state.clone(), position));
        }
    }
    if positions.is_empty() {
        return true;
    }
    match consumer.commit(&tpl, mode) {
        Ok(()) => {
            for (state, position) in positions {
                state.tracker().committed(position);
            }
            true
        }
        Err(e) if nothing_new(&e) => true,
        // Not fatal: the next commit carries the same positions, and anything
        // redelivered meanwhile is a duplicate the claim skips.
        Err(e) => {
            tracing::warn!("offset commit failed: {e}");
            false
        }
    }
}

/// librdkafka's answer to a commit of offsets it has committed already.
fn nothing_new(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::NoOffset)
}

/// A consumer's rdkafka context: a handle on its handler's [`IdemContext`].
/// A consumer rebuilt after a fatal error (KIP-848's unreleased instance
/// id, `poll_loop`) gets a new handle on the same state, so partitions,
/// counters and the metrics' tap carry over.
pub(crate) struct Ctx(pub(crate) Arc<IdemContext>);

/// A handler's Kafka consumer.
pub(crate) type HandlerConsumer = BaseConsumer<Ctx>;

impl std::ops::Deref for Ctx {
    type Target = IdemContext;
    fn deref(&self) -> &IdemContext {
        &self.0
    }
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        self.0.on_log(level, fac, message);
    }
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.0.on_stats(statistics);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(line) = self.0.repeats.client_error(&error, reason) {
            tracing::error!(target: "librdkafka", handler = %self.shared.name, "{line}");
        }
    }
}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, consumer: &HandlerConsumer, rebalance: &Rebalance<'_>) {
        self.0.on_pre_rebalance(consumer, rebalance);
    }
    fn post_rebalance(&self, _consumer: &HandlerConsumer, rebalance: &Rebalance<'_>) {
        self.0.on_post_rebalance(rebalance);
    }
    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        self.0.on_commit(result);
    }
}

impl IdemContext {
    fn on_log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::kafka_client::log(level, fac, message);
        if fac == "OFFSET" {
            self.note_offset_reset(message);
        }
    }

    /// librdkafka's statistics (`statistics.interval.ms`): each assigned
    /// partition's high watermark, for the consumer-lag metric.
    /// Membership too: a consumer whose group state is not `up` (it lost
    /// its session, was fenced) is not joined, whatever it was assigned.
    fn on_stats(&self, statistics: rdkafka::Statistics) {
        if let Some(group) = &statistics.cgrp
            && self.joined.load(Ordering::SeqCst)
            && group.state != "up"
        {
            self.joined.store(false, Ordering::SeqCst);
        }
        if statistics.cgrp.as_ref().is_some_and(|group| group.state == "up") {
            self.watch().healthy(Instant::now());
        }
        let mut watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        for (name, topic) in &statistics.topics {
            for (partition, p) in &topic.partitions {
                // Under read_committed (librdkafka's default) the end a
                // consumer can reach is the last stable offset.
                let end = if p.ls_offset >= 0 { p.ls_offset } else { p.hi_offset };
                if let Some(known) = watermarks.get_mut(&(name.clone(), *partition))
                    && end >= 0
                {
                    *known = end;
                }
            }
        }
    }

    fn on_pre_rebalance(&self, consumer: &HandlerConsumer, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => self.revoke(consumer, tpl),
            Rebalance::Error(e) => {
                self.joined.store(false, Ordering::SeqCst);
                tracing::warn!(handler = %self.shared.name, "rebalance error: {e}");
            }
            Rebalance::Assign(_) => {}
        }
    }

    fn on_post_rebalance(&self, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.watch().assigned(Instant::now());
            self.assign(tpl);
            let mut watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
            for element in tpl.elements() {
                watermarks.entry((element.topic().to_owned(), element.partition())).or_insert(-1);
            }
            drop(watermarks);
            self.joined.store(true, Ordering::SeqCst);
            // A consumer made again after an incident is in its group.
            self.shared.stats.incidents.ended();
        }
    }

    /// A failed asynchronous commit is only logged: its positions go out
    /// again with the periodic re-commit and at shutdown
    /// (`Positions::All`), which does not rely on this report arriving.
    /// A confirmed one is a sign the consumer is in its group (`stall`).
    fn on_commit(&self, result: KafkaResult<()>) {
        // Every offset was committed already: nothing was needed.
        match result.or_else(|e| if nothing_new(&e) { Ok(()) } else { Err(e) }) {
            Ok(()) => self.watch().healthy(Instant::now()),
            Err(e) => tracing::warn!(handler = %self.shared.name, "offset commit failed: {e}"),
        }
    }

    pub(crate) fn watch(&self) -> MutexGuard<'_, StallWatch> {
        self.stall.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Copies a polled message into an owned [`Record`].
pub(crate) fn record(message: &BorrowedMessage<'_>) -> Record {
    let headers = message
        .headers()
        .map(|h| h.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect())
        .unwrap_or_default();
    Record {
        topic: message.topic().to_owned(),
        partition: message.partition(),
        offset: message.offset(),
        key: message.key().map(<[u8]>::to_vec),
        payload: message.payload().map(<[u8]>::to_vec),
        headers,
        timestamp: message.timestamp().to_millis(),
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
    fn note_offset_reset(&self, message: &str) {
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

    /// Pauses partitions whose queue is long, resumes drained ones.
    pub(crate) fn flow_control(&self, consumer: &HandlerConsumer) {
        for state in self.states() {
            let queued = state.queued.load(Ordering::SeqCst);
            let bytes = state.queued_bytes.load(Ordering::SeqCst);
            let paused = state.paused.load(Ordering::SeqCst);
            let Some(pause) = pause_change(paused, queued, bytes) else { continue };
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&state.topic, state.partition);
            let result = if pause { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
            match result {
                Ok(()) => {
                    state.paused.store(pause, Ordering::SeqCst);
                    if pause {
                        Stats::add(&self.shared.stats.pauses);
                    }
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
    use super::{PAUSE_AT, PAUSE_AT_BYTES, RESUME_AT_BYTES, pause_change, reset_partition};

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
        assert_eq!(pause_change(false, 20, 20 << 20), Some(true), "20 records of 1 MB pause the partition");
        assert_eq!(pause_change(false, PAUSE_AT, 0), Some(true));
        assert_eq!(pause_change(true, 3, RESUME_AT_BYTES + 1), None, "few records, still too many bytes");
        assert_eq!(pause_change(true, 3, 1 << 10), Some(false));
        assert_eq!(pause_change(false, 10, PAUSE_AT_BYTES - 1), None);
    }
}
