//! `[registry]`: the schema registry that `format = "avro" | "protobuf" |
//! "json-schema"` handlers read writer schemas from (Confluent's REST API:
//! Confluent Schema Registry, Apicurio Registry's `/apis/ccompat/v7`,
//! Redpanda's, Karapace). See docs/formats.md.

use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;

/// Longest a registry request may take, in milliseconds, at most.
const MAX_TIMEOUT_MS: u64 = 60_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The API's base URL, e.g. `http://registry:8081` or
    /// `http://apicurio:8080/apis/ccompat/v7`. `IDEM_REGISTRY_URL` overrides.
    pub url: String,
    /// Basic authentication: the variables holding the user and the
    /// password (both, or neither).
    #[serde(default)]
    pub username_env: Option<String>,
    #[serde(default)]
    pub password_env: Option<String>,
    /// Bearer authentication: the variable holding the token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// PEM file of the certificate authority an `https` registry's
    /// certificate is checked against (besides the system's), relative to
    /// the config file.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// One request's limit, connecting included, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Writer schemas each handler keeps, by id (ids never change meaning,
    /// so a cached one is never fetched again while it is kept).
    #[serde(default = "default_cached_schemas")]
    pub cached_schemas: usize,
}

fn default_timeout_ms() -> u64 {
    5_000
}

fn default_cached_schemas() -> usize {
    1_000
}

impl RegistryConfig {
    pub(super) fn check(&self) -> anyhow::Result<()> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            bail!("[registry] url `{}` is not an http:// or https:// URL", self.url);
        }
        if self.username_env.is_some() != self.password_env.is_some() {
            bail!("[registry] username_env and password_env go together: set both, or neither");
        }
        if self.token_env.is_some() && self.username_env.is_some() {
            bail!(
                "[registry] takes basic authentication (username_env, password_env) or a bearer token (token_env), not both"
            );
        }
        if !(1..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            bail!("[registry] timeout_ms is {}; it must be 1 to {MAX_TIMEOUT_MS}", self.timeout_ms);
        }
        if !(1..=1_000_000).contains(&self.cached_schemas) {
            bail!("[registry] cached_schemas is {}; it must be 1 to 1000000", self.cached_schemas);
        }
        Ok(())
    }
}
