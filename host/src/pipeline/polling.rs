//! A handler's polling thread: its consumer made from a recipe (so it can
//! be made again), the poll loop that routes records and commits, and what
//! it does with a fatal consumer error.
//!
//! One fatal error is waited out rather than ending the host: under KIP-848
//! the broker refuses a static member whose previous process died until
//! its `group.consumer.session.timeout.ms` runs out (UNRELEASED_INSTANCE_ID),
//! and librdkafka makes that refusal fatal. The loop then drops the
//! consumer and makes a new one on the same state, every few seconds, until
//! the broker lets the identity back in. Every other fatal error (a fence
//! by another live host with the same identity included) stops the host,
//! named.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer as _};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::watch;

use super::HandlerContext;
use super::consumer::{self, Ctx, HandlerConsumer, IdemContext, Positions};
use super::shutdown;
use crate::config::{Config, HandlerConfig};

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
        Ok(Self { client, context, topic: handler.topic.clone(), what, instance })
    }

    /// A consumer on the recipe's state, subscribed.
    pub(super) fn make(&self) -> anyhow::Result<HandlerConsumer> {
        let consumer: HandlerConsumer =
            crate::kafka_client::create(&self.client, Ctx(self.context.clone()), &self.what)?;
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
    while !*stop.borrow() {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => ctx.route(consumer::record(&message)),
            Some(Err(rdkafka::error::KafkaError::MessageConsumptionFatal(code))) => {
                let (code, reason) = consumer.client().fatal_error().unwrap_or((code, code.to_string()));
                if code == RDKafkaErrorCode::UnreleasedInstanceId {
                    match rejoin(recipe, consumer, &stop) {
                        Ok(again) => {
                            consumer = again;
                            continue;
                        }
                        Err(Some(e)) => ctx.fatal(format!("cannot make the Kafka consumer again: {e:#}")),
                        // Stopped while waiting: the consumer is closed already.
                        Err(None) => {}
                    }
                    return;
                }
                let message = fatal_account(code, &reason, recipe.instance.as_deref());
                tracing::error!("{message}");
                ctx.fatal(message);
                break;
            }
            Some(Err(e)) => {
                if let Some(line) = ctx.repeats.line(&format!("poll: {e}"), format_args!("consumer error: {e}")) {
                    tracing::warn!("{line}");
                }
            }
            None => {}
        }
        ctx.look_up_starts(&consumer);
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

/// The broker refused the identity for now: the consumer is closed (its
/// assignment is lost: the partitions stop, nothing more is committed) and
/// made again after [`REJOIN_EVERY`]. `Err(None)`: the host stopped
/// meanwhile; `Err(Some(_))`: the consumer cannot be made.
fn rejoin(
    recipe: &Recipe,
    consumer: HandlerConsumer,
    stop: &watch::Receiver<bool>,
) -> Result<HandlerConsumer, Option<anyhow::Error>> {
    let ctx = &recipe.context;
    tracing::warn!(
        instance = ?recipe.instance,
        "the broker still holds this host's group instance for its previous process (KIP-848 releases it after \
         the broker's group.consumer.session.timeout.ms): joining again in {REJOIN_EVERY:?}"
    );
    consumer::settle(&ctx.states(), consumer::REVOKE_GRACE);
    ctx.release_all();
    shutdown::close(consumer, Instant::now() + REJOIN_EVERY);
    let until = Instant::now() + REJOIN_EVERY;
    while Instant::now() < until {
        if *stop.borrow() {
            return Err(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    recipe.make().map_err(Some)
}

/// A fatal consumer error in words an operator can act on: a fenced
/// static member names its identity (two live hosts share it).
fn fatal_account(code: RDKafkaErrorCode, reason: &str, instance: Option<&str>) -> String {
    match instance {
        Some(id) if code == RDKafkaErrorCode::FencedInstanceId => format!(
            "this host was fenced: another live host joined the group as instance `{id}`. Two live hosts must \
             never share an instance id: give each its own [kafka] instance_id or IDEM_INSTANCE_ID ({reason})"
        ),
        _ => format!("the Kafka consumer failed for good: {reason}"),
    }
}
