//! The guest components, built for `wasm32-wasip2` by the harness itself.
//!
//! They are built once per test process into `<target>/guests` (a target
//! directory of their own: the `cargo test` that runs us holds the lock on
//! ours).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

pub const CRATES: &[&str] = &["billing", "notification", "payments", "scenarios", "not-a-handler"];

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
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace()).args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"]);
    for name in CRATES {
        cmd.args(["-p", name]);
    }
    cmd.env("CARGO_TARGET_DIR", &target_dir);
    let status = cmd.status().map_err(|e| format!("failed to run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the guest components failed ({status}); is the target installed? `rustup target add wasm32-wasip2`"
        ));
    }
    Ok(target_dir.join("wasm32-wasip2").join("release"))
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
    let out = guest_target_dir().join(format!("{name}.wasm"));
    let status = Command::new("bash")
        .arg(workspace().join(script))
        .arg(&source)
        .arg(&out)
        .status()
        .map_err(|e| format!("failed to run {script}: {e}"))?;
    if !status.success() {
        return Err(format!("{script} failed on {}: {status}", source.display()));
    }
    Ok(out)
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
