//! Every registered capability has its counterparts outside the host: its
//! interface in `wit/`, imported by the world, and a way to call it in
//! each SDK. A capability registered without them fails here, naming what
//! is missing; an interface the world imports that no capability serves
//! fails too.

use std::path::{Path, PathBuf};

use super::INTERFACES;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Every `.wit` file's text, and every file's of `dir` ending in `ext`.
fn texts(dir: &Path, ext: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(ext)).map(|p| read(&p)).collect()
}

/// What `name` lacks under `root`, each named for the one who adds it.
fn missing(root: &Path, name: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let wit = root.join("wit");
    if !texts(&wit, ".wit").iter().any(|t| t.contains(&format!("interface {name} {{"))) {
        missing.push(format!("wit/: no `interface {name} {{ … }}`"));
    }
    if !read(&wit.join("world.wit")).contains(&format!("import {name};")) {
        missing.push(format!("wit/world.wit: no `import {name};`"));
    }
    let rust = root.join("sdk/rust/src");
    if !rust.join(format!("{name}.rs")).exists() || !read(&rust.join("lib.rs")).contains(&format!("pub mod {name};")) {
        missing.push(format!("the Rust SDK: no `pub mod {name};` in sdk/rust/src/lib.rs with sdk/rust/src/{name}.rs"));
    }
    if !read(&root.join("sdk/python/idem/_wit.py")).contains(&format!("\"{name}\"")) {
        missing.push(format!("the Python SDK: sdk/python/idem/_wit.py does not import `{name}`"));
    }
    let ts = format!("'idem:handler/{name}@0.1.0'");
    if !texts(&root.join("sdk/typescript/src"), ".ts").iter().any(|t| t.contains(&ts)) {
        missing.push(format!("the TypeScript SDK: no file of sdk/typescript/src imports {ts}"));
    }
    missing
}

#[test]
fn every_capability_has_its_interface_and_its_counterpart_in_every_sdk() {
    let root = root();
    let mut found = Vec::new();
    for name in INTERFACES.iter().filter(|n| **n != "types") {
        found.extend(missing(&root, name).into_iter().map(|m| format!("capability `{name}`: {m}")));
    }
    assert!(found.is_empty(), "capabilities without their counterparts:\n{}", found.join("\n"));
}

#[test]
fn the_world_imports_no_interface_that_no_capability_serves() {
    let world = read(&root().join("wit/world.wit"));
    let imported: Vec<&str> = world
        .lines()
        .filter_map(|l| l.trim().strip_prefix("import ")?.strip_suffix(';'))
        .filter(|name| !INTERFACES.contains(name))
        .collect();
    assert!(imported.is_empty(), "wit/world.wit imports interfaces no capability serves: {imported:?}");
}

#[test]
fn a_capability_registered_without_its_counterparts_is_named_with_each_one() {
    // The test above must be able to fail: a name with nothing anywhere.
    let missing = missing(&root(), "ledger");
    assert_eq!(missing.len(), 5, "{missing:#?}");
    for place in ["wit/:", "wit/world.wit", "Rust SDK", "Python SDK", "TypeScript SDK"] {
        assert!(missing.iter().any(|m| m.contains(place)), "{place}: {missing:#?}");
    }
}

/// The smallest config that loads; each case adds to its handler.
const BASE: &str = "[kafka]\nbrokers = \"b\"\n[database]\nurl = \"postgres://u@h/db\"\n[[handler]]\nname = \"h\"\n\
                    topic = \"t\"\ngroup_id = \"g\"\ncomponent = \"c\"\nevent_types = [\"e\"]\nschema = \"s\"\n";

/// What the capabilities say of [`BASE`] with `extra`, loaded as a file
/// (the config's own checks pass) then checked by each capability.
fn checked(extra: &str) -> Result<(), String> {
    static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("idem-capability-check-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("idem.toml"), format!("{BASE}{extra}")).unwrap();
    let config = crate::config::Config::load(&dir.join("idem.toml")).map_err(|e| format!("config: {e:#}"));
    std::fs::remove_dir_all(&dir).ok();
    super::check(&config?.handlers[0]).map_err(|e| format!("{e:#}"))
}

#[test]
fn each_capability_refuses_its_own_keys_out_of_range_naming_them() {
    assert_eq!(checked(""), Ok(()), "the defaults are in range");
    let allowed = "[handler.http]\nallow = [\"https://a.example\"]\n";
    let credential = |header: &str| {
        format!(
            "{allowed}[[handler.http.credential]]\nbase = \"https://a.example\"\nheader = \"{header}\"\nvalue_env = \"PATH\"\n"
        )
    };
    assert_eq!(checked(&credential("Authorization")), Ok(()));
    let cases = [
        ("[handler.limits]\nmax_db_statements = 0\n".to_owned(), "limits.max_db_statements = 0"),
        ("[handler.limits]\nmax_db_statements = 1000001\n".to_owned(), "max_db_statements = 1000001 must be at most"),
        ("[handler.limits]\nmax_http_requests = 1000001\n".to_owned(), "limits.max_http_requests = 1000001"),
        ("[handler.limits]\nmax_emits = 0\n".to_owned(), "limits.max_emits must be 1 to 1000000"),
        ("[handler.limits]\nmax_emit_bytes = 0\n".to_owned(), "limits.max_emit_bytes"),
        ("[handler.http]\ntimeout_ms = 0\n".to_owned(), "http.timeout_ms = 0 must be between 1 and"),
        ("[handler.http]\ntimeout_ms = 86400001\n".to_owned(), "http.timeout_ms = 86400001"),
        ("[handler.http]\nkey_prefix = \"a b\"\n".to_owned(), "http.key_prefix `a b`"),
        ("[handler.http]\nallow = [\"ftp://a\"]\n".to_owned(), "http.allow `ftp://a` must be an http(s) URL"),
        ("[handler.http]\nallow_private = [\"http://10.0.0.1\"]\n".to_owned(), "not an entry of http.allow"),
        ("[handler.http.retry]\nmax_attempts = 0\n".to_owned(), "http.retry.max_attempts = 0"),
        ("[handler.http.retry]\nmax_backoff_ms = 60001\n".to_owned(), "http.retry needs initial_backoff_ms"),
        (credential("Host"), "header `Host` is reserved"),
        (credential("Content-Length"), "is reserved"),
        (credential("Proxy-Authorization"), "is reserved"),
        (credential("bad header"), "is not a header name"),
        ("[handler.config]\n\"idem.test.sources\" = \"{}\"\n".to_owned(), "config key `idem.test.sources` is reserved"),
    ];
    for (extra, expected) in cases {
        let said = checked(&extra).expect_err(&extra);
        assert!(said.contains("handler `h`") && said.contains(expected), "expected `{expected}` in: {said}");
    }
}
