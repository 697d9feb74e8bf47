//! Named operators: a token issued per person (`idem token create NAME
//! --scope read|operate`, `POST /operators`), kept in `idem.operator` only as
//! its SHA-256, revocable, and named in the audit trail (`audit`) as the
//! actor of everything done with it.
//!
//! The tokens of `[admin] token_env` and `read_token_env` stay what they
//! were: the host's own, needed to start requiring tokens at all and to
//! issue the first named ones, and working while the database is down (the
//! break-glass). A named token is looked up in the database, so every host
//! of a fleet knows it at once; an answer is kept for [`FRESH`], so a
//! revoked token stops working everywhere within that.

mod cache;
mod routes;

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use super::access::{Actor, LOCAL, Scope, sha256 as digest};
pub(super) use routes::router;

/// How long a lookup's answer is reused: a revocation takes this long to
/// reach every host.
pub(crate) const FRESH: Duration = Duration::from_secs(2);
/// Lookups in flight at most, and how long one may take: a client sending
/// random tokens, or a database that stopped answering, costs a few
/// connections for a second, and the host's own tokens (which need no
/// lookup) keep working.
const LOOKUPS: usize = 4;
const LOOKUP_WITHIN: Duration = Duration::from_secs(1);
/// What every issued token starts with: secret scanners and people can
/// tell an idem token from other secrets.
const PREFIX: &str = "idem_";

/// One operator as `GET /operators` lists them (never the token).
#[derive(Debug, Serialize, sqlx::FromRow)]
pub(crate) struct Listed {
    pub name: String,
    pub scope: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub created_by: String,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_by: Option<String>,
}

/// Why a token was not issued or revoked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OperatorError {
    #[error("{0}")]
    Invalid(String),
    #[error("an operator named `{0}` exists (or did: a revoked name is never reissued, so the trail stays true)")]
    Taken(String),
    #[error("`{LOCAL}` is reserved: it names whoever calls a host that requires no token")]
    Reserved,
    #[error("no operator named `{0}`")]
    Unknown(String),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// Why a token could not be checked (said to whoever sent it without the
/// database's own words: they are not known to be anyone yet).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error("too many operator tokens are being checked at once; try again")]
    Busy,
    #[error("the database did not answer within {LOOKUP_WITHIN:?}")]
    TimedOut,
    #[error("the database failed")]
    Database(#[source] sqlx::Error),
}

/// The named operators, through the database, with a short cache.
#[derive(Debug)]
pub(crate) struct Operators {
    pool: PgPool,
    cache: cache::Cache,
    lookups: tokio::sync::Semaphore,
    /// The widest scope a named operator gets on this host.
    highest: Scope,
}

impl Operators {
    /// Operators as a host whose own tokens reach `highest` sees them: a
    /// host started with only a read token (a read-only replica, a
    /// dashboard's host) lets no one change anything, named operators of
    /// scope operate included: they read there.
    pub(crate) fn new(pool: PgPool, highest: Scope) -> Self {
        Self { pool, cache: cache::Cache::default(), lookups: tokio::sync::Semaphore::new(LOOKUPS), highest }
    }

    /// The live operator `token` names (`None`: no such token, or revoked).
    pub(crate) async fn lookup(&self, token: &str) -> Result<Option<Actor>, LookupError> {
        // Only issued tokens are looked up: anything else is no operator's.
        if !token.starts_with(PREFIX) {
            return Ok(None);
        }
        self.lookup_digest(digest(token)).await
    }

    /// As [`Operators::lookup`], by the token's digest (what a console
    /// session keeps, to end when the token is revoked).
    pub(crate) async fn lookup_digest(&self, digest: [u8; 32]) -> Result<Option<Actor>, LookupError> {
        if let Some(cached) = self.cache.get(&digest) {
            return Ok(cached);
        }
        let _turn = self.lookups.try_acquire().map_err(|_| LookupError::Busy)?;
        let generation = self.cache.generation();
        let query =
            sqlx::query_as("SELECT name, scope FROM idem.operator WHERE token_sha256 = $1 AND revoked_at IS NULL")
                .bind(digest.as_slice())
                .fetch_optional(&self.pool);
        let row: Option<(String, String)> = tokio::time::timeout(LOOKUP_WITHIN, query)
            .await
            .map_err(|_| LookupError::TimedOut)?
            .map_err(LookupError::Database)?;
        let named = row.map(|(name, scope)| Actor {
            name: name.into(),
            scope: scope_named(&scope).min(self.highest),
            named: true,
        });
        self.cache.put(digest, named.clone(), generation);
        Ok(named)
    }

    /// Issues a token for `name` of `scope`, created `by` an actor; the
    /// token is returned once and kept only as its digest.
    pub(crate) async fn create(&self, name: &str, scope: Scope, by: &str) -> Result<String, OperatorError> {
        valid_name(name).map_err(OperatorError::Invalid)?;
        if name == LOCAL {
            return Err(OperatorError::Reserved);
        }
        let token = format!("{PREFIX}{}", super::access::secret());
        let inserted = sqlx::query(
            "INSERT INTO idem.operator (name, scope, token_sha256, created_by) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(scope.as_str())
        .bind(digest(&token).as_slice())
        .bind(by)
        .execute(&self.pool)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(OperatorError::Taken(name.to_owned()));
        }
        Ok(token)
    }

    /// Revokes `name`'s token (on every host within [`FRESH`]); false
    /// when it already was.
    pub(crate) async fn revoke(&self, name: &str, by: &str) -> Result<bool, OperatorError> {
        let revoked = sqlx::query(
            "UPDATE idem.operator SET revoked_at = now(), revoked_by = $2 WHERE name = $1 AND revoked_at IS NULL",
        )
        .bind(name)
        .bind(by)
        .execute(&self.pool)
        .await?;
        if revoked.rows_affected() == 1 {
            // This host forgets at once (a lookup already under way keeps
            // its answer to itself); the others within FRESH.
            self.cache.forget_all();
            return Ok(true);
        }
        let known: Option<i32> = sqlx::query_scalar("SELECT 1 FROM idem.operator WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        match known {
            Some(_) => Ok(false),
            None => Err(OperatorError::Unknown(name.to_owned())),
        }
    }

    pub(crate) async fn list(&self) -> Result<Vec<Listed>, sqlx::Error> {
        sqlx::query_as(
            "SELECT name, scope, created_at, created_by, revoked_at, revoked_by FROM idem.operator \
             ORDER BY revoked_at IS NOT NULL, name",
        )
        .fetch_all(&self.pool)
        .await
    }
}

/// The scope the table names (its CHECK allows only these two).
fn scope_named(scope: &str) -> Scope {
    if scope == "operate" { Scope::Operate } else { Scope::Read }
}

/// A name an operator may have: 1 to 64 of lower-case letters, digits and
/// `.`, `_`, `-`, `@`, starting with a letter or digit. So no name looks
/// like the host's own tokens' (`$IDEM_ADMIN_TOKEN`), and every name prints
/// as itself. `local` is one too, reserved ([`LOCAL`]).
pub(crate) fn valid_name(name: &str) -> Result<(), String> {
    let fine = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | '@'));
    if !fine {
        return Err(format!(
            "name: `{}` is not an operator name: 1 to 64 of a-z, 0-9, `.`, `_`, `-`, `@`, starting with a letter \
             or digit",
            crate::text::shown(name, 80)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::valid_name;

    #[test]
    fn names_are_plain_and_cannot_pass_for_the_hosts_own() {
        for ok in ["alice", "bob.smith", "oncall-2", "ci@build", "7"] {
            assert!(valid_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Alice", "$IDEM_ADMIN_TOKEN", "-x", "a b", "é", &"a".repeat(65), "a\nb"] {
            let err = valid_name(bad).expect_err(bad);
            assert!(err.starts_with("name: "), "{err}");
        }
    }
}
