//! Reading the config file, for every command.

use anyhow::Context as _;

/// A config file loaded and checked whole, before anything connects:
/// `Config::load`'s checks, then each capability's own ranges of every
/// handler's section (`Capability::check`: the config layer sits below the
/// capabilities and cannot call them). Every command that reads the file
/// loads it here.
pub fn load_config(path: &std::path::Path) -> anyhow::Result<crate::config::Config> {
    let config = crate::config::Config::load(path)?;
    for h in &config.handlers {
        crate::capabilities::check(h).with_context(|| format!("invalid config {}", path.display()))?;
    }
    Ok(config)
}
