//! A topic the broker does not take rows for (an outage of that topic
//! alone): its rows wait, tried again after a backoff doubling from 100 ms
//! to 5 s, while the producer's other topics go on; once the broker takes
//! them they are published, none failed.

use std::time::{Duration, Instant};

use crate::mock::Mock;
use crate::{Env, Host, emit, wait_rows};

/// The relay's hold-backs of `topic` in `host`'s log: when each was logged
/// and the wait it announced.
fn holds(host: &Host, topic: &str) -> Vec<(Stamp, Duration)> {
    let prefix = format!("outbox: the broker did not take a row for {topic}: ");
    host.log()
        .iter()
        .filter(|l| l["level"] == "WARN" && l["message"].as_str().is_some_and(|m| m.starts_with(&prefix)))
        .map(|l| {
            let message = l["message"].as_str().unwrap_or_default();
            let at = l["timestamp"].as_str().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{l}"));
            let wait = message.rsplit_once("retrying in ").map(|(_, w)| w).unwrap_or_else(|| panic!("{message}"));
            (at, parse_wait(wait))
        })
        .collect()
}

/// A `Duration` as `{:?}` prints it: `100ms`, `1.6s`, `5s`.
fn parse_wait(text: &str) -> Duration {
    let (number, scale) = match text.strip_suffix("ms") {
        Some(ms) => (ms, 1e-3),
        None => (text.strip_suffix('s').unwrap_or_else(|| panic!("a wait: {text}")), 1.0),
    };
    let seconds = number.parse::<f64>().unwrap_or_else(|e| panic!("{text}: {e}")) * scale;
    Duration::from_millis((seconds * 1000.0).round() as u64)
}

/// README: "While the broker does not take rows (down, too few replicas),
/// they stay where they are; the topics it refused are held back, each
/// backing off from 100 ms to 5 s, while the producer's other topics go
/// on, and the rows go out when the broker takes them." One of the
/// producer's two topics has no leader. Its row must stay pending (never
/// failed), the waits the relay announces for it doubling from 100 ms to
/// 5 s; the other topic's rows, emitted every 300 ms throughout, are all
/// published, and those committed while the held topic waits (a second or
/// more of its wait left) within 1 s; with the leader back, the held row
/// is published. A try of the held topic costs its round the 5-s delivery
/// timeout, so a relay that tried it during its wait, held the producer's
/// other topics with it, did not back off, or failed the row, fails this.
///
/// On the mock cluster: a single Apache Kafka broker leads every partition
/// or none, and a topic's `min.insync.replicas` above its replicas does not
/// refuse rows on Kafka 4.4 (eligible leader replicas cap it: tried, the
/// row was acknowledged), so one topic alone cannot be made unavailable.
#[tokio::test(flavor = "multi_thread")]
async fn a_topic_the_broker_does_not_take_backs_off_while_the_producers_other_topics_are_published() {
    let mock = Mock::start("one topic's only partition without a leader while the other topics' have one");
    let env = Env::on_mock(&mock).await;
    let (stuck, flowing) = (mock.topic(), mock.topic());
    let config = env.config(env.emitter(&[&stuck, &flowing])).await;
    let leaderless = stuck.clone();
    mock.on(move |c| c.partition_leader(&leaderless, 0, None)).expect("a partition without a leader");
    env.emit(vec![emit(&stuck, "s1", 1, 0), emit(&flowing, "f1", 1, 0)]).await;
    let running = Host::start(&config);

    // The other topic's rows, one event every 300 ms, until the held
    // topic's wait has reached 5 s and 2.5 s of it have passed (seven
    // tries, about 45 s).
    let waited = |held: &[(Stamp, Duration)]| {
        held.last().is_some_and(|(at, wait)| {
            *wait >= Duration::from_secs(5) && chrono::Utc::now() - *at >= chrono::TimeDelta::milliseconds(2500)
        })
    };
    let mut amount = 1;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !waited(&holds(&running, &stuck)) {
        assert!(Instant::now() < deadline, "the wait reached 5 s within 120 s: {:?}", holds(&running, &stuck));
        amount += 1;
        env.emit(vec![emit(&flowing, &format!("f{amount}"), amount, 0)]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let rows = wait_rows(&env, "every row of the other topic is published", |rows| {
        let others: Vec<_> = rows.iter().filter(|r| r.topic == flowing).collect();
        others.len() == amount as usize && others.iter().all(|r| r.published)
    })
    .await;
    let held = holds(&running, &stuck);
    let waits: Vec<Duration> = held.iter().map(|(_, w)| *w).collect();
    let ms = Duration::from_millis;
    assert_eq!(
        waits,
        [ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(5000)],
        "from 100 ms, doubling, to 5 s"
    );
    let row = rows.iter().find(|r| r.topic == stuck).expect("the held row");
    assert!(!row.published && !row.failed, "the held row waits, neither published nor failed: {row:?}");
    let warned = running.logged("WARN", "outbox: the broker did not take a row for ");
    assert!(warned.iter().all(|m| m.contains(&stuck)), "only the refused topic is held back: {warned:?}");

    // The rows committed while the held topic waited (a second or more of
    // its wait left) went out at once.
    let times: Vec<(i64, Stamp, Stamp)> =
        sqlx::query_as("SELECT id, created_at, published_at FROM idem.outbox WHERE topic = $1 ORDER BY id")
            .bind(&flowing)
            .fetch_all(&env.db.pool)
            .await
            .expect("the other topic's rows");
    let waiting = |at: Stamp| held.iter().any(|(from, wait)| at >= *from && at + ms(1000) <= *from + *wait);
    let during: Vec<_> = times.iter().filter(|(_, created, _)| waiting(*created)).collect();
    assert!(during.len() >= 3, "rows were committed while the topic waited: {times:?} {held:?}");
    for (id, created, published) in during {
        assert!(*published - *created < chrono::TimeDelta::seconds(1), "row {id} waited: {created} → {published}");
    }

    let leader = stuck.clone();
    mock.on(move |c| c.partition_leader(&leader, 0, Some(1))).expect("the leader back");
    let rows = wait_rows(&env, "the held row is published once its partition has a leader", |rows| {
        rows.iter().all(|r| r.published)
    })
    .await;
    assert!(rows.iter().all(|r| !r.failed), "none failed: {rows:#?}");
    let mut keys = mock.keys(&stuck);
    keys.dedup();
    assert_eq!(keys, ["s1"], "the held row reached its topic");
    let flowed: Vec<String> = (1..=amount).map(|n| format!("f{n}")).collect();
    assert_eq!(mock.keys(&flowing), flowed, "the other topic's rows, each once, in order");
    running.stop();
    env.finish().await;
}

type Stamp = chrono::DateTime<chrono::Utc>;
