//! `[pipeline]`: batching, flushing, the event cache, retries and checkpoint
//! saves. The defaults here are the only ones: the processor's own default is
//! built from them.

use serde::{Deserialize, Serialize};

use crate::bounds::*;
use crate::bytes::ByteSize;
use crate::error::{ConfigError, invalid};

/// `[pipeline]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PipelineConfig {
    /// Most rows per batch.
    #[serde(default = "default_batch_rows")]
    pub max_batch_rows: usize,
    /// Most bytes per batch, e.g. `"4MiB"`.
    #[serde(default = "default_batch_bytes")]
    pub max_batch_bytes: ByteSize,
    /// How often the sink is flushed and the checkpoint moves, in milliseconds.
    #[serde(default = "default_flush_ms")]
    pub flush_interval_ms: u64,
    /// Flush as soon as the source has nothing more ready (else only by
    /// interval and bytes): the lag then follows the downstream's speed.
    #[serde(default = "default_true")]
    pub flush_when_idle: bool,
    /// Decoded transactions that may wait between source and pipeline.
    #[serde(default = "default_cache")]
    pub event_cache_count: usize,
    /// Bytes of row data that may wait there, e.g. `"64MiB"` (an event larger
    /// than this waits alone); the source blocks when either bound is reached.
    #[serde(default = "default_cache_bytes")]
    pub event_cache_bytes: ByteSize,
    /// Retries of one failing plugin call before the changefeed fails.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// How often the checkpoint is saved (with `resume` or in a server), at most,
    /// in milliseconds.
    #[serde(default = "default_checkpoint_ms")]
    pub checkpoint_interval_ms: u64,
    /// How far ahead of the rows written the saved fence runs, in milliseconds of
    /// upstream time: larger means fewer saves and more rows flagged replay after a
    /// crash.
    #[serde(default = "default_fence_ms")]
    pub fence_ahead_ms: u64,
    /// How long the plugins' instances stay alive with nothing going
    /// through (everything written flushed and acknowledged) before they are
    /// released, in milliseconds; the next rows start a new instance from the
    /// precompiled plugin. 0 keeps them for the changefeed's life.
    #[serde(default = "default_release_idle_ms")]
    pub release_idle_ms: u64,
}

fn default_batch_rows() -> usize {
    1024
}
fn default_batch_bytes() -> ByteSize {
    ByteSize(4 << 20)
}
fn default_flush_ms() -> u64 {
    1000
}
fn default_true() -> bool {
    true
}
fn default_cache() -> usize {
    10_240
}
fn default_cache_bytes() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_retries() -> u32 {
    8
}
fn default_checkpoint_ms() -> u64 {
    500
}
fn default_fence_ms() -> u64 {
    2_000
}
fn default_release_idle_ms() -> u64 {
    60_000
}

/// Shortest idle time before instances are released (a shorter one would
/// only trade memory for instantiations).
const MIN_RELEASE_IDLE_MS: u64 = 1_000;
/// Longest: a day.
const MAX_RELEASE_IDLE_MS: u64 = 86_400_000;

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            max_batch_rows: default_batch_rows(),
            max_batch_bytes: default_batch_bytes(),
            flush_interval_ms: default_flush_ms(),
            flush_when_idle: true,
            event_cache_count: default_cache(),
            event_cache_bytes: default_cache_bytes(),
            max_retries: default_retries(),
            checkpoint_interval_ms: default_checkpoint_ms(),
            fence_ahead_ms: default_fence_ms(),
            release_idle_ms: default_release_idle_ms(),
        }
    }
}

impl PipelineConfig {
    /// Every number against its range; errors name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_BATCH_ROWS).contains(&self.max_batch_rows) {
            return invalid!(
                "pipeline.max-batch-rows is {}; it must be between 1 and {MAX_BATCH_ROWS}",
                self.max_batch_rows
            );
        }
        if !(MIN_BATCH_BYTES..=MAX_BATCH_BYTES).contains(&self.max_batch_bytes.0) {
            return invalid!(
                "pipeline.max-batch-bytes is {} bytes; it must be between 1KiB and 256MiB",
                self.max_batch_bytes.0
            );
        }
        if !(1..=MAX_EVENT_CACHE).contains(&self.event_cache_count) {
            return invalid!(
                "pipeline.event-cache-count is {}; it must be between 1 and {MAX_EVENT_CACHE}",
                self.event_cache_count
            );
        }
        if !(MIN_EVENT_CACHE_BYTES..=MAX_EVENT_CACHE_BYTES).contains(&self.event_cache_bytes.0) {
            return invalid!(
                "pipeline.event-cache-bytes is {} bytes; it must be between 1MiB and 1GiB",
                self.event_cache_bytes.0
            );
        }
        if self.max_retries > MAX_RETRIES {
            return invalid!(
                "pipeline.max-retries is {}; at most {MAX_RETRIES}",
                self.max_retries
            );
        }
        if self.flush_interval_ms == 0 {
            return invalid!("pipeline.flush-interval-ms must be at least 1");
        }
        if self.release_idle_ms != 0
            && !(MIN_RELEASE_IDLE_MS..=MAX_RELEASE_IDLE_MS).contains(&self.release_idle_ms)
        {
            return invalid!(
                "pipeline.release-idle-ms is {}; it must be 0 (never) or between {MIN_RELEASE_IDLE_MS} and {MAX_RELEASE_IDLE_MS} (a day)",
                self.release_idle_ms
            );
        }
        for (key, value) in [
            ("flush-interval-ms", self.flush_interval_ms),
            ("checkpoint-interval-ms", self.checkpoint_interval_ms),
            ("fence-ahead-ms", self.fence_ahead_ms),
        ] {
            if value > MAX_INTERVAL_MS {
                return invalid!("pipeline.{key} is {value}; at most {MAX_INTERVAL_MS} (one hour)");
            }
        }
        Ok(())
    }
}
