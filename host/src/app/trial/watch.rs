//! `idem test --watch`: the test again whenever one of its inputs changes,
//! until Ctrl-C: the config, the events file, the handler's schema and
//! migrations, and the component: a `.wasm` (rebuilt by whatever builds
//! it, e.g. a project's `./test.sh --watch`) or a project folder, whose
//! sources idem rebuilds first.
//!
//! Inputs are polled (their size and modification time, every 300 ms):
//! nothing to install, the same on every file system, and a change is seen
//! well within the time a rebuild takes.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::Config;
use crate::output::outln;

use super::Options;

/// How often the inputs are looked at.
const POLL: Duration = Duration::from_millis(300);

/// Folders of a project that are outputs or tools, not sources (besides
/// every hidden one: `.idem`, `.git`, `.venv`, …).
const SKIPPED: &[&str] = &["target", "node_modules", "__pycache__", "venv"];

/// Runs the test, then again after every change of its inputs, until the
/// process ends (Ctrl-C); a run that fails (a config that does not load, a
/// component being rewritten) is printed, and the next change tries again.
pub async fn watch(o: Options) -> anyhow::Result<()> {
    loop {
        let before = stamp(&inputs(&o));
        match super::test(o.clone()).await {
            Ok(true) => outln!("idem test: passed")?,
            Ok(false) => outln!("idem test: not every event came to what it should")?,
            Err(e) => outln!("idem test: {e:#}")?,
        }
        outln!("idem test: watching the component, config, events, schema and migrations (Ctrl-C ends)")?;
        while stamp(&inputs(&o)) == before {
            tokio::time::sleep(POLL).await;
        }
        outln!("\nidem test: a change: testing again")?;
    }
}

/// The files and folders the test reads, as the config names them now (a
/// config that does not load is watched alone, until it is fixed).
fn inputs(o: &Options) -> Vec<PathBuf> {
    let mut paths = vec![o.config.clone(), o.events.clone()];
    paths.extend(o.component.clone());
    paths.extend(o.sources.clone());
    let Ok(config) = Config::load(&o.config) else { return paths };
    if let Some(h) = config.handlers.iter().find(|h| h.name == o.handler) {
        paths.push(h.schema.clone());
        paths.extend(h.database.migrations.clone());
        if o.component.is_none() {
            paths.extend(h.component.clone());
        }
    }
    paths
}

/// Each file under `paths` with its size and modification time, in order.
fn stamp(paths: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut seen = Vec::new();
    for path in paths {
        walk(path, &mut seen);
    }
    seen.sort();
    seen
}

fn walk(path: &Path, seen: &mut Vec<(PathBuf, u64, Option<SystemTime>)>) {
    let Ok(meta) = std::fs::metadata(path) else {
        // A missing input is a state too: its coming back is a change.
        seen.push((path.to_owned(), u64::MAX, None));
        return;
    };
    if !meta.is_dir() {
        seen.push((path.to_owned(), meta.len(), meta.modified().ok()));
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // A project's build writes its component into the folder: that is
        // the result of a change, not one. A link inside the folder is not
        // followed (one to `..` would walk for ever).
        let linked = entry.file_type().is_ok_and(|t| t.is_symlink());
        if linked || name.starts_with('.') || SKIPPED.contains(&name.as_ref()) || name.ends_with(".wasm") {
            continue;
        }
        walk(&entry.path(), seen);
    }
}
