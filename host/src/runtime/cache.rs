//! Compiled components cached on disk, so that a restart or a switch back
//! to a known module version loads native code in milliseconds instead of
//! compiling it again (about 50 ms for the examples here, seconds for a
//! componentize-py component).
//!
//! Loading compiled code means trusting it completely: wasmtime runs it as
//! is. So an artifact is only ever loaded from a cache this process made:
//! - the directory is created owner-only (0700) and refused unless it is
//!   owned by this process's user and writable by nobody else, on a path
//!   only this user or root can change; each file is opened without
//!   following symlinks and checked (owner, mode, one link) through the
//!   handle it is read from;
//! - a file's name is the module's sha256 plus the engine's compatibility
//!   hash (wasmtime's version, target and every setting that changes code),
//!   so a changed engine misses instead of loading foreign code;
//! - its first 32 bytes are the SHA-256 of its name and the rest, checked
//!   before loading, so a truncated, damaged or renamed file is compiled
//!   afresh, never run;
//! - files are written to a temporary name and renamed into place.

use std::fs;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
}

/// The SHA-256 of the file's name and the artifact: an artifact is only
/// valid under the name it was stored as.
fn checksum(path: &Path, artifact: &[u8]) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(path.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default());
    digest.update(artifact);
    digest.finalize().into()
}

/// The user this process runs as (the owner of its `/proc/self`).
fn own_uid() -> std::io::Result<u32> {
    Ok(fs::metadata("/proc/self")?.uid())
}

/// Whether `meta` belongs to this process's user and nobody else may write it.
fn private(meta: &fs::Metadata) -> bool {
    own_uid().is_ok_and(|uid| meta.uid() == uid) && meta.mode() & 0o022 == 0
}

/// Whether nobody but this user (and root) can replace `dir` or anything
/// on the way to it: every ancestor is owned by root or this user and is
/// not writable by others, unless sticky (like /tmp, where others cannot
/// rename what is ours).
fn trusted_path(dir: &Path) -> Result<(), String> {
    let uid = own_uid().map_err(|e| format!("cannot tell which user this process runs as: {e}"))?;
    for ancestor in dir.ancestors().skip(1) {
        let meta = fs::metadata(ancestor).map_err(|e| format!("cannot read {}: {e}", ancestor.display()))?;
        let owner_ok = meta.uid() == 0 || meta.uid() == uid;
        let sticky = meta.mode() & 0o1000 != 0;
        if !owner_ok || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!("{} can be changed by other users", ancestor.display()));
        }
    }
    Ok(())
}

/// `dir`, created owner-only if missing, canonical, and checked: a
/// directory owned by this user, writable by nobody else, on a path only
/// this user or root can change (what is loaded from it runs as is).
pub(super) fn private_dir(dir: &Path, what: &str) -> Result<PathBuf, String> {
    let shown = dir.display();
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create the {what} {shown}: {e}"))?;
    }
    let dir = fs::canonicalize(dir).map_err(|e| format!("cannot resolve the {what} {shown}: {e}"))?;
    let meta = fs::symlink_metadata(&dir).map_err(|e| format!("cannot read the {what} {shown}: {e}"))?;
    let refused = |why: String| {
        format!(
            "the {what} {shown} must be a directory owned by this user and writable by nobody else, \
                 on a path only this user or root can change (compiled code loaded from it runs as is): {why}"
        )
    };
    if !meta.is_dir() || !private(&meta) {
        return Err(refused("the directory itself is not".into()));
    }
    trusted_path(&dir).map_err(refused)?;
    Ok(dir)
}

/// The bytes of the file at `path` if it is this user's alone. Opened
/// without following a symlink, and checked and read through the same
/// handle: what is checked is what is loaded.
pub(super) fn read_private(path: &Path) -> Option<Vec<u8>> {
    let mut file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || !private(&meta) || meta.nlink() != 1 {
        tracing::warn!(path = %path.display(), "ignoring a cached file not owned by this user alone");
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Writes `parts` to `path` (owner-only) through a temporary file renamed
/// into place, so a reader sees all of it or nothing; `durable`: flushed to
/// the disk first (a file whose loss costs a compilation need not be:
/// its checksum catches a torn one).
pub(super) fn write_private(path: &Path, parts: &[&[u8]], durable: bool) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
    let written = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        for part in parts {
            file.write_all(part)?;
        }
        if durable {
            file.sync_all()?;
        }
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

impl ArtifactCache {
    /// Opens (creating it owner-only if missing) the cache at `dir`.
    pub fn open(dir: &Path) -> Result<Self, String> {
        Ok(Self { dir: private_dir(dir, "component cache")? })
    }

    fn path(&self, engine: &Engine, sha256: &str) -> PathBuf {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir.join(format!("{sha256}-{:016x}.cwasm", hasher.finish()))
    }

    /// The compiled component for the module `sha256`, if this cache has a
    /// sound one for this engine.
    pub fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path(engine, sha256);
        let bytes = read_private(&path)?;
        let (digest, artifact) = bytes.split_at_checked(32)?;
        if checksum(&path, artifact).as_slice() != digest {
            tracing::warn!(path = %path.display(), "a cached component is damaged: compiling again");
            let _ = fs::remove_file(&path);
            return None;
        }
        #[expect(
            unsafe_code,
            reason = "deserialising runs compiled code as is; the file comes from this process's own private \
                      cache, named by the module's hash and the engine's compatibility hash, and its checksum matched"
        )]
        // SAFETY: see the module's comment: the artifact was produced by
        // `Component::serialize` of an engine with the same compatibility
        // hash, in a directory only this user can write, and is intact.
        let loaded = unsafe { Component::deserialize(engine, artifact) };
        match loaded {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), "a cached component does not load ({e}): compiling again");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `component` (compiled from the module `sha256`); a failure
    /// only costs a compilation next time.
    pub fn store(&self, engine: &Engine, sha256: &str, component: &Component) {
        let path = self.path(engine, sha256);
        let written = component.serialize().map_err(|e| e.to_string()).and_then(|artifact| {
            write_private(&path, &[&checksum(&path, &artifact), &artifact], true).map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), "failed to cache a compiled component: {e}");
        }
    }
}
