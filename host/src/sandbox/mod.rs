//! The database side of the sandbox: PostgreSQL's own privileges are the
//! boundary around a handler, not a statement filter.
//!
//! - [`provision`] (`idem migrate --config`, as an administrator): a login
//!   role per handler, its schema and migrations, exactly the grants below;
//! - [`rights`] (`idem check`, `idem run`): refuses a handler whose role can
//!   do more than that;
//! - [`pool`] (`idem run`): each handler's own pool, logged in as its role,
//!   with everything a guest could leave on a connection removed when its
//!   event's transaction ends (`transaction::EventTx`).
//!
//! What a handler role may do: USAGE on its schema and SELECT, INSERT,
//! UPDATE, DELETE on its tables (USAGE, SELECT, UPDATE on its sequences);
//! EXECUTE `idem_api.claim`, which claims only in its own namespace. Nothing
//! else: it owns nothing, creates nothing (PUBLIC loses CREATE and TEMPORARY
//! on the database and CREATE on `public`), is a member of no role, and is
//! neither superuser nor CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS.

pub mod pool;
pub mod provision;
pub mod public;
pub mod rights;

/// A handler's place in the database, as `[handler.database]` resolves.
#[derive(Debug, Clone)]
pub struct Place {
    pub handler: String,
    pub schema: String,
    pub role: String,
    /// The role's password, read from `password_env` (never printed).
    pub password: Option<String>,
    pub migrations: Option<std::path::PathBuf>,
    /// `[handler.limits] temp_file_limit_mib`, `work_mem_mib`: set on the role.
    pub temp_file_limit_mib: u32,
    pub work_mem_mib: u32,
}

impl Place {
    /// Resolves `h`'s place in `database`; reads the password variable.
    pub fn of(h: &crate::config::HandlerConfig, database: &str) -> anyhow::Result<Self> {
        let password = match &h.database.password_env {
            Some(var) => Some(crate::env::get(var).ok_or_else(|| {
                anyhow::anyhow!("handler `{}`: database.password_env names {var}, which is not set", h.name)
            })?),
            None => None,
        };
        Ok(Self {
            handler: h.name.clone(),
            schema: h.schema_name(),
            role: h.role_name(database),
            password,
            migrations: h.database.migrations.clone(),
            temp_file_limit_mib: h.limits.temp_file_limit_mib,
            work_mem_mib: h.limits.work_mem_mib,
        })
    }
}

/// `name` quoted as an SQL identifier. Names reaching here were checked to be
/// plain lowercase identifiers; quoting is the second guard.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
