//! Compiled functions kept between compilations, for `idem test`'s
//! edit–test loop: Cranelift's incremental cache
//! (`Config::enable_incremental_compilation`), on disk. A component rebuilt
//! after a one-line change still carries its language's runtime (CPython,
//! SpiderMonkey) unchanged, tens of thousands of functions whose machine
//! code is found here instead of compiled again; only what changed is
//! compiled.
//!
//! Only `idem test`'s compiling children use it ([`super::compiler`]):
//! `idem run` compiles a module whole, once, and keeps the result in the
//! [`super::ArtifactCache`], so an experimental part of Cranelift never
//! decides the code that runs in production.
//!
//! What is read from here becomes code, so it is kept as the artifact
//! cache keeps components: a directory of this user's alone (checked when
//! opened), each file named by the SHA-256 of its key, read without
//! following symlinks, and starting with the SHA-256 of its key and value,
//! checked before the value is handed to Cranelift; a file that fails the
//! check is a miss. Keys are Cranelift's: a hash of the function's whole
//! intermediate form, the target and the settings.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// A directory of compiled functions.
#[derive(Debug)]
pub(super) struct FunctionCache {
    dir: PathBuf,
}

impl FunctionCache {
    /// Opens (creating it owner-only if missing) the cache at `dir`.
    pub(super) fn open(dir: &Path) -> Result<Self, String> {
        Ok(Self { dir: super::cache::private_dir(dir, "function cache")? })
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let name = hex::encode(Sha256::digest(key));
        // 256 folders, so no folder holds the whole of a runtime's functions.
        self.dir.join(&name[..2]).join(&name[2..])
    }
}

fn checksum(key: &[u8], value: &[u8]) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update((key.len() as u64).to_le_bytes());
    digest.update(key);
    digest.update(value);
    digest.finalize().into()
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let bytes = super::cache::read_private(&self.path(key))?;
        let (digest, value) = bytes.split_at_checked(32)?;
        (checksum(key, value).as_slice() == digest).then(|| Cow::Owned(value.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let path = self.path(key);
        let folder = path.parent().map(|p| {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(p)
        });
        matches!(folder, Some(Ok(())))
            && super::cache::write_private(&path, &[&checksum(key, &value), &value], false).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::CacheStore as _;

    use super::*;

    #[test]
    fn a_value_is_found_under_its_key_and_a_damaged_one_is_a_miss() {
        let dir = std::env::temp_dir().join(format!("idem-functions-{}", std::process::id()));
        let cache = FunctionCache::open(&dir).expect("a private folder");
        assert!(cache.get(b"key").is_none(), "empty at first");
        assert!(cache.insert(b"key", b"code".to_vec()));
        assert_eq!(cache.get(b"key").as_deref(), Some(&b"code"[..]));
        assert!(cache.get(b"other").is_none());
        let path = cache.path(b"key");
        let mut bytes = std::fs::read(&path).expect("the file");
        if let Some(last) = bytes.last_mut() {
            *last ^= 1;
        }
        std::fs::write(&path, bytes).expect("damage it");
        assert!(cache.get(b"key").is_none(), "a damaged value is never handed to the compiler");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
