//! `idem test --replay`'s way through the executor: a captured event run
//! on the handler with no transaction and no network, every statement and
//! request answered from the capture's tape (`capabilities::tape`), which
//! notes where the handler now asks something else.

use std::sync::Arc;

use super::{Executor, Outcome, Run};
use crate::capabilities::emit::Emitted;
use crate::capabilities::tape::{Recorded, Tape};
use crate::error::ExecError;
use crate::event::Event;
use crate::transaction::Lent;

/// What a handler did with a captured event, played back.
#[derive(Debug)]
pub struct Replayed {
    pub result: Result<Outcome, ExecError>,
    pub emitted: Vec<Emitted>,
    /// Each statement or request that differs from the capture's, was not
    /// issued, or is not in it.
    pub divergences: Vec<String>,
}

impl Executor {
    /// Runs `event` against `recorded`'s answers, within the handler's
    /// timeout. Nothing is claimed, committed, sent or written.
    pub async fn replay(&self, event: &Event, recorded: Recorded) -> Replayed {
        let (result, left, tape) = self.replay_on(event, recorded.clone(), false).await;
        // A trap on a kept instance: again on a fresh one, as a live run
        // would (`Executor::execute`).
        let (result, left, tape) = match result {
            Err(ExecError::KeptTrapped(_)) => self.replay_on(event, recorded, true).await,
            result => (result, left, tape),
        };
        let (_, divergences) = tape.take();
        Replayed { result, emitted: left.emit, divergences }
    }

    /// One run of [`Executor::replay`], on a `fresh` instance or a kept one.
    async fn replay_on(
        &self,
        event: &Event,
        recorded: Recorded,
        fresh: bool,
    ) -> (Result<Outcome, ExecError>, crate::capabilities::Left, Arc<Tape>) {
        let tape: Arc<Tape> = Tape::replaying(recorded);
        let deadline = tokio::time::Instant::now() + self.handler.settings().timeout;
        let run = Run { fresh, ..Run::alone(1) };
        let (_, result, left) = self.invoke_on(Lent::Returned, deadline, event, run, Some(tape.clone())).await;
        (result, left, tape)
    }
}
