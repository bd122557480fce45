//! Errors shared across the host, grouped by what the caller does next.

/// What a plugin call ended with, when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// The plugin rejected its configuration: fail at once, do not retry.
    #[error("plugin rejected its config: {0}")]
    Config(String),
    /// A transient failure reported by the plugin: back off and retry.
    #[error("plugin reported a retryable error: {0}")]
    Retryable(String),
    /// The plugin says retrying will not help: fail the changefeed.
    #[error("plugin reported a fatal error: {0}")]
    Fatal(String),
    /// The instance trapped, ran out of memory or time, or misbehaved; it was dropped
    /// and the next call gets a fresh instance. Retryable.
    #[error("plugin instance was stopped: {0}")]
    Stopped(String),
    /// The host refused the call before the plugin saw it (for example a batch over
    /// the plugin's bound). Not the plugin's fault; the caller must change the call.
    #[error("call refused by the host: {0}")]
    Refused(String),
}

impl PluginError {
    /// Whether backing off and retrying from the checkpoint may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, PluginError::Retryable(_) | PluginError::Stopped(_))
    }
}

/// A batch is not consistent with itself or its schema (a filter returned garbage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed batch for table {table_id}: {reason}")]
pub struct BatchError {
    pub table_id: u32,
    pub reason: String,
}
