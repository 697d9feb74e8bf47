//! Every environment variable idem reads is read here: the fixed ones,
//! named below, and the ones an operator names in the config (`value_env`,
//! `properties_env`, `token_env`, `key_env`: where secrets come from),
//! through [`get`]. So this file is the list of what the environment can
//! change, and the one seam for it.

/// `[kafka] brokers`, overriding the file.
pub const KAFKA_BROKERS: &str = "IDEM_KAFKA_BROKERS";
/// `[database] url`, overriding the file.
pub const DATABASE_URL: &str = "IDEM_DATABASE_URL";
/// The database URL `idem migrate` falls back to without a config.
pub const FALLBACK_DATABASE_URL: &str = "DATABASE_URL";
/// `[kafka] instance_id`, overriding the file (`identity`).
pub const INSTANCE_ID: &str = "IDEM_INSTANCE_ID";
/// The async runtime's worker threads (one per core when unset).
pub const WORKER_THREADS: &str = "IDEM_WORKER_THREADS";
/// `json`: one JSON object per log line.
pub const LOG_FORMAT: &str = "IDEM_LOG_FORMAT";
/// The machine's name when `/proc` does not say (an automatic identity).
pub const HOSTNAME: &str = "HOSTNAME";
/// The read-scope token the reading commands (`idem status`, `idem
/// handlers`) fall back to when `IDEM_ADMIN_TOKEN` (clap reads it) is unset.
pub const ADMIN_READ_TOKEN: &str = "IDEM_ADMIN_READ_TOKEN";
/// Who `idem deploy` says uploaded a module.
pub const USER: &str = "USER";
/// Where the compiled-component cache goes without `[runtime] cache_dir`.
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
pub const HOME: &str = "HOME";
/// OpenTelemetry's own variables (`traces`).
pub const OTEL_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
pub const OTEL_TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// The value of `name`; `None` when it is unset or not UTF-8.
pub fn get(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The value of `name` as the OS has it (a path need not be UTF-8).
pub fn get_os(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name)
}

/// The value of `name` when it is set to something other than blanks.
pub fn non_blank(name: &str) -> Option<String> {
    get(name).filter(|v| !v.trim().is_empty())
}
