//! One round's rows to the broker: produced in order, every
//! acknowledgement awaited, each row's fate classified.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureRecord, Producer as _};

use crate::config::Config;
use crate::kafka_client::Producer;
use crate::kafka_client::refusal;

/// How long the broker may take to acknowledge a row, retries included:
/// well inside the lease ([`super::lease::TTL`]), so a holder waiting out an
/// outage renews it before another host could take over.
pub(super) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The relay's Kafka producer: `[kafka]`'s properties, idempotent, every
/// replica's acknowledgement awaited.
pub(super) fn kafka_producer(config: &Config, producer: &str) -> anyhow::Result<Producer> {
    let client = kafka_client(config, producer)?;
    crate::kafka_client::create(&client, crate::kafka_client::Quiet::default(), &relay_producer(producer))
}

/// The properties of [`kafka_producer`].
pub(super) fn kafka_client(config: &Config, producer: &str) -> anyhow::Result<rdkafka::ClientConfig> {
    let mut client = crate::kafka_client::client_config(config, None, crate::kafka_client::ClientKind::Producer)?;
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("client.id", format!("idem-outbox-{producer}"))
        .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
        .set("linger.ms", "5");
    Ok(client)
}

/// What [`kafka_producer`] is, in its errors.
pub(super) fn relay_producer(producer: &str) -> String {
    format!("the outbox relay of `{producer}`")
}

/// One row as the relay reads it.
#[derive(sqlx::FromRow)]
pub(super) struct Row {
    pub id: i64,
    pub topic: String,
    pub key: String,
    pub value: String,
    pub headers: sqlx::types::Json<serde_json::Value>,
    /// The value in its topic's registry format (`formats::Emitting`); none: the JSON as it is.
    #[sqlx(skip)]
    pub encoded: Option<Vec<u8>>,
}

/// What became of a round's rows.
#[derive(Debug, Default)]
pub(super) struct Sent {
    /// Acknowledged by the broker.
    pub published: Vec<i64>,
    /// Refused for good, with why.
    pub failed: Vec<(i64, String)>,
    /// The topics an outage held rows of back, and the first reason.
    pub held: Vec<String>,
    pub outage: Option<String>,
    /// The producer cannot go on (librdkafka's fatal error): make another.
    pub fatal: bool,
}

/// Produces `rows` in order and waits for every acknowledgement.
///
/// librdkafka sends a partition's rows in one batch, and the broker refuses
/// a batch as a whole (larger than the topic's `max.message.bytes`, say):
/// every row in it is reported refused. A row refused as a record while
/// others of its topic went out in the same round is therefore sent again
/// alone, and failed only if refused then, unless a later row of its key
/// was published meanwhile (sent again, it would follow that row: it fails
/// as before, its key's order kept). The whole send, rows sent again
/// included, ends within [`DELIVERY_TIMEOUT`], well inside the lease: a
/// row not answered by then stays pending for the next round (if it went
/// out after all, it is published again: at least once), and so does the
/// rest of a topic an outage hits meanwhile.
pub(super) async fn send(kafka: &Producer, rows: &[Row]) -> Sent {
    // librdkafka ends each first delivery by then (`message.timeout.ms`).
    let by = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    let deliveries: Vec<_> = rows.iter().map(|row| produce(kafka, row)).collect();
    let mut sent = Sent::default();
    let mut again = Vec::new();
    for (row, delivery) in rows.iter().zip(deliveries) {
        match delivered(delivery).await {
            Err(Some(e)) if shares_its_topic(rows, row) && is_record_refusal(row, &e) => again.push((row, e)),
            result => settle(&mut sent, row, result),
        }
    }
    for (row, first) in again {
        let overtaken = rows
            .iter()
            .any(|o| o.id > row.id && o.topic == row.topic && o.key == row.key && sent.published.contains(&o.id));
        if overtaken || sent.fatal_seen(kafka) {
            settle(&mut sent, row, Err(Some(first)));
        } else if !sent.held.contains(&row.topic) {
            // Not answered by then: pending, sent again next round (it may
            // have gone out: at least once).
            if let Ok(result) = tokio::time::timeout_at(by, delivered(produce(kafka, row))).await {
                settle(&mut sent, row, result);
            }
        }
    }
    sent.fatal = kafka.client().fatal_error().is_some();
    sent
}

impl Sent {
    fn fatal_seen(&self, kafka: &Producer) -> bool {
        self.fatal || kafka.client().fatal_error().is_some()
    }
}

type Delivery = Result<rdkafka::producer::DeliveryFuture, Option<KafkaError>>;

/// Hands `row` to the producer; `Err(None)` when it is not a record.
fn produce(kafka: &Producer, row: &Row) -> Delivery {
    // Never a map of text: not a record anyone can send (the database
    // refuses such headers; only a row written around it).
    let headers = headers(&row.headers.0).ok_or(None)?;
    let record = FutureRecord::to(&row.topic).key(row.key.as_bytes()).payload(row.encoded.as_deref().unwrap_or(row.value.as_bytes())).headers(headers);
    kafka.send_result(record).map_err(|(e, _)| Some(e))
}

/// The broker's answer to a produced row.
async fn delivered(delivery: Delivery) -> Result<(), Option<KafkaError>> {
    match delivery?.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(Some(e)),
        Err(_) => Err(Some(KafkaError::Canceled)),
    }
}

fn settle(sent: &mut Sent, row: &Row, result: Result<(), Option<KafkaError>>) {
    match result {
        Ok(()) => sent.published.push(row.id),
        Err(None) => sent.failed.push((row.id, "its headers are not a JSON object of text values".into())),
        Err(Some(e)) => classify(sent, row, &e),
    }
}

fn shares_its_topic(rows: &[Row], row: &Row) -> bool {
    rows.iter().any(|other| other.id != row.id && other.topic == row.topic)
}

fn is_record_refusal(row: &Row, e: &KafkaError) -> bool {
    matches!(refusal::classify(&row.topic, e), refusal::Refusal::Record(_))
}

fn classify(sent: &mut Sent, row: &Row, e: &KafkaError) {
    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
        sent.fatal = true;
    }
    match refusal::classify(&row.topic, e) {
        refusal::Refusal::Outage(_) => {
            if !sent.held.contains(&row.topic) {
                sent.held.push(row.topic.clone());
            }
            sent.outage.get_or_insert_with(|| format!("the broker did not take a row for {}: {e}", row.topic));
        }
        refused => {
            let scope = match refused {
                refusal::Refusal::Topic(_) => " (the topic refuses every record)",
                _ => "",
            };
            sent.failed.push((row.id, format!("topic {}: {e}{scope}", row.topic)));
        }
    }
}

/// A row's headers as Kafka's: `None` unless a JSON object of text.
fn headers(json: &serde_json::Value) -> Option<OwnedHeaders> {
    let mut headers = OwnedHeaders::new();
    for (name, value) in json.as_object()? {
        headers = headers.insert(Header { key: name, value: Some(value.as_str()?.as_bytes()) });
    }
    Some(headers)
}
