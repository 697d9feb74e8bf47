//! The admin listener's connection slots: `max_connections` in all and
//! `max_connections_per_peer` per IP address, taken before a connection is
//! served and given back when it closes (a [`Slot`] dropped). The map only
//! holds addresses with an open connection, so it is never larger than
//! `max_connections`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::telemetry::{Refused, Telemetry};

#[derive(Debug)]
pub(super) struct Peers {
    max: usize,
    per_peer: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_ip: HashMap<IpAddr, usize>,
}

/// What [`Peers::admit`] decided.
pub(super) enum Admission {
    Admitted(Slot),
    Refused(Refused),
}

/// One connection's place; dropping it frees the place.
pub(super) struct Slot {
    peers: Arc<Peers>,
    ip: IpAddr,
    telemetry: Arc<Telemetry>,
}

impl Peers {
    pub(super) fn new(max: usize, per_peer: usize) -> Arc<Self> {
        Arc::new(Self { max, per_peer, open: Mutex::default() })
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Open> {
        // The counts stay consistent under a panic elsewhere: every change
        // is one statement.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection from `ip`, or why there is none.
    pub(super) fn admit(self: &Arc<Self>, ip: IpAddr, telemetry: Arc<Telemetry>) -> Admission {
        // An IPv4 client of a dual-stack socket is one peer, however named.
        let ip = ip.to_canonical();
        let mut open = self.open();
        if open.total >= self.max {
            return Admission::Refused(Refused::Total);
        }
        let from_ip = open.by_ip.entry(ip).or_insert(0);
        if *from_ip >= self.per_peer {
            return Admission::Refused(Refused::Peer);
        }
        *from_ip += 1;
        open.total += 1;
        telemetry.listener().open.fetch_add(1, Ordering::Relaxed);
        Admission::Admitted(Slot { peers: self.clone(), ip, telemetry })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.peers.open();
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.by_ip.remove(&self.ip);
            }
        }
        self.telemetry.listener().open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{Admission, Peers};
    use crate::telemetry::{Refused, Telemetry};

    #[tokio::test]
    async fn slots_are_capped_in_all_and_per_address_and_given_back() {
        let pool = sqlx::PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").expect("lazy pool");
        let telemetry = Telemetry::new(pool);
        let peers = Peers::new(3, 2);
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let admit = |s: &str| peers.admit(ip(s), telemetry.clone());
        let Admission::Admitted(a1) = admit("10.0.0.1") else { panic!("first") };
        let Admission::Admitted(_a2) = admit("::ffff:10.0.0.1") else { panic!("second") };
        assert!(matches!(admit("10.0.0.1"), Admission::Refused(Refused::Peer)), "a third from one address");
        let Admission::Admitted(_b) = admit("10.0.0.2") else { panic!("another address") };
        assert!(matches!(admit("10.0.0.3"), Admission::Refused(Refused::Total)), "a fourth in all");
        drop(a1);
        assert!(matches!(admit("10.0.0.1"), Admission::Admitted(_)), "a closed connection's slot is free again");
        assert_eq!(peers.open().by_ip.len(), 2, "addresses without a connection are forgotten");
    }
}
