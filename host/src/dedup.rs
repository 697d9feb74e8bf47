//! The claim: one row per (event, handler) in `idem.processed_event`,
//! inserted in the same transaction as the handler's effect.
//!
//! The handler's role has no right on that table: it claims through
//! `idem_api.claim_events`, a SECURITY DEFINER function that takes the handler's
//! namespace from the login role (`session_user`), never from an argument.

use std::borrow::Borrow;

use sqlx::PgConnection;

use crate::event::Event;

/// What the claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// First time: run the handler.
    Claimed,
    /// Already processed (committed by someone) with the same payload: skip.
    Duplicate,
    /// Already processed with a different payload: the event id was reused.
    Conflict,
    /// Not found, but older than the handler's dedup retention (or its
    /// window was dropped): its row may be gone, so it was not claimed.
    Stale,
    /// Stale, and the claim was asked to accept that: run it with no dedup
    /// row (`stale_events = "process"`, `idem dlq replay --force`).
    Unguarded,
    /// Its id lies further in the future than `future_skew`: not claimed.
    Future,
}

/// Claims `event` for the handler `conn` is logged in as (see [`claim_many`]).
///
/// Under READ COMMITTED a concurrent claim of the same key waits for the
/// first transaction: if it commits, this finds its row; if it rolls back,
/// this one claims. (Under REPEATABLE READ it would raise a serialization
/// error instead, which is why the executor pins the isolation level.)
pub async fn claim(
    conn: &mut PgConnection,
    event: &Event,
    version: Option<i32>,
    accept_stale: bool,
) -> Result<Claim, sqlx::Error> {
    let claims = claim_many(conn, std::slice::from_ref(event), version, accept_stale).await?;
    claims.first().copied().ok_or_else(|| sqlx::Error::Protocol("idem_api.claim_events answered nothing".into()))
}

/// Claims a batch in one statement (see `idem_api.claim_events`), recording
/// each payload's hash and the module `version` that runs them: what each
/// event found, in the order given. The ids must be distinct. Fails with
/// SQLSTATE `ID001` when `version` is not the handler's active one, `ID002`
/// when an event's dedup window was not created yet. `accept_stale`: a
/// stale event is claimed where its window still exists and answered
/// [`Claim::Unguarded`] where it does not, instead of [`Claim::Stale`].
pub async fn claim_many<E: Borrow<Event>>(
    conn: &mut PgConnection,
    events: &[E],
    version: Option<i32>,
    accept_stale: bool,
) -> Result<Vec<Claim>, sqlx::Error> {
    let events: Vec<&Event> = events.iter().map(Borrow::borrow).collect();
    let ids: Vec<uuid::Uuid> = events.iter().map(|e| e.id).collect();
    let topics: Vec<&str> = events.iter().map(|e| e.topic.as_str()).collect();
    let partitions: Vec<i32> = events.iter().map(|e| e.partition).collect();
    let offsets: Vec<i64> = events.iter().map(|e| e.offset).collect();
    let hashes: Vec<Vec<u8>> = events.iter().map(|e| e.payload_sha256.to_vec()).collect();
    let answers: Vec<String> = sqlx::query_scalar("SELECT idem_api.claim_events($1, $2, $3, $4, $5, $6, $7)")
        .bind(&ids)
        .bind(&topics)
        .bind(&partitions)
        .bind(&offsets)
        .bind(&hashes)
        .bind(version)
        .bind(accept_stale)
        .fetch_one(conn)
        .await?;
    if answers.len() != events.len() {
        return Err(sqlx::Error::Protocol(format!(
            "idem_api.claim_events answered {} words for {} events",
            answers.len(),
            events.len()
        )));
    }
    answers
        .iter()
        .map(|answer| match answer.as_str() {
            "claimed" => Ok(Claim::Claimed),
            "duplicate" => Ok(Claim::Duplicate),
            "conflict" => Ok(Claim::Conflict),
            "stale" => Ok(Claim::Stale),
            "unguarded" => Ok(Claim::Unguarded),
            "future" => Ok(Claim::Future),
            other => Err(sqlx::Error::Protocol(format!("idem_api.claim_events answered `{other}`"))),
        })
        .collect()
}
