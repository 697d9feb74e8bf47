//! The claim: one row per (event, handler) in `idem.processed_event`,
//! inserted in the same transaction as the handler's effect.
//!
//! The handler's role has no right on that table: it claims through
//! `idem_api.claim`, a SECURITY DEFINER function that takes the handler's
//! namespace from the login role (`session_user`), never from an argument.

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
}

/// Claims `event` for the handler `conn` is logged in as, recording the
/// hash of its payload.
///
/// Under READ COMMITTED a concurrent claim of the same key waits for the
/// first transaction: if it commits, this finds its row; if it rolls back,
/// this one claims. (Under REPEATABLE READ it would raise a serialization
/// error instead, which is why the executor pins the isolation level.)
pub async fn claim(conn: &mut PgConnection, event: &Event) -> Result<Claim, sqlx::Error> {
    let answer: String = sqlx::query_scalar("SELECT idem_api.claim($1, $2, $3, $4, $5)")
        .bind(event.id)
        .bind(&event.topic)
        .bind(event.partition)
        .bind(event.offset)
        .bind(&event.payload_sha256[..])
        .fetch_one(conn)
        .await?;
    match answer.as_str() {
        "claimed" => Ok(Claim::Claimed),
        "duplicate" => Ok(Claim::Duplicate),
        "conflict" => Ok(Claim::Conflict),
        other => Err(sqlx::Error::Protocol(format!("idem_api.claim answered `{other}`"))),
    }
}

/// Claims a batch in one statement (see `idem_api.claim_many`): what each
/// event found, in the order given. The ids must be distinct.
pub async fn claim_many(conn: &mut PgConnection, events: &[Event]) -> Result<Vec<Claim>, sqlx::Error> {
    let ids: Vec<uuid::Uuid> = events.iter().map(|e| e.id).collect();
    let topics: Vec<&str> = events.iter().map(|e| e.topic.as_str()).collect();
    let partitions: Vec<i32> = events.iter().map(|e| e.partition).collect();
    let offsets: Vec<i64> = events.iter().map(|e| e.offset).collect();
    let hashes: Vec<Vec<u8>> = events.iter().map(|e| e.payload_sha256.to_vec()).collect();
    let answers: Vec<String> = sqlx::query_scalar("SELECT idem_api.claim_many($1, $2, $3, $4, $5)")
        .bind(&ids)
        .bind(&topics)
        .bind(&partitions)
        .bind(&offsets)
        .bind(&hashes)
        .fetch_one(conn)
        .await?;
    if answers.len() != events.len() {
        return Err(sqlx::Error::Protocol(format!(
            "idem_api.claim_many answered {} words for {} events",
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
            other => Err(sqlx::Error::Protocol(format!("idem_api.claim_many answered `{other}`"))),
        })
        .collect()
}
