//! The Prometheus text exposition (format 0.0.4): `idem_` names in base
//! units, `_total` counters, labels only of bounded sets (handlers, their
//! topic's partitions, outcomes, classes, the hosts of a handler's HTTP
//! allowlist, pools). No event id, offset or payload is ever a label.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;

use super::HandlerTelemetry;
use super::listener::ListenerStats;
use crate::histogram::Histogram;
use crate::stats::RelayStats;

/// A per-handler family: its name, help, and where it is in `Stats`.
type Family<T> = (&'static str, &'static str, fn(&crate::stats::Stats) -> &T);

/// A counter's value.
fn get(counter: &AtomicU64) -> f64 {
    counter.load(Ordering::Relaxed) as f64
}

/// Writes families and their samples.
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape(value));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let (buckets, count, sum) = h.snapshot();
        for (le, n) in buckets {
            let mut with_le = labels.to_vec();
            with_le.push(("le", le.as_str()));
            self.sample(&format!("{name}_bucket"), &with_le, n as f64);
        }
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, count as f64);
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{}", value as i64) } else { format!("{value}") }
}

pub(super) fn render(
    handlers: &[Arc<HandlerTelemetry>],
    relays: &[(String, Arc<RelayStats>)],
    pool: &PgPool,
    listener: &ListenerStats,
) -> String {
    let mut e = Exposition { out: String::with_capacity(16 << 10) };
    counters(&mut e, handlers);
    labelled(&mut e, handlers);
    histograms(&mut e, handlers);
    partitions(&mut e, handlers);
    throttles(&mut e, handlers);
    pools(&mut e, handlers, pool);
    process(&mut e, listener);
    outbox(&mut e, relays);
    e.out
}

/// Each handler's rates in force (events, destination hosts) and how long
/// its events and requests waited for them.
fn throttles(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>]) {
    e.family("idem_throttle_per_second", "gauge", "The rate in force, by target (events, or a destination host).");
    for h in handlers {
        for t in h.throttles.effective() {
            if let Some(rate) = h.throttles.rate(&t.target) {
                e.sample("idem_throttle_per_second", &[("handler", &h.name), ("target", &t.target)], rate.per_second);
            }
        }
    }
    e.family(
        "idem_throttle_waited_seconds_total",
        "counter",
        "Seconds events or requests waited for their target's rate or Retry-After, by target.",
    );
    for h in handlers {
        for t in h.throttles.effective() {
            let labels = [("handler", h.name.as_str()), ("target", t.target.as_str())];
            e.sample("idem_throttle_waited_seconds_total", &labels, t.waited_seconds);
        }
    }
}

/// Each handler's counters of records and of what became of them.
fn counters(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>]) {
    e.family("idem_records_total", "counter", "Records resolved, by outcome.");
    for h in handlers {
        let s = &h.stats;
        for (outcome, n) in [
            ("processed", get(&s.processed)),
            ("duplicate", get(&s.duplicates)),
            ("invalid", get(&s.invalid)),
            ("skipped", get(&s.skipped)),
            ("failed", get(&s.failed)),
        ] {
            e.sample("idem_records_total", &[("handler", &h.name), ("outcome", outcome)], n);
        }
    }
    e.family(
        "idem_offset_commits_total",
        "counter",
        "Offset commits the broker answered, by result (a failed one's positions go out again).",
    );
    for h in handlers {
        let s = &h.stats;
        for (result, n) in [("confirmed", get(&s.commits_confirmed)), ("failed", get(&s.commits_failed))] {
            e.sample("idem_offset_commits_total", &[("handler", &h.name), ("result", result)], n);
        }
    }
    let counters: [Family<AtomicU64>; 16] = [
        ("idem_records_delivered_total", "Records handed to the partition workers.", |s| &s.delivered),
        ("idem_dead_lettered_total", "Records written to the dead-letter topic.", |s| &s.dead_lettered),
        ("idem_dead_letter_envelopes_total", "Of them, envelopes: the topic refused the record as it was.", |s| {
            &s.enveloped
        }),
        (
            "idem_dlq_refused_total",
            "Times the dead-letter topic refused even an envelope; its partition waits for an operator (alert on it).",
            |s| &s.dlq_refused,
        ),
        ("idem_retries_total", "Executions repeated after a retryable failure (each spent an attempt).", |s| {
            &s.retries
        }),
        ("idem_unavailable_retries_total", "Retries because the infrastructure failed (no attempt spent).", |s| {
            &s.unavailable
        }),
        ("idem_rebalances_total", "Rebalances of the handler's consumer.", |s| &s.rebalances),
        ("idem_offset_resets_total", "Partitions that resumed away from their committed offset.", |s| &s.offset_resets),
        ("idem_transactions_total", "Transactions that committed events (a batch is one).", |s| &s.transactions),
        ("idem_db_statements_total", "Statements handlers ran.", |s| &s.db_statements),
        (
            "idem_kept_instance_traps_total",
            "Events that trapped on an instance kept from earlier events and ran again on a fresh one.",
            |s| &s.kept_traps,
        ),
        ("idem_parked_total", "Records parked in the quarantine (a key's failing event and those behind it).", |s| {
            &s.parked
        }),
        ("idem_unparked_total", "Parked events that ran again or were dead-lettered, leaving the quarantine.", |s| {
            &s.unparked
        }),
        (
            "idem_quarantine_overflow_total",
            "Events dead-lettered instead of parked: the quarantine held failure.max_parked events.",
            |s| &s.quarantine_overflow,
        ),
        (
            "idem_audit_checked_records_total",
            "Records the ledger audit accounted for (applied, dead-lettered, parked or past the retention).",
            |s| &s.audit_checked,
        ),
        (
            "idem_audit_unaccounted_total",
            "Records below the committed offset that nothing accounts for (each counted once per process).",
            |s| &s.audit_unaccounted,
        ),
    ];
    for (name, help, read) in counters {
        e.family(name, "counter", help);
        for h in handlers {
            e.sample(name, &[("handler", &h.name)], get(read(&h.stats)));
        }
    }
    gauges(e, handlers);
}

/// Each handler's gauges of what it holds now (quarantine, audit, registry).
fn gauges(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>]) {
    let gauges: [Family<AtomicU64>; 6] = [
        ("idem_quarantined_keys", "Keys parked in the quarantine now (counted every few seconds).", |s| {
            &s.quarantine_keys
        }),
        ("idem_quarantined_events", "Events parked in the quarantine now.", |s| &s.quarantine_events),
        (
            "idem_quarantine_oldest_seconds",
            "Age of the oldest parked event (0: none; counted every few seconds).",
            |s| &s.quarantine_oldest_seconds,
        ),
        (
            "idem_audit_clean_at_seconds",
            "When the ledger audit's last sweep that found nothing unaccounted ended (Unix seconds; 0: none yet).",
            |s| &s.audit_clean_at,
        ),
        (
            "idem_audit_unpublished",
            "Rows the handler emitted that the ledger audit's last sweep found unpublished 10 minutes after their \
             commit (pending or failed).",
            |s| &s.audit_unpublished,
        ),
        (
            "idem_registry_waiting",
            "Lanes waiting for the schema registry to answer (its records wait, nothing spent).",
            |s| &s.registry_waiting,
        ),
    ];
    for (name, help, read) in gauges {
        e.family(name, "gauge", help);
        for h in handlers {
            e.sample(name, &[("handler", &h.name)], get(read(&h.stats)));
        }
    }
}

/// Each handler's counts by a label (class, host, kind), and its state.
fn labelled(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>]) {
    e.family(
        "idem_failures_total",
        "counter",
        "Final failures of valid records, by class (dead-lettered, or blocking the partition).",
    );
    for h in handlers {
        for (class, n) in h.stats.failures() {
            e.sample("idem_failures_total", &[("handler", &h.name), ("class", class.as_str())], n as f64);
        }
    }
    e.family("idem_http_requests_total", "counter", "HTTP requests handlers sent, by host and status class.");
    for h in handlers {
        for ((host, class), n) in h.stats.http_requests() {
            e.sample(
                "idem_http_requests_total",
                &[("handler", &h.name), ("host", &host), ("status_class", class)],
                n as f64,
            );
        }
    }
    e.family(
        "idem_http_retries_total",
        "counter",
        "HTTP requests the host re-sent after a transient failure (with the same Idempotency-Key), by host and reason.",
    );
    for h in handlers {
        for ((host, reason), n) in h.stats.http_retries() {
            e.sample("idem_http_retries_total", &[("handler", &h.name), ("host", &host), ("reason", reason)], n as f64);
        }
    }
    e.family(
        "idem_handler_incidents_total",
        "counter",
        "Times the handler's pipeline was made again after a failure that stopped it (fenced, consumer failed or \
         stalled, worker panicked, idem's tables refused); no other handler stops (alert on it).",
    );
    for h in handlers {
        for (kind, n) in h.stats.incidents.totals() {
            e.sample("idem_handler_incidents_total", &[("handler", &h.name), ("kind", kind.as_str())], n as f64);
        }
    }
    e.family(
        "idem_handler_incident",
        "gauge",
        "1 while the handler is in an incident: its consumer is being made again.",
    );
    for h in handlers {
        e.sample(
            "idem_handler_incident",
            &[("handler", &h.name)],
            f64::from(u8::from(h.stats.incidents.current().is_some())),
        );
    }
    e.family("idem_module_version", "gauge", "The module version this host runs (0: a native handler).");
    for h in handlers {
        e.sample("idem_module_version", &[("handler", &h.name)], f64::from(h.slot.version().unwrap_or(0)));
    }
}

/// Each handler's latencies and batch sizes.
fn histograms(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>]) {
    let histograms: [Family<Histogram>; 4] = [
        ("idem_end_to_end_latency_seconds", "From a record's timestamp to its resolution (commit or DLQ).", |s| {
            &s.latency
        }),
        ("idem_handler_execution_seconds", "One handler invocation, guest code and its calls.", |s| &s.execution),
        ("idem_transaction_seconds", "BEGIN to COMMIT of a committed transaction.", |s| &s.transaction),
        ("idem_batch_size_events", "Events per committed transaction.", |s| &s.batch_size),
    ];
    for (name, help, read) in histograms {
        e.family(name, "histogram", help);
        for h in handlers {
            e.histogram(name, &[("handler", &h.name)], read(&h.stats));
        }
    }
}

/// Each assigned partition's position, end, lag and queue.
fn partitions(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>]) {
    let partitions: Vec<_> = handlers.iter().map(|h| (h, h.tap.partitions())).collect();
    let gauges: [(&str, &str); 7] = [
        ("idem_consumer_lag_records", "High watermark minus the committed position (unknown: absent)."),
        ("idem_committed_offset", "The position idem commits: every record before it is resolved."),
        ("idem_partition_high_watermark", "The partition's end (last stable offset), from librdkafka's statistics."),
        ("idem_partition_assigned", "1 while the partition is assigned to this host."),
        (
            "idem_partition_paused",
            "1 while fetching is paused: the partition's queue is full, or an operator paused it.",
        ),
        ("idem_partition_held", "1 while an operator's pause holds the partition (idem pause): nothing of it runs."),
        ("idem_partition_queue_depth", "Records fetched and waiting for the partition's worker."),
    ];
    for (name, help) in gauges {
        e.family(name, "gauge", help);
        for (h, views) in &partitions {
            for p in views {
                let partition = p.partition.to_string();
                let labels = [("handler", h.name.as_str()), ("topic", p.topic.as_str()), ("partition", &partition)];
                let value = match name {
                    "idem_consumer_lag_records" => match (p.assigned, p.position, p.high_watermark) {
                        (true, Some(pos), hw) if hw >= 0 => Some((hw - pos).max(0) as f64),
                        _ => None,
                    },
                    "idem_committed_offset" => p.position.map(|v| v as f64),
                    "idem_partition_high_watermark" => {
                        (p.assigned && p.high_watermark >= 0).then_some(p.high_watermark as f64)
                    }
                    "idem_partition_assigned" => Some(f64::from(u8::from(p.assigned))),
                    "idem_partition_paused" => Some(f64::from(u8::from(p.paused))),
                    "idem_partition_held" => Some(f64::from(u8::from(p.held))),
                    _ => Some(p.queued as f64),
                };
                if let Some(value) = value {
                    e.sample(name, &labels, value);
                }
            }
        }
    }
}

/// The database pools' connections, idem's and each handler's.
fn pools(e: &mut Exposition, handlers: &[Arc<HandlerTelemetry>], pool: &PgPool) {
    e.family(
        "idem_db_pool_connections",
        "gauge",
        "Open connections of idem's own pool (pool=\"idem\") and each handler's (pool=\"handler\"), by state.",
    );
    let mut pools = vec![("idem", String::new(), pool.clone())];
    pools.extend(handlers.iter().map(|h| ("handler", h.name.clone(), h.slot.pool())));
    for (kind, handler, p) in pools {
        let (size, idle) = (p.size(), u32::try_from(p.num_idle()).unwrap_or(u32::MAX));
        for (state, n) in [("idle", idle), ("busy", size.saturating_sub(idle))] {
            let mut labels = vec![("pool", kind)];
            if !handler.is_empty() {
                labels.push(("handler", handler.as_str()));
            }
            labels.push(("state", state));
            e.sample("idem_db_pool_connections", &labels, f64::from(n));
        }
    }
}

/// The process's memory and CPU, and the admin listener's counters.
fn process(e: &mut Exposition, listener: &ListenerStats) {
    if let Some(bytes) = super::process::resident_bytes() {
        e.family("idem_process_resident_memory_bytes", "gauge", "Resident memory of the idem process.");
        e.sample("idem_process_resident_memory_bytes", &[], bytes as f64);
    }
    if let Some(seconds) = super::process::cpu_seconds() {
        e.family("idem_process_cpu_seconds_total", "counter", "User and system CPU time of the idem process.");
        e.sample("idem_process_cpu_seconds_total", &[], seconds);
    }
    for f in listener.families() {
        e.family(f.name, f.kind, f.help);
        for (value, n) in f.samples {
            let labels: &[(&str, &str)] = if f.label.is_empty() { &[] } else { &[(f.label, value)] };
            e.sample(f.name, labels, n as f64);
        }
    }
}

/// Each outbox producer's relay on this host (its pending rows and their
/// age as its last round counted them, while it holds the lease).
fn outbox(e: &mut Exposition, relays: &[(String, Arc<RelayStats>)]) {
    if relays.is_empty() {
        return;
    }
    type Read = fn(&RelayStats) -> f64;
    let families: [(&str, &str, &str, Read); 5] = [
        ("idem_outbox_published_total", "counter", "Outbox rows this host published.", |s| get(&s.published)),
        (
            "idem_outbox_failed_total",
            "counter",
            "Outbox rows the broker refused for good (idem outbox shows them).",
            |s| get(&s.failed),
        ),
        ("idem_outbox_pending", "gauge", "Outbox rows not yet published, as the lease holder last counted.", |s| {
            get(&s.pending)
        }),
        ("idem_outbox_oldest_pending_seconds", "gauge", "The age of the oldest of them.", |s| {
            get(&s.oldest_ms) / 1000.0
        }),
        ("idem_outbox_lease_held", "gauge", "1 when this host's relay holds the producer's lease.", |s| {
            f64::from(u8::from(s.holding.load(Ordering::Relaxed)))
        }),
    ];
    for (name, kind, help, read) in families {
        e.family(name, kind, help);
        for (producer, stats) in relays {
            e.sample(name, &[("producer", producer)], read(stats));
        }
    }
}
