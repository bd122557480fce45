//! The single-changefeed pipeline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{
    Batch, BatchBuilder, CheckpointTs, CommitTs, DdlEvent, FLAG_REPLAY, FLAG_SPLIT, Filter,
    PluginError, ResolvedTs, RowChange, Sink, Source, SourceEvent, TableSchema, Transaction,
};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::persist::ProgressStore;

/// Live progress, published after every batch and flush.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Row changes received from the source.
    pub rows_read: u64,
    /// Row changes handed to the sink (after filters).
    pub rows_written: u64,
    /// Bytes of row data (wire size) handed to the sink.
    pub bytes_written: u64,
    /// Transactions received.
    pub transactions: u64,
    /// Highest ts the source has resolved.
    pub resolved_ts: ResolvedTs,
    /// Highest ts the sink acknowledged with `flush`.
    pub checkpoint_ts: CheckpointTs,
    /// Times a plugin call failed and was retried.
    pub retries: u64,
    /// Most bytes of row data waiting in the event cache at once.
    pub event_cache_peak_bytes: u64,
}

/// What a finished (or interrupted) run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub progress: Progress,
    /// Rows received per `schema.table`.
    pub rows_in: BTreeMap<String, u64>,
    /// Rows handed to the sink per `schema.table`.
    pub rows_out: BTreeMap<String, u64>,
    /// Stopped by the shutdown signal rather than by the source ending.
    pub interrupted: bool,
    pub elapsed: Duration,
}

/// Bytes an event holds in the event cache, given back when it is dropped.
struct CachePermit(
    #[expect(dead_code, reason = "held for its drop")] tokio::sync::OwnedSemaphorePermit,
);

/// A sink call that is retried until it succeeds (see `Pipeline::call_sink`).
#[derive(Clone, Copy)]
enum SinkCall<'a> {
    Flush(CommitTs),
    ApplyDdl(&'a DdlEvent),
}

/// A batch kept until the sink acknowledges it.
struct Pending {
    schemas: Vec<Arc<TableSchema>>,
    batch: Batch,
}

/// One changefeed: a source, a filter chain and a sink.
pub struct Pipeline<K: Sink, F: Filter> {
    config: PipelineConfig,
    sink: K,
    filters: Vec<F>,
    progress: Progress,
    progress_tx: watch::Sender<Progress>,
    report: Report,
    builder: BatchBuilder,
    /// Every transaction with commit ts <= this has been written to the sink.
    written_through: CommitTs,
    /// Every transaction with commit ts <= this is in the builder or written.
    pending_through: CommitTs,
    /// Batches written but not acknowledged yet, for replay.
    unacked: Vec<Pending>,
    unacked_bytes: usize,
    last_flush: Instant,
    /// Where positions are saved (none: nothing survives the process).
    store: Option<Box<dyn ProgressStore>>,
    /// Rows above this may not reach the sink until a higher fence is saved.
    fence: CommitTs,
    /// The fence runs `fence_ahead` times this ahead (see `raise_fence`).
    fence_lead: u64,
    last_fence_save: Option<Instant>,
    last_saved: Option<(CheckpointTs, Instant)>,
}

/// The most the fence lead is multiplied by while catching up.
const MAX_FENCE_LEAD: u64 = 1024;

impl<K: Sink, F: Filter> Pipeline<K, F> {
    /// A pipeline into `sink` through `filters`; `start` is the checkpoint to
    /// resume from.
    pub fn new(config: PipelineConfig, filters: Vec<F>, sink: K, start: CheckpointTs) -> Self {
        let progress = Progress {
            checkpoint_ts: start,
            resolved_ts: ResolvedTs::from(start),
            ..Progress::default()
        };
        let (progress_tx, _) = watch::channel(progress.clone());
        let fence = CommitTs::from(start).max(config.replay_until);
        Self {
            config,
            sink,
            filters,
            progress,
            progress_tx,
            report: Report::default(),
            builder: BatchBuilder::new(),
            written_through: CommitTs::from(start),
            pending_through: CommitTs::from(start),
            unacked: Vec::new(),
            unacked_bytes: 0,
            last_flush: Instant::now(),
            store: None,
            // A previous run may have saved a higher fence: never save a lower one.
            fence,
            fence_lead: 1,
            last_fence_save: None,
            last_saved: None,
        }
    }

    /// Save positions in `store`: a fence before rows reach the sink and the
    /// checkpoint after acknowledged flushes.
    pub fn with_progress_store(mut self, store: Box<dyn ProgressStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Watch progress while the pipeline runs.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress_tx.subscribe()
    }

    /// The sink (for inspection after a run).
    pub fn sink(&self) -> &K {
        &self.sink
    }

    /// The filters (for inspection after a run).
    pub fn filters(&self) -> &[F] {
        &self.filters
    }

    /// Run until the source ends or `shutdown` resolves; then write what is
    /// pending, flush, and close the sink.
    pub async fn run<S>(
        &mut self,
        mut source: S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Report, PipelineError>
    where
        S: Source + 'static,
    {
        let started = Instant::now();
        source.start_after(CommitTs::from(self.progress.checkpoint_ts));
        let (tx, mut rx) = mpsc::channel::<(Result<SourceEvent, PipelineError>, CachePermit)>(
            self.config.event_cache_count.max(1),
        );
        // The cache's byte bound: the reader takes an event's bytes before it
        // queues it (blocking while the cache is full, never dropping), and the
        // pipeline gives them back when it takes the event out.
        let budget = self.config.event_cache_bytes.clamp(1, u32::MAX as usize);
        let bytes = Arc::new(tokio::sync::Semaphore::new(budget));
        let cached_bytes = bytes.clone();
        // The reader runs in the caller's span (the changefeed's), like the rest.
        // It lives in a JoinSet so that it is aborted however this function ends:
        // an error return, or the whole pipeline being cancelled (dropped).
        let mut reader = tokio::task::JoinSet::new();
        reader.spawn(
            async move {
                loop {
                    let event = source
                        .next_event()
                        .await
                        .map_err(|e| PipelineError::Source(Box::new(e)));
                    let last = matches!(event, Ok(SourceEvent::End) | Err(_));
                    let size = match &event {
                        Ok(SourceEvent::Transaction(t)) => transaction_bytes(t),
                        _ => 0,
                    };
                    // An event larger than the whole budget takes all of it.
                    let want = size.min(budget) as u32;
                    let Ok(permit) = cached_bytes.clone().acquire_many_owned(want).await else {
                        break;
                    };
                    if tx.send((event, CachePermit(permit))).await.is_err() || last {
                        break;
                    }
                }
            }
            .instrument(tracing::Span::current()),
        );

        self.open_all().await?;
        let mut ticker = tokio::time::interval(self.config.flush_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let result = loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => {
                    self.report.interrupted = true;
                    break Ok(());
                }
                event = rx.recv() => match event.map(|(event, permit)| {
                    // Out of the cache: its bytes are free again.
                    let held = (budget - bytes.available_permits()) as u64;
                    self.progress.event_cache_peak_bytes = self.progress.event_cache_peak_bytes.max(held);
                    drop(permit);
                    event
                }) {
                    Some(Ok(SourceEvent::Transaction(txn))) => {
                        if let Err(e) = self.on_transaction(txn).await { break Err(e); }
                    }
                    Some(Ok(SourceEvent::Resolved(ts))) => {
                        self.progress.resolved_ts = self.progress.resolved_ts.max(ts);
                        if self.builder.is_empty() {
                            self.written_through = self.written_through.max(CommitTs::from(ts));
                        }
                    }
                    Some(Ok(SourceEvent::Ddl(ddl))) => {
                        if let Err(e) = self.on_ddl(&ddl).await { break Err(e); }
                    }
                    Some(Ok(SourceEvent::End)) => break Ok(()),
                    // The reader stopped without saying End: it panicked (or was cancelled).
                    None => break Err(PipelineError::Source("the source task stopped unexpectedly (it panicked); see the log".into())),
                    Some(Err(e)) => break Err(e),
                },
                _ = ticker.tick() => {
                    let step = async {
                        self.emit().await?;
                        self.flush().await
                    };
                    if let Err(e) = step.await { break Err(e); }
                }
            }
        };
        reader.abort_all();
        result?;
        self.emit().await?;
        self.flush().await?;
        self.save_checkpoint().await?;
        if let Err(e) = self.sink.close().await {
            tracing::warn!(sink = self.sink.name(), error = %e, "Sink close failed after the final flush.");
        }
        self.report.progress = self.progress.clone();
        self.report.elapsed = started.elapsed();
        Ok(self.report.clone())
    }

    async fn open_all(&mut self) -> Result<(), PipelineError> {
        for f in &mut self.filters {
            f.open().await.map_err(|error| PipelineError::Filter {
                name: f.name().to_string(),
                error,
            })?;
        }
        let result = self.sink.open().await;
        self.retry_sink(result).await
    }

    async fn on_transaction(&mut self, txn: Transaction) -> Result<(), PipelineError> {
        self.progress.transactions += 1;
        self.progress.rows_read += txn.rows.len() as u64;
        for row in &txn.rows {
            *self
                .report
                .rows_in
                .entry(row.table.qualified_name())
                .or_default() += 1;
        }
        let bytes_bound = self.config.max_batch_bytes;
        let rows_bound = self.config.max_batch_rows.max(1);
        let txn_bytes = transaction_bytes(&txn);
        if self.builder.rows() + txn.rows.len() > rows_bound
            || self.builder.bytes() + txn_bytes > bytes_bound
        {
            self.emit().await?;
        }
        // A transaction that does not fit an empty batch (by rows or by bytes) is
        // spread over several; one that does fit is never cut by the checks below.
        let split = txn.rows.len() > rows_bound || txn_bytes > bytes_bound;
        for row in &txn.rows {
            if self.builder.rows() >= rows_bound || self.builder.bytes() >= bytes_bound {
                self.emit().await?;
            }
            let mut flags = if split { FLAG_SPLIT } else { 0 };
            if txn.commit_ts <= self.config.replay_until {
                flags |= FLAG_REPLAY;
            }
            self.builder.push(txn.commit_ts, flags, row);
        }
        // The whole transaction is now in the builder or written.
        self.pending_through = self.pending_through.max(txn.commit_ts);
        if self.builder.rows() >= rows_bound {
            self.emit().await?;
        }
        if self.unacked_bytes > self.config.max_pending_bytes
            || self.last_flush.elapsed() >= self.config.flush_interval
        {
            self.emit().await?;
            self.flush().await?;
        }
        Ok(())
    }

    /// A DDL is a barrier: write and flush everything before it, apply it
    /// (retrying into a fresh sink like any call), then let the checkpoint pass it.
    async fn on_ddl(&mut self, ddl: &DdlEvent) -> Result<(), PipelineError> {
        self.emit().await?;
        self.flush().await?;
        self.raise_fence(ddl.commit_ts).await?;
        self.call_sink(SinkCall::ApplyDdl(ddl)).await?;
        self.pending_through = self.pending_through.max(ddl.commit_ts);
        self.written_through = self.written_through.max(ddl.commit_ts);
        Ok(())
    }

    /// Filter and write what the builder holds.
    async fn emit(&mut self) -> Result<(), PipelineError> {
        if self.builder.is_empty() {
            self.written_through = self.written_through.max(self.pending_through);
            return Ok(());
        }
        let (schemas, mut batch) = std::mem::take(&mut self.builder).finish();
        for i in 0..self.filters.len() {
            let mut attempt = 0;
            loop {
                let filter = &mut self.filters[i];
                match filter.transform(&schemas, &mut batch).await {
                    Ok(()) => break,
                    Err(error) if error.is_retryable() && attempt < self.config.max_retries => {
                        attempt += 1;
                        self.progress.retries += 1;
                        let wait = backoff(&self.config, attempt);
                        tracing::warn!(filter = filter.name(), %error, attempt, ?wait, "Filter failed; retrying.");
                        tokio::time::sleep(wait).await;
                    }
                    Err(error) => {
                        return Err(PipelineError::Filter {
                            name: filter.name().to_string(),
                            error,
                        });
                    }
                }
            }
            batch.tables.retain(|t| !t.is_empty());
        }
        let rows = batch.row_count() as u64;
        if rows > 0 {
            for t in &batch.tables {
                if let Some(s) = schemas.iter().find(|s| s.table_id == t.table_id) {
                    *self.report.rows_out.entry(s.qualified_name()).or_default() += t.len() as u64;
                }
            }
            self.raise_fence(batch.max_commit_ts().unwrap_or_default())
                .await?;
            let bytes = batch.wire_bytes();
            self.unacked_bytes += bytes;
            self.unacked.push(Pending { schemas, batch });
            let last = self.unacked.last_mut().expect("just pushed");
            let result = self.sink.write(&last.schemas, &mut last.batch).await;
            self.retry_sink(result).await?;
            self.progress.rows_written += rows;
            self.progress.bytes_written += bytes as u64;
        }
        self.written_through = self.written_through.max(self.pending_through);
        self.publish();
        Ok(())
    }

    /// Ask the sink to make everything written durable; on success the checkpoint
    /// moves to the written ts and the replay buffer is released.
    async fn flush(&mut self) -> Result<(), PipelineError> {
        self.last_flush = Instant::now();
        let target = self.written_through;
        if target.get() <= self.progress.checkpoint_ts.get() {
            // Nothing new to flush, but a checkpoint reached earlier may not be saved yet.
            if self.save_due() {
                self.save_checkpoint().await?;
            }
            return Ok(());
        }
        self.call_sink(SinkCall::Flush(target)).await?;
        self.progress.checkpoint_ts = CheckpointTs::from(target);
        self.unacked.clear();
        self.unacked_bytes = 0;
        self.publish();
        if self.save_due() {
            self.save_checkpoint().await?;
        }
        Ok(())
    }

    fn save_due(&self) -> bool {
        self.last_saved
            .is_none_or(|(_, at)| at.elapsed() >= self.config.checkpoint_interval)
    }

    /// Save the fence ahead of `ts` before any row at `ts` reaches the sink; the
    /// fence runs `fence_ahead` of upstream time ahead so that saves are rare.
    async fn raise_fence(&mut self, ts: CommitTs) -> Result<(), PipelineError> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        if ts <= self.fence {
            return Ok(());
        }
        // While catching up, upstream time passes much faster than wall time and a
        // fixed lead would mean a save every few batches: the lead doubles while
        // saves come less than a checkpoint interval apart, and shrinks back
        // when they are rarer. A longer lead only flags more rows replay after a
        // crash; it never loses one.
        let interval = self.config.checkpoint_interval;
        match self.last_fence_save {
            Some(at) if at.elapsed() < interval => {
                self.fence_lead = (self.fence_lead * 2).min(MAX_FENCE_LEAD);
            }
            Some(at) if at.elapsed() > interval * 4 => {
                self.fence_lead = (self.fence_lead / 2).max(1);
            }
            _ => {}
        }
        let ahead = (self.config.fence_ahead.as_millis() as u64).saturating_mul(self.fence_lead);
        // The physical part of a ts has 46 bits.
        let physical = ts
            .physical_millis()
            .saturating_add(ahead)
            .min((1 << 46) - 1);
        let fence = CommitTs::compose(physical, 0).max(ts);
        store
            .save_fence(fence)
            .await
            .map_err(PipelineError::Persist)?;
        self.fence = fence;
        self.last_fence_save = Some(Instant::now());
        Ok(())
    }

    async fn save_checkpoint(&mut self) -> Result<(), PipelineError> {
        let checkpoint = self.progress.checkpoint_ts;
        if self
            .last_saved
            .is_some_and(|(saved, _)| saved == checkpoint)
        {
            return Ok(());
        }
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        store
            .save_checkpoint(checkpoint, self.progress.resolved_ts)
            .await
            .map_err(PipelineError::Persist)?;
        self.last_saved = Some((checkpoint, Instant::now()));
        Ok(())
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
            if !error.is_retryable() || attempt >= self.config.max_retries {
                return Err(PipelineError::Sink(error));
            }
            attempt += 1;
            self.progress.retries += 1;
            let wait = backoff(&self.config, attempt);
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
                .write(&pending.schemas, &mut pending.batch)
                .await?;
        }
        Ok(())
    }

    fn publish(&self) {
        self.progress_tx.send_replace(self.progress.clone());
    }
}

/// The bytes a transaction adds to a batch, counted as `BatchBuilder::bytes` counts
/// them, so that deciding whether it fits (and is flagged split) is exact.
fn transaction_bytes(txn: &Transaction) -> usize {
    txn.rows.iter().map(RowChange::wire_bytes).sum()
}

fn backoff(config: &PipelineConfig, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    config
        .initial_backoff
        .saturating_mul(factor)
        .min(config.max_backoff)
}
