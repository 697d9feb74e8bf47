//! `[runtime]`: the wasm engine's settings that are not per handler.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Where compiled components are cached (see `runtime::cache`); `"off"`
    /// for no cache. Default: `$XDG_CACHE_HOME/idem/components`, else
    /// `$HOME/.cache/idem/components`.
    #[serde(default)]
    pub cache_dir: Option<String>,
}

impl RuntimeConfig {
    /// The cache directory, or `None` when off (or no home to put it in).
    pub fn cache_dir(&self) -> Option<PathBuf> {
        match self.cache_dir.as_deref() {
            Some("off") => None,
            Some(dir) => Some(PathBuf::from(dir)),
            None => crate::env::get_os(crate::env::XDG_CACHE_HOME)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    crate::env::get_os(crate::env::HOME)
                        .filter(|d| !d.is_empty())
                        .map(|h| PathBuf::from(h).join(".cache"))
                })
                .map(|base| base.join("idem").join("components")),
        }
    }
}
