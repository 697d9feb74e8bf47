//! A revocation that meets an event stuck in flight: it holds up neither
//! the partitions the host keeps nor the partition's next owner, and the
//! stuck event still takes effect once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::wait_until;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use crate::Env;
use crate::failures::scenario;

/// Polls `done` every 50 ms until `limit`; panics naming `what`.
async fn within<F: std::future::Future<Output = bool>>(what: &str, limit: Duration, done: impl Fn() -> F) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain member of `group` that only holds what it is assigned.
struct Member {
    assigned: Arc<Mutex<Vec<i32>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Member {
    /// Joins `group` with the group protocol `spec` uses.
    fn join(group: &str, topic: &str, spec: &HandlerSpec) -> Self {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", kafka::brokers()).set("group.id", group).set("enable.auto.commit", "false");
        if spec.group_protocol == "consumer" {
            config.set("group.protocol", "consumer");
        } else {
            config
                .set("partition.assignment.strategy", "cooperative-sticky")
                .set("session.timeout.ms", "6000")
                .set("heartbeat.interval.ms", "500");
        }
        let consumer: BaseConsumer = config.create().unwrap_or_else(|e| panic!("consumer: {e}"));
        consumer.subscribe(&[topic]).unwrap_or_else(|e| panic!("subscribe: {e}"));
        let (assigned, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (seen, stopping) = (assigned.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                // Records are not consumed: the member only holds its partitions.
                let _ = consumer.poll(Duration::from_millis(50));
                if let Ok(tpl) = consumer.assignment() {
                    let partitions = tpl.elements().iter().map(|e| e.partition()).collect();
                    *seen.lock().unwrap_or_else(|e| e.into_inner()) = partitions;
                }
            }
            consumer.unsubscribe();
        });
        Self { assigned, stop, thread }
    }

    fn assigned(&self) -> Vec<i32> {
        self.assigned.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn leave(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revocation_meeting_a_stuck_event_holds_up_neither_the_kept_partition_nor_the_new_owner() {
    revocation_meets_a_stuck_event("classic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_kip_848_a_revocation_meeting_a_stuck_event_holds_up_neither_the_kept_partition_nor_the_new_owner() {
    revocation_meets_a_stuck_event("consumer").await;
}

async fn revocation_meets_a_stuck_event(protocol: &'static str) {
    let env = Env::new(2).await;
    // Each partition: an ordinary event, a gated one, 300 more. A gate is an
    // uncommitted row of the test's that the gated event's first write
    // waits on, so the event stays in flight until the test rolls it back.
    let mut gated = Vec::new();
    let mut records = Vec::new();
    for partition in 0..2 {
        let (id, payload) = scenario("ok", serde_json::json!({ "gated": true }));
        gated.push(id);
        records.push((partition, scenario("ok", serde_json::json!({})).1));
        records.push((partition, payload));
        records.extend((0..300).map(|_| (partition, scenario("ok", serde_json::json!({})).1)));
    }
    let mut gates = Vec::new();
    for id in &gated {
        let mut gate = env.db.pool.begin().await.expect("begin");
        sqlx::query("INSERT INTO scenario.effect (event_id, note) VALUES ($1, 'start')")
            .bind(id)
            .execute(&mut *gate)
            .await
            .expect("gate");
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *gate).await.expect("pid");
        gates.push((gate, pid));
    }
    let gate_pids: Vec<i32> = gates.iter().map(|(_, pid)| *pid).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let per_partition = 302;

    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    if protocol == "consumer" {
        spec = spec.with_consumer_protocol();
    }
    spec.extra = "timeout_ms = 60000\n".into();
    // One event per transaction: a partition then runs in parallel with
    // the others from its second event on (until it has processed
    // `max_events` events alone, a handler runs one at a time), so both
    // gated events can be in flight at once. Batches meeting revocations
    // are the rebalance tests' (`main.rs`).
    spec.batch = Some((1, 0));
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let first = host::InProcess::start(&config);
    let waiting_on_gates = || async {
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1";
        sqlx::query_scalar::<_, i64>(sql).bind(&gate_pids).fetch_one(&env.db.pool).await.expect("waiters") == 2
    };
    within("both gated events in flight", Duration::from_secs(60), waiting_on_gates).await;

    // A second member joins: the host gives one partition up while that
    // partition's event is stuck. The member is assigned it promptly (the
    // revocation does not wait for the event's 60 s deadline).
    let member = Member::join(&spec.group_id, &env.topic, &spec);
    let assigned = || async { member.assigned().len() == 1 };
    within("the second member assigned a partition", Duration::from_secs(20), assigned).await;
    let moved = member.assigned()[0];
    let kept = 1 - moved;

    // The kept partition flows and is committed while the moved
    // partition's event is still stuck in the first host.
    let (gate, _) = gates.remove(kept as usize);
    gate.rollback().await.expect("open the kept partition's gate");
    let kept_committed =
        || async { kafka::committed(&spec.group_id, &env.topic, 2)[kept as usize] == Some(per_partition) };
    within("the kept partition committed to its end", Duration::from_secs(20), kept_committed).await;
    let stuck = format!("SELECT count(*) FROM scenario.effect WHERE event_id = '{}'", gated[moved as usize]);
    assert_eq!(env.count(&stuck).await, 0, "the moved partition's event is still in flight");

    // The stuck event ends in the first host; the partition comes back to
    // it when the member leaves.
    let (gate, _) = gates.remove(0);
    gate.rollback().await.expect("open the moved partition's gate");
    member.leave();
    let ends = vec![Some(per_partition); 2];
    wait_until("both partitions committed to their ends", || kafka::committed(&spec.group_id, &env.topic, 2) == ends)
        .await;
    let r = &first.stop().await[0];
    // The stuck event committed (alone, or with the events of its batch
    // before it) and came back as a duplicate; or its batch was rolled back
    // at the revocation and it ran again: once either way.
    assert_eq!((r.processed, r.failed), (2 * per_partition as u64, 0), "{r:?}");
    let effects = "SELECT count(DISTINCT event_id) FROM scenario.effect WHERE note = 'start'";
    assert_eq!(env.count(effects).await, 2 * per_partition, "every event took effect");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect").await, 2 * per_partition, "none twice");
    env.finish().await;
}
