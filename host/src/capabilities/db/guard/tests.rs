//! The guard's cases: every former gap of the statement filter, closed.

use super::check;

/// Every clause a former gap let through, with `{e}` where an expression goes.
const CLAUSES: &[&str] = &[
    "INSERT INTO t (a) VALUES ({e})",
    "INSERT INTO t (a) VALUES (1), (2), ({e})",
    "VALUES (1), ({e})",
    "INSERT INTO t (a) VALUES (1) RETURNING {e}",
    "UPDATE t SET a = 1 RETURNING a, {e}",
    "DELETE FROM t RETURNING {e}",
    "SELECT a FROM t LIMIT {e}",
    "SELECT a FROM t OFFSET {e}",
    "SELECT a FROM t LIMIT 1 OFFSET {e}",
    "INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2 WHERE {e} IS NOT NULL",
    "INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = {e}",
    "MERGE INTO t USING s ON t.a = s.a WHEN MATCHED AND {e} IS NOT NULL THEN DELETE",
    "MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN UPDATE SET a = {e}",
    "MERGE INTO t USING s ON t.a = s.a WHEN NOT MATCHED THEN INSERT (a) VALUES ({e})",
    "MERGE INTO t USING s ON t.a = {e} WHEN MATCHED THEN DO NOTHING",
    "MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DO NOTHING RETURNING {e}",
    "SELECT ARRAY[{e}]",
    "SELECT ARRAY[1, {e}]",
    "SELECT count(*) FILTER (WHERE {e} IS NOT NULL) FROM t",
    "SELECT {e}",
    "SELECT a, {e} FROM t",
    "SELECT * FROM t, LATERAL (SELECT {e}) x",
    "SELECT * FROM t CROSS JOIN LATERAL (SELECT a FROM u WHERE u.b = {e}) x",
    "SELECT * FROM t JOIN u ON u.a = {e}",
    "SELECT * FROM t WHERE a IN (1, {e})",
    "SELECT * FROM t WHERE a = ANY (ARRAY[{e}])",
    "SELECT * FROM t WHERE EXISTS (SELECT 1 WHERE {e} IS NOT NULL)",
    "SELECT a FROM t GROUP BY a HAVING max(a) > {e}",
    "SELECT a FROM t GROUP BY a, {e}",
    "SELECT a FROM t ORDER BY {e}",
    "SELECT sum(a) OVER (PARTITION BY {e}) FROM t",
    "SELECT sum(a) OVER w FROM t WINDOW w AS (ORDER BY {e})",
    "SELECT CASE WHEN a = 1 THEN {e} END FROM t",
    "SELECT coalesce(a, {e}) FROM t",
    "SELECT (a, {e}) FROM t",
    "SELECT {e}::text",
    "SELECT jsonb_build_object('k', {e})",
    "SELECT string_agg(a::text, ',' ORDER BY {e}) FROM t",
    "SELECT 1 UNION ALL SELECT {e}",
    "SELECT 1 INTERSECT (SELECT 2 EXCEPT SELECT {e})",
    "SELECT * FROM (SELECT {e}) sub",
    "SELECT * FROM (SELECT * FROM (SELECT {e}) a) b",
    "WITH x AS (SELECT {e}) SELECT * FROM x",
    "WITH x AS (SELECT 1), y AS (WITH z AS (SELECT {e}) SELECT * FROM z) SELECT * FROM y",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {e}) SELECT * FROM r",
    "WITH x AS (INSERT INTO t (a) VALUES ({e}) RETURNING a) SELECT * FROM x",
    "WITH x AS (UPDATE t SET a = {e} RETURNING a) SELECT * FROM x",
    "UPDATE t SET a = 1 FROM u WHERE u.a = {e}",
    "UPDATE t SET (a, b) = (SELECT 1, {e})",
    "DELETE FROM t USING u WHERE u.a = {e}",
    "INSERT INTO t (a) SELECT {e}",
    "SELECT * FROM t WHERE a = 1 FOR UPDATE OF t SKIP LOCKED LIMIT {e}",
    "SELECT * FROM generate_series(1, {e})",
    "SELECT * FROM ROWS FROM (generate_series(1, 2), generate_series(1, {e}))",
    "SELECT * FROM json_to_record({e}::json) AS x(a int)",
    "SELECT xmlelement(name x, {e})",
    "SELECT * FROM t WHERE a BETWEEN 1 AND {e}",
    "SELECT * FROM t WHERE a IS DISTINCT FROM {e}",
    "SELECT NULLIF(a, {e}) FROM t",
    "SELECT GREATEST(a, {e}) FROM t",
];

fn fill(clause: &str, expression: &str) -> String {
    clause.replace("{e}", expression)
}

#[test]
fn clauses_are_allowed_with_harmless_expressions() {
    for clause in CLAUSES {
        for e in ["1", "(SELECT max(a) FROM billing.charge)", "lower($1)"] {
            let sql = fill(clause, e);
            assert_eq!(check(&sql), Ok(()), "{sql}");
        }
    }
}

#[test]
fn host_tables_are_refused_in_every_clause() {
    for clause in CLAUSES {
        for e in [
            "(SELECT count(*) FROM idem.processed_event)",
            "(SELECT count(*) FROM \"idem\".processed_event)",
            "(SELECT count(*) FROM IDEM.Processed_Event)",
            "(SELECT count(*) FROM \"IDEM\".\"processed_event\")",
            "(SELECT count(*) FROM idem_api.claim($1, $2, $3, $4))",
            "(SELECT 1 FROM t WHERE EXISTS (SELECT 1 FROM idem.handler_role))",
            "(WITH processed_event AS (SELECT 1) SELECT count(*) FROM idem.processed_event)",
        ] {
            let sql = fill(clause, e);
            let why = check(&sql).expect_err(&sql);
            assert!(why.contains("belongs to the host"), "{sql}: {why}");
        }
    }
}

#[test]
fn refused_functions_are_refused_in_every_clause() {
    for clause in CLAUSES {
        for (e, function) in [
            ("set_config('role', 'postgres', false)", "set_config()"),
            ("pg_catalog.set_config('role', 'postgres', false)", "set_config()"),
            ("\"set_config\"('role', 'postgres', false)", "set_config()"),
            ("SET_CONFIG('role', 'postgres', true)", "set_config()"),
            ("(SELECT set_config('role', 'postgres', false))", "set_config()"),
            ("(SELECT length(pg_read_file('/etc/passwd')))", "pg_read_file()"),
            ("(SELECT 1 FROM query_to_xml('select 1', true, true, ''))", "query_to_xml()"),
            ("pg_advisory_lock(1)", "pg_advisory_lock()"),
        ] {
            let sql = fill(clause, e);
            let why = check(&sql).expect_err(&sql);
            assert!(why.contains(function) && why.contains("not allowed"), "{sql}: {why}");
        }
    }
}

#[test]
fn a_cte_never_hides_a_host_table() {
    for sql in [
        "WITH processed_event AS (SELECT 1) SELECT * FROM idem.processed_event",
        "WITH processed_event AS (SELECT 1) SELECT * FROM processed_event, idem.processed_event",
        "WITH processed_event AS (SELECT 1) DELETE FROM idem.processed_event",
        "WITH processed_event AS (SELECT 1) INSERT INTO idem.processed_event SELECT * FROM processed_event",
        "WITH processed_event AS (SELECT 1) UPDATE idem.processed_event SET topic = 'x'",
        "WITH processed_event AS (SELECT 1) MERGE INTO idem.processed_event p USING processed_event s \
         ON true WHEN MATCHED THEN DELETE",
        "WITH processed_event AS (SELECT * FROM idem.processed_event) SELECT * FROM processed_event",
        "WITH x AS (DELETE FROM idem.processed_event RETURNING *) SELECT * FROM x",
        "WITH handler_role AS (SELECT 1) SELECT * FROM t WHERE a IN (SELECT 1 FROM idem.handler_role)",
    ] {
        let why = check(sql).expect_err(sql);
        assert!(why.contains("belongs to the host"), "{sql}: {why}");
    }
    // The CTE itself, unqualified, is the handler's own.
    assert_eq!(check("WITH processed_event AS (SELECT 1 AS a) SELECT a FROM processed_event"), Ok(()));
}

#[test]
fn host_schema_is_refused_in_every_kind_of_name() {
    for sql in [
        "SELECT idem.processed_event.event_id FROM t",
        "SELECT idem.processed_event.* FROM t",
        "SELECT mydb.idem.processed_event.event_id FROM t",
        "SELECT idem.claim($1)",
        "SELECT * FROM idem.f()",
        "SELECT NULL::idem.some_type",
        "SELECT CAST(NULL AS \"idem\".some_type[])",
        "SELECT 1 OPERATOR(idem.+) 2",
        "SELECT a FROM t ORDER BY a USING OPERATOR(idem.<)",
        "SELECT 'x' COLLATE idem.c",
        "SELECT 'idem.processed_event'::regclass",
        "SELECT CAST('\"IDEM\".processed_event' AS regclass)",
        "SELECT * FROM t TABLESAMPLE idem.sampler (10)",
        "TABLE idem.processed_event",
        "SELECT * FROM ONLY idem.processed_event",
        "SELECT * FROM t FOR UPDATE OF idem.processed_event",
        "INSERT INTO idem.processed_event (event_id) VALUES ($1)",
        "UPDATE idem.processed_event SET topic = 'x'",
        "MERGE INTO t USING idem.processed_event s ON true WHEN MATCHED THEN DELETE",
        "SELECT idem_api.claim($1, $2, $3, $4)",
    ] {
        let why = check(sql).expect_err(sql);
        assert!(why.contains("belongs to the host"), "{sql}: {why}");
    }
    // Names that merely contain or end with "idem" are the handler's.
    for sql in [
        "SELECT idem FROM t",
        "SELECT t.idem FROM t",
        "SELECT idem.a FROM t AS idem",
        "SELECT * FROM idempotency.key",
        "SELECT * FROM billing.idem",
        "SELECT * FROM t WHERE topic = 'idem.orders'",
    ] {
        assert_eq!(check(sql), Ok(()), "{sql}");
    }
}

#[test]
fn system_catalogs_are_not_write_targets() {
    for sql in [
        "UPDATE pg_catalog.pg_authid SET rolsuper = true",
        "UPDATE pg_settings SET setting = 'x' WHERE name = 'role'",
        "UPDATE PG_CATALOG.pg_settings SET setting = 'x'",
        "INSERT INTO information_schema.sql_features VALUES ('x')",
        "DELETE FROM pg_toast.pg_toast_1234",
        "DELETE FROM pg_temp.scratch",
        "INSERT INTO pg_largeobject VALUES (1, 0, '')",
        "MERGE INTO pg_catalog.pg_class c USING t ON true WHEN MATCHED THEN DELETE",
        "WITH x AS (UPDATE pg_settings SET setting = 'x' RETURNING *) SELECT * FROM x",
        "WITH pg_x AS (SELECT 1) INSERT INTO pg_x SELECT * FROM pg_x",
        "SELECT * FROM t WHERE a IN (WITH d AS (DELETE FROM \"pg_catalog\".pg_shdescription RETURNING 1) \
         SELECT * FROM d)",
    ] {
        let why = check(sql).expect_err(sql);
        assert!(why.contains("belongs to PostgreSQL"), "{sql}: {why}");
    }
    // Reading them is a matter for privileges.
    assert_eq!(check("SELECT relname FROM pg_catalog.pg_class WHERE oid = $1::regclass"), Ok(()));
    assert_eq!(check("WITH pg_x AS (SELECT 1) SELECT * FROM pg_x"), Ok(()));
}

#[test]
fn into_is_refused_at_any_depth() {
    for sql in [
        "SELECT 1 INTO t",
        "SELECT * INTO TEMP t FROM u",
        "SELECT * FROM (SELECT 1 INTO t) s",
        "WITH x AS (SELECT 1 INTO t) SELECT * FROM x",
        "SELECT 1 INTO t UNION SELECT 2",
        "SELECT (SELECT 1 INTO t)",
        "INSERT INTO u SELECT 1 INTO t",
    ] {
        let why = check(sql).expect_err(sql);
        assert!(why.contains("INTO"), "{sql}: {why}");
    }
}

#[test]
fn refuses_each_function_family() {
    for call in [
        "query_to_xml('select 1', true, true, '')",
        "query_to_xmlschema('select 1', true, true, '')",
        "query_to_xml_and_xmlschema('select 1', true, true, '')",
        "cursor_to_xml('c', 1, true, true, '')",
        "cursor_to_xmlschema('c', true, true, '')",
        "table_to_xml('t', true, true, '')",
        "table_to_xml_and_xmlschema('t', true, true, '')",
        "schema_to_xml('s', true, true, '')",
        "database_to_xml(true, true, '')",
        "ts_stat('select v from t')",
        "ts_rewrite('a'::tsquery, 'select t, s from aliases')",
        "dblink('dbname=x', 'select 1')",
        "dblink_exec('dbname=x', 'delete from t')",
        "crosstab('select 1')",
        "pg_read_file('/etc/passwd')",
        "pg_read_binary_file('/etc/passwd')",
        "pg_ls_dir('.')",
        "pg_ls_waldir()",
        "pg_stat_file('x')",
        "lo_import('/etc/passwd')",
        "lo_export(1, '/tmp/x')",
        "lo_get(1)",
        "loread(0, 1)",
        "lowrite(0, 'x')",
        "pg_file_write('x', 'y', false)",
        "set_config('search_path', 'idem', false)",
        "pg_advisory_lock(1)",
        "pg_advisory_lock_shared(1)",
        "pg_try_advisory_lock(1)",
        "pg_try_advisory_lock_shared(1, 2)",
        "pg_advisory_unlock(1)",
        "pg_advisory_unlock_all()",
        "pg_advisory_xact_lock(42)",
        "pg_advisory_xact_lock_shared(42)",
        "pg_try_advisory_xact_lock(1, 2)",
        "pg_relation_size('billing.charge')",
        "pg_stat_get_live_tuples(16384)",
        "table_to_xml('t', true, true, '')",
        "pg_terminate_backend(1)",
        "pg_cancel_backend(1)",
        "pg_reload_conf()",
        "pg_rotate_logfile()",
        "pg_switch_wal()",
        "pg_promote()",
        "pg_backup_start('x')",
        "pg_log_backend_memory_contexts(1)",
        "pg_notify('c', 'x')",
        "pg_stat_reset()",
        "pg_wal_replay_pause()",
        "pg_create_physical_replication_slot('s')",
        "pg_create_logical_replication_slot('s', 'p')",
        "pg_drop_replication_slot('s')",
        "pg_copy_logical_replication_slot('a', 'b')",
        "pg_replication_origin_create('o')",
        "pg_logical_slot_get_changes('s', NULL, NULL)",
        "pg_logical_emit_message(true, 'p', 'x')",
    ] {
        for sql in [format!("SELECT {call}"), format!("SELECT * FROM {call}"), format!("SELECT pg_catalog.{call}")] {
            let why = check(&sql).expect_err(&sql);
            assert!(why.contains("not allowed"), "{sql}: {why}");
        }
    }
    // The three-argument ts_rewrite runs no SQL.
    assert_eq!(check("SELECT ts_rewrite('a & b'::tsquery, 'a'::tsquery, 'c'::tsquery)"), Ok(()));
}

#[test]
fn allows_what_handlers_write() {
    for sql in [
        "SELECT 1",
        "insert into billing.charge (event_id) values ($1)",
        "UPDATE t SET a = $1 WHERE id = $2",
        "DELETE FROM t WHERE id = $1",
        "WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x",
        "SELECT * FROM t FOR UPDATE",
        "INSERT INTO billing.charge (event_id, amount) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id",
        "INSERT INTO billing.charge (event_id, amount) VALUES ($1, $2) ON CONFLICT (event_id) \
         DO UPDATE SET amount = EXCLUDED.amount, updated_at = now() WHERE charge.amount <> EXCLUDED.amount \
         RETURNING id, (xmax = 0) AS inserted",
        "UPDATE billing.account a SET balance = a.balance + c.amount FROM billing.charge c \
         WHERE c.account_id = a.id AND c.event_id = $1",
        "DELETE FROM billing.hold h USING billing.charge c WHERE h.charge_id = c.id AND c.event_id = $1",
        "MERGE INTO billing.balance b USING (SELECT $1::uuid AS account, $2::bigint AS amount) s \
         ON b.account = s.account WHEN MATCHED THEN UPDATE SET amount = b.amount + s.amount \
         WHEN NOT MATCHED THEN INSERT (account, amount) VALUES (s.account, s.amount)",
        "SELECT payload->>'customer', jsonb_array_length(payload->'items'), jsonb_build_object('id', id), \
         jsonb_set(payload, '{a}', to_jsonb($1::text)), payload #>> '{b,c}' \
         FROM orders.placed WHERE payload @> $2::jsonb",
        "SELECT e.key, e.value FROM orders.placed o, jsonb_each(o.payload) e",
        "SELECT id, row_number() OVER (PARTITION BY customer ORDER BY created_at DESC), \
         sum(amount) OVER w, lag(amount) OVER w FROM orders.placed WINDOW w AS (PARTITION BY customer)",
        "SELECT now(), gen_random_uuid(), clock_timestamp(), current_setting('TimeZone'), coalesce($1, 'x'), \
         upper(lower(trim($2))), round(random() * 100), abs(-1), greatest(1, 2), length('x'), md5('x'), \
         to_char(now(), 'YYYY'), extract(epoch FROM now()), date_trunc('day', now()), substring('abc' from 2)",
        "SELECT nextval('billing.invoice_no'), $1::uuid, $2::timestamptz AT TIME ZONE 'UTC'",
        "WITH moved AS (DELETE FROM outbox.message WHERE sent RETURNING *) INSERT INTO outbox.archive \
         SELECT * FROM moved",
        "WITH RECURSIVE tree AS (SELECT id FROM catalog.node WHERE parent IS NULL UNION ALL \
         SELECT n.id FROM catalog.node n JOIN tree ON n.parent = tree.id) SELECT * FROM tree",
        "SELECT count(*) FILTER (WHERE status = 'paid'), array_agg(id ORDER BY id) FROM billing.invoice",
        "SELECT ARRAY[(SELECT max(id) FROM billing.invoice)]",
        "SELECT * FROM billing.invoice WHERE id = ANY($1::bigint[]) ORDER BY id LIMIT $2 OFFSET $3",
        "SELECT * FROM billing.invoice FOR UPDATE SKIP LOCKED",
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
        "SET LOCAL role postgres",
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

#[test]
fn refuses_other_utility_statements() {
    for sql in [
        "COPY t TO STDOUT",
        "COPY (SELECT 1) TO '/tmp/x'",
        "LOCK TABLE t",
        "LISTEN c",
        "NOTIFY c",
        "PREPARE p AS SELECT 1",
        "EXECUTE p",
        "DEALLOCATE p",
        "EXPLAIN ANALYZE DELETE FROM t",
        "CREATE TEMP TABLE t (a int)",
        "CREATE TABLE t AS SELECT 1",
        "DECLARE c CURSOR FOR SELECT 1",
        "VACUUM t",
        "TRUNCATE t",
        "GRANT SELECT ON t TO PUBLIC",
        "ALTER ROLE current_user SET search_path = idem",
        "CALL idem_api.claim($1)",
    ] {
        let why = check(sql).expect_err(sql);
        assert!(why.contains("not allowed"), "{sql}: {why}");
    }
}

#[test]
fn refuses_functions_called_in_column_notation() {
    for sql in [
        "SELECT x.ts_stat FROM concat('select 1') x",
        "SELECT (concat('select 1')).ts_stat",
        "SELECT x.lo_creat FROM int4(-1) x",
        "SELECT x.pg_advisory_lock FROM int8(42) x",
        "SELECT x.set_config FROM (SELECT 1) x",
        "SELECT (t.a).pg_notify FROM t",
    ] {
        let why = check(sql).expect_err(sql);
        assert!(why.contains("not allowed"), "{sql}: {why}");
    }
    for sql in ["SELECT t.amount FROM t", "SELECT (t.payload).total FROM t", "SELECT x.now FROM t x"] {
        assert_eq!(check(sql), Ok(()), "{sql}");
    }
}

#[test]
fn a_verdict_is_the_same_when_it_comes_from_the_cache() {
    for sql in ["INSERT INTO billing.charge (event_id) VALUES ($1)", "DELETE FROM idem.processed_event"] {
        let first = check(sql);
        assert_eq!(check(sql), first, "{sql}");
    }
    assert!(check("DELETE FROM idem.processed_event").is_err());
    let long = format!("SELECT 1 /* {} */", "x".repeat(super::CACHED_BYTES));
    assert_eq!(check(&long), Ok(()), "long statements are checked, not cached");
}
