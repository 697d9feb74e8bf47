//! `events_per_instance`: an instance kept for several events serves its
//! quota and no more, is retired after a trap or an overrun, and lends each
//! event its own capabilities (the idempotency key, the output).

use std::time::Duration;

use super::{Setup, scenario, scenario_with};
use idem::{ExecError, Executor, Outcome};

/// Runs the `count` scenario once; which invocation of its instance it was.
async fn count(s: &Setup, exec: &Executor) -> u32 {
    let e = scenario("count");
    let outcome = exec.execute(&e, 1).await.unwrap_or_else(|e| panic!("count: {e}"));
    assert_eq!(outcome, Outcome::Processed);
    let note: String =
        sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note LIKE 'count:%'")
            .bind(e.id)
            .fetch_one(&s.db.pool)
            .await
            .unwrap_or_else(|e| panic!("its count: {e}"));
    note.trim_start_matches("count:").parse().unwrap_or_else(|e| panic!("{note}: {e}"))
}

#[tokio::test]
async fn a_fresh_instance_per_event_by_default_and_a_kept_one_serves_its_quota() {
    let s = Setup::new().await;
    let fresh = s.scenarios();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(count(&s, &fresh).await);
    }
    assert_eq!(seen, [1, 1, 1], "by default no event sees another's memory");

    let kept = s.scenarios_with(|settings| settings.events_per_instance = 3);
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(count(&s, &kept).await);
    }
    assert_eq!(seen, [1, 2, 3, 1, 2, 3, 1], "each instance serves 3 events, then a fresh one does");
    s.finish().await;
}

#[tokio::test]
async fn a_trap_or_an_overrun_retires_the_instance_and_a_handler_error_does_not() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| {
        settings.events_per_instance = 100;
        settings.timeout = Duration::from_millis(500);
    });
    assert_eq!((count(&s, &exec).await, count(&s, &exec).await), (1, 2));

    // The guest's own error is an answer: its instance goes on.
    let err = exec.execute(&scenario("write-then-fail"), 1).await.expect_err("fails");
    assert!(matches!(err, ExecError::HandlerPermanent(_)), "{err}");
    assert_eq!(count(&s, &exec).await, 3, "an instance that answered an error is kept");

    let err = exec.execute(&scenario("write-then-trap"), 1).await.expect_err("traps");
    assert!(matches!(err, ExecError::Trapped(_)), "{err}");
    assert_eq!(count(&s, &exec).await, 1, "after a trap the next event gets a fresh instance");
    assert_eq!(count(&s, &exec).await, 2);

    let err = exec.execute(&scenario("loop"), 1).await.expect_err("overruns");
    assert!(matches!(err, ExecError::TimedOut(_)), "{err}");
    assert_eq!(count(&s, &exec).await, 1, "after an overrun the next event gets a fresh instance");
    s.finish().await;
}

/// Its `start` rows: one per run of the event that committed.
async fn starts(s: &Setup, event: &idem::Event) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM scenario.effect WHERE event_id = $1 AND note = 'start'")
        .bind(event.id)
        .fetch_one(&s.db.pool)
        .await
        .unwrap_or_else(|e| panic!("its rows: {e}"))
}

/// A trap on a kept instance may be the earlier events' doing (memory
/// they left): the event runs again on a fresh instance, in a new
/// transaction, and only a trap there is its own. Nothing of the trapped
/// run remains; after three such traps the version keeps no instance.
#[tokio::test]
async fn an_event_trapping_on_a_kept_instance_runs_again_on_a_fresh_one_and_commits_once() {
    let s = Setup::new().await;
    let stats = std::sync::Arc::new(idem::stats::Stats::default());
    let exec = s.scenarios_with(|settings| settings.events_per_instance = 100).with_stats(stats.clone());
    let kept_traps = || stats.kept_traps.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!((count(&s, &exec).await, count(&s, &exec).await), (1, 2));
    let e = scenario("trap-if-kept");
    assert_eq!(exec.execute(&e, 1).await.expect("passes on a fresh instance"), Outcome::Processed);
    assert_eq!(starts(&s, &e).await, 1, "the trapped run's write was rolled back, the fresh run's committed");
    assert_eq!(count(&s, &exec).await, 1, "the fresh instance is the one kept; the trapped one was retired");
    assert_eq!(kept_traps(), 1, "the trap on the kept instance is counted (idem_kept_instance_traps_total)");

    // In a batch, the trap is not the event's own yet: the batch rolls
    // back, and the event runs again alone.
    let batch = [scenario("count"), scenario("trap-if-kept")];
    let failure = exec.execute_batch(&batch, |_| false).await.expect_err("the kept instance traps");
    assert!(matches!(failure, idem::executor::BatchFailure::At { index: 1, own: None }), "{failure:?}");
    assert_eq!(exec.execute(&batch[1], 1).await.expect("alone, on a fresh instance"), Outcome::Processed);
    assert_eq!(starts(&s, &batch[1]).await, 1);

    // The third trap on a kept instance: the version keeps none from then on.
    assert_eq!(count(&s, &exec).await, 1, "the batch's kept instance went with its trap");
    let third = scenario("trap-if-kept");
    assert_eq!(exec.execute(&third, 1).await.expect("on a fresh instance"), Outcome::Processed);
    assert_eq!((count(&s, &exec).await, count(&s, &exec).await), (1, 1), "a fresh instance per event now");
    assert_eq!(kept_traps(), 3, "each trap on a kept instance counted once, the batch's too");

    // A trap on a fresh instance is the event's own: final, as before.
    let err = exec.execute(&scenario("write-then-trap"), 1).await.expect_err("traps");
    assert!(matches!(err, ExecError::Trapped(ref m) if m.contains("trapping on purpose")), "{err}");
    assert_eq!(kept_traps(), 3, "a trap on a fresh instance is no kept instance's");
    s.finish().await;
}

#[tokio::test]
async fn each_event_on_a_kept_instance_has_its_own_key_and_its_own_output() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.events_per_instance = 100);
    assert_eq!(count(&s, &exec).await, 1);
    // Two events on the same instance (the counts around them say so),
    // each sending its charge and its fee.
    let posts: Vec<_> = (0..2).map(|_| scenario("two-labeled-posts")).collect();
    for e in &posts {
        assert_eq!(exec.execute(e, 2).await.expect("posted"), Outcome::Processed);
    }
    assert_eq!(count(&s, &exec).await, 2, "the same instance served them all");
    let keys: Vec<_> = posts.iter().flat_map(|e| [Some(e.id.to_string()), Some(format!("{}:fee", e.id))]).collect();
    assert_eq!(s.provider.keys(), keys, "each request carried its own event's id");

    // An event traps after another wrote to stderr on the same instance: its
    // error shows its own stderr, nothing of the other's.
    let noisy = scenario_with("forge-logs", serde_json::json!({ "text": "written by the first event" }));
    exec.execute(&noisy, 1).await.expect_err("forge-logs fails on purpose");
    assert_eq!(count(&s, &exec).await, 3, "still the same instance");
    let err = exec.execute(&scenario("write-then-trap"), 1).await.expect_err("traps");
    let text = err.to_string();
    assert!(text.contains("trapping on purpose"), "its own stderr is in its error: {text}");
    assert!(!text.contains("written by the first event"), "another event's output leaked into it: {text}");
    s.finish().await;
}

/// A kept instance's pipes hold two invocations' output: once one
/// invocation's worth (64 KiB) is used it retires, so the next event on it
/// always has a whole invocation's worth, and no instance's output grows
/// without bound. What each invocation wrote is counted, whichever
/// instance and however many events before it.
#[tokio::test]
async fn a_kept_instance_retires_once_its_output_fills_an_invocations_worth() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.events_per_instance = 100);
    assert_eq!(count(&s, &exec).await, 1);
    // 40 KiB to stdout and to stderr: under one invocation's worth.
    let loud = || scenario_with("forge-logs", serde_json::json!({ "text": "x".repeat(40 << 10) }));
    exec.execute(&loud(), 1).await.expect_err("forge-logs fails on purpose");
    assert_eq!(count(&s, &exec).await, 2, "40 KiB written: the instance is kept");
    // 80 KiB in its pipes now: it goes after this event.
    exec.execute(&loud(), 1).await.expect_err("forge-logs fails on purpose");
    assert_eq!(count(&s, &exec).await, 1, "the instance that wrote 80 KiB was retired");
    s.finish().await;
}

#[tokio::test]
async fn kept_instances_serve_events_that_run_at_once_and_are_reused() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.events_per_instance = 1_000);
    // Rounds of 4 events at once: each round needs 4 instances; kept ones
    // serve the next rounds, one event at a time each.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let round = futures::future::join_all((0..4).map(|_| count(&s, &exec))).await;
        seen.extend(round);
    }
    seen.sort_unstable();
    let ones = seen.iter().filter(|n| **n == 1).count();
    assert!(ones <= 5, "at most the first round's 4 (and the start-up's) were fresh: {seen:?}");
    assert!(seen.iter().any(|n| *n >= 4), "instances were reused round after round: {seen:?}");
    // The n-th invocation of an instance happens once per instance, and
    // there are no more instances than events ran at once.
    for n in 1..=20 {
        let times = seen.iter().filter(|m| **m == n).count();
        assert!(times <= 5, "{times} instances had a {n}th invocation: {seen:?}");
    }
    assert_eq!(seen.len(), 20);
    s.finish().await;
}

/// `events_per_instance` not configured (issue 47): a component built by
/// componentize-py or ComponentizeJS keeps its instances (its interpreter
/// takes milliseconds to start), and so does one that declares itself
/// reusable (issue 46: the billing example, `handler!(handle, reusable)`,
/// the declaration a custom section of its core module inside the
/// component); any other gets a fresh one per event; a configured value
/// always wins.
#[tokio::test]
async fn without_a_configured_policy_an_interpreters_or_a_declared_reusable_component_keeps_its_instances() {
    let s = Setup::new().await;
    let per_instance = |component: &str, configured: u32| {
        let mut settings = s.settings("notification");
        settings.events_per_instance = configured;
        let loaded = idem::Handler::load(&s.runtime, &idem_tests::guests::component(component), settings)
            .unwrap_or_else(|e| panic!("{component} loads: {e}"));
        loaded.settings().events_per_instance
    };
    assert_eq!(per_instance("python-probe", 0), 1000, "Python: kept");
    assert_eq!(per_instance("ts-probe", 0), 1000, "TypeScript: kept");
    assert_eq!(per_instance("scenarios", 0), 1, "Rust: a fresh instance per event");
    assert_eq!(per_instance("billing", 0), 1000, "Rust declaring itself reusable (`handler!(f, reusable)`): kept");
    assert_eq!(per_instance("billing", 1), 1, "the config wins over the declaration");
    assert_eq!(per_instance("python-probe", 1), 1, "the config wins");
    assert_eq!(per_instance("scenarios", 7), 7);
    s.finish().await;
}
