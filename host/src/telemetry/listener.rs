//! The admin listener's own counters: what a flood of hostile clients does
//! to it shows on `/metrics` (when a connection gets through to read it),
//! and the tests read it to see that every slot was given back.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a connection was closed at once without being served.
#[derive(Debug, Clone, Copy)]
pub enum Refused {
    /// `[admin] max_connections` were open.
    Total,
    /// `[admin] max_connections_per_peer` were open from its IP address.
    Peer,
}

/// Counted by the admin listener (`admin::listener`) and the upload route.
#[derive(Debug, Default)]
pub struct ListenerStats {
    pub(crate) open: AtomicU64,
    refused_total: AtomicU64,
    refused_peer: AtomicU64,
    header_timeouts: AtomicU64,
    body_timeouts: AtomicU64,
    pub(crate) uploads: AtomicU64,
}

impl ListenerStats {
    pub(crate) fn refused(&self, why: Refused) {
        let counter = match why {
            Refused::Total => &self.refused_total,
            Refused::Peer => &self.refused_peer,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn header_timeout(&self) {
        self.header_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn body_timeout(&self) {
        self.body_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Its families, for `render`.
    pub(super) fn families(&self) -> [Family; 4] {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            Family {
                name: "idem_admin_connections",
                kind: "gauge",
                help: "Connections the admin listener serves now.",
                label: "",
                samples: vec![("", get(&self.open))],
            },
            Family {
                name: "idem_admin_connections_refused_total",
                kind: "counter",
                help: "Connections closed at once: max_connections (total) or max_connections_per_peer (peer) were open.",
                label: "reason",
                samples: vec![("total", get(&self.refused_total)), ("peer", get(&self.refused_peer))],
            },
            Family {
                name: "idem_admin_timeouts_total",
                kind: "counter",
                help: "Requests whose headers (header_timeout) or upload body (body_timeout) did not arrive in time.",
                label: "phase",
                samples: vec![("headers", get(&self.header_timeouts)), ("body", get(&self.body_timeouts))],
            },
            Family {
                name: "idem_admin_uploads",
                kind: "gauge",
                help: "Uploads holding one of the upload slots now.",
                label: "",
                samples: vec![("", get(&self.uploads))],
            },
        ]
    }
}

/// One metric family: its samples by the value of its one label (`""`: none).
pub(super) struct Family {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
    pub label: &'static str,
    pub samples: Vec<(&'static str, u64)>,
}
