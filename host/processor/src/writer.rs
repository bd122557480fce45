//! The sink writer: what the dispatchers' batches go through on their way
//! downstream. It runs the filter chain, writes to the sink, keeps every batch
//! written since the last acknowledged flush (the replay buffer), and retries
//! a failed call by replaying that buffer into a fresh instance. It saves the
//! fence before rows reach the sink and the checkpoint after flushes.
//!
//! The sink and the filters are live plugins ([`crate::live`]): a candidate in
//! shadow or a trial after a swap wraps them, and the writer only tells them of
//! failures and flushes.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::{
    Batch, Checkpoint, CheckpointTs, CommitTs, DdlEvent, Filter, PluginError, ResolvedTs, Sink,
    TableSchema,
};

use crate::config::Retry;
use crate::dispatcher::Output;
use crate::error::PipelineError;
use crate::live::{LiveFilter, LiveSink};
use crate::persist::{ProgressStore, Saver};
use crate::pipeline::AckListener;
use crate::probation::on_probation;
use crate::shadow::{ShadowCandidate, ShadowCommand};
use crate::swap::Probation;

/// A batch kept until the sink acknowledges it.
struct Pending {
    schemas: Vec<Arc<TableSchema>>,
    batch: Batch,
}

/// A sink call that is retried until it succeeds (see [`SinkWriter::call_sink`]).
#[derive(Clone, Copy)]
enum SinkCall<'a> {
    Flush(CommitTs),
    ApplyDdl(&'a DdlEvent),
}

/// What the writer counts.
#[derive(Debug, Default, Clone)]
pub(crate) struct WriteStats {
    /// Row changes handed to the sink (after filters).
    pub(crate) rows_written: u64,
    /// Bytes of row data (wire size) handed to the sink.
    pub(crate) bytes_written: u64,
    /// Times a plugin call failed and was retried.
    pub(crate) retries: u64,
    /// Rows handed to the sink per `schema.table`.
    pub(crate) rows_out: BTreeMap<String, u64>,
}

/// How the sink side of a swap went (see [`SinkWriter::swap_sink`]).
pub(crate) enum SinkSwap<K> {
    /// The new sink did not open: the old one runs on.
    Refused { new: K, error: PluginError },
    /// The new sink is live; `replayed` batches were written to it again (the
    /// old sink's final flush failed), and want a flush.
    Swapped { old: K, replayed: Option<usize> },
}

/// Filters, sink, replay buffer and saved positions of one changefeed.
pub(crate) struct SinkWriter<K, F> {
    retry: Retry,
    sink: LiveSink<K>,
    filters: Vec<LiveFilter<F>>,
    /// Batches written but not acknowledged yet, for replay.
    unacked: Vec<Pending>,
    unacked_bytes: usize,
    /// Written since the last successful flush.
    wrote_since_flush: bool,
    /// When a row, a flush or a DDL last went through (for releasing idle
    /// instances).
    last_active: tokio::time::Instant,
    /// The plugins' instances were released and nothing went through since.
    released: bool,
    /// The ts of the last successful flush.
    flushed: CommitTs,
    /// Told of batches once acknowledged.
    ack_listener: Option<Box<dyn AckListener>>,
    saver: Saver,
    /// The changefeed's checkpoint, as last computed (for logs and verdicts).
    pub(crate) checkpoint: CheckpointTs,
    pub(crate) stats: WriteStats,
}

impl<K: Sink + 'static, F: Filter + 'static> SinkWriter<K, F> {
    pub(crate) fn new(
        retry: Retry,
        filters: Vec<F>,
        sink: K,
        saver: Saver,
        from: CommitTs,
        checkpoint: CheckpointTs,
    ) -> Self {
        Self {
            retry,
            sink: LiveSink::new(sink),
            filters: filters.into_iter().map(LiveFilter::new).collect(),
            unacked: Vec::new(),
            unacked_bytes: 0,
            wrote_since_flush: false,
            last_active: tokio::time::Instant::now(),
            released: false,
            flushed: from,
            ack_listener: None,
            saver,
            checkpoint,
            stats: WriteStats::default(),
        }
    }

    pub(crate) fn sink(&self) -> &K {
        self.sink.get()
    }

    pub(crate) fn filters(&self) -> impl Iterator<Item = &F> {
        self.filters.iter().map(LiveFilter::get)
    }

    pub(crate) fn set_ack_listener(&mut self, listener: Box<dyn AckListener>) {
        self.ack_listener = Some(listener);
    }

    pub(crate) fn take_ack_listener(&mut self) -> Option<Box<dyn AckListener>> {
        self.ack_listener.take()
    }

    pub(crate) fn set_store(&mut self, store: Box<dyn ProgressStore>) {
        self.saver.set_store(store);
    }

    /// The ts of the last acknowledged flush.
    pub(crate) fn flushed(&self) -> CommitTs {
        self.flushed
    }

    /// Bytes written since the last acknowledged flush.
    pub(crate) fn unacked_bytes(&self) -> usize {
        self.unacked_bytes
    }

    /// Run the sink on trial from the start (see [`crate::Pipeline::with_probation`]).
    pub(crate) fn sink_trial(&mut self, fallback: K, probation: Probation<K>) {
        self.sink.start_trial(fallback, probation);
    }

    /// Run filter `index` on trial from the start.
    pub(crate) fn filter_trial(&mut self, index: usize, fallback: F, probation: Probation<F>) {
        if let Some(f) = self.filters.get_mut(index) {
            f.start_trial(fallback, probation);
        }
    }

    /// Opens the filters and the sink, before the first write.
    pub(crate) async fn open(&mut self, start: CheckpointTs) -> Result<(), PipelineError> {
        self.sink.checkpoint_saved(start);
        for f in &mut self.filters {
            f.open().await?;
        }
        let result = self.sink.open().await;
        self.retry_sink(result).await
    }

    /// Ask the sink to make everything written durable, up to `target` (where
    /// reading has got to); on success the replay buffer is released.
    pub(crate) async fn flush(&mut self, target: CommitTs) -> Result<(), PipelineError> {
        if target <= self.flushed && !self.wrote_since_flush {
            return Ok(());
        }
        if self.released && !self.wrote_since_flush {
            // Released while idle, and still nothing written: there is
            // nothing to make durable, so the plugin is not started for it.
            self.flushed = target;
            self.sink.flushed(target);
            return Ok(());
        }
        self.call_sink(SinkCall::Flush(target)).await?;
        self.sink.flushed(target);
        for f in &mut self.filters {
            f.flushed();
        }
        self.flushed = target;
        self.wrote_since_flush = false;
        self.active();
        match &mut self.ack_listener {
            Some(listener) => {
                for p in std::mem::take(&mut self.unacked) {
                    listener.acked(&p.schemas, p.batch);
                }
            }
            None => self.unacked.clear(),
        }
        self.unacked_bytes = 0;
        Ok(())
    }

    /// Apply `ddl` (every row below it is written and flushed).
    pub(crate) async fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), PipelineError> {
        self.saver
            .raise_fence(ddl.commit_ts)
            .await
            .map_err(PipelineError::Persist)?;
        self.active();
        self.call_sink(SinkCall::ApplyDdl(ddl)).await
    }

    fn active(&mut self) {
        self.last_active = tokio::time::Instant::now();
        self.released = false;
    }

    /// Releases the sink's and filters' instances once nothing has gone
    /// through for `after`: everything written is flushed and acknowledged
    /// (nothing to replay), and nothing is on trial. Each comes back at the
    /// next row, from its precompiled plugin. Whether they were released now.
    pub(crate) async fn release_idle(&mut self, after: std::time::Duration) -> bool {
        if self.released
            || self.wrote_since_flush
            || !self.unacked.is_empty()
            || self.on_trial()
            || self.last_active.elapsed() < after
        {
            return false;
        }
        self.sink.release_idle().await;
        for f in &mut self.filters {
            f.release_idle().await;
        }
        self.released = true;
        tracing::debug!(sink = self.sink.name(), idle = ?after, "Idle plugin instances released.");
        true
    }

    /// A checkpoint save is due.
    pub(crate) fn save_due(&self) -> bool {
        self.saver.due()
    }

    /// Saves `checkpoint` (unless saved already) and tells the sink.
    pub(crate) async fn save_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        resolved: ResolvedTs,
    ) -> Result<(), PipelineError> {
        if self
            .saver
            .save_checkpoint(checkpoint, resolved)
            .await
            .map_err(PipelineError::Persist)?
        {
            self.sink.checkpoint_saved(checkpoint.ts);
        }
        Ok(())
    }

    /// Ends trials whose time and flushes have both passed.
    pub(crate) fn judge_trials(&mut self) {
        self.sink.judge();
        for f in &mut self.filters {
            f.judge();
        }
    }

    /// Something swapped in earlier is still on trial.
    fn on_trial(&self) -> bool {
        self.sink.on_trial() || self.filters.iter().any(LiveFilter::on_trial)
    }

    /// Closes the sink after the final flush (a candidate in shadow stops
    /// first).
    pub(crate) async fn close(&mut self) {
        for f in &mut self.filters {
            f.stop_shadow();
        }
        if let Err(e) = self.sink.close().await {
            tracing::warn!(sink = self.sink.name(), error = %e, "Sink close failed after the final flush.");
        }
    }

    /// Why a sink swap cannot start now, if it cannot.
    pub(crate) fn refuse_sink_swap(&self) -> Option<PluginError> {
        self.on_trial().then(on_probation)
    }

    /// The sink side of a swap, once every batch was written and the old sink
    /// was asked to flush (`flushed`): the new sink takes over; if it does
    /// not open, the old one opens again and runs on. If the old sink's flush
    /// failed, the new one gets the unacknowledged batches, flagged replay.
    pub(crate) async fn swap_sink(
        &mut self,
        new: K,
        flushed: Result<(), PipelineError>,
    ) -> Result<SinkSwap<K>, PipelineError> {
        self.active();
        let mut old = self.sink.replace(new);
        let saved = self.saver.saved_checkpoint();
        self.sink.checkpoint_saved(saved);
        if let Err(e) = old.close().await {
            tracing::warn!(sink = old.name(), error = %e, "The old sink failed to close after the swap barrier.");
        }
        let replayed = match flushed {
            Ok(()) => {
                if let Err(error) = self.sink.open().await {
                    // Refused: the old sink opens again and runs on.
                    let new = self.sink.replace(old);
                    let result = self.sink.open().await;
                    self.retry_sink(result).await?;
                    return Ok(SinkSwap::Refused { new, error });
                }
                None
            }
            Err(PipelineError::Sink(error)) => {
                tracing::warn!(%error, "The old sink's final flush failed; the new sink gets its rows again, flagged replay.");
                let replayed = self.unacked.len();
                let result = self.replay().await;
                self.retry_sink(result).await?;
                Some(replayed)
            }
            Err(other) => return Err(other),
        };
        Ok(SinkSwap::Swapped { old, replayed })
    }

    /// After a swap: with a probation, the old sink is kept to roll back to;
    /// without, it is handed back.
    pub(crate) fn keep_old_sink(&mut self, old: K, probation: Option<Probation<K>>) -> Option<K> {
        match probation {
            Some(p) => {
                self.sink.start_trial(old, p);
                None
            }
            None => Some(old),
        }
    }

    /// Why filter `index` cannot be swapped now, if it cannot.
    pub(crate) fn refuse_filter_swap(&self, index: usize) -> Option<PluginError> {
        if self.on_trial() {
            Some(on_probation())
        } else if index >= self.filters.len() {
            Some(PluginError::Refused(format!(
                "there is no filter at position {index} (the chain has {})",
                self.filters.len()
            )))
        } else {
            None
        }
    }

    /// Opens `filter` and puts it in place of filter `index` (every batch the
    /// old one transformed is flushed); the old one is handed back, or kept to
    /// roll back to with a probation. `Err` gives the new filter back with why
    /// it did not open.
    pub(crate) async fn swap_filter(
        &mut self,
        index: usize,
        mut filter: F,
        probation: Option<Probation<F>>,
    ) -> Result<Option<F>, (F, PluginError)> {
        if let Err(error) = filter.open().await {
            return Err((filter, error));
        }
        self.active();
        let live = &mut self.filters[index];
        let old = live.replace(filter);
        Ok(match probation {
            Some(p) => {
                live.start_trial(old, p);
                None
            }
            None => Some(old),
        })
    }

    /// The name of filter `index`.
    pub(crate) fn filter_name(&self, index: usize) -> &str {
        self.filters[index].get().name()
    }

    /// Starts or stops the candidate in shadow; a start replaces any shadow
    /// running.
    pub(crate) fn on_shadow(&mut self, command: ShadowCommand<K, F>) {
        self.sink.stop_shadow();
        for f in &mut self.filters {
            f.stop_shadow();
        }
        let ShadowCommand::Start {
            candidate,
            limits,
            status,
        } = command
        else {
            tracing::info!("Shadow stopped.");
            return;
        };
        match candidate {
            ShadowCandidate::Sink(sink) => self.sink.start_shadow(sink, limits, status),
            ShadowCandidate::Filter { index, filter } => match self.filters.get_mut(index) {
                Some(live) => live.start_shadow(index, filter, limits, status),
                None => status.drop_with(format!(
                    "there is no filter at position {index} (the chain has {})",
                    self.filters.len()
                )),
            },
        }
    }

    /// Run a sink call that must succeed before the pipeline goes on; on a
    /// retryable failure, replay into a fresh sink and call again, up to
    /// `max_retries` times.
    async fn call_sink(&mut self, call: SinkCall<'_>) -> Result<(), PipelineError> {
        // One count of attempts for the call and its replays, so that the backoff
        // keeps doubling while the same call keeps failing.
        let mut attempt = 0;
        loop {
            let result = match call {
                SinkCall::Flush(ts) => self.sink.flush(ts).await,
                SinkCall::ApplyDdl(ddl) => self.sink.apply_ddl(ddl).await,
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) => attempt = self.retry_sink_from(Err(e), attempt).await?,
            }
        }
    }

    /// After a failed sink call: back off, open a fresh sink and replay every
    /// unacknowledged batch (flagged as replay). Returns once the sink is back in
    /// the state the failed call expected, or fails the pipeline.
    async fn retry_sink(&mut self, result: Result<(), PluginError>) -> Result<(), PipelineError> {
        self.retry_sink_from(result, 0).await.map(|_| ())
    }

    /// [`Self::retry_sink`] after `attempt` earlier retries of the same call: the
    /// next wait is the backoff of `attempt + 1`. Returns the attempts made so far.
    async fn retry_sink_from(
        &mut self,
        mut result: Result<(), PluginError>,
        mut attempt: u32,
    ) -> Result<u32, PipelineError> {
        while let Err(error) = result {
            let error = match self.sink.failed(error) {
                Ok(error) => error,
                Err((mut failed, rolled)) => {
                    // The sink on trial failed: the one it replaced is live
                    // again and gets every unacknowledged batch.
                    let saved = self.saver.saved_checkpoint();
                    self.sink.checkpoint_saved(saved);
                    tracing::warn!(failed = failed.name(), sink = self.sink.name(), error = %rolled.error(), checkpoint = %self.checkpoint, "The sink on probation failed; rolling back to the one it replaced.");
                    if let Err(e) = failed.close().await {
                        tracing::debug!(error = %e, "The failed sink did not close cleanly.");
                    }
                    let replayed_batches = self.unacked.len();
                    result = self.replay().await;
                    rolled.tell(failed, self.checkpoint, replayed_batches);
                    attempt = 0;
                    continue;
                }
            };
            if !error.is_retryable() || attempt >= self.retry.max_retries {
                return Err(PipelineError::Sink(error));
            }
            attempt += 1;
            self.stats.retries += 1;
            let wait = self.retry.backoff(attempt);
            tracing::warn!(sink = self.sink.name(), %error, attempt, ?wait, "Sink failed; replaying from the checkpoint into a fresh instance.");
            tokio::time::sleep(wait).await;
            result = self.replay().await;
        }
        Ok(attempt)
    }

    async fn replay(&mut self) -> Result<(), PluginError> {
        self.sink.open().await?;
        for pending in &mut self.unacked {
            pending.batch.mark_replay();
            self.sink
                .rewrite(&pending.schemas, &mut pending.batch)
                .await?;
        }
        Ok(())
    }
}

impl<K: Sink + 'static, F: Filter + 'static> Output for SinkWriter<K, F> {
    /// Run the filter chain on a batch and write it.
    async fn write(
        &mut self,
        schemas: Vec<Arc<TableSchema>>,
        mut batch: Batch,
    ) -> Result<(), PipelineError> {
        for f in &mut self.filters {
            f.transform(
                &schemas,
                &mut batch,
                self.retry,
                &mut self.stats.retries,
                self.checkpoint,
            )
            .await?;
            batch.tables.retain(|t| !t.is_empty());
        }
        let rows = batch.row_count() as u64;
        if rows == 0 {
            return Ok(());
        }
        for t in &batch.tables {
            if let Some(s) = schemas.iter().find(|s| s.table_id == t.table_id) {
                *self.stats.rows_out.entry(s.qualified_name()).or_default() += t.len() as u64;
            }
        }
        self.saver
            .raise_fence(batch.max_commit_ts().unwrap_or_default())
            .await
            .map_err(PipelineError::Persist)?;
        let bytes = batch.wire_bytes();
        self.unacked_bytes += bytes;
        self.unacked.push(Pending { schemas, batch });
        let last = self.unacked.last_mut().expect("just pushed");
        let result = self.sink.write(&last.schemas, &mut last.batch).await;
        self.retry_sink(result).await?;
        self.wrote_since_flush = true;
        self.active();
        self.stats.rows_written += rows;
        self.stats.bytes_written += bytes as u64;
        Ok(())
    }
}
