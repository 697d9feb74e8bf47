//! A handler's polling thread: its consumer made from a recipe (so it can
//! be made again), the poll loop that routes records and commits, and what
//! it does with a fatal consumer error or an incident a worker reported.
//!
//! No fatal error ends the host (see `incident`): the loop closes the
//! consumer and makes a new one on the same state, after a backoff. One
//! fatal error is no incident but expected: under KIP-848 the broker
//! refuses a static member whose previous process died until its
//! `group.consumer.session.timeout.ms` runs out (UNRELEASED_INSTANCE_ID);
//! the consumer is made again every [`REJOIN_EVERY`] until the broker lets
//! the identity back in. A fence (FENCED_INSTANCE_ID) is an incident: a
//! live twin with the same identity, a client that took it, or this host's
//! own earlier session after a broker outage (its rejoin raced the
//! broker's restart) — made again, the consumer takes the identity back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::watch;

use super::HandlerContext;
use super::consumer::{self, Ctx, HandlerConsumer, IdemContext, Positions};
use super::ends::{PausedEnds, Quiet};
use super::incident::Backoff;
use super::shutdown;
use crate::config::{Config, HandlerConfig};
use crate::stats::IncidentKind;

/// Offsets resolved since the last commit are committed this often.
const COMMIT_INTERVAL: Duration = Duration::from_millis(200);

/// Every position is committed again this often: an asynchronous commit
/// refused during a rebalance may fail without a word reaching the
/// application, and must not leave its position uncommitted for good.
const RECOMMIT_INTERVAL: Duration = Duration::from_secs(5);

/// How long a refused identity waits before the consumer is made again.
const REJOIN_EVERY: Duration = Duration::from_secs(2);

/// What a handler's consumer is made of.
pub(super) struct Recipe {
    client: ClientConfig,
    /// A group-less client's properties (the handler's brokers and
    /// credentials), for the stall probe (`stalled`).
    pub(super) probe: ClientConfig,
    pub context: Arc<IdemContext>,
    topic: String,
    what: String,
    /// Its `group.instance.id`, for a fatal error's account.
    pub instance: Option<String>,
}

impl Recipe {
    pub(super) fn new(
        config: &Config,
        handler: &HandlerConfig,
        instance: Option<String>,
        shared: Arc<HandlerContext>,
    ) -> anyhow::Result<Self> {
        let mut client =
            crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Consumer)?;
        let probe = client.clone();
        client
            .set("group.id", &handler.group_id)
            .set("client.id", format!("idem-{}", handler.name))
            .set("group.protocol", handler.group_protocol.as_str())
            .set("auto.offset.reset", &handler.auto_offset_reset)
            .set("enable.partition.eof", "false");
        // Static membership (see `identity`): a restart within the session
        // timeout gets its partitions back without a rebalance.
        if let Some(instance) = &instance {
            client.set("group.instance.id", instance);
        }
        let assignor = handler.assignor.as_deref().or(handler.group_protocol.default_assignor());
        match (handler.group_protocol, assignor) {
            (crate::config::GroupProtocol::Classic, Some(a)) => client.set("partition.assignment.strategy", a),
            (crate::config::GroupProtocol::Consumer, Some(a)) => client.set("group.remote.assignor", a),
            (_, None) => &mut client,
        };
        // Each partition's high watermark reaches the lag metric this way.
        if client.get("statistics.interval.ms").is_none() {
            client.set("statistics.interval.ms", "1000");
        }
        // Last, so nothing above can turn them back on (the config check
        // refuses it anyway): librdkafka's default stores an offset as soon
        // as poll hands the message out, and auto-commit would then commit
        // unprocessed records.
        client.set("enable.auto.commit", "false").set("enable.auto.offset.store", "false");
        let revoke_grace = consumer::REVOKE_GRACE.min(Duration::from_millis(handler.timeout_ms));
        let reset = handler.auto_offset_reset.clone();
        let context = Arc::new(IdemContext::new(shared, tokio::runtime::Handle::current(), revoke_grace, reset));
        let what = format!("the Kafka consumer of handler {}", handler.name);
        Ok(Self { client, probe, context, topic: handler.topic.clone(), what, instance })
    }

    /// A consumer on the recipe's state, subscribed.
    pub(super) fn make(&self) -> anyhow::Result<HandlerConsumer> {
        let consumer: HandlerConsumer =
            crate::kafka_client::create(&self.client, Ctx(self.context.clone()), &self.what)?;
        self.context.watch().made(Instant::now());
        consumer.subscribe(&[self.topic.as_str()]).with_context(|| format!("failed to subscribe to {}", self.topic))?;
        Ok(consumer)
    }
}

/// How a polling thread ends: within `timeout` of being stopped, leaving
/// the group if `leave` is set by then.
pub(crate) struct Stopping {
    pub timeout: Duration,
    pub leave: Arc<AtomicBool>,
}

pub(super) fn poll_loop(
    recipe: &Recipe,
    mut consumer: HandlerConsumer,
    stop: watch::Receiver<bool>,
    drained: &AtomicBool,
    how: Stopping,
) {
    let ctx = recipe.context.clone();
    let mut last_commit = Instant::now();
    let mut last_recommit = Instant::now();
    let mut backoff = Backoff::default();
    super::faults::hold_poll(&stop);
    while !*stop.borrow() {
        let trouble = match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                ctx.route(consumer::record(&message));
                None
            }
            Some(Err(rdkafka::error::KafkaError::MessageConsumptionFatal(code))) => {
                let (code, reason) = consumer.client().fatal_error().unwrap_or((code, code.to_string()));
                Some(fatal(code, &reason, recipe.instance.as_deref()))
            }
            Some(Err(e)) => {
                if let Some(line) = ctx.repeats.line(&format!("poll: {e}"), format_args!("consumer error: {e}")) {
                    tracing::warn!("{line}");
                }
                None
            }
            None => None,
        };
        // A worker's report waits for this turn: the consumer is ours.
        let trouble = trouble.or_else(|| ctx.handler().taken_incident().map(|(kind, _)| Trouble::Incident(kind)));
        if let Some(trouble) = trouble {
            match remake(recipe, consumer, &stop, trouble, &mut backoff) {
                Some(again) => {
                    consumer = again;
                    continue;
                }
                // Stopped while waiting: the consumer is closed already.
                None => return,
            }
        }
        ctx.look_up_starts(&consumer);
        ctx.apply_rewinds(&consumer);
        ctx.flow_control(&consumer);
        if last_recommit.elapsed() >= RECOMMIT_INTERVAL {
            consumer::commit(&consumer, &ctx.states(), CommitMode::Async, Positions::All);
            (last_commit, last_recommit) = (Instant::now(), Instant::now());
        } else if last_commit.elapsed() >= COMMIT_INTERVAL {
            consumer::commit(&consumer, &ctx.states(), CommitMode::Async, Positions::Moved);
            last_commit = Instant::now();
        }
        if drained.load(Ordering::SeqCst) {
            tracing::info!("drained: every assigned partition is consumed to its end");
            how.leave.store(true, Ordering::SeqCst);
            break;
        }
    }
    let leave = how.leave.load(Ordering::SeqCst);
    shutdown::finish(consumer, &shutdown::Ending { deadline: Instant::now() + how.timeout, leave });
}

/// How long the stall probe waits for a broker's answer.
const PROBE_WAIT: Duration = Duration::from_secs(5);

/// Watches `recipe`'s consumer for a stall (`stall`) on a thread of its
/// own until `stop`: while the consumer is suspected, asks a broker every
/// ten seconds whether it answers and, when the member waits on a join,
/// whether its group is rebalancing (which excuses the wait); reports the
/// handler's incident when the consumer is stalled. Each probe is a new
/// client, not the consumer's (a stuck consumer's own client was seen
/// failing these requests while the broker answered others), made and
/// dropped here so that the polling thread never waits on it.
pub(super) fn watch_stall(recipe: &Recipe, group: &str, stop: &watch::Receiver<bool>) {
    let mut warned = false;
    // The same thread keeps paused partitions' ends current (`ends`).
    let mut ends = PausedEnds::new();
    while !*stop.borrow() {
        std::thread::sleep(Duration::from_secs(1));
        ends.tick(&recipe.context, &recipe.probe);
        if !recipe.context.watch().due(Instant::now()) {
            continue;
        }
        let probe = match crate::kafka_client::create::<BaseConsumer<Quiet>, _>(&recipe.probe, Quiet, "a Kafka client") {
            Ok(probe) => probe,
            Err(e) => {
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!("the consumer's stall probe could not be made (stalls go unnoticed): {e:#}");
                }
                continue;
            }
        };
        let answers = probe.fetch_metadata(Some(&recipe.topic), PROBE_WAIT).is_ok();
        let rebalancing = answers
            && recipe.context.watch().joining()
            && probe.fetch_group_list(Some(group), PROBE_WAIT).is_ok_and(|list| {
                list.groups().iter().any(|g| matches!(g.state(), "PreparingRebalance" | "CompletingRebalance"))
            });
        drop(probe);
        if rebalancing {
            recipe.context.watch().excused(Instant::now());
            continue;
        }
        stalled(recipe, answers);
    }
}


/// Reports the consumer stalled if the probe's answer makes it so.
fn stalled(recipe: &Recipe, answers: bool) {
    let Some(silence) = recipe.context.watch().answered(Instant::now(), answers) else { return };
    let account = format!(
        "the consumer has shown no sign of being in its group (its group state up and no join waiting on the \
         broker, a commit confirmed) for {silence:?}, its brokers answering"
    );
    recipe.context.handler().incident(IncidentKind::ConsumerStalled, account);
}

/// Why a handler's consumer is made again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trouble {
    /// The broker still holds the identity for this host's previous
    /// process (KIP-848): expected after a restart, not an incident.
    Unreleased,
    /// The handler's incident (see `incident`).
    Incident(IncidentKind),
}

/// What a fatal consumer error means, said at error level when it is an
/// incident.
fn fatal(code: RDKafkaErrorCode, reason: &str, instance: Option<&str>) -> Trouble {
    match code {
        RDKafkaErrorCode::UnreleasedInstanceId => Trouble::Unreleased,
        RDKafkaErrorCode::FencedInstanceId => {
            tracing::error!("{}", fenced_account(reason, instance));
            Trouble::Incident(IncidentKind::Fenced)
        }
        _ => {
            tracing::error!("the Kafka consumer failed for good: {reason}");
            Trouble::Incident(IncidentKind::ConsumerFailed)
        }
    }
}

/// Closes `consumer` (its assignment is lost: the partitions stop, what
/// is resolved is committed if the consumer still can) and makes it again
/// after a wait, until it is made. `None`: the host stopped meanwhile.
fn remake(
    recipe: &Recipe,
    consumer: HandlerConsumer,
    stop: &watch::Receiver<bool>,
    trouble: Trouble,
    backoff: &mut Backoff,
) -> Option<HandlerConsumer> {
    let ctx = &recipe.context;
    let handler = &ctx.handler().name;
    let fatally_failed =
        matches!(trouble, Trouble::Unreleased | Trouble::Incident(IncidentKind::Fenced | IncidentKind::ConsumerFailed));
    let mut wait = match trouble {
        Trouble::Unreleased => {
            tracing::warn!(
                handler = %handler, instance = ?recipe.instance,
                "the broker still holds this host's group instance for its previous process (KIP-848 releases \
                 it after the broker's group.consumer.session.timeout.ms): joining again in {REJOIN_EVERY:?}"
            );
            REJOIN_EVERY
        }
        Trouble::Incident(kind) => {
            ctx.handler().stats.incidents.began(kind);
            let wait = backoff.wait();
            tracing::error!(
                handler = %handler, kind = kind.as_str(),
                "the handler's consumer is closed and made again in {wait:?}; no other handler stops"
            );
            wait
        }
    };
    let states = ctx.states();
    consumer::settle(&states, consumer::REVOKE_GRACE);
    consumer::commit(&consumer, &states, CommitMode::Async, Positions::All);
    ctx.release_all();
    ctx.joined.store(false, Ordering::SeqCst);
    if fatally_failed {
        // A fenced or failed client refuses the close (and `close` would
        // leak it): destroyed on a thread of its own, so that a destroy
        // that hangs holds no handler up.
        crate::kafka_client::drop_aside(consumer, "a failed consumer");
    } else {
        shutdown::close(consumer, Instant::now() + REJOIN_EVERY);
    }
    loop {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if *stop.borrow() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        match recipe.make() {
            Ok(again) => return Some(again),
            Err(e) => {
                wait = backoff.wait();
                tracing::error!(handler = %handler, "cannot make the Kafka consumer again: {e:#}; next try in {wait:?}");
            }
        }
    }
}

/// A fence in words an operator can act on, naming the identity.
fn fenced_account(reason: &str, instance: Option<&str>) -> String {
    match instance {
        Some(id) => format!(
            "this host was fenced: a member joined the group as instance `{id}` (another live host with the same \
             [kafka] instance_id or IDEM_INSTANCE_ID, a client that took the id, or this host's own earlier session \
             after a broker outage); the consumer takes the identity back when made again ({reason})"
        ),
        None => format!("this host's consumer was fenced ({reason})"),
    }
}
