//! `idem migrate --config`'s part for the outbox: what each handler and
//! each `[[outbox.producer]]` may publish (`idem.outbox_topic`), which
//! roles are producers (`idem.outbox_producer`), and their one right on
//! idem's schemas (`idem_api.publish`).

use anyhow::{Context as _, bail};
use sqlx::{Executor as _, PgPool};

use crate::config::Config;
use crate::sandbox::ident;

/// Writes every producer's topics (handlers' and applications'), replacing
/// what an earlier config said; returns what was done, one line each.
pub async fn apply(admin: &PgPool, config: &Config) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let mut tx = admin.begin().await?;
    let handlers = config.handlers.iter().map(|h| {
        let topics: Vec<(String, Vec<String>)> =
            h.emit.iter().map(|e| (e.topic.clone(), e.event_types.clone())).collect();
        (h.name.clone(), topics)
    });
    let producers = config.outbox.producers.iter().map(|p| {
        let topics: Vec<(String, Vec<String>)> =
            p.topics.iter().map(|t| (t.topic.clone(), t.event_types.clone())).collect();
        (p.name.clone(), topics)
    });
    for (producer, topics) in handlers.chain(producers) {
        sqlx::query("DELETE FROM idem.outbox_topic WHERE producer = $1").bind(&producer).execute(&mut *tx).await?;
        for (topic, event_types) in &topics {
            sqlx::query("INSERT INTO idem.outbox_topic (producer, topic, event_types) VALUES ($1, $2, $3)")
                .bind(&producer)
                .bind(topic)
                .bind(event_types)
                .execute(&mut *tx)
                .await
                .with_context(|| format!("`{producer}`: failed to record its topic {topic}"))?;
        }
        if !topics.is_empty() {
            let names: Vec<&str> = topics.iter().map(|(t, _)| t.as_str()).collect();
            done.push(format!("`{producer}` may publish to {}", names.join(", ")));
        }
    }
    tx.commit().await?;
    for p in &config.outbox.producers {
        done.push(producer_role(admin, &p.name, &p.role).await?);
    }
    Ok(done)
}

/// Maps `role` to the producer `name` and grants it `idem_api.publish`.
/// The role is the application's: it must exist, and is never a handler's.
async fn producer_role(admin: &PgPool, name: &str, role: &str) -> anyhow::Result<String> {
    let at = format!("[[outbox.producer]] `{name}`");
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
        .bind(role)
        .fetch_one(admin)
        .await?;
    if !exists {
        bail!("{at}: role {role} does not exist (it is the application's own: create it first)");
    }
    let handler: Option<String> = sqlx::query_scalar("SELECT handler FROM idem.handler_role WHERE role_name = $1")
        .bind(role)
        .fetch_optional(admin)
        .await?;
    if let Some(handler) = handler {
        bail!("{at}: role {role} is handler `{handler}`'s: a producer's role is the application's own");
    }
    sqlx::query(
        "INSERT INTO idem.outbox_producer (role_name, producer) VALUES ($1, $2) \
         ON CONFLICT (role_name) DO UPDATE SET producer = excluded.producer",
    )
    .bind(role)
    .bind(name)
    .execute(admin)
    .await
    .with_context(|| format!("{at}: failed to map role {role} (is `{name}` another role's?)"))?;
    let role = ident(role);
    admin
        .execute(
            format!(
                "GRANT USAGE ON SCHEMA idem_api TO {role}; \
                 GRANT EXECUTE ON FUNCTION idem_api.publish(text, text, text, jsonb, jsonb) TO {role}"
            )
            .as_str(),
        )
        .await
        .with_context(|| format!("{at}: failed to grant idem_api.publish"))?;
    Ok(format!("role {role} may publish as `{name}` (idem_api.publish)"))
}

/// Fails, naming the producer, unless what the database allows each
/// producer to publish is what the config says (`idem migrate --config`
/// writes it): a topic the config added would otherwise fail every event
/// that emits to it, and one it removed would still be allowed.
pub async fn check(pool: &PgPool, config: &Config) -> anyhow::Result<()> {
    let configured = config
        .handlers
        .iter()
        .map(|h| (h.name.as_str(), h.emit.iter().map(|e| (e.topic.clone(), e.event_types.clone())).collect::<Vec<_>>()))
        .chain(config.outbox.producers.iter().map(|p| {
            (p.name.as_str(), p.topics.iter().map(|t| (t.topic.clone(), t.event_types.clone())).collect::<Vec<_>>())
        }));
    for (producer, mut topics) in configured {
        let mut recorded: Vec<(String, Vec<String>)> =
            sqlx::query_as("SELECT topic, event_types FROM idem.outbox_topic WHERE producer = $1")
                .bind(producer)
                .fetch_all(pool)
                .await
                .context("failed to read idem.outbox_topic")?;
        for (_, types) in topics.iter_mut().chain(recorded.iter_mut()) {
            types.sort();
        }
        topics.sort();
        recorded.sort();
        if topics != recorded {
            bail!(
                "`{producer}`: the database allows it to publish {}, the config {}: run `idem migrate --config` \
                 with this config",
                shown(&recorded),
                shown(&topics)
            );
        }
    }
    Ok(())
}

fn shown(topics: &[(String, Vec<String>)]) -> String {
    if topics.is_empty() {
        return "nothing".into();
    }
    topics.iter().map(|(t, types)| format!("{t} ({})", types.join(", "))).collect::<Vec<_>>().join(", ")
}
