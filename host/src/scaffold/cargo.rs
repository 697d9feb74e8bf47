//! What idem's workspace says about the Rust SDK: the values its
//! manifest's `workspace = true` keys stand for, and the versions of its
//! dependencies that idem was tested with (`Cargo.lock`).

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use super::files::{WORKSPACE_LOCK, WORKSPACE_MANIFEST};

/// idem's `[workspace]` table.
pub(super) struct Workspace(Table);

impl Workspace {
    pub(super) fn parse() -> anyhow::Result<Self> {
        let mut root: Table = toml::from_str(WORKSPACE_MANIFEST).context("idem's Cargo.toml")?;
        match root.remove("workspace") {
            Some(Value::Table(table)) => Ok(Self(table)),
            _ => bail!("idem's Cargo.toml has no [workspace]"),
        }
    }

    fn table(&self, key: &str) -> anyhow::Result<&Table> {
        let table = self.0.get(key).and_then(Value::as_table);
        table.with_context(|| format!("idem's Cargo.toml has no [workspace.{key}]"))
    }

    /// A `[workspace.package]` value.
    pub(super) fn package(&self, key: &str) -> anyhow::Result<&Value> {
        self.table("package")?.get(key).with_context(|| format!("[workspace.package] has no {key}"))
    }

    /// A `[workspace.dependencies]` entry, as a table.
    fn dependency_table(&self, name: &str) -> anyhow::Result<Table> {
        match self.table("dependencies")?.get(name) {
            Some(Value::String(version)) => Ok(Table::from_iter([("version".to_owned(), version.as_str().into())])),
            Some(Value::Table(table)) => Ok(table.clone()),
            _ => bail!("[workspace.dependencies] has no {name}"),
        }
    }

    /// A `[workspace.dependencies]` entry as a manifest writes it:
    /// `"1"`, or `{ version = "1", features = ["derive"] }`.
    pub(super) fn dependency(&self, name: &str) -> anyhow::Result<String> {
        Ok(inline(&self.dependency_table(name)?))
    }

    /// `manifest` with each `workspace = true` made concrete, line by line
    /// (so its order and comments stay): `key.workspace = true` under
    /// `[package]` or a dependencies table, `workspace = true` under `[lints]`.
    pub(super) fn concrete(&self, manifest: &str) -> anyhow::Result<String> {
        let mut out = String::new();
        let mut section = String::new();
        for line in manifest.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                section = trimmed.to_owned();
            }
            if !trimmed.contains("workspace") || trimmed.starts_with('#') {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            let parsed: Table = toml::from_str(trimmed).with_context(|| format!("sdk/rust/Cargo.toml: `{trimmed}`"))?;
            let Some((key, value)) = parsed.iter().next().filter(|_| parsed.len() == 1) else {
                bail!("sdk/rust/Cargo.toml: `{trimmed}`: one key a line");
            };
            match section.as_str() {
                "[lints]" if key == "workspace" && value.as_bool() == Some(true) => {
                    for (tool, lints) in self.table("lints")? {
                        for (lint, level) in lints.as_table().into_iter().flatten() {
                            out.push_str(&format!("{tool}.{lint} = {level}\n"));
                        }
                    }
                }
                "[package]" if inherited(value) => out.push_str(&format!("{key} = {}\n", self.package(key)?)),
                "[dependencies]" | "[build-dependencies]" | "[dev-dependencies]" if inherited(value) => {
                    let mut concrete = self.dependency_table(key)?;
                    for (own, extra) in value.as_table().into_iter().flatten().filter(|(k, _)| *k != "workspace") {
                        match (concrete.get_mut(own), extra) {
                            (Some(Value::Array(features)), Value::Array(more)) => features.extend(more.iter().cloned()),
                            _ => {
                                concrete.insert(own.clone(), extra.clone());
                            }
                        }
                    }
                    out.push_str(&format!("{key} = {}\n", inline(&concrete)));
                }
                _ => bail!("sdk/rust/Cargo.toml: `{trimmed}` under {section}: not a workspace key idem new knows"),
            }
        }
        Ok(out)
    }
}

fn inherited(value: &Value) -> bool {
    value.get("workspace").and_then(Value::as_bool) == Some(true)
}

/// A dependency's table inline, its version first; a bare version alone.
fn inline(dependency: &Table) -> String {
    if let (1, Some(Value::String(version))) = (dependency.len(), dependency.get("version")) {
        return Value::from(version.as_str()).to_string();
    }
    let mut keys: Vec<&String> = dependency.keys().collect();
    keys.sort_by_key(|k| *k != "version");
    let entries: Vec<String> = keys.iter().map(|k| format!("{k} = {}", dependency[k.as_str()])).collect();
    format!("{{ {} }}", entries.join(", "))
}

#[derive(Serialize, Deserialize)]
struct Lock {
    version: u32,
    package: Vec<Locked>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Locked {
    name: String,
    version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
    /// `name`, `name version` or `name version (source)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dependencies: Vec<String>,
}

/// idem's `Cargo.lock` cut to `idem-guest` and what it depends on: the
/// project builds with the versions idem was tested with (cargo adds the
/// project's own package, and drops what the project's features leave out).
pub(super) fn pruned_lock() -> anyhow::Result<String> {
    let lock: Lock = toml::from_str(WORKSPACE_LOCK).context("idem's Cargo.lock")?;
    let mut keep = vec![false; lock.package.len()];
    let mut todo = vec!["idem-guest".to_owned()];
    while let Some(spec) = todo.pop() {
        let mut words = spec.split(' ');
        let (name, version) = (words.next().unwrap_or_default(), words.next());
        let found = lock.package.iter().position(|p| p.name == name && version.is_none_or(|v| v == p.version));
        let at = found.with_context(|| format!("idem's Cargo.lock has no {spec}"))?;
        if !std::mem::replace(&mut keep[at], true) {
            todo.extend(lock.package[at].dependencies.iter().cloned());
        }
    }
    let package = lock.package.iter().zip(keep).filter(|(_, k)| *k).map(|(p, _)| p.clone()).collect();
    let text = toml::to_string(&Lock { version: lock.version, package }).context("the project's Cargo.lock")?;
    Ok(format!("# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\n{text}"))
}
