//! `sluice-config`: the changefeed config. One schema ([`ChangefeedFile`]) serves
//! `sluice run` and the server; it is parsed once and validated in a [`Mode`]
//! into a typed value, [`ChangefeedConfig`] (what the owner stores, versioned,
//! in the meta store) or, for `sluice run`, a [`RunConfig`] around one. Every
//! default is here, once, and every number is checked against its range
//! ([`bounds`]) when the config is validated, with an error naming the key.
//!
//! The crate is pure: serde types, defaults and checks, no I/O and no runtime.
//! Turning a config into running parts happens elsewhere: `sluice_source::build`
//! builds the source, `sluice_capture` the plugins' runtime settings, and
//! `sluice_processor` its pipeline settings.

pub mod bounds;
mod bytes;
mod changefeed;
mod consistent;
mod error;
pub mod filter;
mod limits;
mod mysql;
mod name;
mod pipeline;
mod plugin;
pub mod source;
mod storage_uri;
mod validator;

#[cfg(test)]
mod tests;

pub use bytes::ByteSize;
pub use changefeed::{
    ChangefeedConfig, ChangefeedFile, ChangefeedSection, DEFAULT_DATA_DIR, DEFAULT_PLUGIN_DIR,
    Mode, RunConfig,
};
pub use consistent::{ConsistentConfig, ConsistentLevel, RedoCompression, RedoRetention};
pub use error::ConfigError;
pub use filter::{EventFilterRule, FilterConfig};
pub use limits::ServerLimits;
pub use name::{IdError, MAX_NAME_LEN, NameKind, PluginId, validate_name};
pub use pipeline::PipelineConfig;
pub use plugin::{Capabilities, DEFAULT_MEMORY, DataDir, GrantedHost, Limits, PluginConfig};
pub use source::{
    DatagenConfig, Mix, MysqlConfig, SourceConfig, StartPosition, redact_secrets, redact_url,
};
pub use storage_uri::{S3Location, StorageUri};
pub use validator::{ValidatorConfig, ValidatorMode};
