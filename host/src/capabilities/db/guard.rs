//! Which statements a handler may run, decided by PostgreSQL's own parser
//! (`pg_query`), so no spelling, comment or case slips through.
//!
//! Allowed: exactly one SELECT (without INTO), INSERT, UPDATE, DELETE or
//! MERGE. Refused: transaction control (the host owns the transaction),
//! session changes (they would outlive the event on a pooled connection),
//! DDL and every other utility statement, session-level functions that
//! escape the transaction, and the host's own `idem` schema. This is a
//! guard against mistakes, not a sandbox: per-handler database roles are the
//! isolation boundary (a later issue).

use pg_query::NodeEnum;

/// Functions whose effect outlives the transaction or changes the session.
const REFUSED_FUNCTIONS: &[&str] = &[
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_advisory_unlock",
    "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
    "dblink",
    "dblink_exec",
    "pg_terminate_backend",
    "pg_cancel_backend",
];

/// Returns why `sql` is refused, or `Ok` if a handler may run it.
pub(crate) fn check(sql: &str) -> Result<(), String> {
    let parsed = pg_query::parse(sql, 0).map_err(|e| format!("not valid SQL: {e}"))?;
    let statements = &parsed.protobuf.stmts;
    if statements.len() != 1 {
        return Err(format!("{} statements in one call: send exactly one statement per call", statements.len()));
    }
    match statements[0].stmt.as_ref().and_then(|s| s.node.as_ref()) {
        Some(NodeEnum::SelectStmt(select)) if select.into_clause.is_some() => {
            return Err("SELECT … INTO creates a table; handlers may not run DDL".into());
        }
        Some(
            NodeEnum::SelectStmt(_)
            | NodeEnum::InsertStmt(_)
            | NodeEnum::UpdateStmt(_)
            | NodeEnum::DeleteStmt(_)
            | NodeEnum::MergeStmt(_),
        ) => {}
        Some(NodeEnum::TransactionStmt(_)) => {
            return Err(
                "transaction control (BEGIN, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, …) belongs to the host, \
                        which commits when `handle` returns ok"
                    .into(),
            );
        }
        Some(NodeEnum::VariableSetStmt(_) | NodeEnum::DiscardStmt(_)) => {
            return Err("session changes (SET, RESET, SET ROLE, SET SESSION AUTHORIZATION, DISCARD) are not allowed: \
                        they would outlive the event on a pooled connection"
                .into());
        }
        _ => {
            let kind = parsed.statement_types().first().copied().unwrap_or("this statement");
            return Err(format!("{kind} is not allowed: handlers may run SELECT, INSERT, UPDATE, DELETE and MERGE"));
        }
    }
    for function in parsed.functions() {
        let name = function.rsplit('.').next().unwrap_or(&function).to_ascii_lowercase();
        if REFUSED_FUNCTIONS.contains(&name.as_str()) {
            return Err(format!("{name}() is not allowed: its effect outlives the event's transaction"));
        }
    }
    for table in parsed.tables() {
        if table.split('.').next().is_some_and(|schema| schema.eq_ignore_ascii_case("idem")) && table.contains('.') {
            return Err(format!("{table} belongs to the host (schema idem); handlers may not touch it"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn allows_one_dml_or_select() {
        for sql in [
            "SELECT 1",
            "insert into billing.charge (event_id) values ($1)",
            "UPDATE t SET a = $1 WHERE id = $2",
            "DELETE FROM t WHERE id = $1",
            "WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x",
            "SELECT * FROM t FOR UPDATE",
            "SELECT pg_advisory_xact_lock(42)",
        ] {
            assert_eq!(check(sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn refuses_transaction_control_in_any_spelling() {
        for sql in [
            "commit",
            "COMMIT",
            "END",
            "end transaction",
            "/**/ COMMIT",
            "-- hello\nCoMmIt;",
            "ABORT",
            "rollback",
            "BEGIN",
            "start transaction",
            "SAVEPOINT s",
            "release savepoint s",
            "PREPARE TRANSACTION 'x'",
        ] {
            let why = check(sql).expect_err(sql);
            assert!(why.contains("transaction control"), "{sql}: {why}");
        }
    }

    #[test]
    fn refuses_session_changes_and_roles() {
        for sql in [
            "SET search_path = x",
            "set role postgres",
            "RESET ROLE",
            "SET SESSION AUTHORIZATION postgres",
            "reset all",
            "DISCARD ALL",
        ] {
            let why = check(sql).expect_err(sql);
            assert!(why.contains("session changes"), "{sql}: {why}");
        }
        assert!(check("SELECT set_config('role', 'postgres', false)").is_err());
        assert!(check("select pg_advisory_lock(1)").is_err());
    }

    #[test]
    fn refuses_several_statements_ddl_and_host_tables() {
        let why = check("insert into t values (1); commit").expect_err("two statements");
        assert!(why.contains("2 statements"), "{why}");
        assert!(check("CREATE TABLE t (a int)").expect_err("ddl").contains("not allowed"));
        assert!(check("SELECT 1 INTO t").is_err());
        assert!(check("DO $$ BEGIN END $$").is_err());
        assert!(check("CALL p()").is_err());
        assert!(check("DELETE FROM idem.processed_event").expect_err("host table").contains("belongs to the host"));
        assert!(check("select * from IDEM.processed_event").is_err());
        assert!(check("").is_err());
        assert!(check("SELEC 1").expect_err("syntax").contains("not valid SQL"));
    }
}
