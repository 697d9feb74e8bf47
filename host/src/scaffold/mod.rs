//! `idem new NAME --lang rust|python|ts [--format json|avro|protobuf]`: a
//! handler project that builds and runs on its own, outside idem's repository.
//!
//! No SDK is on a registry, so they ship inside the binary ([`files`]) and
//! are written into the project: `.idem/sdk/<lang>/`, with the WIT world in
//! `.idem/wit/` (where the Rust crate's bindings look too).
//! Beside them: the handler (`src/lib.rs`, `app.py` or `handler.ts`), its
//! event's JSON Schema, its table's migration, a complete `idem.toml`, two
//! sample events, `build.sh`, `test.sh` and a README ([`templates`]).

mod cargo;
mod files;
mod python;
mod rust;
mod templates;
mod ts;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The language of a new handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    #[value(alias = "typescript")]
    Ts,
}

impl std::str::FromStr for Lang {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "rust" => Ok(Self::Rust),
            "python" => Ok(Self::Python),
            "ts" | "typescript" => Ok(Self::Ts),
            other => bail!("unknown language `{other}`: rust, python or ts"),
        }
    }
}

/// How a new handler's topic is encoded (`idem new --format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordFormat {
    /// JSON text, checked with a JSON Schema.
    #[default]
    Json,
    /// Avro through a schema registry: an `.avsc` reader schema.
    Avro,
    /// Protobuf through a schema registry: a `.proto` reader schema.
    Protobuf,
}

/// Writes a new handler project named `name` in `lang` into `dir`, which
/// must not exist yet; returns the files written. `name` is the handler's
/// name, its crate's, and (with `-` as `_`) its database schema's.
#[cfg_attr(not(any(test, feature = "test-hooks")), expect(dead_code, reason = "the command line passes a format; the tests and the harness do not"))]
pub fn new_project(name: &str, lang: Lang, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    new_project_reading(name, lang, RecordFormat::Json, dir)
}

/// [`new_project`] for a topic in `format`: its reader schema, and a
/// `[registry]` in its config.
pub fn new_project_reading(name: &str, lang: Lang, format: RecordFormat, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    let project = Project { format, ..Project::new(name, lang) };
    let mut files = templates::common(&project)?;
    files.extend(match lang {
        Lang::Rust => rust::files(&project)?,
        Lang::Python => python::files(&project)?,
        Lang::Ts => ts::files(&project)?,
    });
    if dir.symlink_metadata().is_ok() {
        bail!("{} already exists: idem new writes a new directory", dir.display());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("failed to create {}", parent.display()))?;
    }
    // `create_dir`, not `_all`: one that appeared since the check is refused too.
    std::fs::create_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            anyhow::anyhow!("{} already exists: idem new writes a new directory", dir.display())
        }
        _ => anyhow::Error::new(e).context(format!("failed to create {}", dir.display())),
    })?;
    let written = write_all(dir, &files);
    if written.is_err() {
        // Ours alone: it did not exist a moment ago.
        let _ = std::fs::remove_dir_all(dir);
    }
    written
}

fn write_all(dir: &Path, files: &[File]) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::with_capacity(files.len());
    for file in files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("failed to create {}", parent.display()))?;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("failed to write {}", path.display()))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("failed to make {} executable", path.display()))?;
        }
        written.push(path);
    }
    Ok(written)
}

/// A handler's name: lowercase letters, digits, `-` and `_`, starting with
/// a letter, at most 63 characters (its schema is a PostgreSQL identifier),
/// its schema not one idem or PostgreSQL reserves.
fn check_name(name: &str) -> anyhow::Result<()> {
    let valid = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}` is not a handler name: lowercase letters, digits, `-` and `_`, starting with a letter, \
             at most 63 characters"
        );
    }
    let schema = name.replace('-', "_");
    if crate::config::is_reserved_schema(&schema) {
        bail!("`{name}` is not a handler name: its schema `{schema}` is reserved (idem's own or PostgreSQL's)");
    }
    Ok(())
}

/// What the templates are filled with.
struct Project {
    name: String,
    /// The name with `-` as `_`: the database schema and database, the Rust library.
    snake: String,
    lang: Lang,
    format: RecordFormat,
}

impl Project {
    fn new(name: &str, lang: Lang) -> Self {
        Self { name: name.to_owned(), snake: name.replace('-', "_"), lang, format: RecordFormat::Json }
    }
}

/// One file of a project, its path relative to the project's folder.
struct File {
    path: String,
    text: String,
    executable: bool,
}

impl File {
    fn text(path: impl Into<String>, text: impl Into<String>) -> Self {
        Self { path: path.into(), text: text.into(), executable: false }
    }

    fn script(path: impl Into<String>, text: impl Into<String>) -> Self {
        Self { path: path.into(), text: text.into(), executable: true }
    }

    /// `files` (repository paths under `from`) as the same files under `to`.
    fn copies(files: files::Embedded, from: &str, to: &str) -> Vec<Self> {
        files.iter().map(|(path, text)| Self::text(format!("{to}{}", path.trim_start_matches(from)), *text)).collect()
    }
}

#[cfg(test)]
mod tests;
