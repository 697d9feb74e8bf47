//! The operators' routes: `POST /operators` issues a token, `DELETE
//! /operators/{name}` revokes one (both for the host's own operate token
//! only), `GET /operators` lists them.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use serde_json::json;

use super::OperatorError;
use crate::admin::access::{Actor, Scope};
use crate::admin::audit::Detail;
use crate::admin::{AdminState, answer};

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
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Response {
    if let Some(refusal) = own(&actor) {
        return refusal;
    }
    let value = match body {
        Ok(Json(value)) => value,
        // 415 without `Content-Type: application/json`, else 400.
        Err(e) if e.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            return answer::error(e.status(), e.body_text()).into_response();
        }
        Err(e) => return answer::error(StatusCode::BAD_REQUEST, e.body_text()).into_response(),
    };
    // NUL in a name is refused by `valid_name`, naming it.
    let new: NewOperator = match crate::admin::body::from_object(value) {
        Ok(new) => new,
        Err((status, message)) => return answer::error(status, message).into_response(),
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
    if let Some(refusal) = own(&actor) {
        return refusal;
    }
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

/// Only the host's own operate token issues and revokes: a named operator
/// cannot make identities that outlive their own revocation, nor end
/// anyone else's. (A host that requires no token issues none: `create`.)
fn own(actor: &Actor) -> Option<Response> {
    let message = "issuing and revoking tokens needs the host's own operate token ($IDEM_ADMIN_TOKEN), not a named \
                   operator's";
    actor.named.then(|| answer::error(StatusCode::FORBIDDEN, message).into_response())
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

pub(in crate::admin) fn router(state: AdminState) -> Router {
    Router::new()
        .route("/operators", get(list).post(create))
        .route("/operators/{name}", delete(revoke))
        .with_state(state)
}
