//! `sluice-processor`: runs one changefeed's pipeline on a capture.
//!
//! The stages: a source task feeds transactions (column-oriented, per table)
//! through the event cache, bounded by count and bytes (the reader blocks, never
//! drops); each event passes the stage seam where the redo log will sit
//! ([`EventStage`], [`PassThrough`] today); per-table dispatchers append rows to
//! their table's batch, run the filter chain on full batches and write them to
//! the one sink instance. The checkpoint only ever passes a ts after `flush(ts)`
//! returned `Ok`, and is the minimum over the tables of what each has written.
//! A DDL is a barrier for every table: rows above it wait until it is applied
//! (a row of another table may need it). Batches written since the
//! last flush are kept so that a failed sink can be replayed into a fresh
//! instance (flagged as replay).

mod cache;
mod config;
mod dispatcher;
mod error;
mod persist;
mod pipeline;
mod shadow;
mod stage;
mod swap;
#[cfg(test)]
mod tests;

pub use config::PipelineConfig;
pub use error::PipelineError;
pub use persist::{ProgressStore, ProgressStoreError, StoreFuture};
pub use pipeline::{AckListener, Pipeline, Progress, Report};
pub use shadow::{
    CallLatency, Difference, MAX_DIFFERENCES, MAX_FAILURES_IN_A_ROW, ShadowCandidate,
    ShadowCommand, ShadowLimits, ShadowSnapshot, ShadowStatus,
};
pub use stage::{EventStage, PassThrough, StageError};
pub use swap::{FilterSwapRequest, Probation, SwapRefused, SwapRequest, Swapped, Verdict};
