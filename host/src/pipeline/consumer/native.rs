//! The one consumer call rust-rdkafka does not wrap: an asynchronous
//! commit whose result comes back.
//!
//! rust-rdkafka's `commit(.., CommitMode::Async)` is librdkafka's
//! `rd_kafka_commit(.., async = 1)`, which sends the result nowhere unless
//! an `offset_commit_cb` is set in the configuration, and rust-rdkafka sets
//! none (it uses the event API): `ConsumerContext::commit_callback` is never
//! called for it, success or failure. Measured: not one result in a run of
//! thousands of commits. `rd_kafka_commit_queue` with the consumer's own
//! queue posts the result there as an `OFFSET_COMMIT` event, which
//! `BaseConsumer::poll` hands to `commit_callback` on the polling thread.
//! A confirmed commit is how the stall watch knows the group coordinator
//! still answers (`stall`).

use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer as _;
use rdkafka::error::{IsError as _, KafkaError, KafkaResult};

use super::HandlerConsumer;

/// Commits `offsets` asynchronously; the broker's answer arrives on the
/// consumer's queue, for its context's `commit_callback`.
pub(super) fn commit_async(consumer: &HandlerConsumer, offsets: &TopicPartitionList) -> KafkaResult<()> {
    let rk = consumer.client().native_ptr();
    #[expect(
        unsafe_code,
        reason = "two librdkafka calls rust-rdkafka does not wrap; the pointers are the live consumer's and \
                  the list's, and the queue handle taken is released before returning"
    )]
    // SAFETY: `rk` is the consumer's client, alive for this borrow.
    // `rd_kafka_queue_get_consumer` returns a new reference to its consumer
    // queue (NULL when it has no group), released by
    // `rd_kafka_queue_destroy` after the commit took its own reference for
    // the reply. `rd_kafka_commit_queue` copies `offsets`; a NULL callback
    // is what the event API asks for.
    let err = unsafe {
        let queue = rdkafka_sys::rd_kafka_queue_get_consumer(rk);
        if queue.is_null() {
            return Err(KafkaError::ConsumerCommit(rdkafka::error::RDKafkaErrorCode::UnknownGroup));
        }
        let err = rdkafka_sys::rd_kafka_commit_queue(rk, offsets.ptr(), queue, None, std::ptr::null_mut());
        rdkafka_sys::rd_kafka_queue_destroy(queue);
        err
    };
    if err.is_error() { Err(KafkaError::ConsumerCommit(err.into())) } else { Ok(()) }
}
