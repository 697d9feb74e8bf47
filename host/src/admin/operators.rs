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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;

use super::access::{Actor, LOCAL, Scope};
use super::audit::Detail;
use super::{AdminState, answer};

/// How long a lookup's answer is reused: a revocation takes this long to
/// reach every host.
pub(crate) const FRESH: Duration = Duration::from_secs(2);
/// Answers kept at most (past it the cache starts over): a client trying
/// random tokens costs one indexed lookup each, never memory.
const CACHED: usize = 4096;
/// What every issued token starts with: secret scanners and people can
/// tell an idem token from other secrets.
const PREFIX: &str = "idem_";

/// An operator a token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub name: Arc<str>,
    pub scope: Scope,
}

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

/// The named operators, through the database, with a short cache.
#[derive(Debug)]
pub(crate) struct Operators {
    pool: PgPool,
    cache: Mutex<HashMap<[u8; 32], Looked>>,
}

/// A lookup's answer (`None`: no live operator) and when it was had.
type Looked = (Option<Named>, Instant);

impl Operators {
    pub(crate) fn new(pool: PgPool) -> Self {
        Self { pool, cache: Mutex::default() }
    }

    /// The live operator `token` names (`None`: no such token, or revoked).
    pub(crate) async fn lookup(&self, token: &str) -> Result<Option<Named>, sqlx::Error> {
        // Only issued tokens are looked up: anything else is no operator's.
        if !token.starts_with(PREFIX) {
            return Ok(None);
        }
        self.lookup_digest(digest(token)).await
    }

    /// As [`Operators::lookup`], by the token's digest (what a console
    /// session keeps, to end when the token is revoked).
    pub(crate) async fn lookup_digest(&self, digest: [u8; 32]) -> Result<Option<Named>, sqlx::Error> {
        if let Some(cached) = self.cached(&digest) {
            return Ok(cached);
        }
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT name, scope FROM idem.operator WHERE token_sha256 = $1 AND revoked_at IS NULL")
                .bind(digest.as_slice())
                .fetch_optional(&self.pool)
                .await?;
        let named = row.map(|(name, scope)| Named { name: name.into(), scope: scope_named(&scope) });
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED {
            cache.clear();
        }
        cache.insert(digest, (named.clone(), Instant::now()));
        Ok(named)
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<Option<Named>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(digest).filter(|(_, at)| at.elapsed() < FRESH).map(|(named, _)| named.clone())
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
            // This host forgets at once; the others within FRESH.
            self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
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

pub(crate) fn digest(token: &str) -> [u8; 32] {
    <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into()
}

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

/// `POST /operators`'s body.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewOperator {
    name: String,
    scope: String,
}

/// `POST /operators`: issues a token (shown in this answer only).
pub(crate) async fn create(
    State(state): State<AdminState>,
    Extension(actor): Extension<Actor>,
    body: Result<Json<NewOperator>, JsonRejection>,
) -> Response {
    let Json(new) = match body {
        Ok(body) => body,
        Err(e) => return answer::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    if !state.tokens.any() {
        let message = "this host requires no token (none in $IDEM_ADMIN_TOKEN): set the host's own token first, \
                       so that a named token is needed and means who it names";
        return answer::error(StatusCode::CONFLICT, message).into_response();
    }
    let scope = match new.scope.as_str() {
        "read" => Scope::Read,
        "operate" => Scope::Operate,
        other => {
            let message = format!("scope: `{}` is not a scope: read or operate", crate::text::shown(other, 40));
            return answer::error(StatusCode::BAD_REQUEST, message).into_response();
        }
    };
    match state.operators.create(&new.name, scope, &actor.name).await {
        Ok(token) => {
            let detail = Detail(json!({ "operator": new.name, "scope": scope }));
            let body = json!({ "name": new.name, "scope": scope, "token": token });
            (StatusCode::CREATED, Extension(detail), Json(body)).into_response()
        }
        Err(e) => refused(&e),
    }
}

/// `DELETE /operators/{name}`.
pub(crate) async fn revoke(
    State(state): State<AdminState>,
    Extension(actor): Extension<Actor>,
    Path(name): Path<String>,
) -> Response {
    match state.operators.revoke(&name, &actor.name).await {
        Ok(revoked) => Json(json!({ "name": name, "revoked": revoked })).into_response(),
        Err(e) => refused(&e),
    }
}

/// `GET /operators`.
pub(crate) async fn list(State(state): State<AdminState>) -> Response {
    match state.operators.list().await {
        Ok(operators) => Json(json!({ "operators": operators })).into_response(),
        Err(e) => refused(&OperatorError::Database(e)),
    }
}

fn refused(e: &OperatorError) -> Response {
    let status = match e {
        OperatorError::Invalid(_) => StatusCode::BAD_REQUEST,
        OperatorError::Taken(_) | OperatorError::Reserved => StatusCode::CONFLICT,
        OperatorError::Unknown(_) => StatusCode::NOT_FOUND,
        OperatorError::Database(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    answer::error(status, e.to_string()).into_response()
}

pub(super) fn router(state: AdminState) -> Router {
    Router::new()
        .route("/operators", get(list).post(create))
        .route("/operators/{name}", delete(revoke))
        .with_state(state)
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
