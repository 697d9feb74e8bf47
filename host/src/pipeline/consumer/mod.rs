//! One handler's Kafka consumer: its state, what it does when partitions
//! are assigned and revoked; librdkafka's calls into it (`context`), its
//! commits (`commits`), and the routing of records and flow control (`flow`).
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

mod commits;
mod context;
mod flow;
mod native;
mod rewind;

use commits::nothing_new;
pub(crate) use commits::{Positions, commit, settle, unconfirmed};
pub(crate) use context::{Ctx, HandlerConsumer};

use super::HandlerContext;
use super::partition::{PartitionState, Reset};
use super::stall::StallWatch;
use crate::stats::Stats;
use crate::validate::Record;

type Key = (String, i32);

/// How long a revocation waits for the revoked partitions' in-flight events
/// before it lets them go. Short, because the wait blocks routing and
/// commits of the partitions the handler keeps. An event still running
/// then is abandoned, not committed: the partition's next owner redelivers
/// it, and its claim waits on this execution's uncommitted claim row, so it
/// finds a duplicate if this execution commits and runs the event if it
/// rolls back. Dedup absorbs the overlap; nothing runs twice.
pub(crate) const REVOKE_GRACE: Duration = Duration::from_millis(250);

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
    /// Each assigned partition's low watermark as the last statistics said
    /// (the earliest offset kept: a rewind never seeks before it).
    lows: Mutex<std::collections::BTreeMap<(String, i32), i64>>,
    /// Shutting down: an assignment that arrives now starts no worker.
    pub(crate) closing: AtomicBool,
    /// Client errors an outage repeats on every poll, said once a while.
    pub(crate) repeats: crate::repeats::Repeats,
    /// Its signs of health, for the polling thread (`stall`).
    pub(crate) stall: Mutex<StallWatch>,
    /// Its signs of health are hidden (`faults::silent_consumer`).
    silent: bool,
    /// The rewinds it applied, by (rewind, partition) (`rewind`).
    rewound: Mutex<std::collections::HashSet<(i64, i32)>>,
    /// Those whose offset's commit is not confirmed yet (`rewind`).
    unconfirmed: Mutex<Vec<rewind::Unconfirmed>>,
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
        let silent = super::faults::silent_consumer(&shared.name);
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
            lows: Mutex::default(),
            closing: AtomicBool::new(false),
            repeats: Default::default(),
            stall: Mutex::new(StallWatch::new(Instant::now())),
            silent,
            rewound: Mutex::default(),
            unconfirmed: Mutex::default(),
        }
    }

    fn partitions(&self) -> MutexGuard<'_, HashMap<Key, Arc<PartitionState>>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current assignment's states (a snapshot; the lock is not held).
    pub(crate) fn states(&self) -> Vec<Arc<PartitionState>> {
        self.partitions().values().cloned().collect()
    }

    /// A paused partition's end as looked up (`pipeline::ends`), for its
    /// lag: only ever raised (a lookup answered after a resume may be
    /// older than the statistics' end); a partition no longer assigned
    /// keeps what it had.
    pub(crate) fn paused_end(&self, topic: &str, partition: i32, end: i64) {
        let mut watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = watermarks.get_mut(&(topic.to_owned(), partition))
            && end >= 0
        {
            *known = (*known).max(end);
        }
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

    /// A new state for `topic`/`partition`, its workers started (one per
    /// lane), held from its first record if an operator paused it.
    fn start_partition(&self, topic: &str, partition: i32) -> Arc<PartitionState> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let config = &self.shared.config;
        let (state, queues) = PartitionState::with_lanes(topic, partition, config.ordering, config.lanes());
        tracing::debug!(topic, partition, generation, lanes = queues.len(), "partition worker started");
        state.hold(self.shared.pauses.holds(&self.shared.name, topic, partition));
        for (lane, queue) in queues.into_iter().enumerate() {
            self.start_worker(&state, lane, queue);
        }
        state
    }

    fn assign(&self, tpl: &TopicPartitionList) {
        if self.closing.load(Ordering::SeqCst) {
            tracing::debug!(handler = %self.shared.name, partitions = ?keys(tpl), "assigned while shutting down: not started");
            return;
        }
        Stats::add(&self.shared.stats.rebalances);
        let started: Vec<_> =
            tpl.elements().iter().map(|e| (e.topic().to_owned(), self.start_partition(e.topic(), e.partition()))).collect();
        let mut map = self.partitions();
        for (topic, state) in started {
            map.insert((topic, state.partition), state);
        }
        drop(map);
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

fn keys(tpl: &TopicPartitionList) -> Vec<String> {
    tpl.elements().iter().map(|e| format!("{}/{}", e.topic(), e.partition())).collect()
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
