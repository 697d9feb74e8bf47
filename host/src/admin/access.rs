//! Who may do what on the admin listener: tokens and their scopes, and the
//! `Host` names a request may carry.
//!
//! Two scopes: `read` (every page of the console, every `GET` of the API)
//! and `operate` (also deploy, activate, roll back, replay). A token's scope
//! is the variable it came from: `[admin] token_env` holds the `operate`
//! token, `[admin] read_token_env` the `read` one. With neither set the API
//! serves loopback only and every caller operates (docs/modules.md, "Admin API").

use std::sync::Arc;

use anyhow::bail;
use axum::http::{HeaderValue, Method};

use crate::config::AdminConfig;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scope {
    Read,
    Operate,
}

impl Scope {
    /// The scope `method` needs: reading needs `read`, anything else changes
    /// something.
    pub(crate) fn needed_for(method: &Method) -> Self {
        if method == Method::GET || method == Method::HEAD { Self::Read } else { Self::Operate }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
        }
    }
}

/// The shortest token a host accepts. A wrong login is only slowed, never
/// allowed to lock out the right token (`console::session`), so a token
/// must be one no one can guess: 32 characters of `openssl rand -hex 32`
/// hold 128 bits.
pub(crate) const MIN_TOKEN_CHARS: usize = 32;

fn long_enough(env: &str, token: &str) -> anyhow::Result<()> {
    let chars = token.chars().count();
    if chars < MIN_TOKEN_CHARS {
        bail!(
            "${env} holds a token of {chars} characters: a token must have at least {MIN_TOKEN_CHARS}, random \
             (e.g. `openssl rand -hex 32`), so that guessing it is hopeless"
        );
    }
    Ok(())
}

/// The tokens this host accepts, read from the environment at start-up.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens {
    operate: Option<Arc<str>>,
    read: Option<Arc<str>>,
    /// `[admin] token_env`, named in refusals and as the actor.
    operate_env: Arc<str>,
    /// `[admin] read_token_env`.
    read_env: Arc<str>,
}

impl Tokens {
    pub(crate) fn from_config(config: &AdminConfig) -> anyhow::Result<Self> {
        let (operate, read) = (config.token(), config.read_token());
        for (env, token) in [(&config.token_env, &operate), (&config.read_token_env, &read)] {
            if let Some(token) = token {
                long_enough(env, token)?;
            }
        }
        if operate.is_some() && operate == read {
            bail!(
                "${} and ${} hold the same token: a token has one scope, so the read-only token must differ",
                config.token_env,
                config.read_token_env
            );
        }
        Ok(Self {
            operate: operate.map(Arc::from),
            read: read.map(Arc::from),
            operate_env: config.token_env.as_str().into(),
            read_env: config.read_token_env.as_str().into(),
        })
    }

    /// Whether any token is set (then every request must carry one).
    /// The widest scope this host's own tokens grant (`Read` when only a
    /// read token is set): no named operator acts beyond it here.
    pub(crate) fn highest(&self) -> Scope {
        if self.operate.is_some() || self.read.is_none() { Scope::Operate } else { Scope::Read }
    }

    pub(crate) fn any(&self) -> bool {
        self.operate.is_some() || self.read.is_some()
    }

    /// The scope `given` carries; `None`: no token of this host.
    pub(crate) fn scope_of(&self, given: &str) -> Option<Scope> {
        let matches = |t: &Option<Arc<str>>| t.as_deref().is_some_and(|t| same_secret(given, t));
        // Both compared, so the time taken does not tell which one matched.
        let (operate, read) = (matches(&self.operate), matches(&self.read));
        if operate {
            Some(Scope::Operate)
        } else if read {
            Some(Scope::Read)
        } else {
            None
        }
    }

    /// The actor `given` is, when it is one of the host's own tokens.
    pub(crate) fn actor_of(&self, given: &str) -> Option<Actor> {
        let scope = self.scope_of(given)?;
        let env = if scope == Scope::Operate { &self.operate_env } else { &self.read_env };
        Some(Actor { name: format!("${env}").into(), scope, named: false })
    }

    /// The refusal for a caller of `scope` asking for more.
    pub(crate) fn too_narrow(&self, scope: Scope) -> String {
        format!(
            "this token has scope `{}`: deploying, activating, rolling back and replaying need a token of scope \
             `operate` (${})",
            scope.as_str(),
            self.operate_env
        )
    }
}

/// 32 random bytes, hex: a session's id, a CSRF token, an issued token.
pub(crate) fn secret() -> String {
    let mut bytes = [0u8; 32];
    // The OS's generator failing is not something to serve on.
    if let Err(e) = getrandom::fill(&mut bytes) {
        tracing::error!("admin: no random bytes from the OS: {e}");
        std::process::abort();
    }
    hex::encode(bytes)
}

/// The actor of a request when the host requires no token (loopback only).
pub(crate) const LOCAL: &str = "local";

/// Who is asking: a named operator, one of the host's own tokens (named by
/// its variable, `$IDEM_ADMIN_TOKEN`), or `local` when the host requires
/// no token. What the audit trail and a module's `uploaded_by` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Actor {
    pub name: Arc<str>,
    pub scope: Scope,
    /// A named operator (`operators`), not one of the host's own tokens.
    pub named: bool,
}

/// Whether `Host` names this machine's loopback (by address or as localhost).
pub(crate) fn loopback_host(host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|h| h.to_str().ok()) else { return false };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether two secrets are equal: their SHA-256 digests compared without
/// an early exit, so the time taken tells neither where they differ nor
/// how long the secret is.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    constant_time_eq(&sha256(a), &sha256(b))
}

/// The SHA-256 of `secret`: what is compared, and what a map or the
/// database keeps instead of the secret itself.
pub(crate) fn sha256(secret: &str) -> [u8; 32] {
    <sha2::Sha256 as sha2::Digest>::digest(secret.as_bytes()).into()
}

/// Compares without an early exit, so timing does not leak the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, Method};

    use super::{Scope, Tokens, constant_time_eq, loopback_host};

    #[test]
    fn only_loopback_host_names_pass() {
        let host = |h: &str| loopback_host(Some(&HeaderValue::from_str(h).expect("header")));
        for ok in ["127.0.0.1:7700", "localhost:7700", "LOCALHOST", "[::1]:7700", "127.8.9.10"] {
            assert!(host(ok), "{ok}");
        }
        for refused in ["evil.example:7700", "127.0.0.1.evil.example", "10.0.0.1:7700", "localhost.evil.example"] {
            assert!(!host(refused), "{refused}");
        }
        assert!(!loopback_host(None), "no Host header");
        assert!(
            constant_time_eq(b"token", b"token")
                && !constant_time_eq(b"token", b"tokeN")
                && !constant_time_eq(b"t", b"to")
        );
    }

    #[test]
    fn short_tokens_are_refused_naming_their_variable() {
        let err = super::long_enough("IDEM_ADMIN_TOKEN", "admin-test-token").expect_err("16 characters").to_string();
        assert!(err.contains("$IDEM_ADMIN_TOKEN") && err.contains("16 characters"), "{err}");
        assert!(super::long_enough("IDEM_ADMIN_TOKEN", &"x".repeat(super::MIN_TOKEN_CHARS)).is_ok());
    }

    #[test]
    fn a_token_carries_the_scope_of_its_variable() {
        let tokens = Tokens {
            operate: Some("op".into()),
            read: Some("rd".into()),
            operate_env: "X".into(),
            read_env: "R".into(),
        };
        assert_eq!(tokens.actor_of("rd").map(|a| a.name), Some("$R".into()));
        assert_eq!(tokens.scope_of("op"), Some(Scope::Operate));
        assert_eq!(tokens.scope_of("rd"), Some(Scope::Read));
        assert_eq!(tokens.scope_of("o"), None);
        assert_eq!(tokens.scope_of(""), None);
        assert_eq!(Scope::needed_for(&Method::GET), Scope::Read);
        assert_eq!(Scope::needed_for(&Method::HEAD), Scope::Read);
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert_eq!(Scope::needed_for(&m), Scope::Operate, "{m}");
        }
        assert!(Scope::Read < Scope::Operate);
        assert!(tokens.too_narrow(Scope::Read).contains("scope `read`"));
        let none = Tokens::default();
        assert!(!none.any() && none.scope_of("").is_none());
    }
}
