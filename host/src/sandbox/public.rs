//! What PUBLIC keeps of PostgreSQL's defaults, in idem's databases.
//!
//! Every role, a handler's included, may execute most of `pg_catalog`'s
//! functions and read the statistics views. Some of them reach past the
//! handler's schema: other handlers' statistics and sizes, other backends'
//! locks, namespaces every role shares (advisory lock keys, notification
//! channels), SQL text run out of the guard's sight, WAL written outside any
//! table. `public_functions.tsv` classifies every function PUBLIC may
//! execute on PostgreSQL 15 (`scripts/classify-pg-functions` holds the rules
//! and the reasons); [`revoke`] takes EXECUTE on the revoked ones and SELECT
//! on the statistics views away from PUBLIC (the views go to
//! `pg_read_all_stats`, i.e. `pg_monitor`). The statement guard refuses
//! them too: this is the second layer, PostgreSQL's own.

use sqlx::{Executor as _, PgPool};

/// The classification, one `signature \t verdict \t reason` row a function.
const CLASSIFIED: &str = include_str!("public_functions.tsv");

/// One classified function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// As `regprocedure` prints it with `pg_catalog` on the search path.
    pub signature: &'static str,
    pub allowed: bool,
    /// The rule's code; the file's header says what each means.
    pub reason: &'static str,
}

/// Reasons of revoked functions that observe the server: monitoring
/// (`pg_read_all_stats`, `pg_monitor`) keeps them, as it keeps the views.
const OBSERVING: &[&str] = &["stats", "sizes", "locks", "activity", "prepared"];

/// Every classified function.
pub fn classification() -> impl Iterator<Item = Classified> {
    CLASSIFIED.lines().filter(|l| !l.starts_with('#') && !l.starts_with("signature\t")).filter_map(|line| {
        let mut cols = line.split('\t');
        let (signature, verdict, reason) = (cols.next()?, cols.next()?, cols.next()?);
        Some(Classified { signature, allowed: verdict == "allowed", reason })
    })
}

/// Views of every session's or every table's statistics; `pg_stats` and
/// `pg_stats_ext*` are not among them (PostgreSQL shows a role only the
/// columns it may read).
const STATISTICS_VIEWS: &str = "SELECT c.oid::regclass::text FROM pg_class c \
     WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'v' \
       AND (c.relname LIKE 'pg\\_stat\\_%' OR c.relname LIKE 'pg\\_statio\\_%' \
            OR c.relname IN ('pg_locks', 'pg_prepared_xacts')) \
       AND has_table_privilege('public', c.oid, 'SELECT') ORDER BY 1";

/// Revokes the revoked functions and the statistics views from PUBLIC, in
/// the database `admin` is connected to. Needs a superuser (they belong to
/// the bootstrap superuser); without one, says what it could not do and
/// goes on: the guard still refuses them. Returns what was done.
pub async fn revoke(admin: &PgPool) -> Vec<String> {
    let revoked: Vec<Classified> = classification().filter(|c| !c.allowed).collect();
    let signatures: Vec<&str> = revoked.iter().map(|c| c.signature).collect();
    let mut done = Vec::new();
    let granted: Result<Vec<String>, _> = sqlx::query_scalar(
        "SELECT s FROM unnest($1::text[]) AS s \
         WHERE to_regprocedure(s) IS NOT NULL AND has_function_privilege('public', to_regprocedure(s), 'EXECUTE')",
    )
    .bind(&signatures)
    .fetch_all(admin)
    .await;
    match granted {
        Ok(functions) if functions.is_empty() => {}
        Ok(functions) => {
            let qualified = |f: &String| format!("pg_catalog.{f}");
            let list = functions.iter().map(qualified).collect::<Vec<_>>().join(", ");
            let observing = functions
                .iter()
                .filter(|f| revoked.iter().any(|c| c.signature == f.as_str() && OBSERVING.contains(&c.reason)))
                .map(qualified)
                .collect::<Vec<_>>()
                .join(", ");
            let mut sql = format!("REVOKE EXECUTE ON FUNCTION {list} FROM PUBLIC");
            if !observing.is_empty() {
                sql.push_str(&format!("; GRANT EXECUTE ON FUNCTION {observing} TO pg_read_all_stats"));
            }
            done.push(match admin.execute(sql.as_str()).await {
                Ok(_) => {
                    format!("revoked EXECUTE on {} functions from PUBLIC (see public_functions.tsv)", functions.len())
                }
                Err(e) => format!(
                    "could not revoke EXECUTE on {} functions from PUBLIC ({e}); the guard refuses them",
                    functions.len()
                ),
            });
        }
        Err(e) => done.push(format!("could not list the functions to revoke ({e})")),
    }
    match sqlx::query_scalar::<_, String>(STATISTICS_VIEWS).fetch_all(admin).await {
        Ok(views) if views.is_empty() => {}
        Ok(views) => {
            let list = views.join(", ");
            let sql = format!("REVOKE SELECT ON {list} FROM PUBLIC; GRANT SELECT ON {list} TO pg_read_all_stats");
            done.push(match admin.execute(sql.as_str()).await {
                Ok(_) => format!("statistics views ({}) readable by pg_read_all_stats only", views.len()),
                Err(e) => format!("could not revoke the statistics views from PUBLIC ({e})"),
            });
        }
        Err(e) => done.push(format!("could not list the statistics views ({e})")),
    }
    done
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_classification_covers_what_the_issue_names_with_reasons() {
        let of = |s: &str| super::classification().find(|c| c.signature == s).unwrap_or_else(|| panic!("{s}"));
        for revoked in [
            "pg_logical_emit_message(boolean,text,text)",
            "table_to_xml(regclass,boolean,boolean,text)",
            "schema_to_xml(name,boolean,boolean,text)",
            "database_to_xml(boolean,boolean,text)",
            "pg_relation_size(regclass)",
            "pg_stat_get_live_tuples(oid)",
            "pg_advisory_xact_lock(bigint)",
            "pg_notify(text,text)",
            "query_to_xml(text,boolean,boolean,text)",
        ] {
            assert!(!of(revoked).allowed, "{revoked}");
        }
        assert!(of("lower(text)").allowed);
        assert!(super::classification().count() > 3_000, "every function, not a list of bad ones");
        assert!(super::classification().all(|c| !c.reason.is_empty()));
    }
}
