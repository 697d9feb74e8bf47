//! `ordering` and `max_in_flight` of a `[[handler]]`: which records of one
//! partition may run at the same time.
//!
//! A partition's records are spread over `max_in_flight` lanes; each lane
//! runs its records one batch at a time, in offset order, and the lanes run
//! side by side. Offsets are committed only up to the first record not yet
//! resolved, whichever lane holds it, so a lane that waits (a backoff, a
//! blocked record) holds the partition's committed offset, never another
//! lane's work.
//!
//! - `"partition"` (the default): one lane, today's order.
//! - `"key"`: a record's lane is its key's hash, so records with the same key
//!   keep their order and different keys run concurrently. Records without a
//!   key share one lane and keep their order among themselves: nothing says
//!   a producer of keyless records does not rely on it (`"none"` is for
//!   those that do not).
//! - `"none"`: records go to the lanes in turn; no two are ordered.
//!
//! Lanes are per partition and fixed in number, never per key: many
//! distinct keys share the lanes by hash, so memory does not grow with the
//! keys a partition carries.

use serde::Deserialize;

/// `ordering` of a `[[handler]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ordering {
    #[default]
    Partition,
    Key,
    None,
}

/// Lanes per partition under `"key"` and `"none"` when `max_in_flight` is
/// not set.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 8;

/// The most lanes a partition may have.
pub const MAX_IN_FLIGHT: u32 = 256;

impl Ordering {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Partition => "partition",
            Self::Key => "key",
            Self::None => "none",
        }
    }
}

/// Lanes per partition: 1 under `"partition"`, else `max_in_flight` (or its
/// default).
pub(super) fn lanes(ordering: Ordering, max_in_flight: Option<u32>) -> u32 {
    match ordering {
        Ordering::Partition => 1,
        Ordering::Key | Ordering::None => max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT),
    }
}

/// `max_in_flight` in range, and only where it means something.
pub(super) fn check(at: &str, ordering: Ordering, max_in_flight: Option<u32>) -> anyhow::Result<()> {
    match (ordering, max_in_flight) {
        (Ordering::Partition, Some(n)) if n != 1 => anyhow::bail!(
            "{at}: max_in_flight = {n} needs ordering = \"key\" or \"none\": under \"partition\" one record of a \
             partition runs at a time"
        ),
        (_, Some(n)) if !(1..=MAX_IN_FLIGHT).contains(&n) => {
            anyhow::bail!("{at}: max_in_flight = {n} must be between 1 and {MAX_IN_FLIGHT}")
        }
        _ => Ok(()),
    }
}

/// The most events of one batch that may run at once.
pub const MAX_CONCURRENT: usize = 64;

/// `[handler.batch] max_concurrent` in range.
pub(super) fn check_concurrent(at: &str, max_concurrent: usize) -> anyhow::Result<()> {
    if !(1..=MAX_CONCURRENT).contains(&max_concurrent) {
        anyhow::bail!("{at}: batch.max_concurrent = {max_concurrent} must be between 1 and {MAX_CONCURRENT}");
    }
    Ok(())
}

/// The lane of `lanes` that a record with `key` goes to under
/// `ordering = "key"`: its key's hash (SipHash with fixed keys, so the same
/// in every process and release of the same build). Records without a key
/// all go to one lane.
pub fn key_lane(key: Option<&[u8]>, lanes: usize) -> usize {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::hash::DefaultHasher::new();
    key.hash(&mut hasher);
    usize::try_from(hasher.finish() % lanes.max(1) as u64).unwrap_or(0)
}
