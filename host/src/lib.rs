//! idem: Kafka consumers whose business logic is a WebAssembly component,
//! with each event's effect applied exactly once.
//!
//! The host owns everything that must be right every time: consumption,
//! validation, deduplication on the event's UUID v7 id, the PostgreSQL
//! transaction that holds both the claim and the handler's writes, and the
//! offset commit after it. A handler (see the `idem-guest` crate) only sees
//! the validated event and two capabilities bound to that transaction.
//!
//! - [`runtime`]: the wasmtime engine, loading and invoking components;
//! - `capabilities` (private): what a guest can call (`db`, `http`, `config`, `log`),
//!   each owning its state and serving its `wit` interface on a view;
//! - [`wit`]: the bindings generated from `wit/`; [`transaction`]: the event's
//!   transaction, the resource the executor hands to the capabilities;
//! - [`executor`]: one event, one transaction: claim, handler, commit;
//! - [`dedup`]: the claim in `idem.processed_event`;
//! - [`migrate`]: idem's own schema;
//! - [`modules`]: uploaded handler modules, their versions, hot swap;
//! - `shadow` (private): a stored version run beside the active one, always rolled back;
//! - [`retention`]: how long dedup rows are kept, and the maintenance that drops them;
//! - [`admin`]: the host's HTTP API (`idem deploy`, `idem handlers`, `idem rollback`);
//! - [`telemetry`]: `/metrics`, `/healthz`, `/readyz` on that listener, and `idem status`;
//! - [`sandbox`]: each handler's database role, schema, grants and pool;
//! - [`config`], [`startup`], [`pipeline`]: `idem run`: the config file, the
//!   start-up checks, and the Kafka consumers with [`validate`] and [`offsets`];
//! - [`kafka_client`]: brokers, librdkafka properties, secrets from the environment.
//!
//! The public surface is what the `idem` binary and a program embedding
//! the host need (`cli::main_with`, [`runtime`]'s native handlers, the
//! config and executor types). The modules only the test harness reaches
//! inside are public with the `test-hooks` feature alone
//! (`harness_visible!` below); the rest are crate-private.

pub(crate) mod admin;
pub mod app;
mod capabilities;
pub(crate) mod capture;
pub mod config;
pub(crate) mod env;
pub mod error;
pub mod event;
pub mod executor;
pub(crate) mod fd_limit;
pub(crate) mod files;
pub mod formats;
pub(crate) mod histogram;
pub(crate) mod identity;
pub(crate) mod kafka_client;
pub(crate) mod offsets;
pub(crate) mod output;
mod repeats;
pub mod runtime;
pub(crate) mod schema;
pub(crate) mod shadow;
pub mod stats;
mod strict_json;
pub(crate) mod telemetry;
pub(crate) mod text;
pub mod throttle;
pub(crate) mod traces;
pub mod wit;

/// Modules the test harness (`tests/`) reaches inside: public with the
/// `test-hooks` feature (which only the harness's `idem-under-test`
/// enables), crate-private in the `idem` binary and for embedders.
macro_rules! harness_visible {
    ($($module:ident),* $(,)?) => {
        $(
            #[cfg(feature = "test-hooks")]
            pub mod $module;
            #[cfg(not(feature = "test-hooks"))]
            pub(crate) mod $module;
        )*
    };
}

harness_visible!(dedup, migrate, modules, outbox, pipeline, retention, sandbox, scaffold, transaction, validate);

#[cfg(test)]
mod structure_tests;

pub use app::{cli, startup};
pub use capabilities::HostFault;
pub use capabilities::emit::EmitPolicy;
pub use capabilities::http::client as http_client;
pub use error::{ErrorClass, ExecError};
pub use event::Event;
pub use executor::{Executor, Outcome};
pub use runtime::{Handler, HandlerSettings, HttpPolicy, LoadError, Runtime};
