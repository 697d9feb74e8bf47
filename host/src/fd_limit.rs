//! The process's open-files limit (`RLIMIT_NOFILE`). Every Kafka, database,
//! HTTP and admin socket is a file descriptor; at the limit each of them
//! fails with "Too many open files". `idem run` raises the soft limit to
//! the hard one at start, and the admin listener takes at most a quarter
//! of what is in force (`admin::Admin::bind`), so that clients of the admin
//! API can never starve event processing.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Where a soft limit is raised to when the hard limit is "unlimited": the
/// kernel refuses more than `fs.nr_open` (1,048,576 by default) anyway.
const UNLIMITED_TARGET: u64 = 1 << 20;

/// Raises the soft limit to the hard limit where allowed; logs what is in
/// force. A refusal is a warning: the host runs with the limit it has.
pub fn raise() {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let target = maximum.unwrap_or(UNLIMITED_TARGET);
    if let Some(soft) = current
        && soft < target
    {
        match setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum }) {
            Ok(()) => tracing::debug!(from = soft, to = target, "raised the open-files limit (RLIMIT_NOFILE)"),
            Err(e) => tracing::warn!(
                soft,
                hard = ?maximum,
                "could not raise the open-files limit (RLIMIT_NOFILE) from {soft} to {target}: {e}"
            ),
        }
    }
}

/// The soft limit in force; `None`: unlimited.
pub fn soft() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// The admin listener's connection cap under an open-files limit of
/// `soft`: `configured`, but at most a quarter of the limit (and at least
/// one, so a tiny limit still leaves a probe a way in).
pub fn admin_share(configured: usize, soft: Option<u64>) -> usize {
    let quarter = soft.map_or(usize::MAX, |s| usize::try_from(s / 4).unwrap_or(usize::MAX));
    configured.min(quarter).max(1)
}

#[cfg(test)]
mod tests {
    use super::admin_share;

    #[test]
    fn the_admin_listener_takes_at_most_a_quarter_of_the_limit() {
        assert_eq!(admin_share(64, Some(256)), 64);
        assert_eq!(admin_share(64, Some(100)), 25);
        assert_eq!(admin_share(64, Some(1)), 1);
        assert_eq!(admin_share(64, None), 64);
        assert_eq!(admin_share(64, Some(1 << 20)), 64);
    }

    #[test]
    fn raising_leaves_the_soft_limit_at_or_above_where_it_was() {
        let before = super::soft();
        super::raise();
        let after = super::soft();
        assert!(after.unwrap_or(u64::MAX) >= before.unwrap_or(u64::MAX), "{before:?} -> {after:?}");
        assert_eq!(after, rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.or(after));
    }
}
