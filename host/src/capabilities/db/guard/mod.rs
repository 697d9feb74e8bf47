//! Which statements a handler may run, decided by PostgreSQL's own parser
//! (`pg_query`), so no spelling, comment or case slips through.
//!
//! Allowed: exactly one SELECT, INSERT, UPDATE, DELETE or MERGE. Refused:
//! transaction control (the host owns the transaction), session changes
//! (they would outlive the event on a pooled connection), DDL and every other
//! utility statement. Inside the statement, every node of the parse tree is
//! visited, and refused wherever it appears (any clause, any depth):
//!
//! - `INTO` (SELECT … INTO creates a table);
//! - any reference to the host's schemas `idem` and `idem_api` (any case,
//!   quoted or not): relations, functions, types, operators, collations,
//!   qualified column references and string literals cast to a `reg*` type;
//! - a write (INSERT, UPDATE, DELETE, MERGE, also in a WITH clause) into
//!   `pg_catalog`, `information_schema`, `pg_toast`, any other `pg_*` schema,
//!   or an unqualified relation named `pg_*`;
//! - the functions listed in [`functions`].
//!
//! How: the protobuf parse tree derives `serde::Serialize`, so it is turned
//! into a `serde_json::Value` and every object and array is walked,
//! recursively, whatever its node type; the rules look at the keys they know
//! (`schemaname`, `funcname`, `relation`, …) wherever they occur. A node type
//! this module has never heard of is still walked through. (The typed
//! helpers `ParseResult::tables()` and `functions()` skip whole clauses:
//! VALUES lists, RETURNING, LIMIT, ON CONFLICT, MERGE actions, …)
//!
//! CTE names are never consulted: a schema-qualified name such as
//! `idem.processed_event` is always a table, whatever CTE shares its relname,
//! and the only rule about unqualified names (a write target named `pg_*`)
//! is about write targets, which PostgreSQL never resolves to a CTE. An
//! unqualified name that matches a visible CTE is that CTE, and otherwise
//! resolves through the search path, which handlers cannot change (SET and
//! `set_config` are refused) and which does not include `idem`.
//!
//! Functions: a denylist, not an allowlist. Handlers need the ordinary
//! built-ins (now(), coalesce, jsonb, string, math and window functions,
//! gen_random_uuid()) and their own and extensions'
//! functions; an allowlist of PostgreSQL's thousands of functions would be
//! long, brittle across versions, and would refuse every function a handler
//! migration creates. The denylist refuses, by exact name or prefix,
//! case-insensitively and whatever the schema, the families that escape what
//! this guard can see or what the transaction can undo: functions that run
//! SQL text, files, large objects and raw storage, settings, every
//! advisory lock (their keys are one namespace for every role), signalling
//! and administration, and replication.
//!
//! This is defence in depth, not a sandbox: a function not on the list, a
//! view, a trigger or a parameter's value is not inspected. Per-handler
//! login roles, with no rights on the host's schemas, are the isolation
//! boundary.

pub(crate) mod checker;
mod functions;

use pg_query::NodeEnum;
use serde_json::{Map, Value};

/// The host's own schemas (compared case-insensitively).
const HOST_SCHEMAS: &[&str] = &["idem", "idem_api"];

/// Keys whose value is a possibly qualified name (a list of `String` nodes,
/// the last one the object's own name): functions, types, operators,
/// collations, operator classes, TABLESAMPLE methods.
const QUALIFIED_NAME_KEYS: &[&str] =
    &["funcname", "names", "name", "oper_name", "collname", "opclass", "collation", "method", "use_op"];

/// The statements a handler may run, as tagged in the parse tree.
const ALLOWED_STATEMENTS: &[&str] = &["SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"];

/// Verdicts on statements already checked. The verdict depends on the
/// text alone, and handlers send the same few statements for every event:
/// parsing each again cost about 7% of the host's CPU under batching. Only
/// short statements are kept, and at most [`CACHED`] of them, so a guest
/// sending ever new text costs the host at most ~16 MiB here.
static VERDICTS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, Result<(), String>>>> =
    std::sync::LazyLock::new(Default::default);
const CACHED: usize = 4_096;
/// Statements up to this long are checked at once (and cached); longer
/// ones by [`checker`].
const CACHED_BYTES: usize = 4_096;

/// Returns why `sql` is refused, or `Ok` if a handler may run it.
pub(crate) fn check(sql: &str) -> Result<(), String> {
    if sql.len() > CACHED_BYTES {
        return check_uncached(sql);
    }
    let verdicts = || VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(verdict) = verdicts().get(sql) {
        return verdict.clone();
    }
    let verdict = check_uncached(sql);
    let mut cache = verdicts();
    if cache.len() >= CACHED {
        cache.clear();
    }
    cache.insert(sql.to_owned(), verdict.clone());
    verdict
}

pub(super) fn check_uncached(sql: &str) -> Result<(), String> {
    let parsed = pg_query::parse(sql, 0).map_err(|e| format!("not valid SQL: {e}"))?;
    let statements = &parsed.protobuf.stmts;
    if statements.len() != 1 {
        return Err(format!("{} statements in one call: send exactly one statement per call", statements.len()));
    }
    match statements[0].stmt.as_ref().and_then(|s| s.node.as_ref()) {
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
    let tree = serde_json::to_value(&parsed.protobuf).map_err(|e| format!("could not inspect the statement: {e}"))?;
    visit(&tree)
}

/// Checks `value` and everything below it.
fn visit(value: &Value) -> Result<(), String> {
    match value {
        Value::Array(items) => items.iter().try_for_each(visit),
        Value::Object(object) => {
            check_object(object)?;
            object.values().try_for_each(visit)
        }
        _ => Ok(()),
    }
}

/// Applies every rule to one object of the tree (its children are visited
/// by [`visit`]).
fn check_object(object: &Map<String, Value>) -> Result<(), String> {
    for (key, value) in object {
        match key.as_str() {
            // A node tagged with its type, e.g. {"InsertStmt": {…}}.
            tag if tag.ends_with("Stmt") && tag.starts_with(|c: char| c.is_ascii_uppercase()) => {
                check_statement(tag, value)?;
            }
            "IntoClause" => return Err(into_refused()),
            "into_clause" | "into" if !value.is_null() => return Err(into_refused()),
            // RangeVar (and the DDL nodes that name a schema).
            "schemaname" => {
                let schema = value.as_str().unwrap_or_default();
                if is_host_schema(schema) {
                    let relation = object.get("relname").and_then(Value::as_str).unwrap_or_default();
                    return Err(host_refused(&format!("{schema}.{relation}"), schema));
                }
            }
            // ColumnRef: [catalog.]schema.table.column (or .*).
            "fields" => {
                let fields = name_parts(value);
                if fields.len() >= 3 {
                    check_qualifiers(&fields, fields.len() - 2)?;
                }
                // `x.f` may be the function f(x) in column notation.
                if fields.len() >= 2 {
                    check_function(&fields, Some(&Value::Array(vec![Value::Null])))?;
                }
            }
            // A_Indirection: `(expr).f` may be f(expr), likewise.
            "indirection" => {
                for part in name_parts(value) {
                    check_function(&[part], Some(&Value::Array(vec![Value::Null])))?;
                }
            }
            name_key if QUALIFIED_NAME_KEYS.contains(&name_key) => {
                let parts = name_parts(value);
                check_qualifiers(&parts, parts.len().saturating_sub(1))?;
                if name_key == "funcname" {
                    check_function(&parts, object.get("args"))?;
                }
            }
            // TypeCast: '…'::regclass and friends name a relation in text.
            "type_name" => check_reg_cast(value, object.get("arg"))?,
            _ => {}
        }
    }
    Ok(())
}

/// A statement node anywhere in the tree (the top one, a WITH query, …).
fn check_statement(tag: &str, statement: &Value) -> Result<(), String> {
    if !ALLOWED_STATEMENTS.contains(&tag) {
        return Err(format!("{tag} is not allowed: handlers may run SELECT, INSERT, UPDATE, DELETE and MERGE"));
    }
    let Some(target) = statement.get("relation").filter(|r| !r.is_null()) else {
        return Ok(());
    };
    let schema = target.get("schemaname").and_then(Value::as_str).unwrap_or_default();
    let relation = target.get("relname").and_then(Value::as_str).unwrap_or_default();
    let schema_lower = schema.to_ascii_lowercase();
    let system = if schema.is_empty() {
        relation.to_ascii_lowercase().starts_with("pg_")
    } else {
        schema_lower.starts_with("pg_") || schema_lower == "information_schema"
    };
    if system {
        let name = if schema.is_empty() { relation.to_owned() } else { format!("{schema}.{relation}") };
        return Err(format!(
            "writing to {name} is not allowed: it belongs to PostgreSQL (pg_catalog, information_schema, pg_toast, \
             any pg_* schema or unqualified pg_* relation)"
        ));
    }
    Ok(())
}

/// Refuses a function on the denylist.
fn check_function(parts: &[Option<&str>], args: Option<&Value>) -> Result<(), String> {
    let Some(Some(name)) = parts.last() else {
        return Ok(());
    };
    let name = name.to_ascii_lowercase();
    let args = args.and_then(Value::as_array).map_or(0, Vec::len);
    match functions::refusal(&name, args) {
        Some(why) => Err(format!("{name}() is not allowed: {why}")),
        None => Ok(()),
    }
}

/// Refuses a string literal cast to a `reg*` type that names a host schema,
/// e.g. `'idem.processed_event'::regclass`.
fn check_reg_cast(type_name: &Value, arg: Option<&Value>) -> Result<(), String> {
    let type_parts = type_name.get("names").map(name_parts).unwrap_or_default();
    let Some(Some(type_name)) = type_parts.last() else {
        return Ok(());
    };
    if !type_name.to_ascii_lowercase().starts_with("reg") {
        return Ok(());
    }
    let text = arg.and_then(|a| a.pointer("/node/AConst/val/Sval/sval")).and_then(Value::as_str).unwrap_or_default();
    let Some((schema, _)) = text.split_once('.') else {
        return Ok(());
    };
    let schema = schema.trim().trim_matches('"');
    if is_host_schema(schema) {
        return Err(host_refused(text, schema));
    }
    Ok(())
}

/// Refuses a qualified name whose first `qualifiers` parts include a host
/// schema.
fn check_qualifiers(parts: &[Option<&str>], qualifiers: usize) -> Result<(), String> {
    match parts.iter().take(qualifiers).flatten().find(|part| is_host_schema(part)) {
        Some(schema) => {
            let name: Vec<&str> = parts.iter().map(|p| p.unwrap_or("*")).collect();
            Err(host_refused(&name.join("."), schema))
        }
        None => Ok(()),
    }
}

/// The parts of a name list: `Some(text)` for a `String` node, `None` for
/// anything else (such as the `*` of `t.*`). Empty when `value` is not a list.
fn name_parts(value: &Value) -> Vec<Option<&str>> {
    let Some(items) = value.as_array() else {
        return Vec::new();
    };
    items.iter().map(|item| item.pointer("/node/String/sval").and_then(Value::as_str)).collect()
}

fn is_host_schema(name: &str) -> bool {
    HOST_SCHEMAS.iter().any(|host| name.eq_ignore_ascii_case(host))
}

fn host_refused(name: &str, schema: &str) -> String {
    format!("{name} belongs to the host (schema {}); handlers may not touch it", schema.to_ascii_lowercase())
}

fn into_refused() -> String {
    "SELECT … INTO creates a table; handlers may not run DDL".into()
}

#[cfg(test)]
mod tests;
