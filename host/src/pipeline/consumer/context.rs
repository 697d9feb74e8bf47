//! librdkafka's calls into a handler's consumer: its log, statistics,
//! errors, rebalances and commit results, on the handler's [`IdemContext`].

use super::*;

/// A consumer's rdkafka context: a handle on its handler's [`IdemContext`].
/// A consumer rebuilt after a fatal error (KIP-848's unreleased instance
/// id, `poll_loop`) gets a new handle on the same state, so partitions,
/// counters and the metrics' tap carry over.
pub(crate) struct Ctx(pub(crate) Arc<IdemContext>);

/// A handler's Kafka consumer.
pub(crate) type HandlerConsumer = BaseConsumer<Ctx>;

impl std::ops::Deref for Ctx {
    type Target = IdemContext;
    fn deref(&self) -> &IdemContext {
        &self.0
    }
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        self.0.on_log(level, fac, message);
    }
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.0.on_stats(statistics);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(line) = self.0.repeats.client_error(&error, reason) {
            tracing::error!(target: "librdkafka", handler = %self.shared.name, "{line}");
        }
    }
}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, consumer: &HandlerConsumer, rebalance: &Rebalance<'_>) {
        self.0.on_pre_rebalance(consumer, rebalance);
    }
    fn post_rebalance(&self, _consumer: &HandlerConsumer, rebalance: &Rebalance<'_>) {
        self.0.on_post_rebalance(rebalance);
    }
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        self.0.on_commit(result, offsets);
    }
}

impl IdemContext {
    fn on_log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::kafka_client::log(level, fac, message);
        if fac == "OFFSET" {
            self.note_offset_reset(message);
        }
    }

    /// librdkafka's statistics (`statistics.interval.ms`): each assigned
    /// partition's high watermark, for the consumer-lag metric.
    /// Membership too: a consumer whose group state is not `up` (it lost
    /// its session, was fenced) is not joined, whatever it was assigned.
    fn on_stats(&self, statistics: rdkafka::Statistics) {
        if let Some(group) = &statistics.cgrp
            && self.joined.load(Ordering::SeqCst)
            && group.state != "up"
        {
            self.joined.store(false, Ordering::SeqCst);
        }
        if let Some(group) = statistics.cgrp.as_ref().filter(|group| group.state == "up")
            && !self.silent
        {
            self.watch().up(Instant::now(), &group.join_state);
        }
        let mut lows = self.lows.lock().unwrap_or_else(|e| e.into_inner());
        for (name, topic) in &statistics.topics {
            for (partition, p) in topic.partitions.iter().filter(|(_, p)| p.lo_offset >= 0) {
                lows.insert((name.clone(), *partition), p.lo_offset);
            }
        }
        drop(lows);
        let mut watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        for (name, topic) in &statistics.topics {
            for (partition, p) in &topic.partitions {
                // Under read_committed (librdkafka's default) the end a
                // consumer can reach is the last stable offset.
                let end = if p.ls_offset >= 0 { p.ls_offset } else { p.hi_offset };
                // Only ever raised within an assignment: a paused partition's
                // statistics keep the end it last fetched, below the one
                // `pipeline::ends` looked up.
                if let Some(known) = watermarks.get_mut(&(name.clone(), *partition))
                    && end >= 0
                {
                    *known = (*known).max(end);
                }
            }
        }
    }

    fn on_pre_rebalance(&self, consumer: &HandlerConsumer, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => self.revoke(consumer, tpl),
            Rebalance::Error(e) => {
                self.joined.store(false, Ordering::SeqCst);
                tracing::warn!(handler = %self.shared.name, "rebalance error: {e}");
            }
            Rebalance::Assign(_) => {}
        }
    }

    fn on_post_rebalance(&self, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.watch().assigned(Instant::now());
            self.assign(tpl);
            let mut watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
            for element in tpl.elements() {
                // Unknown until this assignment's first statistics.
                watermarks.insert((element.topic().to_owned(), element.partition()), -1);
            }
            drop(watermarks);
            self.joined.store(true, Ordering::SeqCst);
            // A consumer made again after an incident is in its group.
            self.shared.stats.incidents.ended();
        }
    }

    /// The broker's answer to an asynchronous commit (`native`). A failed
    /// one is logged, and its positions go out again with the periodic
    /// re-commit (`Positions::All`); a confirmed one is the surest sign the
    /// consumer is in its group (`stall`).
    fn on_commit(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        // Every offset was committed already: nothing was needed.
        let result = result.or_else(|e| if nothing_new(&e) { Ok(()) } else { Err(e) });
        let stats = &self.shared.stats;
        Stats::add(if result.is_ok() { &stats.commits_confirmed } else { &stats.commits_failed });
        if let Err(e) = &result
            && let Some(line) = self.repeats.line(&format!("commit: {e}"), format_args!("offset commit failed: {e}"))
        {
            tracing::warn!(handler = %self.shared.name, "{line}");
        }
        if !self.silent {
            self.watch().answered_commit(Instant::now(), result.is_ok());
        }
        if result.is_ok() {
            self.confirm_rewinds(offsets);
        }
    }

    pub(crate) fn watch(&self) -> MutexGuard<'_, StallWatch> {
        self.stall.lock().unwrap_or_else(|e| e.into_inner())
    }
}
