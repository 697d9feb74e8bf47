//! The arguments several commands share (clap's derive): a running
//! host's admin API, a DLQ and its filters and pages, a pause's scope, a
//! rewind's request.

use std::path::PathBuf;

use crate::output::{out, outln};

#[derive(clap::Args)]
pub(super) struct DlqTarget {
    /// The host's config: the handler's DLQ topic, the brokers, the DLQ key.
    #[arg(long, default_value = "idem.toml")]
    pub(super) config: PathBuf,
    /// The handler whose dead-letter topic is read (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// Records that failed at or after this time: RFC 3339, a date
    /// (midnight UTC), today, yesterday, or a span ago (30m, 1h, 2d).
    #[arg(long, value_parser = super::when::parse)]
    pub(super) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Records that failed before this time (as `--since`).
    #[arg(long, value_parser = super::when::parse)]
    pub(super) until: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many records.
    #[arg(long)]
    pub(super) limit: Option<usize>,
    /// One JSON line instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

/// What `idem dlq search` looks for (the API's filters).
#[derive(clap::Args)]
pub(super) struct DlqFilters {
    /// The handler whose dead letters are searched (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// A failure class (permanent, retryable, invalid, …).
    #[arg(long)]
    pub(super) class: Option<String>,
    /// Text the failure reason contains (any case).
    #[arg(long)]
    pub(super) reason: Option<String>,
    /// The record's key, exactly.
    #[arg(long)]
    pub(super) key: Option<String>,
    /// The event's id.
    #[arg(long)]
    pub(super) event_id: Option<String>,
    /// A header the source record carried (its name).
    #[arg(long)]
    pub(super) header: Option<String>,
    /// A payload field and its value: `customer.id=42`.
    #[arg(long, value_name = "PATH=VALUE")]
    pub(super) field: Option<String>,
    /// Failed at or after this time (RFC 3339, a date, today, yesterday, 30m, 1h, 2d).
    #[arg(long, value_parser = super::when::parse)]
    pub(super) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Failed before this time (as `--since`).
    #[arg(long, value_parser = super::when::parse)]
    pub(super) until: Option<chrono::DateTime<chrono::Utc>>,
    /// What a replay made of it (applied, duplicate, failed_again,
    /// discarded, …), or `none`.
    #[arg(long)]
    pub(super) outcome: Option<String>,
}

/// Which page of a search `idem dlq search` prints.
#[derive(clap::Args)]
pub(super) struct DlqPage {
    /// Oldest first (newest first by default).
    #[arg(long)]
    pub(super) oldest: bool,
    /// The page after this cursor (what `more: --after …` printed).
    #[arg(long)]
    pub(super) after: Option<String>,
    /// Rows shown (1 to 500).
    #[arg(long, default_value_t = 50)]
    pub(super) limit: usize,
}

impl DlqFilters {
    /// The filters as the API names them (its query parameters, or the
    /// fields of a replay's or a discard's `search`).
    pub(super) fn pairs(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let mut q: Vec<(&'static str, String)> = Vec::new();
        let text = [
            ("class", &self.class),
            ("reason", &self.reason),
            ("key", &self.key),
            ("event_id", &self.event_id),
            ("header", &self.header),
            ("outcome", &self.outcome),
        ];
        q.extend(text.into_iter().filter_map(|(k, v)| v.clone().map(|v| (k, v))));
        if let Some(field) = &self.field {
            if field.split_once('=').is_none_or(|(path, _)| path.is_empty()) {
                anyhow::bail!("--field `{field}`: give PATH=VALUE, e.g. customer.id=42");
            }
            q.push(("field", field.clone()));
        }
        for (k, v) in [("since", self.since), ("until", self.until)] {
            if let Some(v) = v {
                q.push((k, v.to_rfc3339()));
            }
        }
        Ok(q)
    }

    /// The filters as a replay's or a discard's `search` object.
    pub(super) fn search(&self) -> anyhow::Result<serde_json::Value> {
        Ok(self.pairs()?.into_iter().map(|(k, v)| (k.to_owned(), serde_json::Value::String(v))).collect())
    }

    /// Filters an offline replay (`--config`) cannot apply: it reads the
    /// topic, not the index, by time and class only.
    pub(super) fn beyond_offline(&self) -> Vec<&'static str> {
        let given = [
            ("--reason", self.reason.is_some()),
            ("--key", self.key.is_some()),
            ("--event-id", self.event_id.is_some()),
            ("--header", self.header.is_some()),
            ("--field", self.field.is_some()),
            ("--outcome", self.outcome.is_some()),
        ];
        given.into_iter().filter(|(_, g)| *g).map(|(name, _)| name).collect()
    }
}

impl DlqPage {
    /// The search's paging parameters.
    pub(super) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("limit", self.limit.to_string())];
        q.extend(self.after.clone().map(|a| ("after", a)));
        if self.oldest {
            q.push(("order", "oldest".into()));
        }
        q
    }
}

/// What `idem pause` and `idem resume` act on.
#[derive(clap::Args)]
pub(super) struct PauseScope {
    /// The handler (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// Only this topic of the handler.
    #[arg(long)]
    pub(super) topic: Option<String>,
    /// Only this partition (of `--topic`, or of the topic the handler
    /// consumes when `--topic` is left out).
    #[arg(long)]
    pub(super) partition: Option<i32>,
}

impl PauseScope {
    pub(super) fn body(&self) -> serde_json::Value {
        serde_json::json!({ "topic": self.topic, "partition": self.partition })
    }
}

#[derive(clap::Args)]
pub(super) struct AdminTarget {
    /// The admin API of a running host (`[admin] listen`).
    #[arg(long, env = "IDEM_ADMIN_URL", default_value = "http://127.0.0.1:7700")]
    pub(super) url: String,
    /// Its bearer token, if it has one (a command that only reads falls
    /// back to $IDEM_ADMIN_READ_TOKEN).
    #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
    pub(super) token: Option<String>,
    /// The API's JSON instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

impl AdminTarget {
    pub(super) fn target(&self) -> crate::admin::client::Target {
        crate::admin::client::Target { url: self.url.clone(), token: self.token.clone().filter(|t| !t.is_empty()) }
    }

    /// [`Self::target`] for a command that only reads: without a token
    /// given, the read-scope one from `$IDEM_ADMIN_READ_TOKEN`.
    pub(super) fn reading(&self) -> crate::admin::client::Target {
        let mut target = self.target();
        target.token = target.token.or_else(read_token);
        target
    }

    pub(super) fn print(
        &self,
        answer: &serde_json::Value,
        human: impl FnOnce(&serde_json::Value) -> String,
    ) -> anyhow::Result<()> {
        if self.json { outln!("{answer}") } else { out!("{}", human(answer)) }
    }
}

impl DlqTarget {
    pub(super) fn window(&self) -> crate::pipeline::replay::Window {
        crate::pipeline::replay::Window { since: self.since, until: self.until, limit: self.limit, class: None }
    }
}

/// `$IDEM_ADMIN_READ_TOKEN`, if set.
pub(super) fn read_token() -> Option<String> {
    crate::env::non_blank(crate::env::ADMIN_READ_TOKEN)
}

/// What `idem rewind` was asked.
#[derive(clap::Args)]
pub(super) struct RewindArgs {
    #[command(flatten)]
    pub(super) admin: AdminTarget,
    /// The handler (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// Where to: `earliest`, an offset (`40`), or a time
    /// (`2026-12-04T09:00:00Z`, the first record at or after it).
    #[arg(long, required_unless_present_any = ["list", "report"])]
    pub(super) to: Option<String>,
    /// Only this topic of the handler (its own).
    #[arg(long)]
    pub(super) topic: Option<String>,
    /// Only this partition.
    #[arg(long)]
    pub(super) partition: Option<i32>,
    /// Count only: rewind nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Rewind although the window reaches past the handler's dedup
    /// retention (its events there may be applied a second time).
    #[arg(long)]
    pub(super) force: bool,
    /// Why (kept with the rewind and in the audit trail).
    #[arg(long, default_value = "")]
    pub(super) reason: String,
    /// The handler's rewinds instead, newest first.
    #[arg(long, conflicts_with_all = ["to", "report"])]
    pub(super) list: bool,
    /// Rewind ID's report instead: per partition, its window's events
    /// applied before the rewind (duplicates), since (anew), and not.
    #[arg(long, value_name = "ID", conflicts_with = "to")]
    pub(super) report: Option<i64>,
}

/// `idem quarantine`: a handler's parked keys, or an operator's release
/// or dead-lettering of one.
#[derive(clap::Args)]
pub(super) struct QuarantineArgs {
    #[command(flatten)]
    pub(super) admin: AdminTarget,
    /// The handler (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// Releases this key: its parked events run again, in their order,
    /// each once.
    #[arg(long, value_name = "KEY", conflicts_with = "dead_letter")]
    pub(super) release: Option<String>,
    /// Sends this key's parked events to the dead-letter topic, in order,
    /// and lets the key go.
    #[arg(long, value_name = "KEY")]
    pub(super) dead_letter: Option<String>,
    /// The KEY given is base64 (a key that is not text: as listed under
    /// `key_base64`).
    #[arg(long)]
    pub(super) base64: bool,
    /// Act only if the key holds this many events (as listed): refused
    /// when more were parked since you looked.
    #[arg(long, value_name = "N")]
    pub(super) events: Option<i64>,
    /// Why (kept in the audit trail).
    #[arg(long, default_value = "")]
    pub(super) reason: String,
    /// Keys listed at most.
    #[arg(long, default_value_t = 100)]
    pub(super) limit: u32,
}

/// `idem throttle`: a handler's rates, or an operator's change of one.
#[derive(clap::Args)]
pub(super) struct ThrottleArgs {
    #[command(flatten)]
    pub(super) admin: AdminTarget,
    /// The handler (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// What to change: `events` (the handler's events a second), or a
    /// destination host of its HTTP requests.
    #[arg(long)]
    pub(super) target: Option<String>,
    /// The new rate, a second (on each host).
    #[arg(long, requires = "target", conflicts_with_all = ["unlimited", "reset"])]
    pub(super) per_second: Option<f64>,
    /// Events or requests that may go at once after a quiet spell
    /// (default: one second's worth).
    #[arg(long, requires = "per_second")]
    pub(super) burst: Option<u32>,
    /// No limit for the target (whatever the config says).
    #[arg(long, requires = "target", conflicts_with = "reset")]
    pub(super) unlimited: bool,
    /// Back to the config's rate for the target.
    #[arg(long, requires = "target")]
    pub(super) reset: bool,
    /// Why (kept in the audit trail).
    #[arg(long, default_value = "")]
    pub(super) reason: String,
}

/// What `idem deploy` was asked: an upload (made active, a shadow or a
/// canary), or a shadow's or a canary's end.
#[derive(clap::Args)]
pub(super) struct DeployArgs {
    #[command(flatten)]
    pub(super) admin: AdminTarget,
    /// The handler it is a version of (its `name`).
    #[arg(long)]
    pub(super) handler: String,
    /// The component (.wasm).
    #[arg(required_unless_present_any = ["activate_shadow", "stop_shadow", "promote", "abort"])]
    pub(super) path: Option<PathBuf>,
    /// Stored with the version (what changed, a ticket).
    #[arg(long)]
    pub(super) note: Option<String>,
    /// Store it as the handler's shadow version instead of activating
    /// it: it runs beside the active version on the same live events,
    /// always rolled back, its requests recorded and never sent, and
    /// `idem status` reports where the two differ.
    #[arg(long, requires = "path")]
    pub(super) shadow: bool,
    /// Make the handler's shadow version active.
    #[arg(long, conflicts_with_all = ["path", "shadow", "stop_shadow"])]
    pub(super) activate_shadow: bool,
    /// End the handler's shadow run (its report is kept).
    #[arg(long, conflicts_with_all = ["path", "shadow"])]
    pub(super) stop_shadow: bool,
    /// Store it as the handler's canary for this share of its keys
    /// (`10%`: a stable tenth, by a hash of the key) instead of
    /// activating it; every host rolls it back by itself when it fails
    /// more than the active version.
    #[arg(long, value_name = "PERCENT", value_parser = percent, requires = "path", conflicts_with = "shadow")]
    pub(super) canary: Option<u8>,
    /// Make the handler's canary the active version.
    #[arg(long, conflicts_with_all = ["path", "shadow", "activate_shadow", "stop_shadow", "abort"])]
    pub(super) promote: bool,
    /// End the handler's canary: every key back on the active version.
    #[arg(long, conflicts_with_all = ["path", "shadow", "activate_shadow", "stop_shadow"])]
    pub(super) abort: bool,
}

/// A canary's share: `10%` or `10`, 1 to 99.
fn percent(text: &str) -> Result<u8, String> {
    let number = text.strip_suffix('%').unwrap_or(text).trim();
    match number.parse::<u8>() {
        Ok(p) if (1..=99).contains(&p) => Ok(p),
        _ => Err(format!("`{text}`: a canary takes 1% to 99% of the keys")),
    }
}

/// What `idem test` was asked: a file of events, or captures to replay.
#[derive(clap::Args)]
pub(super) struct TestArgs {
    #[arg(long, default_value = "idem.toml")]
    pub(super) config: PathBuf,
    /// The handler to run (its `name` in the config).
    #[arg(long)]
    pub(super) handler: String,
    /// The component to test (default: the handler's `component` file),
    /// or a project directory with a build.sh (`idem new`), built first:
    /// the build runs the project's own code, so it runs in an empty
    /// environment (PATH, the toolchains' homes and registry settings,
    /// a scratch HOME; no IDEM_ADMIN_TOKEN, IDEM_DLQ_KEY or other
    /// secret), and never as root: as root idem refuses; build it as an
    /// unprivileged user and pass the .wasm.
    #[arg(long)]
    pub(super) component: Option<PathBuf>,
    /// Keep what the events did (the claims too): commit instead of
    /// rolling back, in the config's database.
    #[arg(long)]
    pub(super) commit: bool,
    /// Run in the config's database, whose migrations must be applied
    /// (`idem migrate`), instead of a scratch database made on its
    /// server for this run and dropped after (the default: migrations
    /// can be edited freely before the first deploy).
    #[arg(long)]
    pub(super) no_scratch: bool,
    /// Where HTTP requests go: a local recorder that prints them, or their hosts.
    #[arg(long, value_enum, default_value = "record")]
    pub(super) http: crate::app::trial::HttpMode,
    /// Test again whenever the component, the config, the events file,
    /// the handler's schema or migrations change, until Ctrl-C.
    #[arg(long)]
    pub(super) watch: bool,
    /// A project handed to its SDK's quick runner (given as
    /// --component) instead of being built into a component: a folder's
    /// Python modules, or a TypeScript project's bundle (a file), as
    /// `./test.sh --quick` does.
    #[arg(long, value_name = "PATH")]
    pub(super) sources: Option<PathBuf>,
    /// A registry format's handler: encode each event with this schema
    /// id's writer schema from the registry (another version than the
    /// reader's, say) instead of the handler's reader schema.
    #[arg(long, value_name = "ID")]
    pub(super) schema_id: Option<u32>,
    /// Replay captured live events (`[handler.capture]`) from FILE
    /// (`GET /handlers/{name}/captures`' answer, or one capture per
    /// line) against the component, with no database or network: each
    /// statement and request answered as when it was captured; every
    /// divergence named; non-zero exit when any event diverged.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["events", "commit", "no_scratch", "watch", "from_capture"])]
    pub(super) replay: Option<PathBuf>,
    /// As --replay, with the handler's newest captures from a running
    /// host (`--url`, `--token`).
    #[arg(long, conflicts_with_all = ["events", "commit", "no_scratch", "watch"])]
    pub(super) from_capture: bool,
    /// How many captures --from-capture replays (1 to 1000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..=1000))]
    pub(super) captures: i64,
    /// Keep the captures --from-capture fetched in this file (for
    /// --replay, in CI, say).
    #[arg(long, value_name = "FILE", requires = "from_capture")]
    pub(super) save: Option<PathBuf>,
    /// The admin API --from-capture reads (`[admin] listen`).
    #[arg(long, env = "IDEM_ADMIN_URL", default_value = "http://127.0.0.1:7700")]
    pub(super) url: String,
    /// Its bearer token, if it has one (else $IDEM_ADMIN_READ_TOKEN: a
    /// read-scope token is enough).
    #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
    pub(super) token: Option<String>,
    /// One event's payload per line.
    #[arg(required_unless_present_any = ["replay", "from_capture"])]
    pub(super) events: Option<PathBuf>,
}
