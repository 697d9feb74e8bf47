//! The functions a handler may not call, by family. A denylist (see the
//! parent module for why): names are compared lower-case, without schema,
//! exactly or by prefix.

/// Functions that run SQL text the guard never sees.
const RUNS_SQL_TEXT: &str = "it runs SQL text that this guard cannot inspect";

/// A family of refused functions and why they are refused.
struct Family {
    why: &'static str,
    /// Refused by exact name.
    names: &'static [&'static str],
    /// Refused when the name starts with one of these.
    prefixes: &'static [&'static str],
}

const FAMILIES: &[Family] = &[
    Family {
        why: RUNS_SQL_TEXT,
        names: &["ts_stat", "connectby"],
        prefixes: &[
            "query_to_xml", // query_to_xml, query_to_xmlschema, query_to_xml_and_xmlschema
            "cursor_to_xml",
            "table_to_xml",
            "schema_to_xml",
            "database_to_xml",
            "dblink", // dblink, dblink_exec, dblink_open, dblink_send_query, …
            "crosstab",
            "pg_background_",
        ],
    },
    Family {
        why: "it reads or writes server files, large objects or raw storage, outside any table",
        names: &[
            "pg_read_file",
            "pg_read_binary_file",
            "pg_stat_file",
            "pg_current_logfile",
            "pg_logdir_ls",
            "pg_hba_file_rules",
            "pg_ident_file_mappings",
            "pg_show_all_file_settings",
            "loread",
            "lowrite",
            "get_raw_page",
        ],
        prefixes: &["pg_ls_", "pg_file_", "lo_", "pg_get_wal_record", "pg_get_wal_block_info", "pg_get_wal_stats"],
    },
    Family {
        why: "it changes a setting, which would outlive the event on a pooled connection \
              (current_setting() is allowed)",
        names: &["set_config"],
        prefixes: &[],
    },
    Family {
        why: "advisory lock keys are one namespace for every role of the server: another handler could hold \
              yours; lock a row of your own table instead",
        names: &[],
        prefixes: &["pg_advisory_", "pg_try_advisory_"],
    },
    Family {
        why: "it reads other tables' or sessions' statistics, sizes or locks, another handler's included",
        names: &[
            "pg_relation_size",
            "pg_total_relation_size",
            "pg_table_size",
            "pg_indexes_size",
            "pg_database_size",
            "pg_tablespace_size",
            "pg_relation_filenode",
            "pg_relation_filepath",
            "pg_filenode_relation",
            "pg_lock_status",
            "pg_blocking_pids",
            "pg_logical_emit_message",
            "table_to_xml",
            "table_to_xmlschema",
            "table_to_xml_and_xmlschema",
            "schema_to_xml",
            "schema_to_xmlschema",
            "schema_to_xml_and_xmlschema",
            "database_to_xml",
            "database_to_xmlschema",
            "database_to_xml_and_xmlschema",
        ],
        prefixes: &["pg_stat_get_"],
    },
    Family {
        why: "it signals other sessions or administers the server",
        names: &[
            "pg_terminate_backend",
            "pg_cancel_backend",
            "pg_signal_backend",
            "pg_reload_conf",
            "pg_switch_wal",
            "pg_switch_xlog",
            "pg_promote",
            "pg_start_backup",
            "pg_stop_backup",
            "pg_create_restore_point",
            "pg_log_backend_memory_contexts",
            "pg_log_standby_snapshot",
            "pg_notify",
            // The random seed outlives the transaction (RESET ALL keeps it).
            "setseed",
            "pg_import_system_collations",
            "pg_stat_statements_reset",
            "pg_truncate_visibility_map",
            "pg_buffercache_evict",
            "brin_summarize_new_values",
            "brin_summarize_range",
            "brin_desummarize_range",
            "gin_clean_pending_list",
        ],
        prefixes: &[
            "pg_rotate_logfile",
            "pg_backup_",
            "pg_wal_replay_",
            "pg_xlog_replay_",
            "pg_stat_reset",
            "pg_set_relation_stats",
            "pg_set_attribute_stats",
            "pg_restore_relation_stats",
            "pg_restore_attribute_stats",
            "pg_clear_relation_stats",
            "pg_clear_attribute_stats",
        ],
    },
    Family {
        why: "it manages replication, which belongs to the operator",
        names: &[
            "pg_create_physical_replication_slot",
            "pg_create_logical_replication_slot",
            "pg_drop_replication_slot",
            "pg_sync_replication_slots",
        ],
        prefixes: &["pg_copy_", "pg_replication_", "pg_logical_"],
    },
];

/// Why `name` (lower-case, without schema) called with `args` arguments is
/// refused, or `None` if a handler may call it.
pub(super) fn refusal(name: &str, args: usize) -> Option<&'static str> {
    // ts_rewrite(query, select text) runs its second argument; the
    // three-argument form ts_rewrite(query, target, substitute) does not.
    if name == "ts_rewrite" && args != 3 {
        return Some(RUNS_SQL_TEXT);
    }
    FAMILIES
        .iter()
        .find(|family| family.names.contains(&name) || family.prefixes.iter().any(|p| name.starts_with(p)))
        .map(|family| family.why)
}
