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
    done.extend(strangers(admin, config).await?);
    Ok(done)
}

/// What the database has of producers this config does not name (another
/// config's, or one removed from this one), said, never changed: several
/// configs may share a database. `remove` is how an operator ends one; an
/// ended producer is said again only while it has rows no host will publish.
async fn strangers(admin: &PgPool, config: &Config) -> anyhow::Result<Vec<String>> {
    let named: Vec<String> = super::producers(config);
    let others: Vec<(String, bool, i64)> = sqlx::query_as(
        "SELECT p.producer, \
                EXISTS (SELECT 1 FROM idem.outbox_topic t WHERE t.producer = p.producer) \
                OR EXISTS (SELECT 1 FROM idem.outbox_producer r WHERE r.producer = p.producer), \
                (SELECT count(*) FROM idem.outbox o WHERE o.producer = p.producer \
                   AND published_at IS NULL AND failed_at IS NULL) \
         FROM (SELECT producer FROM idem.outbox_topic UNION SELECT producer FROM idem.outbox_producer \
               UNION SELECT DISTINCT producer FROM idem.outbox) p \
         WHERE NOT (p.producer = ANY($1)) ORDER BY 1",
    )
    .bind(&named)
    .fetch_all(admin)
    .await?;
    Ok(others
        .into_iter()
        .filter_map(|(producer, live, pending)| match (live, pending) {
            // A handler of this config that emits no more: its relay is gone
            // with its `emit` list (another config naming it may relay on).
            (_, 0) if config.handlers.iter().any(|h| h.name == producer) => None,
            (_, _) if config.handlers.iter().any(|h| h.name == producer) => Some(format!(
                "handler `{producer}` emits no more and has {pending} row(s) pending: no host of this config \
                 publishes them"
            )),
            (true, _) => Some(format!(
                "`{producer}` is an outbox producer this config does not name ({pending} row(s) pending): a host \
                 whose config names it publishes them; `idem outbox --remove-producer {producer}` ends it"
            )),
            (false, 0) => None,
            (false, _) => Some(format!(
                "`{producer}` was ended (`idem outbox --remove-producer`) with {pending} row(s) pending: no host \
                 of this config publishes them"
            )),
        })
        .collect())
}

/// Ends the producer `name`: its topics, its role's mapping and grant go
/// (its published and pending rows stay, for `idem outbox`).
pub async fn remove(admin: &PgPool, name: &str) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let roles: Vec<String> =
        sqlx::query_scalar("DELETE FROM idem.outbox_producer WHERE producer = $1 RETURNING role_name")
            .bind(name)
            .fetch_all(admin)
            .await?;
    for role in roles {
        let revoke = format!(
            "REVOKE EXECUTE ON FUNCTION idem_api.publish(text, text, text, jsonb, jsonb) FROM {}",
            ident(&role)
        );
        if admin.execute(revoke.as_str()).await.is_ok() {
            done.push(format!("role {role} may no longer publish"));
        }
    }
    let topics = sqlx::query("DELETE FROM idem.outbox_topic WHERE producer = $1").bind(name).execute(admin).await?;
    done.push(format!("`{name}` may publish to nothing ({} topic(s) removed)", topics.rows_affected()));
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
    // One namespace: a producer named as a handler would publish as it.
    let as_handler: Option<String> = sqlx::query_scalar("SELECT role_name FROM idem.handler_role WHERE handler = $1")
        .bind(name)
        .fetch_optional(admin)
        .await?;
    if let Some(handler_role) = as_handler {
        bail!("{at}: `{name}` is a handler of this database (role {handler_role}): name the producer otherwise");
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
    // Handlers' emits are written with the host's vouch: its key must be
    // readable (read by `migrate::check`).
    if config.handlers.iter().any(|h| !h.emit.is_empty()) {
        let database: String = sqlx::query_scalar("SELECT pg_catalog.current_database()::text")
            .fetch_one(pool)
            .await
            .context("failed to query the database")?;
        if let Err(why) = crate::capabilities::emit::write::key_of(&database) {
            bail!("handlers emit through the outbox, but {why}");
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
