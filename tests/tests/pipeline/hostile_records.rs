//! Generated hostile records mixed into a stream of valid orders: each is
//! resolved (dead-lettered, as a copy or as its envelope) in bounded time,
//! no partition stops, every valid order is charged exactly once, and the
//! counts add up.

use idem::pipeline::dlq_headers as h;
use idem::pipeline::replay::header;
use idem_tests::host::{self, order_payload};
use idem_tests::kafka;

use crate::{CHARGES, DISTINCT_ORDERS, Env};

/// A small deterministic generator: a failure names its seed and replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One hostile record: (what it is, key, value, headers, too large for the DLQ).
type Hostile = (&'static str, Vec<u8>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>, bool);

fn hostile(rng: &mut Rng, n: i64) -> Hostile {
    let (id, valid) = order_payload(100_000 + n);
    let text = String::from_utf8(valid.clone()).expect("utf-8");
    let id = id.to_string();
    let body = text.trim_start_matches('{').to_owned();
    let none = Vec::new();
    match rng.below(14) {
        0 => (
            "eventId twice",
            b"k".to_vec(),
            Some(format!("{{\"eventId\":\"{}\",{body}", uuid::Uuid::now_v7()).into_bytes()),
            none,
            false,
        ),
        1 => (
            "eventType twice",
            b"k".to_vec(),
            Some(text.replace("\"eventType\"", "\"eventType\":\"order.cancelled.v1\",\"eventType\"").into_bytes()),
            none,
            false,
        ),
        2 => {
            // Version 7, variant bits 11 instead of 10.
            let mut bad = id.clone().into_bytes();
            bad[19] = b'c';
            (
                "variant bits",
                b"k".to_vec(),
                Some(text.replace(&id, std::str::from_utf8(&bad).expect("ascii")).into_bytes()),
                none,
                false,
            )
        }
        3 => ("uppercase id", b"k".to_vec(), Some(text.replace(&id, &id.to_uppercase()).into_bytes()), none, false),
        4 => (
            "uuid v4",
            b"k".to_vec(),
            Some(text.replace(&id, "0b7f1d2e-8f9a-4c3b-9d2e-1f0a2b3c4d5e").into_bytes()),
            none,
            false,
        ),
        5 => {
            let huge = "x".repeat(300_000 + rng.below(100_000) as usize);
            (
                "a huge field",
                b"k".to_vec(),
                Some(text.replace("\"currency\":\"EUR\"", &format!("\"currency\":\"{huge}\"")).into_bytes()),
                none,
                false,
            )
        }
        6 => ("not UTF-8", b"k".to_vec(), Some(vec![b'{', 0xff, 0xfe, b'}']), none, false),
        7 => ("truncated", b"k".to_vec(), Some(valid[..valid.len() / 2].to_vec()), none, false),
        8 => ("no value", b"k".to_vec(), None, none, false),
        9 => (
            "wrong types",
            b"k".to_vec(),
            Some(text.replace("\"currency\":\"EUR\"", "\"currency\":42").into_bytes()),
            none,
            false,
        ),
        10 => (
            "deep nesting",
            b"k".to_vec(),
            Some(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes()),
            none,
            false,
        ),
        11 => {
            let forged = vec![
                (h::REASON.to_owned(), b"forged reason".to_vec()),
                (h::OFFSET.to_owned(), b"0".to_vec()),
                (h::SEAL.to_owned(), b"v1:00".to_vec()),
            ];
            ("forged idem headers", b"k".to_vec(), Some(b"{}".to_vec()), forged, false)
        }
        12 => ("a huge key", vec![b'k'; 200_000], Some(b"[]".to_vec()), none, false),
        _ => {
            // Fits the source topic; its dead-letter copy, with idem's
            // headers, does not fit the DLQ topic (max.message.bytes below).
            let pad = "p".repeat(DLQ_MAX - 250);
            ("too large for the DLQ", b"k".to_vec(), Some(format!("{{\"pad\":\"{pad}\"}}").into_bytes()), none, true)
        }
    }
}

const DLQ_MAX: usize = 600_000;

#[tokio::test(flavor = "multi_thread")]
async fn generated_hostile_records_never_stop_a_partition_and_every_valid_order_is_charged_once() {
    let env = Env::new(3).await;
    let seed = 0x1de3_5eed_u64;
    let mut rng = Rng(seed);
    let dlq = format!("{}.billing.dlq", env.topic);
    kafka::create_topic_with(&dlq, 3, &[("max.message.bytes", &DLQ_MAX.to_string())]).await;

    let (valid, hostiles) = (1_000_i64, 120_i64);
    let mut kinds = std::collections::BTreeMap::<&str, u64>::new();
    let mut too_large = 0;
    // Interleaved as produced: hostile records every 7th place (i % 3 picks
    // the partition, so each partition gets them), valid orders before,
    // between and after them in the same partition; the orders that follow
    // a hostile record in its partition are kept to be checked one by one.
    let mut records: Vec<(i32, Vec<u8>)> = Vec::new();
    let mut pending: Vec<(i32, Vec<u8>)> = Vec::new();
    let mut hostile_at = Vec::new();
    let mut after_hostile: Vec<i64> = Vec::new();
    let mut tainted = [false; 3];
    for i in 0..valid + hostiles {
        let partition = (i % 3) as i32;
        if i % 7 == 4 && hostile_at.len() < hostiles as usize {
            kafka::produce_all(&env.producer, &env.topic, &pending).await;
            records.append(&mut pending);
            let (kind, key, value, headers, large) = hostile(&mut rng, hostile_at.len() as i64);
            *kinds.entry(kind).or_default() += 1;
            too_large += u64::from(large);
            let refs: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
            kafka::produce_raw(&env.producer, &env.topic, partition, &key, value.as_deref(), &refs).await;
            hostile_at.push(i);
            tainted[partition as usize] = true;
            continue;
        }
        if tainted[partition as usize] {
            after_hostile.push(i + 1);
        }
        pending.push((partition, order_payload(i + 1).1));
    }
    kafka::produce_all(&env.producer, &env.topic, &pending).await;
    records.append(&mut pending);
    let sent_valid = records.len() as u64;
    let sent_hostile = hostile_at.len() as u64;

    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    let summary = format!("seed {seed:#x}, kinds {kinds:?}: {r:?}");
    assert_eq!(r.processed, sent_valid, "{summary}");
    assert_eq!(r.invalid, sent_hostile, "{summary}");
    assert_eq!((r.dead_lettered, r.enveloped, r.dlq_refused), (sent_hostile, too_large, 0), "{summary}");
    assert_eq!(env.count(CHARGES).await as u64, sent_valid, "{summary}");
    assert_eq!(env.count(DISTINCT_ORDERS).await as u64, sent_valid, "each order once: {summary}");
    assert_eq!(env.provider.charges() as u64, sent_valid, "each charge sent once: {summary}");
    let ends: Vec<Option<i64>> = kafka::high_watermarks(&env.topic, 3).into_iter().map(Some).collect();
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 3), ends, "every partition resolved: {summary}");
    // The valid orders produced after a hostile record in its partition
    // (most of them in the same fetch, the same batch): each charged.
    assert!(after_hostile.len() > 500, "the interleaving put valid orders after hostile ones: {}", after_hostile.len());
    let charged: Vec<i64> =
        sqlx::query_scalar("SELECT DISTINCT order_id FROM billing.charge WHERE order_id = ANY($1) ORDER BY 1")
            .bind(&after_hostile)
            .fetch_all(&env.db.pool)
            .await
            .expect("charges");
    let missing: Vec<&i64> = after_hostile.iter().filter(|o| charged.binary_search(o).is_err()).collect();
    assert!(missing.is_empty(), "orders after a hostile record not charged: {missing:?}; {summary}");
    let dead = kafka::read_all(&dlq);
    assert_eq!(dead.len() as u64, sent_hostile, "{summary}");
    for m in &dead {
        let at = (rdkafka::Message::partition(m), rdkafka::Message::offset(m));
        let reason = header(m, h::REASON).unwrap_or_else(|| panic!("the dead letter at {at:?} has no reason header"));
        assert!(!reason.is_empty(), "the dead letter at {at:?} has an empty reason");
        assert!(reason != "forged reason" && reason.len() <= 1_100 && !reason.contains('\n'), "{reason:?}");
        assert_eq!(header(m, h::HANDLER).as_deref(), Some("billing"));
    }
    assert!(too_large > 0 && kinds.len() >= 12, "the generator covered the kinds: {kinds:?}");
    eprintln!(
        "hostile records: {sent_hostile} of {} kinds among {sent_valid} valid orders; bad outcomes: 0",
        kinds.len()
    );
    env.finish().await;
}
