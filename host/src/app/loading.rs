//! Reading the config file, for every command.

use anyhow::Context as _;

/// A config file loaded and checked whole, before anything connects:
/// `Config::load`'s checks, then each capability's own ranges of every
/// handler's section (`Capability::check`: the config layer sits below the
/// capabilities and cannot call them). Every command that reads the file
/// loads it here.
pub fn load_config(path: &std::path::Path) -> anyhow::Result<crate::config::Config> {
    let config = crate::config::Config::load(path)?;
    check_capabilities(&config).with_context(|| format!("invalid config {}", path.display()))?;
    Ok(config)
}

/// Each capability's ranges of every handler's section: `load_config`'s,
/// and `startup::prepare_as`'s first step for a config handed over loaded.
pub fn check_capabilities(config: &crate::config::Config) -> anyhow::Result<()> {
    config.handlers.iter().try_for_each(crate::capabilities::check)
}

#[cfg(test)]
mod tests {
    const BASE: &str = "[kafka]\nbrokers = \"b\"\n[database]\nurl = \"postgres://u@127.0.0.1:1/db\"\n[[handler]]\n\
                        name = \"h\"\ntopic = \"t\"\ngroup_id = \"g\"\ncomponent = \"c\"\nevent_types = [\"e\"]\n\
                        schema = \"s\"\n[handler.retry]\non_failure = \"block\"\n[handler.http]\ntimeout_ms = 0\n";

    fn written(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("idem-loading-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("idem.toml"), BASE).unwrap();
        dir.join("idem.toml")
    }

    #[test]
    fn every_command_loads_with_the_capabilities_checks() {
        let path = written("load");
        assert!(crate::config::Config::load(&path).is_ok(), "the file's own checks leave capability keys alone");
        let said = format!("{:#}", super::load_config(&path).unwrap_err());
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
        assert!(said.contains("invalid config") && said.contains("http.timeout_ms = 0"), "{said}");
    }

    /// A config handed over loaded (`prepare_config`) is refused for a
    /// capability's key before anything connects: the database here is a
    /// port nothing listens on, and the error is the key's.
    #[tokio::test]
    async fn a_config_handed_over_loaded_is_checked_before_anything_connects() {
        let path = written("prepare");
        let config = crate::config::Config::load(&path).unwrap();
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
        let natives = crate::runtime::NativeHandlers::default();
        let said = format!("{:#}", crate::app::startup::prepare_config(config, &natives).await.err().unwrap());
        assert!(said.contains("http.timeout_ms = 0"), "{said}");
    }
}
