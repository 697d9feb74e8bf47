//! `[admin]`: the host's HTTP listener (module upload and activation,
//! metrics and health) and the limits that keep hostile clients from
//! holding it, or the process's file descriptors (docs/modules.md, "Admin listener
//! limits"; ranges in `ranges.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use super::Span;

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
    /// The environment variable holding a token of scope `read`: every
    /// page of the console and every `GET`, nothing that changes anything
    /// (`token_env`'s token has scope `operate`: also deploy, activate,
    /// roll back, replay). Unset or empty: no read-only token.
    #[serde(default = "default_read_token_env")]
    pub read_token_env: String,
    /// Host names (with their port, as a browser sends `Host`) the console
    /// answers besides loopback names and addresses, for a console reached
    /// by name through a proxy: `["idem.internal:7700"]`. Any other `Host`
    /// is refused, so that a page whose name was re-pointed at this host
    /// (DNS rebinding) cannot use it.
    #[serde(default)]
    pub console_hosts: Vec<String>,
    /// Longest a client may take to send a request's headers, and to start
    /// the next request on a kept-alive connection; then it is closed.
    #[serde(default = "default_header_timeout")]
    pub header_timeout: Span,
    /// Longest an upload's body may take to arrive (408 after it), and
    /// longest an answer may wait for a client that does not take it
    /// (the connection is closed after it).
    #[serde(default = "default_body_timeout")]
    pub body_timeout: Span,
    /// Connections served at once; more are answered 503 and closed at
    /// once. Also at most a quarter of the process's open-files limit.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections served at once from one IP address, so that one client
    /// cannot take them all (the probes' included).
    #[serde(default = "default_max_connections_per_peer")]
    pub max_connections_per_peer: usize,
    /// The console is reached over HTTPS (a TLS proxy in front): its
    /// session cookie gets `Secure`, so a browser never sends it over
    /// plain HTTP. Off by default: the listener itself speaks plain HTTP.
    #[serde(default)]
    pub console_behind_tls: bool,
    /// How long the audit trail keeps a change (`idem.audit`): every host
    /// deletes older rows at start-up and hourly. 1d to 36500d.
    #[serde(default = "default_audit_retention")]
    pub audit_retention: Span,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            token_env: default_token_env(),
            read_token_env: default_read_token_env(),
            console_hosts: Vec::new(),
            header_timeout: default_header_timeout(),
            body_timeout: default_body_timeout(),
            max_connections: default_max_connections(),
            max_connections_per_peer: default_max_connections_per_peer(),
            console_behind_tls: false,
            audit_retention: default_audit_retention(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:7700".into()
}

fn default_token_env() -> String {
    "IDEM_ADMIN_TOKEN".into()
}

fn default_read_token_env() -> String {
    "IDEM_ADMIN_READ_TOKEN".into()
}

fn default_header_timeout() -> Span {
    Span(Duration::from_secs(10))
}

fn default_body_timeout() -> Span {
    Span(Duration::from_secs(60))
}

fn default_audit_retention() -> Span {
    Span::days(400)
}

fn default_max_connections() -> usize {
    64
}

fn default_max_connections_per_peer() -> usize {
    16
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

    /// The bearer token of scope `operate`, read from the environment
    /// now; never printed.
    pub fn token(&self) -> Option<String> {
        crate::env::get(&self.token_env).filter(|t| !t.is_empty())
    }

    /// The token of scope `read`, read from the environment now.
    pub fn read_token(&self) -> Option<String> {
        crate::env::get(&self.read_token_env).filter(|t| !t.is_empty())
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
