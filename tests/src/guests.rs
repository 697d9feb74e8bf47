//! The guest components, built for `wasm32-wasip2` by the harness itself.
//!
//! They are built into `<target>/guests` (a target directory of their own:
//! the `cargo test` that runs us may hold the lock on ours). nextest runs
//! each test in a process of its own, many at once: the Rust guests are
//! built by cargo (whose lock serialises concurrent builds) once per
//! process, or not at all when `IDEM_GUESTS_PREBUILT` says scripts/test
//! built them before the run; an SDK handler is built once per content
//! (its sources, the SDK, `wit/`, the build script: a hash in its file
//! name), into a file of the building process's own that is then renamed
//! into place, so that concurrent processes never read a half-written one.
//! Every build is bounded in time ([`crate::output_within`]).

use std::collections::BTreeMap;
use std::hash::Hasher as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The longest a build of the Rust guests may take (a cold release build
/// of five crates for wasm32-wasip2 on 2 busy cores takes a few minutes).
const RUST_BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);

/// The longest one SDK handler's build may take (componentize-py or
/// componentize-js: tens of seconds).
const SDK_BUILD_LIMIT: Duration = Duration::from_secs(10 * 60);

pub const CRATES: &[&str] = &["billing", "notification", "payments", "scenarios", "candidate", "not-a-handler"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `<target>/guests`, next to the `debug`/`release` folder this binary runs from.
fn guest_target_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("IDEM_GUEST_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let target = exe
        .ancestors()
        .find(|p| p.join("CACHEDIR.TAG").exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace().join("target"));
    target.join("guests")
}

fn build() -> Result<PathBuf, String> {
    let target_dir = guest_target_dir();
    let out = target_dir.join("wasm32-wasip2").join("release");
    // scripts/test builds them once before the run (see the module doc).
    if std::env::var_os("IDEM_GUESTS_PREBUILT").is_some()
        && CRATES.iter().filter(|c| **c != "not-a-handler").all(|c| out.join(format!("{c}.wasm")).exists())
    {
        return Ok(out);
    }
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace()).args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"]);
    for name in CRATES {
        cmd.args(["-p", name]);
    }
    cmd.env("CARGO_TARGET_DIR", &target_dir);
    let (status, _) = crate::output_within(&mut cmd, "cargo build of the guest components", RUST_BUILD_LIMIT);
    if !status.success() {
        return Err(format!(
            "building the guest components failed ({status}); is the target installed? `rustup target add wasm32-wasip2`"
        ));
    }
    Ok(out)
}

/// The path of the built component `name`: one of [`CRATES`], or a handler
/// written with the Python or TypeScript SDK ([`sdk_component`]).
pub fn component(name: &str) -> PathBuf {
    if !CRATES.contains(&name) {
        return sdk_component(name);
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        // Every crate here but the binary `not-a-handler` has an underscore-free name.
        Ok(dir) => dir.join(format!("{name}.wasm")),
        Err(e) => panic!("{e}"),
    }
}

/// The Python guest `tests/guests/<name>/app.py`, built as any Python
/// handler is ([`sdk_component`]).
pub fn python_component(name: &str) -> PathBuf {
    sdk_component(name)
}

/// A handler written with one of the SDKs, built by the SDK's own build
/// script as a handler's author builds it (once per test process and
/// name): `examples/<name>` or `tests/guests/<name>`, with an `app.py`
/// (`scripts/sdk/build-python`) or a `handler.ts` (`scripts/sdk/build-ts`).
pub fn sdk_component(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let result = built.entry(name.to_owned()).or_insert_with(|| build_sdk(name));
    match result {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn build_sdk(name: &str) -> Result<PathBuf, String> {
    let source = ["examples", "tests/guests"]
        .iter()
        .map(|dir| workspace().join(dir).join(name))
        .find(|dir| dir.is_dir())
        .ok_or_else(|| format!("no handler `{name}` under examples/ or tests/guests/"))?;
    let script = if source.join("app.py").exists() {
        "scripts/sdk/build-python"
    } else if source.join("handler.ts").exists() {
        "scripts/sdk/build-ts"
    } else {
        return Err(format!("{}: neither app.py nor handler.ts", source.display()));
    };
    std::fs::create_dir_all(guest_target_dir()).map_err(|e| format!("guest target dir: {e}"))?;
    // What the component is made of: its sources, the SDK, the WIT, the scripts.
    let root = workspace();
    let mut inputs = vec![source.clone(), root.join("wit"), root.join(script), root.join("scripts/sdk/lib.sh")];
    if script.ends_with("python") {
        inputs.push(root.join("sdk/python/idem"));
    } else {
        for part in ["src", "tools", "package.json", "package-lock.json", "tsconfig.base.json", "tsconfig.build.json"] {
            inputs.push(root.join("sdk/typescript").join(part));
        }
    }
    let mut hasher = std::hash::DefaultHasher::new();
    for input in &inputs {
        hash_tree(&root, input, &mut hasher)?;
    }
    let out = guest_target_dir().join(format!("{name}-{:016x}.wasm", hasher.finish()));
    if out.exists() {
        return Ok(out);
    }
    // Built into a file of this process's own, then renamed into place.
    let partial = guest_target_dir().join(format!("{name}.{}.partial.wasm", std::process::id()));
    let mut command = Command::new("bash");
    command.arg(root.join(script)).arg(&source).arg(&partial);
    let (status, _) = crate::output_within(&mut command, &format!("{script} {}", source.display()), SDK_BUILD_LIMIT);
    if !status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!("{script} failed on {}: {status}", source.display()));
    }
    std::fs::rename(&partial, &out).map_err(|e| format!("{} into place: {e}", out.display()))?;
    Ok(out)
}

/// Feeds the relative path and bytes of every file under `path` (or of the
/// file `path`) into `hasher`, in a fixed order, skipping installed
/// packages and caches.
fn hash_tree(root: &Path, path: &Path, hasher: &mut std::hash::DefaultHasher) -> Result<(), String> {
    let relative = path.strip_prefix(root).unwrap_or(path).to_string_lossy().into_owned();
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| !matches!(p.file_name().and_then(|n| n.to_str()), Some("node_modules" | "__pycache__")))
            .collect();
        entries.sort();
        for entry in entries {
            hash_tree(root, &entry, hasher)?;
        }
    } else if path.exists() {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        hasher.write(relative.as_bytes());
        hasher.write_usize(bytes.len());
        hasher.write(&bytes);
    }
    Ok(())
}

/// `component` (a component's bytes) with a custom section `idem-marker`
/// holding `tag` appended: another module, another sha256, the same
/// behaviour. The tests and the demo deploy it as a "v2".
pub fn with_marker(component: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"idem-marker";
    let mut content = Vec::new();
    leb(name.len(), &mut content);
    content.extend_from_slice(name);
    content.extend_from_slice(tag.as_bytes());
    let mut out = component.to_vec();
    // A custom section (id 0) may appear anywhere in a component.
    out.push(0);
    leb(content.len(), &mut out);
    out.extend_from_slice(&content);
    out
}
