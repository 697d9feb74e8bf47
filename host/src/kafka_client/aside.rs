//! Dropping a Kafka client, aside from the async runtime.
//!
//! Dropping an rdkafka client is blocking work: a producer purges and
//! flushes (up to half a second), a client with a polling thread joins it,
//! and librdkafka's destroy waits for its broker threads, which may hang
//! after a fatal error. On an async worker that stops every task the worker
//! runs meanwhile, and with `IDEM_WORKER_THREADS=1` every handler. So a
//! client owned by async code is held in an [`Aside`], whose drop hands the
//! client to a thread of its own.
//!
//! Nothing waits for that thread: a client is dropped once nothing it
//! carried is still owed (a DLQ record, an outbox row are acknowledged
//! before they count), so a process that exits meanwhile loses nothing.

use std::ops::Deref;

/// A client that, when dropped, is dropped on a thread of its own.
pub(crate) struct Aside<T: Send + 'static> {
    client: Option<T>,
    /// What the client is, for the warning when no thread can be started.
    what: &'static str,
}

impl<T: Send + 'static> Aside<T> {
    pub(crate) fn new(client: T, what: &'static str) -> Self {
        Self { client: Some(client), what }
    }
}

impl<T: Send + 'static> Deref for Aside<T> {
    type Target = T;

    #[expect(clippy::expect_used, reason = "taken only by `drop`, after which nothing can deref")]
    fn deref(&self) -> &T {
        self.client.as_ref().expect("an Aside holds its client until it is dropped")
    }
}

impl<T: Send + 'static> Drop for Aside<T> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop_aside(client, self.what);
        }
    }
}

/// Drops `client` on a thread of its own; here, with a warning, when no
/// thread can be started (the process is out of threads: better a stall
/// than a leak that repeats).
pub(crate) fn drop_aside<T: Send + 'static>(client: T, what: &'static str) {
    let dropping = std::thread::Builder::new().name("idem-client-drop".into()).spawn(move || drop(client));
    if let Err(e) = dropping {
        tracing::warn!("cannot start a thread to drop {what}, dropped in place: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Sends the name of the thread that drops it.
    struct Tells(mpsc::Sender<Option<String>>);

    impl Drop for Tells {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().name().map(str::to_owned));
        }
    }

    #[test]
    fn an_aside_client_is_dropped_on_a_thread_of_its_own() {
        let (tx, rx) = mpsc::channel();
        drop(Aside::new(Tells(tx), "a test client"));
        let dropped_on = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("dropped");
        assert_eq!(dropped_on.as_deref(), Some("idem-client-drop"));
    }
}
