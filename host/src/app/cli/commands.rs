//! What the command line accepts: the subcommands and their arguments
//! (clap's derive), and the targets several of them share.

use std::path::PathBuf;

use clap::Subcommand;

use crate::output::{out, outln};

#[derive(Subcommand)]
pub(super) enum Command {
    /// Consumes every configured topic until SIGINT/SIGTERM.
    Run {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// Exit once every assigned partition is consumed and committed to its end.
        #[arg(long)]
        exit_when_drained: bool,
    },
    /// Writes a new handler project: its source, schema, migration, config,
    /// sample events, build and test commands, and the SDK and WIT it builds
    /// against (it builds outside this repository).
    New {
        /// The handler's name (lowercase letters, digits, `-`, `_`).
        name: String,
        #[arg(long, value_enum)]
        lang: crate::scaffold::Lang,
        /// Where to write it (default: ./NAME); must not exist.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Runs a handler against a file of events (JSON lines) in a PostgreSQL
    /// transaction rolled back at the end, printing each event's statements,
    /// requests, outcome and time; exits non-zero unless every event was
    /// processed or a duplicate.
    Test {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// The handler to run (its `name` in the config).
        #[arg(long)]
        handler: String,
        /// The component to test (default: the handler's `component` file),
        /// or a project directory with a build.sh (`idem new`), built first:
        /// the build runs the project's own code, so it runs in an empty
        /// environment (PATH, the toolchains' homes and registry settings,
        /// a scratch HOME; no IDEM_ADMIN_TOKEN, IDEM_DLQ_KEY or other
        /// secret), and never as root: as root idem refuses; build it as an
        /// unprivileged user and pass the .wasm.
        #[arg(long)]
        component: Option<PathBuf>,
        /// Keep what the events did (the claims too): commit instead of
        /// rolling back, in the config's database.
        #[arg(long)]
        commit: bool,
        /// Run in the config's database, whose migrations must be applied
        /// (`idem migrate`), instead of a scratch database made on its
        /// server for this run and dropped after (the default: migrations
        /// can be edited freely before the first deploy).
        #[arg(long)]
        no_scratch: bool,
        /// Where HTTP requests go: a local recorder that prints them, or their hosts.
        #[arg(long, value_enum, default_value = "record")]
        http: crate::app::trial::HttpMode,
        /// Test again whenever the component, the config, the events file,
        /// the handler's schema or migrations change, until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// One event's payload per line.
        events: PathBuf,
    },
    /// Runs every start-up check of `run`, consumes nothing, exits non-zero on a problem.
    Check {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
    },
    /// A handler's dead-letter topic: what it holds, and replaying it.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Uploads a component as a handler's next module version and activates
    /// it on every host (through the admin API of a running host).
    Deploy {
        #[command(flatten)]
        admin: AdminTarget,
        /// The handler it is a version of (its `name`).
        #[arg(long)]
        handler: String,
        /// The component (.wasm).
        path: PathBuf,
        /// Stored with the version (what changed, a ticket).
        #[arg(long)]
        note: Option<String>,
    },
    /// Each handler's module versions: active, running here, counts per version.
    Handlers {
        #[command(flatten)]
        admin: AdminTarget,
    },
    /// Activates an older version: `--to N`, or else the newest stored
    /// version older than the active one.
    Rollback {
        #[command(flatten)]
        admin: AdminTarget,
        /// The handler to roll back (its `name`).
        #[arg(long = "handler", value_name = "HANDLER", required_unless_present = "named")]
        handler: Option<String>,
        /// The handler as the first argument (`idem rollback billing`), as
        /// before `--handler` was the one way every command names it.
        #[arg(hide = true, conflicts_with = "handler")]
        named: Option<String>,
        /// The version to activate (default: the newest stored version
        /// older than the active one).
        #[arg(long)]
        to: Option<i32>,
    },
    /// Pauses a handler, its topic (`--topic`) or one partition
    /// (`--partition` too) on every host of its group, within seconds and
    /// until `idem resume`, across restarts and rebalances: an event in
    /// flight ends, nothing else of it runs, lag grows.
    Pause {
        #[command(flatten)]
        admin: AdminTarget,
        #[command(flatten)]
        scope: PauseScope,
        /// Why (kept with the pause, shown by `idem status` and the console).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Lifts the pauses within a scope: the handler's every pause, its
    /// topic's (and its partitions'), or one partition's.
    Resume {
        #[command(flatten)]
        admin: AdminTarget,
        #[command(flatten)]
        scope: PauseScope,
    },
    /// Sends a handler's group back to `--to` (`earliest`, an offset, or
    /// an RFC 3339 time) on every host of the group, none stopped: the
    /// events of the window applied already are skipped as duplicates.
    /// Counts the window first (records, applied already, to run, past the
    /// dedup retention) and prints it; `--dry-run` stops there. `--list`
    /// shows the handler's rewinds, `--report ID` one's outcome.
    Rewind(RewindArgs),
    /// Named operators' tokens: issued per person, revocable, each named
    /// in the audit trail as the actor of what is done with it.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// The audit trail: every change made through the admin API or the
    /// console (deploys, activations, replays, logins, tokens), who made it
    /// and the answer's status, newest first.
    Audit {
        #[command(flatten)]
        admin: AdminTarget,
        /// Only changes to this handler.
        #[arg(long)]
        handler: Option<String>,
        /// Only changes by this actor (an operator's name, `$IDEM_ADMIN_TOKEN`, `local`).
        #[arg(long)]
        actor: Option<String>,
        /// Entries older than this id (a page's `more: --before N`).
        #[arg(long)]
        before: Option<i64>,
        /// Entries shown (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// A running host's handlers and partitions from its /metrics: lag,
    /// rate, outcomes, the module running; refreshed in place on a terminal.
    Status {
        /// The host's admin listener (`[admin] listen`).
        #[arg(long, env = "IDEM_ADMIN_URL", default_value = "http://127.0.0.1:7700")]
        url: String,
        /// Its bearer token, if it has one (else $IDEM_ADMIN_READ_TOKEN: a
        /// read-scope token is enough).
        #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// One frame (with the rate over one second), then exit.
        #[arg(long)]
        once: bool,
    },
    /// Runs one retention pass on idem.processed_event (what every host runs
    /// on `[retention] interval`): creates windows ahead, drops expired ones
    /// (or deletes expired rows), and prints what it did.
    Maintenance {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// One JSON line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The outbox: each producer's pending, published and failed rows and
    /// its relay's holder; the rows the broker refused; re-driving them.
    Outbox {
        /// Read (and redrive) through this running host's admin API, as
        /// every operator command does; $IDEM_ADMIN_URL too.
        #[arg(long, env = "IDEM_ADMIN_URL")]
        url: Option<String>,
        /// The admin API's bearer token (scope read, operate to redrive).
        #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Read the database of this config instead (no host needed);
        /// the default without --url: idem.toml.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only this producer (a handler, or an [[outbox.producer]]).
        #[arg(long)]
        producer: Option<String>,
        /// Also list the failed rows (at most 100).
        #[arg(long)]
        failed: bool,
        /// Make the failed rows pending again (`--id` some of them only):
        /// the relay publishes them (after the cause is fixed).
        #[arg(long)]
        redrive: bool,
        /// With `--redrive`: only the failed row with this id (repeat it
        /// for several; ids as `--failed` lists them).
        #[arg(long = "id")]
        ids: Vec<i64>,
        /// End an `[[outbox.producer]]` removed from the configs: its topics,
        /// its role's mapping and its grant go (with `--database-url` of an
        /// administrator, as for `idem migrate`).
        #[arg(long)]
        remove_producer: Option<String>,
        /// The database URL for `--remove-producer` (else the config's).
        #[arg(long)]
        database_url: Option<String>,
        /// One JSON line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Applies idem's migrations (schema `idem`) to the database; with
    /// `--config`, also creates or updates each handler's role, schema,
    /// migrations and grants. Needs an administrator's URL.
    Migrate {
        /// PostgreSQL URL of an administrator; defaults to IDEM_DATABASE_URL,
        /// then DATABASE_URL, then (with --config) the database url in the config.
        #[arg(long)]
        database_url: Option<String>,
        /// The handlers to provision.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(super) enum DlqCommand {
    /// Searches a handler's dead letters in the index a running host keeps
    /// (through its admin API): totals by class and reason pattern, then a
    /// page of records, newest first.
    Search {
        #[command(flatten)]
        admin: AdminTarget,
        #[command(flatten)]
        filters: Box<DlqFilters>,
        #[command(flatten)]
        page: DlqPage,
    },
    /// Rebuilds a handler's dead-letter index from its topic (the source of
    /// truth) and says what differed: records missing from the index, rows
    /// whose record the topic no longer holds (retention removed it).
    Reindex {
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// The handler whose index is rebuilt (its `name`).
        #[arg(long)]
        handler: String,
        /// One JSON line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Counts the records of a handler's DLQ by class and reason, oldest and newest.
    List {
        #[command(flatten)]
        target: DlqTarget,
    },
    /// Runs the dead letters a search matches (at most 200) through that
    /// handler only, on a running host (through its admin API); events
    /// processed meanwhile are skipped as duplicates, discarded ones left
    /// alone. With --config, runs in this process instead, for when no host
    /// runs: then only --since, --until, --class and --limit select.
    Replay {
        #[command(flatten)]
        admin: AdminTarget,
        #[command(flatten)]
        filters: Box<DlqFilters>,
        /// Replay in this process with this config (the handler's DLQ
        /// topic, brokers and DLQ key), not through a host.
        #[arg(long)]
        config: Option<PathBuf>,
        /// With --config: at most this many records.
        #[arg(long, requires = "config")]
        limit: Option<usize>,
        /// Count what would be applied and skipped; execute nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also run records whose event is older than the handler's
        /// dedup_retention (refused otherwise: their dedup rows may be gone,
        /// so one may have been processed already).
        #[arg(long)]
        force: bool,
        /// Also run records without a seal: those dead-lettered before idem
        /// sealed its DLQ records. Anyone who could produce to the topic
        /// could have written such a record; use it once, after an upgrade.
        #[arg(long)]
        trust_unsigned: bool,
    },
    /// Marks the dead letters a search matches discarded, on a running host:
    /// no replay runs them (the topic keeps them; the index keeps the mark
    /// across a reindex). --restore clears the mark.
    Discard {
        #[command(flatten)]
        admin: AdminTarget,
        #[command(flatten)]
        filters: Box<DlqFilters>,
        /// Count what would be marked; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Clear the mark: the records are replayable again.
        #[arg(long)]
        restore: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum TokenCommand {
    /// Issues a token for NAME (shown once; the hosts keep only its hash).
    Create {
        #[command(flatten)]
        admin: AdminTarget,
        /// Who it is for: 1 to 64 of a-z, 0-9, `.`, `_`, `-`, `@`.
        name: String,
        /// `read` (every page and GET) or `operate` (also deploy, roll
        /// back, replay, issue tokens).
        #[arg(long, value_parser = ["read", "operate"])]
        scope: String,
    },
    /// Every named operator: scope, who issued it and when, revoked or not.
    List {
        #[command(flatten)]
        admin: AdminTarget,
    },
    /// Revokes NAME's token on every host (within 2 s); its console
    /// sessions end too. The name is never issued again.
    Revoke {
        #[command(flatten)]
        admin: AdminTarget,
        name: String,
    },
}

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
