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

/// Longest message a plugin may hand the host (an error, a log line), in bytes
/// after escaping, give or take one escaped character.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// `message` as the host may store, show or log it: control characters
/// (newlines included) escaped, so that it cannot forge a log line, and cut after
/// about `max_bytes` on a character boundary, with the original length noted.
pub fn bounded_text(message: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(message.len().min(max_bytes) + 48);
    let mut taken = message.len();
    for (at, c) in message.char_indices() {
        if out.len() >= max_bytes {
            taken = at;
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if taken < message.len() {
        out.push_str(&format!(" ... (cut; {} bytes in all)", message.len()));
    }
    out
}

/// A batch is not consistent with itself or its schema (a filter returned garbage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed batch for table {table_id}: {reason}")]
pub struct BatchError {
    /// The table whose batch is malformed.
    pub table_id: u32,
    /// What is wrong with it.
    pub reason: String,
}
