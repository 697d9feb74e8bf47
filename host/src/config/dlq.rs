//! `[dlq]`: the key that authenticates dead-letter records.
//!
//! Every record idem writes to a dead-letter topic carries a MAC over its
//! bytes and idem's headers (`pipeline::dlq::seal`); `idem dlq replay`
//! applies only records whose MAC verifies. The key lives in the
//! environment, like every other secret, and only the variable's name is
//! in the file — or in a file of its own (`key_file`, as a mounted
//! Kubernetes secret is). Two keys, so a key can be rotated: records are
//! sealed with the current key and verified with either.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DlqConfig {
    /// The variable holding the key records are sealed (and verified) with:
    /// 64 or more hex digits, i.e. at least 32 random bytes (`openssl rand
    /// -hex 32`). Required when any handler has `on_failure = "dlq"`.
    #[serde(default = "default_key_env")]
    pub key_env: String,
    /// The variable holding the previous key, during a rotation: records
    /// it sealed still verify. Optional.
    #[serde(default = "default_previous_key_env")]
    pub previous_key_env: String,
    /// A file holding the current key (hex, as in the variable), instead
    /// of `key_env`; relative to the config file's folder.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// A file holding the previous key, instead of `previous_key_env`.
    #[serde(default)]
    pub previous_key_file: Option<PathBuf>,
}

impl Default for DlqConfig {
    fn default() -> Self {
        Self {
            key_env: default_key_env(),
            previous_key_env: default_previous_key_env(),
            key_file: None,
            previous_key_file: None,
        }
    }
}

fn default_key_env() -> String {
    "IDEM_DLQ_KEY".into()
}

fn default_previous_key_env() -> String {
    "IDEM_DLQ_PREVIOUS_KEY".into()
}
