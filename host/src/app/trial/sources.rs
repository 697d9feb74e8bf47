//! `idem test --sources PATH`: a project handed to its SDK's quick runner
//! as the handler's config value `idem.test.sources`, so that an edit is
//! tested without building a component (`./test.sh --quick`): a folder's
//! Python modules (`sdk/python/idem/_runner.py`), or one file, a TypeScript
//! project's bundle (`sdk/typescript/src/runner.ts`). Only `idem test` sets
//! it; `idem run` never does.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};

/// The config key the runner reads its sources from.
pub const KEY: &str = "idem.test.sources";

/// Sources handed over at most, in all (a handler's modules, not its data).
const MAX_BYTES: usize = 8 << 20;

/// Folders that are outputs or tools, not sources (besides hidden ones).
const SKIPPED: &[&str] = &["target", "node_modules", "__pycache__", "venv"];

/// What `path` hands over, as the JSON object the runners read: a file
/// under its name, or every `.py` file under a folder by its path relative
/// to it (`/`-separated).
pub fn collect(path: &Path) -> anyhow::Result<String> {
    if path.is_file() {
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        if size > MAX_BYTES as u64 {
            bail!("--sources: {} exceeds {} MiB", path.display(), MAX_BYTES >> 20);
        }
        let mut files = BTreeMap::new();
        add(&mut files, path.parent().unwrap_or(Path::new(".")), path)?;
        return Ok(serde_json::to_string(&files)?);
    }
    modules(path)
}

/// Every `.py` file under `dir`, which must hold `app.py`.
fn modules(dir: &Path) -> anyhow::Result<String> {
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
        bail!(
            "--sources: {} has no app.py (a Python project's module the runner imports; a TypeScript project's \
             --sources is its bundle, .idem/quick/handler.js)",
            dir.display()
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_handed_over_under_its_name_and_a_folder_needs_app_py() {
        let dir = std::env::temp_dir().join(format!("idem-sources-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pkg")).unwrap();
        std::fs::write(dir.join("handler.js"), "exports.x = 1;").unwrap();
        let one: BTreeMap<String, String> = serde_json::from_str(&collect(&dir.join("handler.js")).unwrap()).unwrap();
        assert_eq!(one, BTreeMap::from([("handler.js".to_owned(), "exports.x = 1;".to_owned())]));
        let refused = collect(&dir).unwrap_err().to_string();
        assert!(refused.contains("has no app.py"), "{refused}");
        std::fs::write(dir.join("app.py"), "import pkg.util").unwrap();
        std::fs::write(dir.join("pkg/util.py"), "X = 1").unwrap();
        let all: BTreeMap<String, String> = serde_json::from_str(&collect(&dir).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["app.py", "pkg/util.py"]);
    }
}
