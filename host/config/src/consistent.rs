//! `[consistent]`: consistent replication (TiCDC's keys). With `level =
//! "eventual"` the changefeed writes every event to a redo log in `storage`,
//! durably, before any sink sees it; after the loss of the site, `sluice redo
//! apply` brings a fresh downstream to the upstream's state at the log's
//! resolved ts.

use serde::{Deserialize, Serialize};

use crate::bytes::ByteSize;
use crate::changefeed::Mode;
use crate::error::{ConfigError, invalid};

/// `consistent.level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConsistentLevel {
    /// No redo log (the default): nothing is paid for it.
    #[default]
    None,
    /// Every event in the redo log before a sink sees it.
    Eventual,
}

/// `consistent.compression`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RedoCompression {
    /// Records as encoded (the default).
    #[default]
    None,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

/// `consistent.retention`: which files of the log are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RedoRetention {
    /// Files wholly at or below the checkpoint are removed (the default):
    /// the log rebuilds a downstream that kept what it had acknowledged.
    #[default]
    Checkpoint,
    /// Every file is kept: the log alone rebuilds a fresh downstream from the
    /// changefeed's start. It grows without bound.
    All,
}

/// `[consistent]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConsistentConfig {
    /// `none` (default) or `eventual`.
    #[serde(default)]
    pub level: ConsistentLevel,
    /// Where the redo log lives. `sluice run`: `file:///absolute/dir` or
    /// `s3://bucket/prefix?endpoint=...&region=...` (the changefeed's log in
    /// a folder named after it), needed with `level = "eventual"`. A server
    /// keeps a changefeed's log where its operator said (`--redo-storage`)
    /// — a tenant never names a place the server writes to: leave it out.
    #[serde(default)]
    pub storage: String,
    /// How often what was appended is written out and made durable, in
    /// milliseconds (sooner when `max-log-size` is reached): 50 to 600,000.
    /// The sink runs this far behind the source at most, plus the write.
    #[serde(default = "default_flush_ms")]
    pub flush_interval: u64,
    /// How often the meta (checkpoint and resolved ts) is written when only
    /// they moved, in milliseconds: 50 to 600,000.
    #[serde(default = "default_meta_flush_ms")]
    pub meta_flush_interval: u64,
    /// Largest log file: appended records are written out once this much is
    /// pending. 1 MiB to 1 GiB.
    #[serde(default = "default_log_size")]
    pub max_log_size: ByteSize,
    /// `none` (default), `lz4` or `zstd`.
    #[serde(default)]
    pub compression: RedoCompression,
    /// The share of the changefeed's event cache (`pipeline.event-cache-bytes`)
    /// that events waiting to be written to the log may take, in percent: 10
    /// to 90. The rest is the sink's: events the log has and the sink has not.
    #[serde(default = "default_memory_percent")]
    pub memory_percent: u8,
    /// `checkpoint` (default) or `all`.
    #[serde(default, skip_serializing_if = "is_default_retention")]
    pub retention: RedoRetention,
}

fn is_default_retention(r: &RedoRetention) -> bool {
    *r == RedoRetention::Checkpoint
}

fn default_flush_ms() -> u64 {
    2_000
}
fn default_meta_flush_ms() -> u64 {
    200
}
fn default_log_size() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_memory_percent() -> u8 {
    50
}

/// Redo intervals: 50 ms ..= 10 minutes.
pub const MIN_REDO_INTERVAL_MS: u64 = 50;
/// Longest redo interval.
pub const MAX_REDO_INTERVAL_MS: u64 = 600_000;
/// `max-log-size`: 1 MiB ..= 1 GiB.
pub const MIN_LOG_SIZE: u64 = 1 << 20;
/// Largest `max-log-size`.
pub const MAX_LOG_SIZE: u64 = 1 << 30;
/// Longest `storage`.
pub const MAX_STORAGE_CHARS: usize = 1024;

impl Default for ConsistentConfig {
    fn default() -> Self {
        Self {
            level: ConsistentLevel::None,
            storage: String::new(),
            flush_interval: default_flush_ms(),
            meta_flush_interval: default_meta_flush_ms(),
            max_log_size: default_log_size(),
            compression: RedoCompression::None,
            memory_percent: default_memory_percent(),
            retention: RedoRetention::Checkpoint,
        }
    }
}

impl ConsistentConfig {
    /// Whether it is the default (not written back out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the changefeed writes a redo log.
    pub fn enabled(&self) -> bool {
        self.level == ConsistentLevel::Eventual
    }

    /// Every number against its range and the storage's shape for `mode` (no
    /// I/O).
    pub fn validate(&self, mode: Mode) -> Result<(), ConfigError> {
        for (key, value) in [
            ("flush-interval", self.flush_interval),
            ("meta-flush-interval", self.meta_flush_interval),
        ] {
            if !(MIN_REDO_INTERVAL_MS..=MAX_REDO_INTERVAL_MS).contains(&value) {
                return invalid!(
                    "consistent.{key} is {value} ms; it must be between \
                     {MIN_REDO_INTERVAL_MS} and {MAX_REDO_INTERVAL_MS}"
                );
            }
        }
        if !(MIN_LOG_SIZE..=MAX_LOG_SIZE).contains(&self.max_log_size.0) {
            return invalid!(
                "consistent.max-log-size is {} bytes; it must be between 1MiB and 1GiB",
                self.max_log_size.0
            );
        }
        if !(10..=90).contains(&self.memory_percent) {
            return invalid!(
                "consistent.memory-percent is {}; it must be between 10 and 90",
                self.memory_percent
            );
        }
        if self.storage.chars().count() > MAX_STORAGE_CHARS
            || self.storage.chars().any(char::is_control)
        {
            return invalid!(
                "consistent.storage must be at most {MAX_STORAGE_CHARS} characters without \
                 control characters"
            );
        }
        if mode == Mode::Server {
            if !self.storage.is_empty() {
                return invalid!(
                    "remove consistent.storage: a server keeps a changefeed's redo log where \
                     its operator said (--redo-storage, by default its data dir)"
                );
            }
            return Ok(());
        }
        if !self.enabled() && self.storage.is_empty() {
            return Ok(());
        }
        if self.storage.is_empty() {
            return invalid!(
                "consistent.level = \"eventual\" needs consistent.storage, e.g. \
                 \"file:///var/lib/sluice/redo\""
            );
        }
        match crate::StorageUri::parse(&self.storage) {
            Err(e) => invalid!("consistent.storage: {e}"),
            Ok(crate::StorageUri::Local(path))
                if path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir) =>
            {
                invalid!(
                    "consistent.storage is {:?}; it may not contain `..`",
                    self.storage
                )
            }
            Ok(_) => Ok(()),
        }
    }
}
