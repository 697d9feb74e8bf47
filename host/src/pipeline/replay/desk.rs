//! A running host's dead-letter desk for one handler: the console reads its
//! DLQ a page at a time and replays records through the pipeline's own
//! executor, validator and DLQ, by [`super::replay_each`] as `idem dlq replay` does.

use std::sync::Arc;

use super::{Page, PageQuery, ReplayOptions, ReplayReport, Target, Window, page, read};
use crate::config::Config;
use crate::pipeline::HandlerContext;
use crate::pipeline::dlq::seal::Keys;

/// What the console replays.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These records, by their position in the DLQ topic (partition, offset).
    Records(Vec<(i32, i64)>),
    /// Those inside a window (time, class, at most `limit`), as `idem dlq
    /// replay --since --until --limit` reads them.
    Window(Window),
}

/// Records one console replay runs at most (they are held in memory while
/// it runs: up to the topic's largest message each).
pub const MAX_SELECTED: usize = 200;

/// One handler's DLQ, as a running host's console reaches it.
#[derive(Clone)]
pub struct Desk {
    config: Arc<Config>,
    handler: Arc<HandlerContext>,
}

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk").field("handler", &self.handler.name).finish_non_exhaustive()
    }
}

impl Desk {
    pub(crate) fn new(config: Arc<Config>, handler: Arc<HandlerContext>) -> Self {
        Self { config, handler }
    }

    /// The topic the handler consumes.
    pub(crate) fn topic(&self) -> &str {
        &self.handler.config.topic
    }

    pub fn handler(&self) -> &str {
        &self.handler.name
    }

    /// The host's config and the handler's pipeline, for the other levers
    /// an operator pulls on it (`rewinds`).
    pub(crate) fn parts(&self) -> (Arc<Config>, Arc<HandlerContext>) {
        (self.config.clone(), self.handler.clone())
    }

    fn keys(&self) -> anyhow::Result<Keys> {
        match &self.handler.dead_letters {
            Some(d) => Ok(d.keys().clone()),
            None => Keys::load(&self.config.dlq),
        }
    }

    /// One page of the DLQ, read on a blocking thread that holds `permit`
    /// until it is done (whether or not anyone still waits for it).
    pub async fn page(&self, query: PageQuery, permit: impl Send + 'static) -> anyhow::Result<Page> {
        if self.handler.dead_letters.is_none() {
            let note =
                "on_failure = \"block\": this handler has no dead-letter topic; a failed record stops its partition";
            return Ok(Page::empty(self.handler.config.dlq_topic(), note.into()));
        }
        let (config, handler, keys) = (self.config.clone(), self.handler.config.clone(), self.keys()?);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            page::read_page(&config, &handler, &keys, &query)
        })
        .await?
    }

    /// Replays (or, dry, judges) `selection`, with the checks and counts of
    /// `idem dlq replay`. Callers run it in a task of its own, holding their
    /// permit, so that a client going away does not cut a replay short.
    pub async fn replay(&self, selection: Selection, options: ReplayOptions) -> anyhow::Result<ReplayReport> {
        let (config, handler, keys) = (self.config.clone(), self.handler.config.clone(), self.keys()?);
        let sealed = keys.clone();
        let records = tokio::task::spawn_blocking(move || match selection {
            Selection::Records(positions) => read::read_at(&config, &handler, &positions),
            Selection::Window(window) => {
                let limit = window.limit.unwrap_or(MAX_SELECTED).clamp(1, MAX_SELECTED);
                // Only sealed records count toward the limit: records anyone
                // could write to the topic must not crowd out idem's.
                read::read_sealed(&config, &handler, &Window { limit: Some(limit), ..window }, Some(&sealed))
            }
        })
        .await??;
        let shared = &self.handler;
        let target = Target {
            config: &shared.config,
            slot: &shared.slot,
            validator: &shared.validator,
            dead_letters: shared.dead_letters.as_ref(),
        };
        super::replay_each(target, &keys, &shared.idem_pool, &records, options).await
    }
}
