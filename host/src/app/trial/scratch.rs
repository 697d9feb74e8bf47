//! The scratch database of one `idem test` run: made on the config's
//! PostgreSQL server, given idem's schema and the handlers' roles, schemas
//! and migrations as `idem migrate --config` would, used, then dropped. So
//! a migration can be edited and tested again as often as needed before
//! the first deploy, and a test never sees what an earlier one, or another
//! team's staging data, left in the config's database.
//!
//! When the server refuses to make one (the config's user may not create
//! databases), or `--commit` asks to keep the results, the run uses the
//! config's own database and says why.

use anyhow::Context as _;
use sqlx::{Connection as _, Executor as _, PgConnection};

use crate::config::Config;

/// A database made for this run; [`Scratch::drop`] removes it and the
/// roles made for it.
pub(super) struct Scratch {
    pub(super) name: String,
    /// The config's URL (its database, which the drop connects to).
    admin_url: String,
    /// The config, its `[database] url` naming the scratch database.
    pub(super) config: Config,
}

impl Scratch {
    /// Makes and migrates a scratch database for `config`, or says why the
    /// run uses the config's database instead (`Err(reason)`).
    pub(super) async fn make(config: &Config) -> anyhow::Result<Result<Scratch, String>> {
        // The random end of a UUID v7: two runs in one millisecond differ.
        let id = uuid::Uuid::now_v7().simple().to_string();
        let name = format!("idem_test_{}", &id[id.len() - 12..]);
        let shown = super::super::startup::redact(&config.database.url);
        let mut url = reqwest::Url::parse(&config.database.url).context("[database] url is not a URL")?;
        // The config's database need not exist yet to test: then the
        // server's `postgres` database makes the scratch one.
        let mut admin = match PgConnection::connect(&config.database.url).await {
            Ok(admin) => admin,
            Err(e) => {
                url.set_path("/postgres");
                PgConnection::connect(url.as_str())
                    .await
                    .map_err(|_| e)
                    .with_context(|| format!("database unreachable at {shown}"))?
            }
        };
        let admin_url = url.to_string();
        if let Err(e) = admin.execute(format!("CREATE DATABASE {name}").as_str()).await {
            return Ok(Err(format!("the server would not make a scratch database ({e})")));
        }
        url.set_path(&format!("/{name}"));
        let mut scratch = config.clone();
        scratch.database.url = url.to_string();
        let made = Scratch { name, admin_url, config: scratch };
        if let Err(e) = made.migrate().await {
            made.drop().await;
            return Err(e.context("failed to prepare the scratch database"));
        }
        Ok(Ok(made))
    }

    /// idem's schema, then each handler's role, schema and migrations.
    async fn migrate(&self) -> anyhow::Result<()> {
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&self.config.database.url).await?;
        crate::migrate::apply_for(&pool, self.config.retention.mode).await?;
        crate::migrate::provision(&pool, &self.config).await?;
        crate::retention::record(&pool, &self.config).await?;
        pool.close().await;
        Ok(())
    }

    /// Drops the database and the roles named after it (best effort: a
    /// failure is printed, the test's own result stands).
    pub(super) async fn drop(self) {
        let dropped = async {
            let mut admin = PgConnection::connect(&self.admin_url).await?;
            admin.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str()).await?;
            let roles: Vec<String> = sqlx::query_scalar("SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)")
                .bind(format!("{}_", self.name))
                .fetch_all(&mut admin)
                .await?;
            for role in roles {
                admin.execute(format!("DROP ROLE IF EXISTS \"{role}\"").as_str()).await?;
            }
            Ok::<_, sqlx::Error>(())
        };
        if let Err(e) = dropped.await {
            tracing::warn!("idem test: the scratch database {} was not dropped: {e}", self.name);
        }
    }
}
