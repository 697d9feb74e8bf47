//! `[admin]`: the host's HTTP listener (module upload and activation; later
//! metrics and health).

use std::net::SocketAddr;

use anyhow::bail;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Where the admin API listens; `"off"` for no listener. Loopback by
    /// default: exposing it elsewhere requires a token.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The environment variable holding the bearer token every request
    /// must carry. Unset or empty: no token, and the API serves loopback only.
    #[serde(default = "default_token_env")]
    pub token_env: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self { listen: default_listen(), token_env: default_token_env() }
    }
}

fn default_listen() -> String {
    "127.0.0.1:7700".into()
}

fn default_token_env() -> String {
    "IDEM_ADMIN_TOKEN".into()
}

impl AdminConfig {
    /// The address to listen on; `None`: `listen = "off"`.
    pub fn address(&self) -> anyhow::Result<Option<SocketAddr>> {
        if self.listen == "off" {
            return Ok(None);
        }
        match self.listen.parse() {
            Ok(address) => Ok(Some(address)),
            Err(e) => bail!("[admin] listen `{}` is not an address (ip:port, or \"off\"): {e}", self.listen),
        }
    }

    /// The bearer token, read from the environment now; never printed.
    pub fn token(&self) -> Option<String> {
        std::env::var(&self.token_env).ok().filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::AdminConfig;

    #[test]
    fn listen_is_an_address_or_off() {
        let with = |listen: &str| AdminConfig { listen: listen.into(), ..AdminConfig::default() };
        assert_eq!(
            AdminConfig::default().address().expect("default").map(|a| a.to_string()),
            Some("127.0.0.1:7700".into())
        );
        assert!(with("off").address().expect("off").is_none());
        let err = with("localhost").address().expect_err("not an address").to_string();
        assert!(err.contains("[admin] listen `localhost`"), "{err}");
    }
}
