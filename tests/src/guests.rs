//! The guest components, built for `wasm32-wasip2` by the harness itself.
//!
//! They are built once per test process into `<target>/guests` (a target
//! directory of their own: the `cargo test` that runs us holds the lock on
//! ours).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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

/// The path of the built component `name` (one of [`CRATES`]).
pub fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        // Every crate here but the binary `not-a-handler` has an underscore-free name.
        Ok(dir) => dir.join(format!("{name}.wasm")),
        Err(e) => panic!("{e}"),
    }
}

/// Where `scripts/setup` installs componentize-py (a virtualenv).
pub fn componentize_py() -> PathBuf {
    let tools = std::env::var("IDEM_TOOLS").unwrap_or_else(|_| "/var/tmp/idem-tools".into());
    PathBuf::from(tools).join("componentize-py/bin/componentize-py")
}

/// The Python guest `tests/guests/<name>/app.py`, built with componentize-py
/// against `wit/` (once per test process).
pub fn python_component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let source = workspace().join("tests/guests").join(name);
        let out = guest_target_dir().join(format!("{name}.wasm"));
        std::fs::create_dir_all(guest_target_dir()).map_err(|e| format!("guest target dir: {e}"))?;
        let tool = componentize_py();
        let status = Command::new(&tool)
            .current_dir(&source)
            .arg("-d")
            .arg(workspace().join("wit"))
            .args(["-w", "handler", "componentize", "app", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("failed to run {} ({e}); run scripts/setup", tool.display()))?;
        if !status.success() {
            return Err(format!("componentize-py failed on {}: {status}", source.display()));
        }
        Ok(out)
    });
    match built {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
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
