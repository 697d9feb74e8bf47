//! A partition's records between two offsets, read as the handler's
//! consumer reads them (`read_committed`: an aborted record is never
//! processed), each as its event id: what a rewind's census and the
//! ledger audit count.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};
use uuid::Uuid;

use crate::kafka_client::ProbeContext;
use crate::validate::Validator;

/// What one read found.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// Each record's offset and its event id: `Ok` for a valid event, else
    /// the id it carries if it can be read without validating (see
    /// `Validator::raw_event_id`).
    pub records: Vec<(i64, Result<Uuid, Option<Uuid>>)>,
    /// It stopped at its cap before the end.
    pub capped: bool,
}

/// The records of `topic`/`partition` from `from` up to `end` (not
/// included), at most `cap` of them, through `reader` (a group-less
/// client, `small_reader`). On a blocking thread: a writer schema not met
/// yet is fetched here.
pub(crate) fn read(
    reader: &BaseConsumer<ProbeContext>,
    validator: &Validator,
    (topic, partition): (&str, i32),
    (from, end): (i64, i64),
    cap: usize,
) -> anyhow::Result<Read> {
    let mut found = Read::default();
    if from >= end {
        return Ok(found);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))?;
    reader.assign(&tpl)?;
    // Stuck means no record for a minute, however long the window.
    let mut deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match reader.poll(Duration::from_millis(200)) {
            None if Instant::now() > deadline => {
                bail!("reading {topic}/{partition}: no record for a minute before offset {end}")
            }
            None => continue,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => return Err(e).with_context(|| format!("failed to read {topic}/{partition}")),
            Some(Ok(message)) => {
                let offset = rdkafka::Message::offset(&message);
                if offset >= end {
                    break;
                }
                if found.records.len() >= cap {
                    found.capped = true;
                    break;
                }
                let record = crate::pipeline::consumer::record(&message);
                let checked = tokio::runtime::Handle::current().block_on(validator.check(&record))?;
                let id = checked.map(|event| event.id).map_err(|_| validator.raw_event_id(&record));
                found.records.push((offset, id));
                deadline = Instant::now() + Duration::from_secs(60);
            }
        }
    }
    Ok(found)
}
