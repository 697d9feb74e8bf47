//! Why the broker did not take a record idem produced (a dead letter, an
//! outbox row), and what that means.
//!
//! An outage passes (the worker retries without spending an attempt); a
//! refusal of *the record* never will (it is too large for the topic, or
//! the broker calls it invalid), so the record is dead-lettered as a
//! bounded envelope instead; a refusal of *the topic* (gone, not
//! authorised) refuses every record until an operator acts, so the
//! partition waits for that, loudly.

use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};

/// A failed DLQ write, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The broker or the network failed: retry as it is.
    Outage(String),
    /// This record can never be written as it is.
    Record(String),
    /// The topic refuses every record until an operator acts.
    Topic(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Self::Outage(m) | Self::Record(m) | Self::Topic(m) => m,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// Classifies a produce error (`topic` for the message).
pub fn classify(topic: &str, error: &KafkaError) -> Refusal {
    let message = format!("the DLQ topic {topic} refused the record: {error}");
    match error.rdkafka_error_code() {
        Some(code) if refuses_record(code) => Refusal::Record(message),
        Some(code) if refuses_topic(code) => Refusal::Topic(message),
        _ => Refusal::Outage(message),
    }
}

/// Codes that say the record itself is unacceptable to the topic.
fn refuses_record(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidMessage
            | Code::InvalidMessageSize
            | Code::MessageSizeTooLarge
            | Code::MessageBatchTooLarge
            | Code::InvalidTimestamp
            | Code::InvalidRecord
            | Code::BadMessage
            | Code::UnsupportedForMessageFormat
            | Code::PolicyViolation
    )
}

/// Codes that say no record will be taken: the topic is gone or closed to us.
fn refuses_topic(code: Code) -> bool {
    matches!(
        code,
        Code::UnknownTopic
            | Code::UnknownPartition
            | Code::UnknownTopicOrPartition
            | Code::UnknownTopicId
            | Code::InvalidTopic
            | Code::TopicAuthorizationFailed
            | Code::ClusterAuthorizationFailed
    )
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};

    use super::{Refusal, classify};

    #[test]
    fn refusals_are_told_apart_from_outages() {
        let of = |code| classify("t.dlq", &KafkaError::MessageProduction(code));
        for code in [Code::MessageSizeTooLarge, Code::InvalidRecord, Code::InvalidMessage, Code::MessageBatchTooLarge] {
            assert!(matches!(of(code), Refusal::Record(_)), "{code:?}");
        }
        for code in [Code::TopicAuthorizationFailed, Code::UnknownTopicOrPartition, Code::UnknownTopic] {
            assert!(matches!(of(code), Refusal::Topic(_)), "{code:?}");
        }
        for code in [Code::MessageTimedOut, Code::NotEnoughReplicas, Code::LeaderNotAvailable, Code::AllBrokersDown] {
            assert!(matches!(of(code), Refusal::Outage(_)), "{code:?}");
        }
        assert!(of(Code::MessageSizeTooLarge).message().contains("t.dlq"));
    }
}
