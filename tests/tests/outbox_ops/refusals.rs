//! `idem check` and `idem run` refusing to start: an outbox topic missing
//! on the broker, and a producer whose topics recorded in the database
//! differ from the config's. Each is refused with the message README
//! states, a non-zero exit, and nothing consumed.

use std::path::Path;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use super::{Env, add_producer, idem, path};

/// Both `idem check` and `idem run` refuse `config`, exiting non-zero
/// with `expected` on stderr.
fn refused(config: &Path, expected: &str) {
    for command in ["check", "run"] {
        let ran = idem(&[command, "--config", path(config)]);
        assert!(!ran.ok, "idem {command} started: {ran:?}");
        assert!(ran.stderr.contains(expected), "idem {command}: expected `{expected}` in: {ran:?}");
    }
}

/// Nothing of the input was consumed by `spec`'s group.
async fn nothing_consumed(env: &Env, spec: &HandlerSpec) {
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![None], "no offset committed");
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, 0, "no event processed");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event").await, 0, "nothing claimed");
}

/// Three orders on the input topic: something a host that started would consume.
async fn orders(env: &Env) {
    for id in 1..=3 {
        kafka::produce(&env.producer, &env.topic, 0, "k", &host::order_payload(id).1).await;
    }
}

/// README, "The outbox": "`idem check` and `idem run` refuse to start …
/// when an outbox topic does not exist on the broker (idem publishes to
/// topics, it does not create them)". A handler's `[[handler.emit]]` topic
/// and an `[[outbox.producer]]` topic, each missing: both commands exit
/// non-zero naming it, neither creates it, nothing is consumed; created,
/// the same config passes `idem check` (the refusal was that topic's).
#[tokio::test(flavor = "multi_thread")]
async fn check_and_run_refuse_an_outbox_topic_missing_on_the_broker_and_consume_nothing() {
    let env = Env::new(1).await;
    orders(&env).await;
    let missing = idem_tests::unique_name("idem_topic");
    let spec = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &missing);
    let emitting = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let app_missing = idem_tests::unique_name("idem_topic");
    env.create_app_role().await;
    let plain = HandlerSpec::billing(&env.topic, &env.provider.base_url());
    let producing = host::write_config(&env.db.url, std::slice::from_ref(&plain));
    add_producer(&producing, &env.app_role(), &[&app_missing]);

    // In turn: each config's topics recorded as `idem migrate` records
    // them (the one check before the broker's passes).
    for (config, topic) in [(&emitting, &missing), (&producing, &app_missing)] {
        env.db.allow_emits(config).await;
        refused(
            config,
            &format!(
                "outbox topic `{topic}` does not exist on the broker: create it (idem publishes to topics, it does \
                 not create them)"
            ),
        );
        assert_eq!(kafka::partitions(topic), 0, "idem did not create {topic}");
        nothing_consumed(&env, &spec).await;
        nothing_consumed(&env, &plain).await;
        kafka::create_named_topic(topic, 1).await;
        let check = idem(&["check", "--config", path(config)]);
        assert!(check.ok, "with {topic} created the config passes: {check:?}");
    }
    env.finish().await;
}

/// `spec` emitting `event_types` to `topic` instead of what it emitted.
fn emitting_instead(spec: &HandlerSpec, topic: &str, event_types: &[&str]) -> HandlerSpec {
    let mut changed = spec.clone();
    let schema = changed.emit[0].2.clone();
    changed.emit = vec![(topic.to_owned(), event_types.iter().map(|t| (*t).to_owned()).collect(), schema)];
    changed.config.retain(|(k, _)| k != "payment_requests_topic");
    changed.config.push(("payment_requests_topic".into(), topic.into()));
    changed
}

/// README, "The outbox": "`idem check` and `idem run` refuse to start when
/// the database's record differs from the config (naming the producer and
/// both lists)". A handler whose config emits to another topic, one whose
/// config allows another event type, and an `[[outbox.producer]]` whose
/// config adds a topic, none migrated: each refused by both commands
/// naming the producer, the database's list and the config's, exit
/// non-zero, nothing consumed; `idem migrate --config` then makes the
/// config pass.
#[tokio::test(flavor = "multi_thread")]
async fn check_and_run_refuse_a_producer_whose_recorded_topics_differ_from_the_config() {
    let env = Env::new(1).await;
    orders(&env).await;
    let (first, second) = (kafka::create_topic(1).await, kafka::create_topic(1).await);
    let spec = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &first);
    let recorded = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&recorded).await;
    let check = idem(&["check", "--config", path(&recorded)]);
    assert!(check.ok, "the recorded config passes: {check:?}");
    let was = format!("{first} (payment.requested.v1)");

    let moved = host::write_config(&env.db.url, &[emitting_instead(&spec, &second, &["payment.requested.v1"])]);
    let retyped = emitting_instead(&spec, &first, &["payment.requested.v1", "payment.requested.v2"]);
    let retyped = host::write_config(&env.db.url, &[retyped]);
    let handler_cases = [
        (&moved, format!("{second} (payment.requested.v1)")),
        (&retyped, format!("{first} (payment.requested.v1, payment.requested.v2)")),
    ];
    for (config, now) in &handler_cases {
        refused(
            config,
            &format!(
                "`billing`: the database allows it to publish {was}, the config {now}: run `idem migrate --config` \
                 with this config"
            ),
        );
    }

    // An application's producer: one topic recorded, two configured.
    env.create_app_role().await;
    let plain = HandlerSpec::billing(&env.topic, &env.provider.base_url());
    let one = host::write_config(&env.db.url, std::slice::from_ref(&plain));
    add_producer(&one, &env.app_role(), &[&first]);
    env.db.allow_emits(&one).await;
    let two = host::write_config(&env.db.url, std::slice::from_ref(&plain));
    add_producer(&two, &env.app_role(), &[&first, &second]);
    let mut both = [&first, &second];
    both.sort();
    let listed: Vec<String> = both.iter().map(|t| format!("{t} (order.confirmed.v1)")).collect();
    refused(
        &two,
        &format!(
            "`orders`: the database allows it to publish {first} (order.confirmed.v1), the config {}: run `idem \
             migrate --config` with this config",
            listed.join(", ")
        ),
    );
    nothing_consumed(&env, &spec).await;
    nothing_consumed(&env, &plain).await;

    // Migrated with it, the same config passes.
    let admin = env.db.url.as_str();
    for config in [&moved, &two] {
        let migrated = idem(&["migrate", "--database-url", admin, "--config", path(config)]);
        assert!(migrated.ok, "{migrated:?}");
        let check = idem(&["check", "--config", path(config)]);
        assert!(check.ok, "migrated, {} passes: {check:?}", config.display());
    }
    env.finish().await;
}
