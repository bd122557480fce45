//! The seam between the event cache and the dispatchers, where the redo log will
//! sit.
//!
//! Every event the cache hands out passes [`EventStage::admit`], in source order,
//! before any dispatcher sees it. Today the only stage is [`PassThrough`]. The redo
//! writer (consistent replication, DESIGN.md §6) will be a stage that appends each
//! event to the redo log in `admit` and reports, through
//! [`EventStage::released_through`], the resolved ts its log has made durable: the
//! pipeline then holds back from the sink every row above it, which is the
//! invariant "the sink only receives events with commit ts <= the persisted redo
//! resolved ts". Nothing else in the pipeline needs to change for it.

use sluice_core::{CommitTs, SourceEvent, TransactionRun};

/// A stage could not take an event; the changefeed fails with it (and is restarted
/// from its checkpoint by the owner).
#[derive(Debug, thiserror::Error)]
#[error("{stage} stage failed: {message}")]
pub struct StageError {
    /// Which stage.
    pub stage: &'static str,
    /// What went wrong.
    pub message: String,
}

/// A stage between the event cache and the dispatchers.
pub trait EventStage: Send {
    /// Take `event` (in source order) before the dispatchers see it.
    fn admit(&mut self, event: &SourceEvent) -> Result<(), StageError>;

    /// Take consecutive transactions gathered into a run (in source order, like
    /// `admit`), before the dispatchers see them.
    fn admit_run(&mut self, run: &TransactionRun) -> Result<(), StageError>;

    /// Rows with commit ts <= this may reach the sink.
    fn released_through(&self) -> CommitTs;
}

/// No redo log: every event goes straight on.
#[derive(Debug, Default, Clone, Copy)]
pub struct PassThrough;

impl EventStage for PassThrough {
    fn admit(&mut self, _event: &SourceEvent) -> Result<(), StageError> {
        Ok(())
    }

    fn admit_run(&mut self, _run: &TransactionRun) -> Result<(), StageError> {
        Ok(())
    }

    fn released_through(&self) -> CommitTs {
        CommitTs::new(u64::MAX)
    }
}
