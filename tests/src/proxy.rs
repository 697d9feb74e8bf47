//! A TCP proxy on loopback that a test can cut and restore: a database
//! outage without stopping the shared PostgreSQL server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    /// Bumped on every cut: connections of an older generation close.
    generation: watch::Sender<u64>,
    cuts: AtomicU64,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Forwards a free port on 127.0.0.1 to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("proxy bind: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("proxy address: {e}"));
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (accept_up, accept_gen) = (up.clone(), generation.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = accept_gen.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else { return };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { addr, up, generation, cuts: AtomicU64::new(0), task }
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        let n = self.cuts.fetch_add(1, Ordering::SeqCst) + 1;
        self.generation.send_replace(n);
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}
