//! `sluice-processor`: runs one changefeed's pipeline on a capture.
//!
//! The parts, each in its module:
//! - `cache`: a source task feeds transactions (column-oriented, per table)
//!   through the event cache, bounded by count and bytes (the reader blocks,
//!   never drops).
//! - `pipeline`: the loop that takes the cache's items in source order and
//!   routes each table's rows to its dispatcher; it decides the flush points
//!   (the source has nothing more ready, the flush interval, the bytes written
//!   since the last flush) and computes the checkpoint.
//! - `dispatcher`: one per table; appends the table's rows to the batch it
//!   builds, writes full batches to its output, holds rows behind a barrier
//!   and tells the ts up to which it has written everything.
//! - `barrier`: why rows wait. A DDL is a barrier for every table: rows above
//!   it wait until it is applied (a row of another table may need it).
//! - `writer`: the sink writer: the filter chain, the sink, the replay buffer
//!   of every batch written since the last acknowledged flush (a failed sink
//!   is replayed into a fresh instance, flagged as replay) and the saved
//!   positions. The checkpoint only ever passes a ts after `flush(ts)`
//!   returned `Ok`, and is the minimum over the tables of what each has
//!   written.
//! - `redo`: with consistent replication, the fence: every event goes to the
//!   redo writer task first and waits until the log's durable resolved ts
//!   has passed it before it is dispatched.
//! - `live`, `shadow`, `probation`: the live sink and filters, with what may
//!   wrap them: a candidate in shadow, a trial after a swap (`swap`).

mod barrier;
mod cache;
mod config;
mod dispatcher;
mod elsewhere;
mod error;
mod live;
mod persist;
mod pipeline;
mod probation;
mod redo;
mod shadow;
mod swap;
#[cfg(test)]
mod tests;
mod writer;

pub use config::PipelineConfig;
pub use elsewhere::{Elsewhere, LogEverything, TablesHere};
pub use error::PipelineError;
pub use persist::{ProgressStore, ProgressStoreError, StoreFuture};
pub use pipeline::{AckListener, Pipeline, Progress, Report};
pub use redo::{RedoConfig, RedoLog, RedoStatus};
pub use shadow::{
    CallLatency, Difference, MAX_DIFFERENCES, MAX_FAILURES_IN_A_ROW, ShadowCandidate,
    ShadowCommand, ShadowLimits, ShadowSnapshot, ShadowStatus,
};
pub use swap::{FilterSwapRequest, Probation, SwapRefused, SwapRequest, Swapped, Verdict};
