//! `sluice-processor`: runs one changefeed's pipeline on a capture.
//!
//! A source task feeds decoded transactions through a bounded channel (the event
//! cache) to the pipeline, which batches them per table, runs the filter chain,
//! writes to the sink and computes the checkpoint from the sink's flush
//! acknowledgements: the checkpoint only ever passes a ts after `flush(ts)`
//! returned `Ok`. Batches written since the last checkpoint are kept so that a
//! failed sink can be replayed into a fresh instance (flagged as replay).

mod config;
mod error;
mod persist;
mod pipeline;
#[cfg(test)]
mod tests;

pub use config::PipelineConfig;
pub use error::PipelineError;
pub use persist::{ProgressStore, ProgressStoreError, StoreFuture};
pub use pipeline::{Pipeline, Progress, Report};
