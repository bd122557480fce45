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
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            max_batch_rows: 1024,
            max_batch_bytes: 4 << 20,
            flush_interval: Duration::from_secs(1),
            event_cache_count: 10_240,
            event_cache_bytes: 64 << 20,
            max_pending_bytes: 64 << 20,
            max_retries: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            checkpoint_interval: Duration::from_millis(500),
            fence_ahead: Duration::from_secs(2),
            replay_until: sluice_core::CommitTs::ZERO,
        }
    }
}
