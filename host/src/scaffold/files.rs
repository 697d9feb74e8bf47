//! The files `idem new` writes out of the binary: the WIT world, the three
//! SDKs (none is on a registry) and the workspace manifests the Rust SDK's
//! own manifest is made concrete from. Each list is explicit; the test
//! below walks the source folders so that a file added there and not here
//! fails it.

/// `(path in the repository, contents)`.
pub(super) type Embedded = &'static [(&'static str, &'static str)];

macro_rules! embed {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../../", $path)))),*]
    };
}

/// The world every handler is built against.
pub(super) const WIT: Embedded =
    embed!["wit/db.wit", "wit/emit.wit", "wit/host-info.wit", "wit/http.wit", "wit/origin.wit", "wit/types.wit", "wit/world.wit"];

/// The Rust SDK, the crate `idem-guest` (its manifest is rewritten, see `rust.rs`).
pub(super) const RUST_SDK: Embedded = embed![
    "sdk/rust/Cargo.toml",
    "sdk/rust/src/bindings.rs",
    "sdk/rust/src/config.rs",
    "sdk/rust/src/db.rs",
    "sdk/rust/src/emit.rs",
    "sdk/rust/src/error.rs",
    "sdk/rust/src/event.rs",
    "sdk/rust/src/http.rs",
    "sdk/rust/src/lib.rs",
    "sdk/rust/src/log.rs",
    "sdk/rust/src/origin.rs",
];

/// The workspace's manifest and lock file: the versions the Rust SDK's
/// `workspace = true` keys stand for, and the versions it was tested with.
pub(super) const WORKSPACE_MANIFEST: &str = include_str!("../../../Cargo.toml");
pub(super) const WORKSPACE_LOCK: &str = include_str!("../../../Cargo.lock");

/// The Python SDK, the package `idem` (its unit tests, `sdk/python/tests`, stay behind).
pub(super) const PYTHON_SDK: Embedded = embed![
    "sdk/python/idem/__init__.py",
    "sdk/python/idem/_db.py",
    "sdk/python/idem/_errors.py",
    "sdk/python/idem/_event.py",
    "sdk/python/idem/_handler.py",
    "sdk/python/idem/_payload.py",
    "sdk/python/idem/_runner.py",
    "sdk/python/idem/_values.py",
    "sdk/python/idem/_wit.py",
    "sdk/python/idem/config.py",
    "sdk/python/idem/emit.py",
    "sdk/python/idem/http.py",
    "sdk/python/idem/log.py",
    "sdk/python/idem/py.typed",
];

/// The TypeScript SDK, `@idem/handler`, with its build tool and pinned
/// toolchain (`package-lock.json`). Its tests (`sdk/typescript/test`: unit
/// tests and end-to-end runs against a scripted host, which need the
/// repository's examples and guests) stay behind.
pub(super) const TS_SDK: Embedded = embed![
    "sdk/typescript/.gitignore",
    "sdk/typescript/README.md",
    "sdk/typescript/package-lock.json",
    "sdk/typescript/package.json",
    "sdk/typescript/src/component.ts",
    "sdk/typescript/src/config.ts",
    "sdk/typescript/src/db.ts",
    "sdk/typescript/src/emit.ts",
    "sdk/typescript/src/errors.ts",
    "sdk/typescript/src/event.ts",
    "sdk/typescript/src/globals.d.ts",
    "sdk/typescript/src/http.ts",
    "sdk/typescript/src/index.ts",
    "sdk/typescript/src/json.ts",
    "sdk/typescript/src/log.ts",
    "sdk/typescript/src/origin.ts",
    "sdk/typescript/src/response.ts",
    "sdk/typescript/src/rows.ts",
    "sdk/typescript/src/runner.ts",
    "sdk/typescript/src/runtime.ts",
    "sdk/typescript/src/values.ts",
    "sdk/typescript/src/wit/handler.d.ts",
    "sdk/typescript/src/wit/idem-handler-config.d.ts",
    "sdk/typescript/src/wit/idem-handler-db.d.ts",
    "sdk/typescript/src/wit/idem-handler-emit.d.ts",
    "sdk/typescript/src/wit/idem-handler-http.d.ts",
    "sdk/typescript/src/wit/idem-handler-log.d.ts",
    "sdk/typescript/src/wit/idem-handler-origin.d.ts",
    "sdk/typescript/src/wit/idem-handler-types.d.ts",
    "sdk/typescript/tools/build.mjs",
    "sdk/typescript/tools/wit-types.mjs",
    "sdk/typescript/tsconfig.base.json",
    "sdk/typescript/tsconfig.build.json",
    "sdk/typescript/tsconfig.json",
    "sdk/typescript/typedoc.json",
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// What a project does not need: the SDKs' tests, and what builds,
    /// installs and checks leave in the source folders.
    const LEFT_OUT: &[&str] =
        &["sdk/python/tests", "sdk/typescript/test", "node_modules", "dist", "__pycache__", ".mypy_cache"];

    fn walk(root: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
            let name = entry.file_name().to_string_lossy().into_owned();
            if LEFT_OUT.contains(&relative.as_str()) || LEFT_OUT.contains(&name.as_str()) {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, found);
            } else {
                found.push(relative);
            }
        }
    }

    #[test]
    fn every_file_of_the_wit_and_the_sdks_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let embedded: Vec<&str> = [super::WIT, super::RUST_SDK, super::PYTHON_SDK, super::TS_SDK]
            .iter()
            .flat_map(|l| l.iter().map(|f| f.0))
            .collect();
        let mut found = Vec::new();
        for dir in ["wit", "sdk/rust", "sdk/python", "sdk/typescript"] {
            walk(&root, &root.join(dir), &mut found);
        }
        let missing: Vec<&String> = found.iter().filter(|f| !embedded.contains(&f.as_str())).collect();
        assert!(
            missing.is_empty(),
            "not embedded by host/src/scaffold/files.rs (add them, or to LEFT_OUT if a project needs none): {missing:?}"
        );
    }
}
