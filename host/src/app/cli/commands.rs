//! What the command line accepts: the subcommands and their arguments
//! (clap's derive); the targets and scopes several of them share are in
//! `args`.

use std::path::PathBuf;

use clap::Subcommand;

pub(super) use super::args::{
    AdminTarget, DeployArgs, DlqFilters, DlqPage, DlqTarget, PauseScope, QuarantineArgs, RewindArgs, TestArgs,
    ThrottleArgs, read_token,
};

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
        /// How its topic is encoded: json (default), or avro or protobuf
        /// through a schema registry (a reader schema and a `[registry]`).
        #[arg(long, value_enum, default_value = "json")]
        format: crate::scaffold::RecordFormat,
        /// Where to write it (default: ./NAME); must not exist.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Runs a handler against a file of events (JSON lines) in a PostgreSQL
    /// transaction rolled back at the end, printing each event's statements,
    /// requests, outcome and time; exits non-zero unless every event was
    /// processed or a duplicate.
    Test(TestArgs),
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
    Deploy(DeployArgs),
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
    /// A handler's quarantine (`[handler.failure] on_exhausted =
    /// "quarantine"`): its parked keys, oldest first, with the failure that
    /// parked each; `--release KEY` runs a key's parked events again, in
    /// order, each once; `--dead-letter KEY` sends them to the dead-letter
    /// topic.
    Quarantine(QuarantineArgs),
    /// A handler's rates on each host — its events' (`max_events_per_second`)
    /// and its requests' to each destination host (`[handler.http.rate]`)
    /// — as configured and as changed; `--target T --per-second N` changes
    /// one on every host within seconds, `--unlimited` lifts it, `--reset`
    /// goes back to the config's.
    Throttle(ThrottleArgs),
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
        /// then DATABASE_URL, then (with --config) the database url in the
        /// config. With --config it must name the config's database.
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
