//! Why a pipeline stopped.

use sluice_core::PluginError;

/// A pipeline failed; the changefeed is failed with this error.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The source failed.
    #[error("source failed")]
    Source(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A filter failed in a way retrying does not fix (or retries ran out).
    #[error("filter `{name}` failed")]
    Filter {
        /// The filter's name.
        name: String,
        /// What it returned.
        #[source]
        error: PluginError,
    },
    /// The sink failed in a way retrying does not fix (or retries ran out).
    #[error("sink failed")]
    Sink(#[source] PluginError),
    /// The redo log could not be written.
    #[error("redo log failed: {0}")]
    Redo(String),
    /// Positions could not be saved, or a newer epoch fenced this one.
    #[error("progress could not be saved")]
    Persist(#[source] crate::persist::ProgressStoreError),
}
