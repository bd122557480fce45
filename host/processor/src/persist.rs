//! Where a pipeline records its positions durably (the meta store, in a server).

use std::future::Future;
use std::pin::Pin;

use sluice_core::{Checkpoint, CommitTs, ResolvedTs};

/// A boxed future, so that stores can be trait objects.
pub type StoreFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(), ProgressStoreError>> + Send + 'a>>;

/// Saving a position failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgressStoreError {
    /// A newer epoch of this changefeed runs elsewhere: stop without writing more.
    #[error("fenced: {0}")]
    Fenced(String),
    /// The store could not be reached or written; the pipeline fails (and is
    /// restarted from the last saved checkpoint by its owner).
    #[error("saving progress failed: {0}")]
    Unavailable(String),
}

/// Durable positions of one changefeed.
///
/// The pipeline calls [`ProgressStore::save_fence`] before it hands the sink any
/// row above the last saved fence, and [`ProgressStore::save_checkpoint`] after
/// acknowledged flushes (at most once per `checkpoint_interval`, and at the end).
/// After a restart, rows at or below the saved fence may have reached the sink
/// already: the pipeline flags them as replay (see `PipelineConfig::replay_until`).
pub trait ProgressStore: Send {
    /// Record durably that rows with commit ts <= `fence` may reach the sink.
    fn save_fence(&mut self, fence: CommitTs) -> StoreFuture<'_>;
    /// Record durably that every row with commit ts <= `checkpoint.ts` is
    /// downstream, with the source position of the last transaction at or below
    /// it (when the source gives positions): a restart resumes from both.
    fn save_checkpoint(&mut self, checkpoint: &Checkpoint, resolved: ResolvedTs)
    -> StoreFuture<'_>;
}
