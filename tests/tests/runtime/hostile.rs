//! A hostile guest: one test per attack class. Each asserts that the attack
//! failed (refused by the guard, denied by PostgreSQL, or undone), that the
//! host went on processing events, and that the database is as it was:
//! roles, schemas, objects, idem's rows, the other handlers' rows, the
//! settings every connection of the handler's pool sees, advisory locks,
//! temporary objects, replication slots, large objects and the server's
//! files.
//!
//! Most attacks run twice: as a guest statement (the guard refuses it, or
//! PostgreSQL does), and straight on a connection of the handler's pool,
//! past the guard, as if the guard had a hole: PostgreSQL's privileges and
//! the reset at the end of the event's transaction must hold on their own.

use std::time::Duration;

use idem::transaction::EventTx;
use idem::{ErrorClass, ExecError, Outcome};
use serde_json::json;
use sqlx::{Connection as _, Executor as _, PgPool};

use super::{CLAIMS, EFFECTS, Setup, scenario, scenario_with};

/// What must not change, as text (the test prints the difference).
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    roles: String,
    memberships: String,
    schemas: String,
    objects: String,
    idem_rows: String,
    billing_rows: i64,
    advisory_locks: i64,
    temp_objects: i64,
    replication_slots: i64,
    large_objects: i64,
    files: String,
    /// Per connection of the handler's pool: settings, channels, cursors,
    /// SQL-level prepared statements.
    sessions: Vec<String>,
}

const SNAPSHOT: &str = "SELECT
  (SELECT string_agg(format('%s:%s%s%s%s%s', rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls), ',' ORDER BY rolname)
     FROM pg_roles WHERE rolname NOT LIKE 'idem\\_t\\_%' OR rolname LIKE current_database() || '%'),
  (SELECT coalesce(string_agg(format('%s>%s', g.rolname, m.rolname), ',' ORDER BY g.rolname, m.rolname), '')
     FROM pg_auth_members a JOIN pg_roles g ON g.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
     WHERE m.rolname NOT LIKE 'idem\\_t\\_%' OR m.rolname LIKE current_database() || '%'),
  (SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace WHERE nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE 'pg_toast_temp%'),
  (SELECT format('%s classes, %s functions, %s triggers', (SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_proc), (SELECT count(*) FROM pg_trigger))),
  (SELECT coalesce(md5(string_agg(event_id::text || consumer, ',' ORDER BY event_id, consumer)), '') FROM idem.processed_event)
     || (SELECT coalesce(md5(string_agg(role_name || handler, ',' ORDER BY role_name)), '') FROM idem.handler_role),
  (SELECT count(*) FROM billing.charge),
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())),
  (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname LIKE 'pg_temp%'),
  (SELECT count(*) FROM pg_replication_slots),
  (SELECT count(*) FROM pg_largeobject_metadata),
  (SELECT string_agg(f, ',' ORDER BY f) FROM pg_ls_dir('.') f)";

const SESSION: &str = "SELECT
  -- (plpgsql's settings appear, at their defaults, once the claim function
  -- has loaded the language in a session: not a guest's doing.)
  (SELECT string_agg(name || '=' || setting, ',' ORDER BY name) FROM pg_settings
     WHERE NOT (name LIKE 'plpgsql.%' AND source = 'default'))
  || ' user=' || current_user || ' session=' || session_user
  || ' channels=' || (SELECT count(*) FROM pg_listening_channels())
  || ' cursors=' || (SELECT count(*) FROM pg_cursors)
  || ' prepared=' || (SELECT count(*) FROM pg_prepared_statements WHERE from_sql)";

async fn snapshot(s: &Setup, pool: &PgPool) -> Snapshot {
    let mut sessions: Vec<String> = on_every_connection(pool, SESSION).await;
    // Which connection comes first is the pool's business.
    sessions.sort();
    let row: (String, String, String, String, String, i64, i64, i64, i64, i64, String) =
        sqlx::query_as(SNAPSHOT).fetch_one(&s.db.pool).await.unwrap_or_else(|e| panic!("snapshot: {e}"));
    Snapshot {
        roles: row.0,
        memberships: row.1,
        schemas: row.2,
        objects: row.3,
        idem_rows: row.4,
        billing_rows: row.5,
        advisory_locks: row.6,
        temp_objects: row.7,
        replication_slots: row.8,
        large_objects: row.9,
        files: row.10,
        sessions,
    }
}

/// The backends of every connection `pool` holds (opening the rest).
async fn pids(pool: &PgPool) -> Vec<i32> {
    on_every_connection(pool, "SELECT pg_backend_pid()").await
}

/// `query`'s one value on each connection `pool` may hold, all held at
/// once: none is left unchecked, and each is back from its release (and
/// the reset in its last round trip) before anything is read.
async fn on_every_connection<T>(pool: &PgPool, query: &'static str) -> Vec<T>
where
    T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    let mut conns = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        conns.push(pool.acquire().await.unwrap_or_else(|e| panic!("acquire: {e}")));
    }
    let mut values = Vec::new();
    for conn in &mut conns {
        values.push(sqlx::query_scalar(query).fetch_one(&mut **conn).await.unwrap_or_else(|e| panic!("{query}: {e}")));
    }
    values
}

/// Asserts `after` equals `before`, printing only what differs.
fn assert_same(before: &Snapshot, after: &Snapshot, what: &str) {
    if before == after {
        return;
    }
    let fields = |s: &Snapshot| {
        vec![
            ("roles", s.roles.clone()),
            ("memberships", s.memberships.clone()),
            ("schemas", s.schemas.clone()),
            ("objects", s.objects.clone()),
            ("idem rows", s.idem_rows.clone()),
            ("billing rows", s.billing_rows.to_string()),
            ("advisory locks", s.advisory_locks.to_string()),
            ("temp objects", s.temp_objects.to_string()),
            ("replication slots", s.replication_slots.to_string()),
            ("large objects", s.large_objects.to_string()),
            ("files", s.files.clone()),
            ("sessions", s.sessions.join(" | ")),
        ]
    };
    let mut differences = Vec::new();
    for ((name, b), (_, a)) in fields(before).into_iter().zip(fields(after)) {
        if a != b {
            let split = |s: &str| s.split([',', ' ']).map(str::to_owned).collect::<std::collections::BTreeSet<_>>();
            let (sb, sa) = (split(&b), split(&a));
            let gone: Vec<_> = sb.difference(&sa).take(10).collect();
            let new: Vec<_> = sa.difference(&sb).take(10).collect();
            differences.push(format!("{name} (gone: {gone:?}; new: {new:?}; {} vs {} chars)", b.len(), a.len()));
        }
    }
    panic!("{what}: the database changed: {}", differences.join("; "));
}

fn scenarios_pool(s: &Setup) -> PgPool {
    s.pools
        .iter()
        .find(|(n, _, _)| *n == "scenarios")
        .map(|(_, _, p)| p.clone())
        .unwrap_or_else(|| panic!("no scenarios pool"))
}

/// Statements an attacker would send, each with a word of what it tries.
const ATTACKS: &[(&str, &str)] = &[
    // Running OS commands: write a catalog, then call what was written.
    ("catalog write", "UPDATE pg_catalog.pg_language SET lanpltrusted = true WHERE lanname = 'c'"),
    ("catalog write", "INSERT INTO pg_catalog.pg_proc SELECT * FROM pg_catalog.pg_proc LIMIT 1"),
    ("program", "COPY (SELECT 1) TO PROGRAM 'id'"),
    ("DO block", "DO $$ BEGIN PERFORM 1; END $$"),
    // Files, large objects, password hashes.
    ("read a file", "SELECT pg_read_file('/etc/passwd')"),
    ("list files", "SELECT pg_ls_dir('.')"),
    ("large object import", "SELECT lo_import('/etc/passwd')"),
    ("large object", "SELECT lo_from_bytea(0, '\\x41'::bytea)"),
    ("password hashes", "SELECT rolpassword FROM pg_authid"),
    ("password hashes", "SELECT passwd FROM pg_shadow"),
    // Dedup claims.
    ("delete claims", "DELETE FROM idem.processed_event"),
    (
        "forge a claim",
        "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\") VALUES (gen_random_uuid(), 'billing', 't', 0, 0)",
    ),
    ("read the role map", "SELECT * FROM idem.handler_role"),
    ("claim directly", "SELECT idem_api.claim(gen_random_uuid(), 't', 0, 0, NULL)"),
    (
        "claim directly",
        "SELECT idem_api.claim_events(ARRAY[gen_random_uuid()], '{t}', '{0}', '{0}', ARRAY[NULL::bytea], NULL, false)",
    ),
    // Another handler's rows.
    ("read another handler", "SELECT * FROM billing.charge"),
    ("write another handler", "INSERT INTO billing.charge VALUES (gen_random_uuid(), 1, 1, 1, 'EUR')"),
    // Session state that would outlive the event.
    ("search_path", "SELECT set_config('search_path', 'billing', false)"),
    ("synchronous_commit", "SELECT set_config('synchronous_commit', 'off', false)"),
    ("statement_timeout", "SELECT set_config('statement_timeout', '0', false)"),
    ("parse differently", "SELECT set_config('standard_conforming_strings', 'off', false)"),
    ("role", "SELECT set_config('role', 'postgres', false)"),
    ("role", "SET ROLE postgres"),
    ("role", "RESET ROLE"),
    ("session authorization", "SET SESSION AUTHORIZATION postgres"),
    ("advisory lock", "SELECT pg_advisory_lock(42)"),
    ("temp table", "CREATE TEMP TABLE effect (event_id uuid, note text)"),
    ("listen", "LISTEN idem_attack"),
    ("prepare", "PREPARE attack AS SELECT 1"),
    ("cursor", "DECLARE attack CURSOR WITH HOLD FOR SELECT 1"),
    ("create", "CREATE TABLE scenario.attack (a int)"),
    ("create", "CREATE FUNCTION scenario.f() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
    ("alter own role", "ALTER ROLE CURRENT_USER SET statement_timeout = 0"),
    // Other backends, replication.
    ("terminate backends", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"),
    ("replication slot", "SELECT pg_create_physical_replication_slot('idem_attack')"),
    // SQL text executed by a function, out of a parser's sight.
    ("sql in a string", "SELECT query_to_xml('DELETE FROM idem.processed_event RETURNING 1', true, true, '')"),
    // Functions in column notation: x.f is f(x).
    (
        "column notation",
        "SELECT x.ts_stat FROM concat('select to_tsvector(set_config(''statement_timeout'', ''0'', true))') x",
    ),
    ("column notation", "SELECT x.lo_creat FROM int4(-1) x"),
    ("column notation", "SELECT (int8(42)).pg_advisory_lock"),
    ("random seed", "SELECT setseed(0.5)"),
    // Namespaces every role shares; other handlers' volumes.
    ("advisory key", "SELECT pg_advisory_xact_lock(hashtext('idem.handler_module'), hashtext('billing'))"),
    ("statistics", "SELECT n_live_tup FROM pg_stat_all_tables WHERE relname = 'charge'"),
    ("sizes", "SELECT pg_relation_size('billing.charge')"),
    ("locks", "SELECT count(*) FROM pg_locks"),
    ("wal", "SELECT pg_logical_emit_message(true, 'idem', 'attack')"),
    ("sql in a table name", "SELECT table_to_xml('scenario.effect', true, true, '')"),
    // Transaction control and smuggling.
    ("commit", "COMMIT"),
    ("two statements", "SELECT 1; SELECT set_config('search_path', 'billing', false)"),
];

#[tokio::test]
async fn every_attack_statement_fails_in_the_guest_and_leaves_the_database_as_it_was() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let pool = scenarios_pool(&s);
    // Something to protect: another handler's committed row and claim.
    assert_eq!(s.billing().execute(&super::order(), 1).await.expect("billing"), Outcome::Processed);
    let before = snapshot(&s, &pool).await;

    for (what, sql) in ATTACKS {
        // The guest runs it and fails with the error...
        let err = exec.execute(&scenario_with("statement", json!({ "sql": sql })), 1).await.expect_err(what);
        assert_ne!(err.class(), ErrorClass::Fatal, "{what}: a guest never stops the host: {err}");
        // ...or hides the error and succeeds: whatever it did is undone.
        let outcome = exec.execute(&scenario_with("swallow", json!({ "sql": sql })), 1).await;
        assert_eq!(outcome.expect(what), Outcome::Processed, "{what}");
        let note: String = sqlx::query_scalar("SELECT note FROM scenario.effect WHERE note LIKE 'swallow:%' LIMIT 1")
            .fetch_one(&s.db.pool)
            .await
            .expect("note");
        assert!(note.starts_with("swallow:err:"), "{what}: `{sql}` went through: {note}");
        sqlx::query("DELETE FROM scenario.effect").execute(&s.db.pool).await.expect("clean");
        sqlx::query("DELETE FROM idem.processed_event WHERE consumer = 'scenarios'").execute(&s.db.pool).await.ok();
        // The host goes on.
        assert_eq!(exec.execute(&scenario("ok"), 1).await.expect(what), Outcome::Processed, "{what}");
        sqlx::query("DELETE FROM scenario.effect").execute(&s.db.pool).await.expect("clean");
        sqlx::query("DELETE FROM idem.processed_event WHERE consumer = 'scenarios'").execute(&s.db.pool).await.ok();
        assert_same(&before, &snapshot(&s, &pool).await, &format!("{what}: `{sql}`"));
    }
    s.finish().await;
}

#[tokio::test]
async fn past_the_guard_postgresql_denies_every_attack_and_the_pool_forgets_the_rest() {
    let s = Setup::new().await;
    let pool = scenarios_pool(&s);
    assert_eq!(s.billing().execute(&super::order(), 1).await.expect("billing"), Outcome::Processed);
    let before = snapshot(&s, &pool).await;

    // The role may call the claim, but only ever claims as itself.
    let mut conn = pool.acquire().await.expect("acquire");
    let id = uuid::Uuid::now_v7();
    let claimed: Vec<String> = sqlx::query_scalar(
        "SELECT idem_api.claim_events(ARRAY[$1::uuid], '{t}', '{0}', '{0}', ARRAY[NULL::bytea], NULL, false)",
    )
    .bind(id)
    .fetch_one(&mut *conn)
    .await
    .expect("claim as itself");
    assert_eq!(claimed, vec!["claimed"]);
    for older in [
        "SELECT idem_api.claim($1, 't', 0, 0, NULL)",
        "SELECT idem_api.claim_many(ARRAY[$1::uuid], '{t}', '{0}', '{0}', ARRAY[NULL::bytea])",
    ] {
        let err = sqlx::query(older).bind(id).execute(&mut *conn).await.expect_err("the older claims are revoked");
        assert!(err.to_string().contains("permission denied"), "{older}: {err}");
    }
    let consumer: String = sqlx::query_scalar("SELECT consumer FROM idem.processed_event WHERE event_id = $1")
        .bind(id)
        .fetch_one(&s.db.pool)
        .await
        .expect("claim row");
    assert_eq!(consumer, "scenarios", "a direct claim lands in the caller's own namespace");
    sqlx::query("DELETE FROM idem.processed_event WHERE event_id = $1").bind(id).execute(&s.db.pool).await.ok();
    drop(conn);

    // Session state: PostgreSQL lets a role change its own settings, so the
    // event's transaction, the only way a guest reaches a connection, must
    // reset them before the connection serves the next event, whether the
    // event commits or rolls back.
    let pins = idem::executor::Pins { schema: "scenario".into(), synchronous_commit: "on".into() };
    let session_level = [
        "SELECT set_config('search_path', 'billing', false)",
        "SELECT set_config('synchronous_commit', 'off', false)",
        "SELECT set_config('statement_timeout', '0', false)",
        "SELECT set_config('standard_conforming_strings', 'off', false)",
        "LISTEN idem_attack",
        "PREPARE attack AS SELECT 1",
        "DECLARE attack CURSOR WITH HOLD FOR SELECT 1",
    ];
    for sql in session_level {
        for commit in [true, false] {
            let mut tx = EventTx::begin(&pool, &pins, Duration::from_secs(5)).await.expect("begin");
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(tx.conn()).await.expect("pid");
            tx.conn().execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            let end = if commit { "committed" } else { "rolled back" };
            if commit {
                tx.commit().await.unwrap_or_else(|e| panic!("{sql}: commit: {e}"));
            } else {
                tx.rollback().await;
            }
            let what = format!("`{sql}` in a transaction {end} outlived the event");
            assert_same(&before, &snapshot(&s, &pool).await, &what);
            // Reset, not closed: only a prepared statement, which cannot be
            // dropped alone (and which a ROLLBACK keeps), costs the
            // connection.
            let kept = pids(&pool).await.contains(&pid);
            assert_eq!(kept, !sql.starts_with("PREPARE"), "`{sql}` {end}: connection kept");
        }
    }

    // Everything else: denied by PostgreSQL itself.
    let denied = [
        "UPDATE pg_catalog.pg_language SET lanpltrusted = true WHERE lanname = 'c'",
        "COPY (SELECT 1) TO PROGRAM 'id'",
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT pg_ls_dir('.')",
        "SELECT lo_import('/etc/passwd')",
        "SELECT rolpassword FROM pg_authid",
        "DELETE FROM idem.processed_event",
        "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\") VALUES (gen_random_uuid(), 'billing', 't', 0, 0)",
        "SELECT * FROM idem.handler_role",
        "SELECT * FROM billing.charge",
        "SET ROLE postgres",
        "SELECT set_config('role', 'postgres', false)",
        "SET SESSION AUTHORIZATION postgres",
        "CREATE TEMP TABLE effect (event_id uuid, note text)",
        "CREATE TABLE scenario.attack (a int)",
        "CREATE TABLE public.attack (a int)",
        "CREATE SCHEMA attack",
        "DROP TABLE scenario.effect",
        "ALTER TABLE scenario.effect ADD COLUMN x int",
        "TRUNCATE scenario.effect",
        "SELECT pg_create_physical_replication_slot('idem_attack')",
        "SELECT query_to_xml('DELETE FROM idem.processed_event RETURNING 1', true, true, '')",
        "SELECT x.ts_stat FROM concat('select to_tsvector(set_config(''statement_timeout'', ''0'', true))') x",
        "SELECT x.lo_creat FROM int4(-1) x",
        "SELECT pg_notify('idem', 'x')",
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'postgres'",
        // Namespaces every role shares, other handlers' volumes and
        // activity, WAL and SQL text: revoked by `idem migrate`
        // (sandbox/public_functions.tsv), not only refused by the guard.
        "SELECT pg_advisory_lock(42)",
        "SELECT pg_advisory_xact_lock(hashtext('idem.handler_module'), hashtext('billing'))",
        "SELECT n_live_tup FROM pg_stat_all_tables WHERE relname = 'charge'",
        "SELECT heap_blks_read FROM pg_statio_all_tables",
        "SELECT pg_stat_get_live_tuples('billing.charge'::regclass)",
        "SELECT pg_relation_size('billing.charge')",
        "SELECT pg_total_relation_size('idem.processed_event')",
        "SELECT count(*) FROM pg_locks",
        "SELECT application_name FROM pg_stat_activity",
        "SELECT pg_logical_emit_message(true, 'idem', 'attack')",
        "SELECT table_to_xml('scenario.effect', true, true, '')",
        "SELECT schema_to_xml('scenario', true, true, '')",
        "SELECT database_to_xml(true, true, '')",
        "SELECT pg_current_wal_lsn()",
    ];
    for sql in denied {
        let mut conn = pool.acquire().await.expect("acquire");
        let mut tx = conn.begin().await.expect("begin");
        let result = tx.execute(sql).await;
        let failed = match &result {
            Err(e) => e.as_database_error().is_some(),
            // pg_terminate_backend answers false for a backend it may not signal.
            Ok(_) => sql.contains("pg_terminate_backend"),
        };
        assert!(failed, "PostgreSQL let the handler's role run `{sql}`: {result:?}");
        drop(tx);
        drop(conn);
        assert_same(&before, &snapshot(&s, &pool).await, &format!("`{sql}`"));
    }
    let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = 'postgres'")
        .fetch_one(&s.db.pool)
        .await
        .expect("count");
    assert!(alive >= 1, "no other backend was terminated");
    // And the handler still works.
    assert_eq!(s.scenarios().execute(&scenario("ok"), 1).await.expect("ok"), Outcome::Processed);
    s.finish().await;
}

#[tokio::test]
async fn a_statement_past_the_budget_cannot_hold_the_partition_or_the_connection() {
    let s = Setup::new().await;
    let pool = scenarios_pool(&s);
    let before = snapshot(&s, &pool).await;
    let exec = s.scenarios_with(|settings| settings.timeout = Duration::from_millis(500));
    // The guest hides the server's cancellation and loops until the host stops it.
    for sql in ["SELECT pg_sleep(30)", "SELECT count(*) FROM generate_series(1, 100000000000)"] {
        let started = std::time::Instant::now();
        let err = exec.execute(&scenario_with("swallow", json!({ "sql": sql })), 1).await;
        let elapsed = started.elapsed();
        // Either the server cancelled it (statement_timeout) and the guest
        // went on, or the invocation overran: never longer than budget + grace.
        assert!(
            elapsed < Duration::from_millis(500) + idem::executor::GRACE,
            "`{sql}` held the partition for {elapsed:?}"
        );
        if let Err(e) = err {
            assert_eq!(e.class(), ErrorClass::Retryable, "{e}");
        }
    }
    // What the swallowed statements left is cleared before the overrun below.
    sqlx::query("DELETE FROM scenario.effect").execute(&s.db.pool).await.expect("clean");
    sqlx::query("DELETE FROM idem.processed_event").execute(&s.db.pool).await.expect("clean");
    // A guest whose statement runs past the budget: the partition is released
    // within budget + grace, the connection is closed, not waited on.
    let exec = s.scenarios_with(|settings| settings.timeout = Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = exec.execute(&scenario("loop"), 1).await.expect_err("loop");
    assert_eq!(err.class(), ErrorClass::Retryable, "{err}");
    assert!(started.elapsed() < Duration::from_millis(300) + idem::executor::GRACE);
    // Nothing of the overruns survives: the server ends every abandoned
    // backend (a statement still running, a transaction left open) within
    // its client check (1 s) — long before `pg_sleep(30)` would end.
    let abandoned = std::time::Instant::now();
    loop {
        let left: Vec<(i32, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = 'idem:scenarios' AND state IS DISTINCT FROM 'idle' AND pid <> pg_backend_pid()",
        )
        .fetch_all(&s.db.pool)
        .await
        .expect("activity");
        if left.is_empty() {
            break;
        }
        assert!(
            abandoned.elapsed() < Duration::from_secs(5),
            "abandoned backends still there 5 s after the overruns: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_same(&before, &snapshot(&s, &pool).await, "an overrun");
    assert_eq!(s.count(EFFECTS).await, 0);
    assert_eq!(s.count(CLAIMS).await, 0);
    s.finish().await;
}

#[tokio::test]
async fn per_event_caps_bound_statements_and_requests() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| {
        settings.caps.db.max_statements = 100;
        settings.caps.http.max_requests = 5;
    });
    let err = exec.execute(&scenario("statements"), 1).await.expect_err("too many statements");
    assert!(err.to_string().contains("max_db_statements"), "{err}");
    let err = exec.execute(&scenario("requests"), 1).await.expect_err("too many requests");
    assert!(err.to_string().contains("max_http_requests"), "{err}");
    assert_eq!(s.provider.seen().len(), 5, "the sixth request was never sent");
    assert_eq!(s.count(EFFECTS).await, 0);
    assert_eq!(exec.execute(&scenario("ok"), 1).await.expect("ok"), Outcome::Processed, "the host goes on");
    s.finish().await;
}

#[tokio::test]
async fn a_result_the_guest_does_not_get_leaves_no_effect() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    for (sql, expected) in [
        // Rows the host cannot hand over (an interval column): the INSERT is undone.
        (
            "INSERT INTO scenario.effect (event_id, note) VALUES (gen_random_uuid(), 'kept') RETURNING '1 day'::interval AS i",
            "query:err:DbError::InvalidValue",
        ),
        // More than 16 MiB of rows: refused, and the INSERT with it.
        (
            "INSERT INTO scenario.effect (event_id, note) SELECT gen_random_uuid(), 'kept' || g FROM generate_series(1, 20) g RETURNING repeat('x', 1000000)",
            "query:err:DbError::Refused",
        ),
    ] {
        let e = scenario_with("query-swallow", json!({ "sql": sql }));
        assert_eq!(exec.execute(&e, 1).await.expect("the guest hides the error"), Outcome::Processed);
        let notes: Vec<String> =
            sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note LIKE 'query:%'")
                .bind(e.id)
                .fetch_all(&s.db.pool)
                .await
                .expect("notes");
        assert!(notes.first().is_some_and(|n| n.starts_with(expected)), "{sql}: {notes:?}");
        assert_eq!(s.count("SELECT count(*) FROM scenario.effect WHERE note LIKE 'kept%'").await, 0, "{sql}");
    }
    s.finish().await;
}

#[tokio::test]
async fn wasi_gives_a_guest_no_files_no_sockets_no_names_no_environment() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let e = scenario("wasi");
    assert_eq!(exec.execute(&e, 1).await.expect("the probes ran"), Outcome::Processed);
    let notes: Vec<String> = sqlx::query_scalar("SELECT note FROM scenario.effect WHERE note <> 'start' ORDER BY note")
        .fetch_all(&s.db.pool)
        .await
        .expect("notes");
    let got = |name: &str| notes.iter().find(|n| n.starts_with(&format!("{name}:"))).cloned().unwrap_or_default();
    for probe in ["preopens", "read-file", "cwd-file", "connect", "resolve"] {
        assert!(got(probe).starts_with(&format!("{probe}:err:")), "{probe} reached something: {notes:?}");
    }
    assert_eq!(got("env"), "env:ok:0", "{notes:?}");
    assert_eq!(got("args"), "args:ok:0", "{notes:?}");
    assert!(got("stdin") == "stdin:ok:0" || got("stdin").starts_with("stdin:err:"), "{notes:?}");
    s.finish().await;
}

#[tokio::test]
async fn http_redirects_and_huge_answers_go_nowhere() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let base = s.provider.base_url();
    // The guest gets the 302 itself; the host never follows it (here back
    // to the provider, which would count a second request).
    let redirect = scenario_with("get-status", json!({ "url": format!("{base}/redirect") }));
    assert_eq!(exec.execute(&redirect, 1).await.expect("the guest handles the 302"), Outcome::Processed);
    let answered: Vec<String> =
        sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note LIKE 'status:%'")
            .bind(redirect.id)
            .fetch_all(&s.db.pool)
            .await
            .expect("notes");
    assert_eq!(answered, vec!["status:302".to_owned()], "the guest saw the redirect itself");
    assert_eq!(s.provider.seen().len(), 1, "one request: the redirect was not followed");
    let err = exec
        .execute(&scenario_with("get", json!({ "url": format!("{base}/big") })), 1)
        .await
        .expect_err("a 100 MB answer is refused");
    assert!(err.to_string().contains("larger than"), "{err}");
    assert_eq!(exec.execute(&scenario("ok"), 1).await.expect("ok"), Outcome::Processed, "the host goes on");
    s.finish().await;
}

#[tokio::test]
async fn http_to_private_addresses_needs_allow_private() {
    let s = Setup::new().await;
    let port = s.provider.addr.port();
    let by_name = format!("http://localhost:{port}");
    let metadata = "http://169.254.169.254".to_owned();
    let exec = s.scenarios_with(|settings| {
        settings.caps.http.allow = vec![by_name.clone(), metadata.clone()];
        settings.caps.http.allow_private = Vec::new();
    });
    // A name that resolves to loopback, and the metadata address itself.
    let err = exec
        .execute(&scenario_with("get", json!({ "url": format!("{by_name}/v1/status") })), 1)
        .await
        .expect_err("loopback by name");
    assert!(err.to_string().contains("private addresses"), "{err}");
    let err = exec
        .execute(&scenario_with("get", json!({ "url": format!("{metadata}/latest/meta-data/") })), 1)
        .await
        .expect_err("metadata");
    assert!(err.to_string().contains("private address"), "{err}");
    assert!(s.provider.seen().is_empty(), "nothing reached the provider on loopback");
    // Listed in allow_private, the same name is reached.
    let exec = s.scenarios_with(|settings| {
        settings.caps.http.allow = vec![by_name.clone()];
        settings.caps.http.allow_private = vec![by_name.clone()];
    });
    let e = scenario_with("get", json!({ "url": format!("{by_name}/v1/status") }));
    assert_eq!(exec.execute(&e, 1).await.expect("allowed explicitly"), Outcome::Processed);
    assert_eq!(s.provider.seen().len(), 1);
    s.finish().await;
}

#[tokio::test]
async fn injected_credentials_reach_the_provider_and_never_the_guest() {
    let s = Setup::new().await;
    let base = s.provider.base_url();
    let exec = s.scenarios_with(|settings| {
        settings.caps.http.credentials = vec![idem::runtime::Credential {
            base: base.clone(),
            header: "Authorization".into(),
            value: "Bearer s3cret".into(),
        }];
    });
    let e = scenario_with("get", json!({ "url": format!("{base}/v1/status") }));
    assert_eq!(exec.execute(&e, 1).await.expect("processed"), Outcome::Processed);
    let seen = s.provider.seen();
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer s3cret"));
    s.finish().await;
}

#[tokio::test]
async fn a_component_importing_wasi_http_is_refused_naming_the_import() {
    let s = Setup::new().await;
    let wat = r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#;
    let bytes = wat::parse_str(wat).expect("wat");
    let err = idem::Handler::from_bytes(&s.runtime, "http.wasm", &bytes, s.settings("scenarios"))
        .expect_err("refused at load");
    assert!(err.to_string().contains("`wasi:http/outgoing-handler@0.2.0`"), "{err}");
    let wat = r#"(component (import "acme:evil/backdoor@1.0.0" (instance)))"#;
    let err = idem::Handler::from_bytes(&s.runtime, "evil.wasm", &wat::parse_str(wat).expect("wat"), s.settings("x"))
        .expect_err("refused at load");
    assert!(err.to_string().contains("`acme:evil/backdoor@1.0.0`"), "{err}");
    s.finish().await;
}

#[tokio::test]
async fn a_handler_connecting_as_a_superuser_or_with_extra_rights_is_refused_at_start() {
    let s = Setup::new().await;
    let place = s.db.place("scenarios", "scenario");
    let others = vec!["billing".to_owned(), "notification".to_owned()];
    idem::sandbox::rights::check(&s.db.pool, &place, &others).await.expect("the provisioned role passes");
    let role = &place.role;
    for (grant, undo, expected) in [
        (format!("ALTER ROLE {role} SUPERUSER"), format!("ALTER ROLE {role} NOSUPERUSER"), "SUPERUSER"),
        (
            format!("GRANT pg_read_server_files TO {role}"),
            format!("REVOKE pg_read_server_files FROM {role}"),
            "membership",
        ),
        (
            format!("GRANT USAGE ON SCHEMA idem TO {role}"),
            format!("REVOKE USAGE ON SCHEMA idem FROM {role}"),
            "schema idem",
        ),
        (
            format!("GRANT USAGE ON SCHEMA billing TO {role}"),
            format!("REVOKE USAGE ON SCHEMA billing FROM {role}"),
            "billing",
        ),
        (
            format!("GRANT CREATE ON SCHEMA scenario TO {role}"),
            format!("REVOKE CREATE ON SCHEMA scenario FROM {role}"),
            "CREATE on schema",
        ),
        (
            format!("GRANT TEMPORARY ON DATABASE {} TO {role}", s.db.name),
            format!("REVOKE TEMPORARY ON DATABASE {} FROM {role}", s.db.name),
            "TEMPORARY",
        ),
    ] {
        s.db.pool.execute(grant.as_str()).await.expect("grant");
        let err = idem::sandbox::rights::check(&s.db.pool, &place, &others).await.expect_err(&grant);
        assert!(format!("{err:#}").contains(expected), "{grant}: {err:#}");
        s.db.pool.execute(undo.as_str()).await.expect("undo");
    }
    // `idem migrate --config` takes an excess right back.
    s.db.pool.execute(format!("GRANT pg_signal_backend TO {role}").as_str()).await.expect("grant");
    idem::sandbox::provision::apply(&s.db.pool, &place).await.expect("provision");
    idem::sandbox::rights::check(&s.db.pool, &place, &others).await.expect("clean again");
    s.finish().await;
}

/// A guest in another language: a componentize-py component imports more of
/// WASI (filesystem, sockets) than a Rust one; it must still load through
/// the import allowlist, instantiate under the limits and run in the
/// sandbox, finding nothing behind those imports.
#[tokio::test]
async fn a_python_component_loads_and_runs_in_the_sandbox() {
    let s = Setup::new().await;
    let handler = idem::Handler::load(
        &s.runtime,
        &idem_tests::guests::python_component("python-notification"),
        s.settings("notification"),
    )
    .unwrap_or_else(|e| panic!("the Python component loads: {e}"));
    let exec = s.executor_for(handler);
    exec.check_instantiation().await.unwrap_or_else(|e| panic!("instantiates under its limits: {e:#}"));
    let e = super::order();
    assert_eq!(exec.execute(&e, 1).await.expect("processed"), Outcome::Processed);
    assert_eq!(exec.execute(&e, 1).await.expect("again"), Outcome::Duplicate);
    assert_eq!(s.count("SELECT count(*) FROM notification.sent WHERE message = 'from python'").await, 1);
    s.finish().await;
}

/// Python and JavaScript guests, built with their SDKs, look for the host's
/// files, network and environment with whatever their language offers, and
/// record what they found: every probe must have failed or found nothing.
#[tokio::test]
async fn python_and_javascript_guests_find_no_file_no_socket_and_no_environment() {
    let s = Setup::new().await;
    for probe in ["python-probe", "ts-probe"] {
        let handler =
            idem::Handler::load(&s.runtime, &idem_tests::guests::component(probe), s.settings("notification"))
                .unwrap_or_else(|e| panic!("{probe} loads: {e}"));
        let exec = s.executor_for(handler);
        let e = super::order();
        assert_eq!(exec.execute(&e, 1).await.expect("processed"), Outcome::Processed, "{probe}");
        let found: Vec<String> = sqlx::query_scalar("SELECT message FROM notification.sent ORDER BY customer_id")
            .fetch_all(&s.db.pool)
            .await
            .expect("the probes' rows");
        assert_eq!(found.len(), 5, "{probe}: one row per probe: {found:#?}");
        // Each probe's own failure, named: not merely some text with
        // "Error" in it (a probe that got through and printed an error
        // page would pass that).
        let expected: [&str; 5] = if probe == "python-probe" {
            [
                "read /etc/passwd: FileNotFoundError: [Errno 44] No such file or directory: '/etc/passwd'",
                "list /: FileNotFoundError: [Errno 44] No such file or directory: '/'",
                "tcp 127.0.0.1:5432: ModuleNotFoundError: No module named 'socket'",
                "resolve localhost: ModuleNotFoundError: No module named 'socket'",
                "os.environ: {}",
            ]
        } else {
            [
                "read /etc/passwd: Error: no file API (require: undefined, Deno: undefined, Bun: undefined)",
                "fetch http://127.0.0.1:5432/: TypeError: fetch() is not available in idem handlers (the component has \
                 no wasi:http)",
                "tcp 127.0.0.1:5432: Error: no socket API (Deno: undefined, TCPSocket: undefined, navigator: undefined)",
                "http.get http://127.0.0.1:5432/: HttpError: http: denied: `http://127.0.0.1:5432/` is not under this \
                 handler's allowlist",
                "environment: Error: no environment API (process: undefined, Deno: undefined)",
            ]
        };
        for (outcome, expected) in found.iter().zip(expected) {
            assert!(outcome.starts_with(expected), "{probe}: expected `{expected}`, got `{outcome}`");
            assert!(!outcome.contains("root:") && !outcome.contains("PATH"), "{probe}: leaked the host's: {outcome}");
        }
        sqlx::query("DELETE FROM notification.sent").execute(&s.db.pool).await.expect("cleared");
    }
    s.finish().await;
}

/// The instance pool (`runtime::pool`) is sized so that it is never full;
/// should it be, the event is not failed for it: the host's shortage is
/// classified as unavailable (retried without spending an attempt), and
/// the slot serves the next event once free.
#[tokio::test]
async fn a_full_instance_pool_is_the_hosts_shortage_not_the_events_failure() {
    let mut s = Setup::new().await;
    s.runtime = idem::Runtime::with_pool(idem::runtime::PoolSize { instances: 1, max_memory_bytes: 256 << 20 })
        .expect("a pool of one");
    let exec = s.scenarios_with(|settings| settings.timeout = Duration::from_secs(2));
    let endless = scenario("loop");
    let (looping, blocked) = tokio::join!(exec.execute(&endless, 1), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        exec.execute(&scenario("ok"), 1).await
    });
    assert!(matches!(looping, Err(ExecError::TimedOut(_))), "{looping:?}");
    let err = blocked.expect_err("no slot while the loop runs");
    assert!(matches!(err, ExecError::Infrastructure(ref m) if m.contains("no instance slot")), "{err}");
    assert_eq!(err.class(), ErrorClass::Unavailable);
    assert_eq!(exec.execute(&scenario("ok"), 1).await.expect("a free slot"), Outcome::Processed);
    s.finish().await;
}

/// Defence in depth: whatever the guard lets through, the handler's role
/// can execute only the functions `sandbox/public_functions.tsv` allows
/// (every function of PostgreSQL 15 that PUBLIC may execute, classified),
/// its own schema's, and idem's claim and outbox write; and it reads no
/// statistics view.
#[tokio::test]
async fn a_handler_role_can_execute_no_function_the_classification_does_not_allow() {
    let s = Setup::new().await;
    let pool = scenarios_pool(&s);
    let executable: Vec<(String, String)> = sqlx::query_as(
        "SELECT n.nspname::text, p.oid::regprocedure::text \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE has_function_privilege(current_user, p.oid, 'EXECUTE')",
    )
    .fetch_all(&pool)
    .await
    .expect("functions");
    let classified: std::collections::HashMap<String, bool> =
        idem::sandbox::public::classification().map(|c| (c.signature.to_owned(), c.allowed)).collect();
    let mut refused = Vec::new();
    for (schema, function) in &executable {
        let ok = match schema.as_str() {
            "pg_catalog" | "information_schema" => classified.get(function) == Some(&true),
            // The claim, the outbox's write (which takes only events the
            // role claimed in the same transaction), and the count of its
            // own transaction's writes (a shadow run's, `shadow`).
            "idem_api" => {
                function.starts_with("idem_api.claim_events(")
                    || function.starts_with("idem_api.emit_events(")
                    || function == "idem_api.transaction_writes()"
            }
            "scenario" => true,
            _ => false,
        };
        if !ok {
            refused.push(format!("{schema}.{function}"));
        }
    }
    assert!(refused.is_empty(), "the handler's role can execute what the classification does not allow: {refused:?}");
    assert!(executable.len() > 2_500, "the query saw the catalog: {}", executable.len());
    let revoked = idem::sandbox::public::classification().filter(|c| !c.allowed).count();
    assert!(revoked > 150, "{revoked}");
    for view in ["pg_stat_all_tables", "pg_statio_all_tables", "pg_stat_activity", "pg_locks", "pg_stat_database"] {
        let readable: bool = sqlx::query_scalar("SELECT has_table_privilege(current_user, $1::regclass, 'SELECT')")
            .bind(view)
            .fetch_one(&pool)
            .await
            .expect(view);
        assert!(!readable, "the handler's role reads {view}");
    }
    s.finish().await;
}

/// Host work a guest causes is bounded by its budget: the largest statements
/// the caps allow, sent in a loop, are checked off the event workers, one at
/// a time for that handler, and the invocation ends at its deadline whatever
/// the checker is doing; another handler's event meanwhile runs as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_statements_in_a_loop_cannot_hold_the_partition_or_another_handler() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.timeout = Duration::from_millis(500));
    let items = vec!["1"; 30_000].join(",");
    let sql = format!("SELECT ARRAY[{items}]");
    assert!(sql.len() < 64 << 10, "within the cap: {} bytes", sql.len());
    let hostile = async {
        let started = std::time::Instant::now();
        let err = exec.execute(&scenario_with("statement-loop", json!({ "sql": sql })), 1).await;
        (started.elapsed(), err)
    };
    let billing = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let outcome = s.billing().execute(&super::order(), 1).await;
        (started.elapsed(), outcome)
    };
    let ((held, err), (took, outcome)) = tokio::join!(hostile, billing);
    assert!(held < Duration::from_millis(500) + idem::executor::GRACE, "the loop held its partition for {held:?}");
    assert_eq!(err.expect_err("the loop overran").class(), ErrorClass::Retryable);
    assert_eq!(outcome.expect("billing"), Outcome::Processed);
    assert!(took < Duration::from_secs(5), "billing's event took {took:?} beside the loop");
    assert_eq!(s.count(CLAIMS).await, 1, "billing's claim only");
    s.finish().await;
}
