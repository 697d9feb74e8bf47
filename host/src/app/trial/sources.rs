//! `idem test --sources DIR`: a project's Python modules handed to the
//! SDK's quick runner (`sdk/python/idem/_runner.py`) as the handler's
//! config value `idem.test.sources`, so that an edit is tested without
//! building a component (`./test.sh --quick`). Only `idem test` sets it;
//! `idem run` never does.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};

/// The config key the runner reads its sources from.
pub const KEY: &str = "idem.test.sources";

/// Sources handed over at most, in all (a handler's modules, not its data).
const MAX_BYTES: usize = 8 << 20;

/// Folders that are outputs or tools, not sources (besides hidden ones).
const SKIPPED: &[&str] = &["target", "node_modules", "__pycache__", "venv"];

/// Every `.py` file under `dir`, by its path relative to it (`/`-separated),
/// as the JSON object the runner reads.
pub fn collect(dir: &Path) -> anyhow::Result<String> {
    let mut files = BTreeMap::new();
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let entries =
            std::fs::read_dir(&folder).with_context(|| format!("--sources: failed to read {}", folder.display()))?;
        for entry in entries.flatten() {
            let (path, name) = (entry.path(), entry.file_name().to_string_lossy().into_owned());
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && !name.starts_with('.') && !SKIPPED.contains(&name.as_str()) {
                pending.push(path);
            } else if kind.is_file() && name.ends_with(".py") {
                total += add(&mut files, dir, &path)?;
                if total > MAX_BYTES {
                    bail!("--sources: the .py files under {} exceed {} MiB", dir.display(), MAX_BYTES >> 20);
                }
            }
        }
    }
    if !files.contains_key("app.py") {
        bail!("--sources: {} has no app.py (the module the runner imports)", dir.display());
    }
    Ok(serde_json::to_string(&files)?)
}

fn add(files: &mut BTreeMap<String, String>, dir: &Path, path: &Path) -> anyhow::Result<usize> {
    let text =
        crate::files::read_text(path).with_context(|| format!("--sources: failed to read {}", path.display()))?;
    let relative = path.strip_prefix(dir).unwrap_or(path);
    let key = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
    let len = text.len();
    files.insert(key, text);
    Ok(len)
}
