//! The host's identity in its consumer groups: Kafka's static membership
//! (`group.instance.id`, KIP-345, and its KIP-848 counterpart).
//!
//! A consumer with a `group.instance.id` that dies or restarts keeps its
//! place in the group: when a process with the same identity comes back
//! within the session timeout, the broker hands it the same partitions at
//! once, instead of waiting the session out for the dead member and then
//! rebalancing everyone. The identity must therefore be *stable* across a
//! host's restarts and *unique* among live hosts: two live hosts with one
//! identity fence each other.
//!
//! `[kafka] instance_id` (or `IDEM_INSTANCE_ID`, which wins):
//! - a name: used as it is (an orchestrator's stable name: a StatefulSet's
//!   pod name, a systemd instance, a VM's name);
//! - `"auto"` (the default): `<hostname>-<slot>`, where the slot is the
//!   lowest number whose lock file under the temporary directory no live
//!   process holds. A process that dies releases its lock, so its restart
//!   on the same machine (or in the same container) takes the same slot,
//!   and two hosts on one machine take different ones. Without a usable
//!   hostname (`localhost`, empty) there is no automatic identity;
//! - `"off"`: dynamic membership, as Kafka's clients default to.
//!
//! Each handler's consumer joins as `<identity>.<handler>.<mark>` (its own
//! group, or a group shared with other handlers, alike). The mark is 16 hex
//! digits of SHA-256 over a secret only idem's role can read
//! (`idem.instance_secret`, made by the migrations) and the rest of the id:
//! stable for the same host and handler, so restarts keep their place, but
//! not computable from a host name, so a Kafka client cannot join a
//! handler's group as the host without first reading the id from the group
//! (a client with Describe on the group can; that is why a fence is the
//! handler's incident only, made good by joining again:
//! `pipeline::incident`).
//!
//! Under KIP-848 (`group_protocol = "consumer"`) an automatic identity is
//! not used: there the broker refuses a returning identity whose previous
//! process died until the broker's session timeout ends (librdkafka makes
//! that refusal, UNRELEASED_INSTANCE_ID, fatal; `pipeline::polling` waits it
//! out), so a slot taken over from a dead process on the same machine would
//! cost that timeout; a named identity is used as configured.

use std::fs::File;
use std::path::PathBuf;

use anyhow::{Context as _, bail};

/// Slots tried for an automatic identity: more hosts than this on one
/// machine run without static membership.
const SLOTS: u32 = 64;

/// The host's identity, and the lock that keeps an automatic one ours.
#[derive(Debug)]
pub struct Identity {
    pub name: Option<String>,
    /// Held for the process's life (an automatic identity's slot).
    lock: Option<File>,
    /// `idem.instance_secret` (see the module doc); empty until read.
    secret: Vec<u8>,
}

impl Identity {
    /// No static membership.
    pub fn none() -> Self {
        Self { name: None, lock: None, secret: Vec::new() }
    }

    /// Resolves `configured` (`[kafka] instance_id`, overridden by
    /// `IDEM_INSTANCE_ID`).
    pub fn resolve(configured: &str) -> anyhow::Result<Self> {
        Ok(match chosen(configured)? {
            Choice::Off => Self::none(),
            Choice::Auto => from_hostname(),
            Choice::Named(name) => Self { name: Some(name), lock: None, secret: Vec::new() },
        })
    }

    /// Reads the database's instance secret, for the ids' marks.
    pub async fn with_secret(mut self, pool: &sqlx::PgPool) -> anyhow::Result<Self> {
        if self.name.is_some() {
            self.secret = sqlx::query_scalar("SELECT secret FROM idem.instance_secret")
                .fetch_one(pool)
                .await
                .context("cannot read idem.instance_secret (run idem migrate)")?;
        }
        Ok(self)
    }

    /// Whether the identity was chosen automatically (see the module doc).
    pub fn automatic(&self) -> bool {
        self.lock.is_some()
    }

    /// The `group.instance.id` of `handler`'s consumer.
    pub fn instance_id(&self, handler: &str) -> Option<String> {
        let handler: String = handler.chars().map(|c| if id_char(c) { c } else { '_' }).collect();
        self.name.as_ref().map(|name| {
            let visible = format!("{name}.{handler}");
            let mark = mark(&self.secret, &visible);
            format!("{visible}.{mark}")
        })
    }
}

/// The identity `configured` names (`IDEM_INSTANCE_ID` first), without
/// taking a slot: `None` for `"auto"` and `"off"`. For `idem check`.
pub fn named(configured: &str) -> anyhow::Result<Option<Identity>> {
    Ok(match chosen(configured)? {
        Choice::Named(name) => Some(Identity { name: Some(name), lock: None, secret: Vec::new() }),
        Choice::Off | Choice::Auto => None,
    })
}

/// What `[kafka] instance_id` (or `IDEM_INSTANCE_ID`, which wins) asks for.
enum Choice {
    Off,
    Auto,
    Named(String),
}

fn chosen(configured: &str) -> anyhow::Result<Choice> {
    let wanted = crate::env::get(crate::env::INSTANCE_ID).unwrap_or_else(|| configured.to_owned());
    Ok(match wanted.as_str() {
        "off" => Choice::Off,
        "auto" => Choice::Auto,
        name => {
            check(name).context("IDEM_INSTANCE_ID or [kafka] instance_id")?;
            Choice::Named(wanted)
        }
    })
}

/// 16 hex digits of SHA-256 over `secret` and `visible` (its length first,
/// so no two pairs share an input).
fn mark(secret: &[u8], visible: &str) -> String {
    use sha2::Digest as _;
    let mut digest = sha2::Sha256::new();
    digest.update((secret.len() as u64).to_be_bytes());
    digest.update(secret);
    digest.update(visible.as_bytes());
    hex::encode(&digest.finalize()[..8])
}

/// A character Kafka takes in an id.
fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// An identity as Kafka takes it: 1 to 200 of letters, digits, `.`, `_`,
/// `-` (the broker's rule for ids, with room left for the handler's name).
pub fn check(name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name.len() > 200 || !name.chars().all(id_char) {
        bail!(
            "instance id `{}` must be 1 to 200 of letters, digits, `.`, `_`, `-` (or \"auto\", or \"off\")",
            name.escape_debug()
        );
    }
    Ok(())
}

/// `<hostname>-<slot>`, or none (logged) when no slot can be had.
fn from_hostname() -> Identity {
    let host = hostname();
    let usable = host.as_deref().filter(|h| !h.is_empty() && *h != "localhost" && check(h).is_ok());
    let Some(host) = usable else {
        tracing::warn!(
            hostname = ?host,
            "no usable hostname for an automatic instance id: static group membership is off (set [kafka] \
             instance_id or IDEM_INSTANCE_ID for restarts that resume in seconds)"
        );
        return Identity::none();
    };
    slot_of(host).unwrap_or_else(|| {
        tracing::warn!(
            "{SLOTS} idem hosts hold instance slots on this machine already: static group membership is off"
        );
        Identity::none()
    })
}

/// `<host>-<slot>` for the lowest slot no live process holds.
fn slot_of(host: &str) -> Option<Identity> {
    for slot in 0..SLOTS {
        let path = lock_path(host, slot);
        let Ok(file) = File::options().create(true).truncate(false).write(true).open(&path) else { continue };
        if file.try_lock().is_ok() {
            let name = format!("{host}-{slot}");
            tracing::info!(instance_id = %name, lock = %path.display(), "static group membership");
            return Some(Identity { name: Some(name), lock: Some(file), secret: Vec::new() });
        }
    }
    None
}

fn lock_path(host: &str, slot: u32) -> PathBuf {
    std::env::temp_dir().join(format!("idem-instance.{host}.{slot}.lock"))
}

/// The kernel's host name (a container's is its own).
pub(crate) fn hostname() -> Option<String> {
    let raw =
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok().or_else(|| crate::env::get(crate::env::HOSTNAME))?;
    Some(raw.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_handlers_appended() {
        assert!(check("billing-0").is_ok());
        for bad in ["", "a b", "x\ny", "ü", &"x".repeat(201)] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        let id = Identity { name: Some("host-1".into()), lock: None, secret: b"secret".to_vec() };
        let billing = id.instance_id("billing eu").expect("an id");
        assert!(billing.starts_with("host-1.billing_eu."), "{billing}");
        assert_eq!(id.instance_id("billing eu"), Some(billing.clone()), "stable for a restart");
        assert!(check(&billing).is_ok(), "{billing}");
        let other = Identity { name: Some("host-1".into()), lock: None, secret: b"another".to_vec() };
        assert_ne!(other.instance_id("billing eu"), Some(billing), "not computable without the secret");
        assert_eq!(Identity::none().instance_id("billing"), None);
    }

    #[test]
    fn two_identities_on_one_machine_differ_and_a_released_slot_is_taken_again() {
        let host = format!("idem-test-{}", uuid::Uuid::now_v7().simple());
        let a = slot_of(&host).expect("a slot");
        let b = slot_of(&host).expect("another slot");
        assert_eq!(a.name.as_deref(), Some(format!("{host}-0").as_str()));
        assert_eq!(b.name.as_deref(), Some(format!("{host}-1").as_str()), "a held slot is not shared");
        drop(a);
        let c = slot_of(&host).expect("the released slot");
        assert_eq!(
            c.name.as_deref(),
            Some(format!("{host}-0").as_str()),
            "the lowest free slot, released by the first"
        );
        for slot in 0..2 {
            let _ = std::fs::remove_file(lock_path(&host, slot));
        }
    }
}
