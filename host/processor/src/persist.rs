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

/// The most the fence lead is multiplied by while catching up.
const MAX_FENCE_LEAD: u64 = 1024;

/// Saves a run's positions in its [`ProgressStore`], if it has one: the
/// fence before rows reach the sink, the checkpoint after flushes.
pub(crate) struct Saver {
    store: Option<Box<dyn ProgressStore>>,
    /// Rows above this may not reach the sink until a higher fence is saved.
    fence: CommitTs,
    /// The fence runs `fence_ahead` times this ahead (see `raise_fence`).
    fence_lead: u64,
    fence_ahead: std::time::Duration,
    last_fence_save: Option<std::time::Instant>,
    checkpoint_interval: std::time::Duration,
    last_saved: Option<(sluice_core::CheckpointTs, std::time::Instant)>,
    /// The checkpoint the run started from.
    start: sluice_core::CheckpointTs,
}

impl Saver {
    /// Positions of a run from `start`; `fence` is the highest fence saved
    /// before (never save a lower one).
    pub(crate) fn new(
        config: &crate::PipelineConfig,
        start: sluice_core::CheckpointTs,
        fence: CommitTs,
    ) -> Self {
        Self {
            store: None,
            fence,
            fence_lead: 1,
            fence_ahead: config.fence_ahead,
            last_fence_save: None,
            checkpoint_interval: config.checkpoint_interval,
            last_saved: None,
            start,
        }
    }

    pub(crate) fn set_store(&mut self, store: Box<dyn ProgressStore>) {
        self.store = Some(store);
    }

    /// Save the fence ahead of `ts` before any row at `ts` reaches the sink; the
    /// fence runs `fence_ahead` of upstream time ahead so that saves are rare.
    pub(crate) async fn raise_fence(&mut self, ts: CommitTs) -> Result<(), ProgressStoreError> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        if ts <= self.fence {
            return Ok(());
        }
        // While catching up, upstream time passes much faster than wall time and a
        // fixed lead would mean a save every few batches: the lead doubles while
        // saves come less than a checkpoint interval apart, and shrinks back
        // when they are rarer. A longer lead only flags more rows replay after a
        // crash; it never loses one.
        let interval = self.checkpoint_interval;
        match self.last_fence_save {
            Some(at) if at.elapsed() < interval => {
                self.fence_lead = (self.fence_lead * 2).min(MAX_FENCE_LEAD);
            }
            Some(at) if at.elapsed() > interval * 4 => {
                self.fence_lead = (self.fence_lead / 2).max(1);
            }
            _ => {}
        }
        let ahead = (self.fence_ahead.as_millis() as u64).saturating_mul(self.fence_lead);
        // The physical part of a ts has 46 bits.
        let physical = ts
            .physical_millis()
            .saturating_add(ahead)
            .min((1 << 46) - 1);
        let fence = CommitTs::compose(physical, 0).max(ts);
        store.save_fence(fence).await?;
        self.fence = fence;
        self.last_fence_save = Some(std::time::Instant::now());
        Ok(())
    }

    /// A checkpoint save is due (the last one is a checkpoint interval old).
    pub(crate) fn due(&self) -> bool {
        self.last_saved
            .is_none_or(|(_, at)| at.elapsed() >= self.checkpoint_interval)
    }

    /// Saves `checkpoint` unless it is saved already; whether it was.
    pub(crate) async fn save_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        resolved: ResolvedTs,
    ) -> Result<bool, ProgressStoreError> {
        if self
            .last_saved
            .is_some_and(|(saved, _)| saved == checkpoint.ts)
        {
            return Ok(false);
        }
        let Some(store) = self.store.as_mut() else {
            return Ok(false);
        };
        store.save_checkpoint(checkpoint, resolved).await?;
        self.last_saved = Some((checkpoint.ts, std::time::Instant::now()));
        Ok(true)
    }

    /// The checkpoint last saved durably (where a restart would resume).
    pub(crate) fn saved_checkpoint(&self) -> sluice_core::CheckpointTs {
        self.last_saved.map_or(self.start, |(ts, _)| ts)
    }
}
