//! What is wrong with a changefeed config.

/// A changefeed config that cannot be used. Either way the caller refuses it:
/// nothing is stored or started. The message names the key and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not TOML, or a key or value does not fit the schema (an
    /// unknown key, a wrong type); the message gives the line and column.
    #[error("{0}")]
    Syntax(String),
    /// A value is out of its range, or not allowed where it is (`sluice run` or
    /// the server); the message names the key.
    #[error("{0}")]
    Invalid(String),
}

/// `Err(ConfigError::Invalid(..))` from a format string.
macro_rules! invalid {
    ($($arg:tt)*) => {
        Err($crate::error::ConfigError::Invalid(format!($($arg)*)))
    };
}
pub(crate) use invalid;
