//! Names idem creates in the database (schemas, roles): what they may be.

use anyhow::bail;

/// Names idem creates (schemas, roles) are plain lowercase identifiers, so
/// that no quoting rule can be played with.
pub(super) fn check_identifier(at: &str, key: &str, name: &str) -> anyhow::Result<()> {
    let valid = name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        bail!("{at}: {key} `{name}` must be lowercase letters, digits and `_`, at most 63 characters");
    }
    Ok(())
}

/// Schemas no handler may own.
pub(crate) fn is_reserved_schema(schema: &str) -> bool {
    matches!(schema, "idem" | "idem_api" | "public" | "information_schema") || schema.starts_with("pg_")
}
