//! `[[handler]]`: one handler's keys, its defaults, and what is derived
//! from them (schema, role, settings).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::retention::{self, Span, StalePolicy};

/// A handler's place in the database: its schema, the migrations that
/// create its tables, and the login role its connections use.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerDatabase {
    /// The schema the handler owns the rows of (default: the handler's
    /// name, with `-` and `.` as `_`). Its search_path is this schema, then
    /// `pg_catalog`.
    pub schema: Option<String>,
    /// Folder of `NNNN_name.sql` files that `idem migrate --config` applies
    /// in order, as the administrator, with `search_path` set to the schema.
    /// Relative to the config file.
    pub migrations: Option<PathBuf>,
    /// The login role (default: `<database>_<schema>`, as roles are shared
    /// by every database of a server).
    pub role: Option<String>,
    /// The environment variable holding the role's password (none: the
    /// server authenticates the role some other way, e.g. trust or a cert).
    /// `idem migrate` sets the role's password from it, `idem run` logs in
    /// with it; it is never printed.
    pub password_env: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// The handler's name: its dedup namespace. Unique in the file.
    pub name: String,
    pub topic: String,
    /// The Kafka consumer group. Unique in the file.
    pub group_id: String,
    /// Path of the component (`.wasm`), relative to the config file.
    /// Exactly one of `component` and `native`.
    #[serde(default)]
    pub component: Option<PathBuf>,
    /// A native handler the program embedding idem registered under this
    /// name (see `idem::runtime::native`); the `idem` binary has none.
    #[serde(default)]
    pub native: Option<String>,
    /// `"store"`: the handler's module comes from the module store only
    /// (`idem deploy`); the host refuses to start while it holds none.
    /// Exactly one of `component`, `module` and `native`.
    #[serde(default)]
    pub module: Option<String>,
    /// Largest module an upload may have, in MiB.
    #[serde(default = "default_max_module_mib")]
    pub max_module_mib: usize,
    /// CPU seconds compiling the handler's component may take (in a child
    /// process, which is killed past them); an upload that needs more is
    /// refused.
    #[serde(default = "default_max_compile_seconds")]
    pub max_compile_seconds: u64,
    /// The `eventType`s this handler accepts; any other is invalid.
    pub event_types: Vec<String>,
    /// How its records are encoded: `json` (default), `avro`, `protobuf`
    /// or `json-schema` (the last three framed for `[registry]`).
    #[serde(default)]
    pub format: super::Format,
    /// The reader schema, relative to the config file: a JSON Schema (draft
    /// 2020-12) for `json` and `json-schema`, an `.avsc` for `avro`, a
    /// `.proto` for `protobuf`.
    pub schema: PathBuf,
    /// `protobuf`: the message of `schema` the handler reads (its full
    /// name, e.g. `shop.v1.OrderConfirmed`; default: the file's first).
    #[serde(default)]
    pub message: Option<String>,
    /// The registry subject whose versions the contract check reads the
    /// reader schema against (default: `<topic>-value`, the serializers'
    /// TopicNameStrategy).
    #[serde(default)]
    pub subject: Option<String>,
    /// Where `eventId`, `eventType` and `occurredAt` are in the record.
    #[serde(default)]
    pub envelope: super::Envelope,
    /// Executions at once, over all the handler's partitions and lanes
    /// (each holds one of the handler's database connections).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Which records of a partition may run at the same time: `"partition"`
    /// (default; none), `"key"` (different keys) or `"none"` (any). See
    /// `config/ordering.rs`.
    #[serde(default)]
    pub ordering: super::Ordering,
    /// Lanes per partition under `ordering = "key"` or `"none"` (default 8).
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Moved to `[handler.batch] max_events`; kept only to say so.
    #[serde(default)]
    pub(super) max_events: Option<usize>,
    /// Moved to `[handler.retry] max_attempts`; kept only to say so.
    #[serde(default)]
    pub(super) max_attempts: Option<u32>,
    /// Events a second this handler runs on one host at most (none: no
    /// limit); an operator may change it at run time (see `throttle`).
    #[serde(default)]
    pub max_events_per_second: Option<f64>,
    /// Wall-clock limit of one execution, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Linear memory one instance may grow to, in MiB.
    #[serde(default = "default_max_memory_mib")]
    pub max_memory_mib: usize,
    /// Events one instance of the component serves before a fresh one
    /// replaces it. 1: every event gets a fresh instance, so no memory of
    /// one event's run (statics, an interpreter's heap) reaches another.
    /// Above 1, a guest's memory carries over from event to event, even
    /// from one whose transaction rolled back: for handlers that keep no
    /// state in memory, and the way to run interpreted languages fast (see
    /// `runtime/warm.rs`). An instance that traps or overruns is never
    /// reused. Not set: chosen by the component (`runtime::policy`): 1000
    /// for one built by componentize-py or ComponentizeJS (the Python and
    /// TypeScript SDKs), whose interpreter takes milliseconds to start, and
    /// for one that declares itself reusable (the Rust SDK's
    /// `handler!(f, reusable)`), 1 for the rest.
    #[serde(default)]
    pub events_per_instance: Option<u32>,
    /// The consumer-group protocol: `classic` (default) or `consumer`
    /// (KIP-848). See `config/group.rs`.
    #[serde(default)]
    pub group_protocol: super::GroupProtocol,
    /// Classic: `cooperative-sticky` (default), `range` or `roundrobin`;
    /// consumer: `uniform` (the broker's default) or `range`.
    #[serde(default)]
    pub assignor: Option<String>,
    /// Where a group without committed offsets starts: `earliest` (default) or `latest`.
    #[serde(default = "default_auto_offset_reset")]
    pub auto_offset_reset: String,
    /// Extra librdkafka properties for this handler's consumer (they win
    /// over `[kafka.properties]`), e.g. a SASL user of its own.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// As `[kafka.properties_env]`, for this handler's consumer.
    #[serde(default)]
    pub properties_env: BTreeMap<String, String>,
    #[serde(default)]
    pub http: HandlerHttp,
    /// Key/values the guest reads through `config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    #[serde(default)]
    pub database: HandlerDatabase,
    #[serde(default)]
    pub limits: HandlerLimits,
    #[serde(default)]
    pub retry: HandlerRetry,
    /// What becomes of an event whose retries are spent: `[handler.failure]`.
    #[serde(default)]
    pub failure: super::HandlerFailure,
    #[serde(default)]
    pub batch: HandlerBatch,
    /// The ledger audit's pace: `[handler.audit]`.
    #[serde(default)]
    pub audit: super::HandlerAudit,
    /// When a canary is rolled back by itself: `[handler.canary]`.
    #[serde(default)]
    pub canary: super::HandlerCanary,
    /// A sample of live events kept for replay tests: `[handler.capture]`.
    #[serde(default)]
    pub capture: super::HandlerCapture,
    /// The topics it may emit events to (the outbox): `[[handler.emit]]`.
    #[serde(default)]
    pub emit: Vec<super::HandlerEmit>,
    /// How long this handler's dedup rows are kept (`"7d"`): a redelivery
    /// later than that may find its row gone (see `stale_events`).
    #[serde(default = "retention::default_dedup_retention")]
    pub dedup_retention: Span,
    /// What becomes of an event older than `dedup_retention` that has no
    /// dedup row: `"dlq"` (default), `"process"` or `"skip"`.
    #[serde(default)]
    pub stale_events: StalePolicy,
    /// Whether the events it emits carry on the `idem.correlation-id` and
    /// `traceparent` of the record that caused them. false (default): that
    /// record's producer is not trusted to name the chain; an emit's
    /// correlation id is its cause's own id and its `traceparent` only the
    /// host's span's (see `capabilities::emit::write::provenance`).
    #[serde(default)]
    pub trust_input_trace_headers: bool,
}

/// Events per transaction (docs/guarantees.md, "Batching").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerBatch {
    /// At most this many events of one partition in one transaction; 1 is
    /// the seed's per-event mode.
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// How long a batch that is not full waits for more records.
    #[serde(default = "default_max_wait_ms")]
    pub max_wait_ms: u64,
    /// Events of one batch that run at the same time, among those the
    /// handler's `ordering` lets run at once (different partitions' when a
    /// batch spans partitions; different keys under `"key"`, any under
    /// `"none"`): their HTTP requests go out together, their statements take
    /// the batch's transaction in turn. They share that transaction, so a
    /// row lock of one does not hold another back (docs/guarantees.md, "Events of a
    /// batch at once").
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: usize,
}

impl Default for HandlerBatch {
    fn default() -> Self {
        Self {
            max_events: default_max_events(),
            max_wait_ms: default_max_wait_ms(),
            max_concurrent: default_max_concurrent(),
        }
    }
}

/// 100 events share one commit and a few round trips; a failure among
/// them costs re-running the events before it, so larger batches buy
/// little more (see docs/benchmark.md).
fn default_max_events() -> usize {
    100
}
fn default_max_wait_ms() -> u64 {
    5
}
/// One at a time: a batch's events in their order, as before lanes.
fn default_max_concurrent() -> usize {
    1
}

/// What happens to an event that fails (the failure table in docs/guarantees.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerRetry {
    /// Executions of a retryably failing event before its failure is final.
    /// Failures of the infrastructure (class *unavailable*) do not count.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The first backoff; each next one doubles, up to `max_backoff_ms`,
    /// each drawn between half and all of that (jitter).
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// `dlq` (default): a final failure goes to the dead-letter topic and
    /// the partition goes on. `block`: the partition stops at it and says
    /// so, for handlers whose per-key order matters more than progress.
    #[serde(default = "default_on_failure")]
    pub on_failure: OnFailure,
    /// The dead-letter topic (default `<topic>.<handler>.dlq`: handlers
    /// never share one).
    #[serde(default)]
    pub dlq_topic: Option<String>,
}

impl Default for HandlerRetry {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            on_failure: default_on_failure(),
            dlq_topic: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    Dlq,
    Block,
}

fn default_on_failure() -> OnFailure {
    OnFailure::Dlq
}
/// 12 attempts, 500 ms doubling to 60 s, each backoff jittered between
/// half and all of its value: 151 to 303 s between the first and the last
/// attempt (about 4 minutes on average), enough to ride out a provider's
/// outage of a few minutes before anything reaches the DLQ.
fn default_initial_backoff_ms() -> u64 {
    500
}
fn default_max_backoff_ms() -> u64 {
    60_000
}

/// Per-event caps on what a guest may ask of the host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerLimits {
    /// Database statements one invocation may run.
    #[serde(default = "default_max_db_statements")]
    pub max_db_statements: u32,
    /// HTTP requests one invocation may send.
    #[serde(default = "default_max_http_requests")]
    pub max_http_requests: u32,
    /// Temporary files one of the handler role's statements may write
    /// (sorts and hashes spilling to disk), MiB: `temp_file_limit` on the
    /// role, set by `idem migrate --config`.
    #[serde(default = "default_temp_file_limit_mib")]
    pub temp_file_limit_mib: u32,
    /// Memory one sort or hash of the role's statements may take before
    /// spilling, MiB: `work_mem` on the role.
    #[serde(default = "default_work_mem_mib")]
    pub work_mem_mib: u32,
    /// Events one invocation may emit (`[[handler.emit]]`).
    #[serde(default = "default_max_emits")]
    pub max_emits: u32,
    /// Bytes of one emitted event's payload and headers together.
    #[serde(default = "default_max_emit_bytes")]
    pub max_emit_bytes: usize,
}

impl Default for HandlerLimits {
    fn default() -> Self {
        Self {
            max_db_statements: default_max_db_statements(),
            max_http_requests: default_max_http_requests(),
            temp_file_limit_mib: default_temp_file_limit_mib(),
            work_mem_mib: default_work_mem_mib(),
            max_emits: default_max_emits(),
            max_emit_bytes: default_max_emit_bytes(),
        }
    }
}

fn default_max_emits() -> u32 {
    16
}
fn default_max_emit_bytes() -> usize {
    64 << 10
}
fn default_temp_file_limit_mib() -> u32 {
    256
}
fn default_work_mem_mib() -> u32 {
    4
}

fn default_max_db_statements() -> u32 {
    1_000
}
fn default_max_http_requests() -> u32 {
    16
}

fn default_concurrency() -> usize {
    1
}
fn default_max_attempts() -> u32 {
    12
}
fn default_timeout_ms() -> u64 {
    30_000
}
fn default_max_compile_seconds() -> u64 {
    super::DEFAULT_MAX_COMPILE_SECONDS
}

fn default_max_module_mib() -> usize {
    32
}
fn default_max_memory_mib() -> usize {
    256
}
fn default_auto_offset_reset() -> String {
    "earliest".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerHttp {
    /// Base URLs the handler may call. Empty: none.
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default = "default_http_timeout_ms")]
    pub timeout_ms: u64,
    /// Prepended to every Idempotency-Key as `<prefix>:`.
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// Entries of `allow` that may reach private addresses (loopback,
    /// RFC 1918, link-local, …). Every other entry reaches public ones only.
    #[serde(default)]
    pub allow_private: Vec<String>,
    /// Headers the host adds to requests under a base URL, with values
    /// from the environment; the guest never sees them.
    #[serde(default, rename = "credential")]
    pub credentials: Vec<HttpCredential>,
    /// Re-sending transient failures with the same key (on by default).
    #[serde(default)]
    pub retry: HttpRetry,
    /// Requests a second to a destination host, by host name.
    #[serde(default)]
    pub rate: BTreeMap<String, super::HttpRate>,
}

/// `[handler.http.retry]`: a request that meets a transient failure
/// (connection refused or reset, a timeout, 429/502/503/504) is sent again
/// with its `Idempotency-Key`, inside the invocation's budget.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRetry {
    /// Sends per request, the first included: 1 turns re-sending off.
    #[serde(default = "default_http_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_http_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_http_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

impl Default for HttpRetry {
    fn default() -> Self {
        Self {
            max_attempts: default_http_attempts(),
            initial_backoff_ms: default_http_initial_backoff_ms(),
            max_backoff_ms: default_http_max_backoff_ms(),
        }
    }
}

fn default_http_attempts() -> u32 {
    3
}
fn default_http_initial_backoff_ms() -> u64 {
    // The benchmark's variant f: at 50 the waits after 4% dropped
    // connections halved throughput (each drop waited ~25 ms).
    10
}
fn default_http_max_backoff_ms() -> u64 {
    1_000
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpCredential {
    /// An entry of `allow`.
    pub base: String,
    /// e.g. `Authorization`.
    pub header: String,
    /// The environment variable holding the header's value.
    pub value_env: String,
}

impl Default for HandlerHttp {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            timeout_ms: default_http_timeout_ms(),
            key_prefix: None,
            allow_private: Vec::new(),
            credentials: Vec::new(),
            retry: HttpRetry::default(),
            rate: BTreeMap::new(),
        }
    }
}

fn default_http_timeout_ms() -> u64 {
    5_000
}

impl HandlerConfig {
    /// A handler named `name` with every default a `[[handler]]` section
    /// leaves out, and nothing of its own (no topic, component or schema):
    /// what `runtime::HandlerSettings::new` starts from, so that each
    /// default is written once, here.
    pub fn named(name: String) -> Self {
        Self {
            group_id: name.clone(),
            name,
            topic: String::new(),
            component: None,
            native: None,
            module: None,
            max_module_mib: default_max_module_mib(),
            max_compile_seconds: default_max_compile_seconds(),
            event_types: Vec::new(),
            format: super::Format::default(),
            schema: PathBuf::new(),
            message: None,
            subject: None,
            envelope: super::Envelope::default(),
            concurrency: default_concurrency(),
            ordering: super::Ordering::default(),
            max_in_flight: None,
            max_events: None,
            max_attempts: None,
            max_events_per_second: None,
            timeout_ms: default_timeout_ms(),
            max_memory_mib: default_max_memory_mib(),
            events_per_instance: None,
            group_protocol: super::GroupProtocol::default(),
            assignor: None,
            auto_offset_reset: default_auto_offset_reset(),
            properties: BTreeMap::new(),
            properties_env: BTreeMap::new(),
            http: HandlerHttp::default(),
            config: BTreeMap::new(),
            database: HandlerDatabase::default(),
            limits: HandlerLimits::default(),
            retry: HandlerRetry::default(),
            failure: super::HandlerFailure::default(),
            batch: HandlerBatch::default(),
            audit: super::HandlerAudit::default(),
            canary: super::HandlerCanary::default(),
            capture: super::HandlerCapture::default(),
            emit: Vec::new(),
            dedup_retention: retention::default_dedup_retention(),
            stale_events: StalePolicy::default(),
            trust_input_trace_headers: false,
        }
    }

    /// The registry subject of the handler's records (`subject`, or `<topic>-value`).
    pub fn subject(&self) -> String {
        self.subject.clone().unwrap_or_else(|| format!("{}-value", self.topic))
    }

    /// Lanes per partition (see `config/ordering.rs`).
    pub fn lanes(&self) -> u32 {
        super::ordering::lanes(self.ordering, self.max_in_flight)
    }

    /// Whether an exhausted event parks its key (`[handler.failure]`).
    pub fn quarantines(&self) -> bool {
        self.failure.on_exhausted == super::OnExhausted::Quarantine
    }

    /// The handler's configured rates by target (`events`, a host), as
    /// checked when the config loaded.
    pub fn rates(&self) -> BTreeMap<String, crate::throttle::Rate> {
        super::rates::check("", self.max_events_per_second, &self.http.rate).unwrap_or_default()
    }

    /// The handler's dead-letter topic.
    pub fn dlq_topic(&self) -> String {
        self.retry.dlq_topic.clone().unwrap_or_else(|| format!("{}.{}.dlq", self.topic, self.name))
    }

    /// The backoff before attempt `attempt + 1` (or before retrying an
    /// unavailable infrastructure for the `attempt`-th time), jittered.
    pub fn backoff(&self, attempt: u32) -> std::time::Duration {
        let doubled = self.retry.initial_backoff_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(30));
        let ceiling = doubled.min(self.retry.max_backoff_ms);
        // Equal jitter: at least half the backoff, so retries never bunch up
        // at zero, and spread over the other half.
        let spread = ceiling / 2;
        let jitter = if spread == 0 { 0 } else { u64::from(uuid::Uuid::now_v7().as_bytes()[15]) * spread / 255 };
        std::time::Duration::from_millis(ceiling - spread + jitter)
    }

    /// The schema this handler owns.
    pub fn schema_name(&self) -> String {
        self.database.schema.clone().unwrap_or_else(|| sanitize(&self.name))
    }

    /// The login role of this handler's connections in `database`.
    pub fn role_name(&self, database: &str) -> String {
        self.database.role.clone().unwrap_or_else(|| {
            let mut role = format!("{}_{}", sanitize(database), self.schema_name());
            role.truncate(63);
            role
        })
    }
}

/// `name` as a lowercase identifier: other characters become `_`.
fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect()
}
