//! Compiled components cached on disk (`runtime::cache`): reused across
//! runtimes, private to this user, never loaded when damaged or writable
//! by others.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

use idem::runtime::{ArtifactCache, PoolSize};
use idem::{Handler, Outcome, Runtime};
use idem_tests::guests;

use super::{Setup, order};

fn cached_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cache dir: {e}"));
    let mut files: Vec<_> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("entry: {e}")).path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn compiled_components_are_cached_privately_and_never_loaded_damaged() {
    let s = Setup::new().await;
    let dir = std::env::temp_dir().join(idem_tests::unique_name("idem_cache")).join("components");
    let cache = ArtifactCache::open(&dir).expect("a new cache");
    assert_eq!(std::fs::metadata(&dir).expect("dir").mode() & 0o777, 0o700, "created owner-only");
    let runtime =
        |c: &ArtifactCache| Runtime::with_pool_and_cache(PoolSize::default(), Some(c.clone())).expect("runtime");
    let load =
        |rt: &Runtime| Handler::load(rt, &guests::component("billing"), s.settings("billing")).expect("billing loads");

    // First load compiles and stores one artifact, owner-only.
    load(&runtime(&cache));
    let files = cached_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let file = files[0].clone();
    let meta = std::fs::metadata(&file).expect("artifact");
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert!(
        file.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&{
            let bytes = std::fs::read(guests::component("billing")).expect("component");
            hex_sha256(&bytes)
        })),
        "named by the module's sha256: {file:?}"
    );

    // A restart (a new runtime) loads it instead of compiling and storing again.
    let handler = load(&runtime(&cache));
    assert_eq!(std::fs::metadata(&file).expect("artifact").ino(), meta.ino(), "the cached artifact was reused");
    assert_eq!(s.executor_for(handler).execute(&order(), 1).await.expect("runs"), Outcome::Processed);

    // A damaged artifact is compiled again (and replaced), never run.
    let mut bytes = std::fs::read(&file).expect("artifact");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).expect("damage it");
    load(&runtime(&cache));
    let replaced = std::fs::read(&file).expect("artifact");
    assert_ne!(replaced, bytes, "the damaged artifact was replaced");

    // One that others may write is not trusted: compiled again, replaced owner-only.
    let before = std::fs::metadata(&file).expect("artifact").ino();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    load(&runtime(&cache));
    let meta = std::fs::metadata(&file).expect("artifact");
    assert!(meta.ino() != before && meta.mode() & 0o777 == 0o600, "replaced by a private one");

    // A cache directory others may write is refused outright.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = ArtifactCache::open(&dir).expect_err("a shared directory");
    assert!(err.contains("writable by nobody else"), "{err}");
    std::fs::remove_dir_all(dir.parent().expect("parent")).ok();
    s.finish().await;
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
