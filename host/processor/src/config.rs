//! Pipeline tuning.

use std::time::Duration;

/// How the pipeline batches, flushes and retries.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Most rows in one batch.
    pub max_batch_rows: usize,
    /// Most wire bytes in one batch. The caller sets it below every plugin's own
    /// bound (`sluice run` uses half the smallest).
    pub max_batch_bytes: usize,
    /// How often the sink is asked to flush (and the checkpoint can move).
    pub flush_interval: Duration,
    /// Flush as soon as the source has nothing more ready, besides every
    /// `flush_interval` and after `max_pending_bytes`.
    pub flush_when_idle: bool,
    /// Source events (transactions, resolved marks, DDL) that may wait between the
    /// source task and the pipeline.
    pub event_cache_count: usize,
    /// Bytes of row data (wire size) that may wait there; one event larger than
    /// this waits alone. The source blocks when either bound is reached.
    pub event_cache_bytes: usize,
    /// Unacknowledged bytes kept for replay before a flush is forced.
    pub max_pending_bytes: usize,
    /// Retries of one failure before the pipeline gives up.
    pub max_retries: u32,
    /// First backoff; doubled per retry up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
    /// Most time between two checkpoint saves while the checkpoint moves.
    pub checkpoint_interval: Duration,
    /// How far (in upstream time) the saved fence runs ahead of the rows written.
    pub fence_ahead: Duration,
    /// Rows with commit ts <= this are flagged as replay: after a restart, the
    /// fence saved before the crash (they may have reached the sink already).
    pub replay_until: sluice_core::CommitTs,
    /// Release the plugins' instances after this long with nothing going
    /// through (`None`: never).
    pub release_idle: Option<Duration>,
}

impl Default for PipelineConfig {
    /// The defaults of `[pipeline]` (one set, in `sluice_config`), with the
    /// settings the file does not expose.
    fn default() -> Self {
        Self::from(&sluice_config::PipelineConfig::default())
    }
}

impl From<&sluice_config::PipelineConfig> for PipelineConfig {
    /// The pipeline a validated `[pipeline]` describes. The replay bound starts
    /// at zero; the caller sets it from the claimed task position.
    fn from(p: &sluice_config::PipelineConfig) -> Self {
        Self {
            max_batch_rows: p.max_batch_rows,
            max_batch_bytes: usize::try_from(p.max_batch_bytes.0).unwrap_or(usize::MAX),
            flush_interval: Duration::from_millis(p.flush_interval_ms),
            flush_when_idle: p.flush_when_idle,
            event_cache_count: p.event_cache_count,
            event_cache_bytes: usize::try_from(p.event_cache_bytes.0).unwrap_or(usize::MAX),
            max_pending_bytes: 64 << 20,
            max_retries: p.max_retries,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            checkpoint_interval: Duration::from_millis(p.checkpoint_interval_ms),
            fence_ahead: Duration::from_millis(p.fence_ahead_ms),
            replay_until: sluice_core::CommitTs::ZERO,
            release_idle: (p.release_idle_ms > 0).then(|| Duration::from_millis(p.release_idle_ms)),
        }
    }
}

/// How a failed plugin call is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    /// Retries of one failure before the pipeline gives up.
    pub(crate) max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Retry {
    /// The wait before retry number `attempt` (from 1): doubled per retry up
    /// to the longest backoff.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

impl From<&PipelineConfig> for Retry {
    fn from(c: &PipelineConfig) -> Self {
        Self {
            max_retries: c.max_retries,
            initial_backoff: c.initial_backoff,
            max_backoff: c.max_backoff,
        }
    }
}
