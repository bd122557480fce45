//! The single-changefeed pipeline: source task → event cache → stage (the redo
//! seam) → per-table dispatchers → filters → the one sink instance.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{
    Batch, Checkpoint, CheckpointTs, ColumnData, CommitTs, DdlEvent, FLAG_REPLAY, FLAG_SPLIT,
    Filter, PluginError, ResolvedTs, RunPart, RunTransaction, Sink, Source, SourceEvent,
    SourcePosition, TableBatch, TableChanges, TableSchema, Transaction, TransactionRun,
};
use tokio::sync::{oneshot, watch};

use crate::cache::{CachePermit, Chunk, EventCache, Item};
use crate::config::PipelineConfig;
use crate::dispatcher::{Dispatcher, Held, changefeed_checkpoint};
use crate::error::PipelineError;
use crate::persist::ProgressStore;
use crate::shadow::{FilterShadow, ShadowCandidate, ShadowCommand, SinkShadow};
use crate::stage::{EventStage, PassThrough};
use crate::swap::{FilterSwapRequest, Probation, SwapRequest, Verdict};

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
    /// Bytes of row data waiting in the event cache now.
    pub event_cache_bytes: u64,
    /// Upstream events the source read (if it counts them).
    pub source_events: u64,
    /// Upstream statements the source did not recognise and so did not
    /// replicate (each is logged with where it is).
    pub source_skipped_statements: u64,
    /// Upstream time of the source's last event, ms since the Unix epoch (0:
    /// unknown).
    pub source_time_ms: u64,
}

/// What a finished (or interrupted) run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Progress at the end.
    pub progress: Progress,
    /// Rows received per `schema.table`.
    pub rows_in: BTreeMap<String, u64>,
    /// Rows handed to the sink per `schema.table`.
    pub rows_out: BTreeMap<String, u64>,
    /// Stopped by the shutdown signal rather than by the source ending.
    pub interrupted: bool,
    /// How long the run took.
    pub elapsed: Duration,
}

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

/// Told of every batch the sink acknowledged, in order, once the flush that
/// covers it returned (a continuous validator re-reads its rows
/// downstream). It must not block: it runs on the pipeline's task.
pub trait AckListener: Send {
    /// `batch` (as the sink got it, after filters) is durable downstream;
    /// `schemas` are those of its tables.
    fn acked(&mut self, schemas: &[Arc<TableSchema>], batch: Batch);
}

/// One changefeed: a source, a filter chain and a sink.
pub struct Pipeline<K: Sink, F: Filter> {
    config: PipelineConfig,
    sink: K,
    filters: Vec<F>,
    stage: Box<dyn EventStage>,
    progress: Progress,
    progress_tx: watch::Sender<Progress>,
    report: Report,
    /// Where the run starts (the checkpoint it resumes from).
    start: Checkpoint,
    dispatchers: Vec<Dispatcher>,
    by_table: HashMap<u32, usize>,
    /// Every event with commit ts <= this has been received and dispatched (or held).
    read_through: CommitTs,
    /// The commit ts of a transaction whose parts are coming (its last part not
    /// in yet).
    open_parts: Option<CommitTs>,
    /// That transaction's parts are held until the DDL at this ts is applied
    /// (its later parts are held with them).
    open_parts_held: Option<CommitTs>,
    /// The source's own counters (published with the progress).
    source_stats: Option<Arc<sluice_core::SourceStats>>,
    /// DDLs waiting for their tables to be flushed, in commit-ts order.
    barriers: VecDeque<DdlEvent>,
    /// Rows held behind barriers: count of held parts, and their wire bytes.
    held_parts: usize,
    held_bytes: usize,
    /// Source positions of transactions above the checkpoint, in order.
    positions: VecDeque<(CommitTs, SourcePosition)>,
    /// The position of the last transaction at or below the checkpoint.
    checkpoint_position: Option<SourcePosition>,
    /// The ts of the last successful flush.
    flushed: CommitTs,
    /// Written since the last successful flush.
    wrote_since_flush: bool,
    /// Batches written but not acknowledged yet, for replay.
    unacked: Vec<Pending>,
    /// Told of batches once acknowledged.
    ack_listener: Option<Box<dyn AckListener>>,
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
    /// Sink swaps asked for (see [`Pipeline::swaps`]).
    swaps: Option<tokio::sync::mpsc::Receiver<SwapRequest<K>>>,
    /// Filter swaps asked for (see [`Pipeline::filter_swaps`]).
    filter_swaps: Option<tokio::sync::mpsc::Receiver<FilterSwapRequest<F>>>,
    /// Shadows started and stopped (see [`Pipeline::shadows`]).
    shadows: Option<tokio::sync::mpsc::Receiver<ShadowCommand<K, F>>>,
    /// The plugin swapped in last is on trial: the one it replaced waits here.
    probation: Option<OnProbation<K, F>>,
    /// The candidate running in shadow.
    shadow: Option<Shadow>,
}

/// A candidate running in shadow (see the `shadow` module).
enum Shadow {
    Sink(SinkShadow),
    Filter(FilterShadow),
}

impl Shadow {
    fn stop(self) {
        match self {
            Shadow::Sink(s) => s.stop(),
            Shadow::Filter(s) => s.stop(),
        }
    }
}

/// A plugin on trial (see [`Probation`]).
struct OnProbation<K, F> {
    /// What is on trial, and what it replaced (to swap back to).
    trial: OnTrial<K, F>,
    until: Instant,
    flushes_left: u64,
    flushes: u64,
    retries_left: u32,
}

enum OnTrial<K, F> {
    Sink {
        fallback: K,
        verdict: tokio::sync::oneshot::Sender<Verdict<K>>,
    },
    Filter {
        index: usize,
        fallback: F,
        verdict: tokio::sync::oneshot::Sender<Verdict<F>>,
    },
}

impl<K, F> OnProbation<K, F> {
    fn with<P>(
        p: Probation<P>,
        trial: impl FnOnce(oneshot::Sender<Verdict<P>>) -> OnTrial<K, F>,
    ) -> Self {
        Self {
            until: Instant::now() + p.duration,
            flushes_left: p.flushes,
            flushes: 0,
            retries_left: p.max_retries,
            trial: trial(p.verdict),
        }
    }

    fn sink(fallback: K, p: Probation<K>) -> Self {
        Self::with(p, |verdict| OnTrial::Sink { fallback, verdict })
    }

    fn filter(index: usize, fallback: F, p: Probation<F>) -> Self {
        Self::with(p, |verdict| OnTrial::Filter {
            index,
            fallback,
            verdict,
        })
    }

    fn is_sink(&self) -> bool {
        matches!(self.trial, OnTrial::Sink { .. })
    }

    fn is_filter(&self, at: usize) -> bool {
        matches!(self.trial, OnTrial::Filter { index, .. } if index == at)
    }
}

/// The most the fence lead is multiplied by while catching up.
const MAX_FENCE_LEAD: u64 = 1024;

impl<K: Sink + 'static, F: Filter + 'static> Pipeline<K, F> {
    /// A pipeline into `sink` through `filters`; `start` is the checkpoint (and,
    /// when saved, the source position) to resume from.
    pub fn new(
        config: PipelineConfig,
        filters: Vec<F>,
        sink: K,
        start: impl Into<Checkpoint>,
    ) -> Self {
        let start = start.into();
        let progress = Progress {
            checkpoint_ts: start.ts,
            resolved_ts: ResolvedTs::from(start.ts),
            ..Progress::default()
        };
        let (progress_tx, _) = watch::channel(progress.clone());
        let from = CommitTs::from(start.ts);
        // A previous run may have saved a higher fence: never save a lower one.
        let fence = from.max(config.replay_until);
        Self {
            config,
            sink,
            filters,
            stage: Box::new(PassThrough),
            progress,
            progress_tx,
            report: Report::default(),
            checkpoint_position: start.position.clone(),
            start,
            dispatchers: Vec::new(),
            by_table: HashMap::new(),
            read_through: from,
            open_parts: None,
            open_parts_held: None,
            source_stats: None,
            barriers: VecDeque::new(),
            held_parts: 0,
            held_bytes: 0,
            positions: VecDeque::new(),
            flushed: from,
            wrote_since_flush: false,
            unacked: Vec::new(),
            ack_listener: None,
            unacked_bytes: 0,
            last_flush: Instant::now(),
            store: None,
            fence,
            fence_lead: 1,
            last_fence_save: None,
            last_saved: None,
            swaps: None,
            filter_swaps: None,
            shadows: None,
            probation: None,
            shadow: None,
        }
    }

    /// Tell `listener` of every batch the sink acknowledges from now on.
    pub fn set_ack_listener(&mut self, listener: Box<dyn AckListener>) {
        self.ack_listener = Some(listener);
    }

    /// Takes the listener out (dropping it tells it that nothing more will
    /// come).
    pub fn take_ack_listener(&mut self) -> Option<Box<dyn AckListener>> {
        self.ack_listener.take()
    }

    /// Run the sink on trial from the start, with `fallback` to swap back to if
    /// it fails within `probation` (a swap that was still on trial when the
    /// previous run ended).
    pub fn with_probation(mut self, fallback: K, probation: Probation<K>) -> Self {
        self.probation = Some(OnProbation::sink(fallback, probation));
        self
    }

    /// Run the filter at `index` on trial from the start, with `fallback` to
    /// swap back to (see [`Self::with_probation`]).
    pub fn with_filter_probation(
        mut self,
        index: usize,
        fallback: F,
        probation: Probation<F>,
    ) -> Self {
        self.probation = Some(OnProbation::filter(index, fallback, probation));
        self
    }

    /// Where to send [`SwapRequest`]s: each replaces the sink at a barrier
    /// while the pipeline runs (see the `swap` module). Call before `run`; a
    /// later call replaces the channel.
    pub fn swaps(&mut self) -> tokio::sync::mpsc::Sender<SwapRequest<K>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        self.swaps = Some(rx);
        tx
    }

    /// Where to send [`FilterSwapRequest`]s: each replaces one filter at a
    /// barrier while the pipeline runs. Call before `run`.
    pub fn filter_swaps(&mut self) -> tokio::sync::mpsc::Sender<FilterSwapRequest<F>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        self.filter_swaps = Some(rx);
        tx
    }

    /// Where to send [`ShadowCommand`]s: each starts or stops a candidate
    /// running in shadow (see the `shadow` module). Call before `run`.
    pub fn shadows(&mut self) -> tokio::sync::mpsc::Sender<ShadowCommand<K, F>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        self.shadows = Some(rx);
        tx
    }

    /// Save positions in `store`: a fence before rows reach the sink and the
    /// checkpoint (with the source position) after acknowledged flushes.
    pub fn with_progress_store(mut self, store: Box<dyn ProgressStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Put `stage` between the event cache and the dispatchers (the redo log's place).
    pub fn with_stage(mut self, stage: Box<dyn EventStage>) -> Self {
        self.stage = stage;
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

    /// The checkpoint reached so far, with the source position saved with it.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            ts: self.progress.checkpoint_ts,
            position: self.checkpoint_position.clone(),
        }
    }

    /// Run until the source ends or `shutdown` resolves; then write what is
    /// pending, flush, and close the sink.
    pub async fn run<S>(
        &mut self,
        source: S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Report, PipelineError>
    where
        S: Source + 'static,
    {
        let started = Instant::now();
        self.source_stats = source.stats();
        // The reader runs in the caller's span (the changefeed's). It is aborted
        // however this function ends: an error return, or the pipeline being
        // cancelled (dropped).
        let mut cache = EventCache::start(
            source,
            &self.start,
            self.config.event_cache_count,
            self.config.event_cache_bytes,
            // A run is dispatched whole before the next flush check: keep it well
            // below the replay buffer's bound.
            self.config.max_pending_bytes / 4,
        )?;

        self.sink.checkpoint_saved(self.start.ts);
        self.open_all().await?;
        let mut swaps = self.swaps.take();
        let mut filter_swaps = self.filter_swaps.take();
        let mut shadows = self.shadows.take();
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
                chunk = cache.rx.recv() => {
                    let Some(chunk) = chunk else {
                        // The reader stopped without saying End: it panicked (or was cancelled).
                        break Err(PipelineError::Source("the source task stopped unexpectedly (it panicked); see the log".into()));
                    };
                    let held = cache.held_bytes();
                    self.progress.event_cache_peak_bytes = self.progress.event_cache_peak_bytes.max(held);
                    self.progress.event_cache_bytes = held;
                    if let Some(end) = self.on_chunk(chunk, &cache).await {
                        break end;
                    }
                },
                _ = ticker.tick() => {
                    if let Err(e) = self.flush_point().await { break Err(e); }
                    self.judge_probation();
                }
                Some(request) = next_message(&mut swaps) => {
                    if let Err(e) = self.swap_sink(request).await { break Err(e); }
                }
                Some(request) = next_message(&mut filter_swaps) => {
                    if let Err(e) = self.swap_filter(request).await { break Err(e); }
                }
                Some(command) = next_message(&mut shadows) => self.on_shadow(command).await,
            }
        };
        drop(cache);
        result?;
        self.flush_point().await?;
        self.save_checkpoint().await?;
        // A sink candidate gets the last writes and flush, then closes.
        if let Some(shadow) = self.shadow.take() {
            shadow.stop();
        }
        if let Err(e) = self.sink.close().await {
            tracing::warn!(sink = self.sink.name(), error = %e, "Sink close failed after the final flush.");
        }
        self.report.progress = self.progress.clone();
        self.report.elapsed = started.elapsed();
        for d in &self.dispatchers {
            *self.report.rows_in.entry(d.name.clone()).or_default() += d.rows_in;
        }
        Ok(self.report.clone())
    }

    /// Take a chunk's items in order; `Some` when the run ends with one of them
    /// (the source's End, or an error).
    async fn on_chunk(
        &mut self,
        chunk: Chunk,
        cache: &EventCache,
    ) -> Option<Result<(), PipelineError>> {
        for (item, permit) in chunk.into_items() {
            let result = match item {
                Item::Event(Ok(SourceEvent::End)) => return Some(Ok(())),
                Item::Event(Err(e)) => return Some(Err(e)),
                Item::Event(Ok(event)) => self.on_event(event, permit, cache).await,
                Item::Run(run) => self.on_run(run, permit, cache).await,
            };
            if let Err(e) = result {
                return Some(Err(e));
            }
        }
        None
    }

    /// Transactions in a row: each table's rows are moved or copied into its
    /// batch many transactions at a time. Runs that need care (rows already
    /// downstream, a table behind a DDL, a transaction larger than a batch) go
    /// through the transaction-by-transaction path instead.
    async fn on_run(
        &mut self,
        run: TransactionRun,
        mut permit: CachePermit,
        cache: &EventCache,
    ) -> Result<(), PipelineError> {
        let rows_bound = self.config.max_batch_rows.max(1);
        let bytes_bound = self.config.max_batch_bytes;
        let start = CommitTs::from(self.start.ts);
        let simple = run
            .transactions
            .first()
            .is_some_and(|t| t.commit_ts > start)
            && run.parts.iter().all(|part| {
                let fits = part.segments.iter().enumerate().all(|(i, s)| {
                    let (r0, _, _, y0) = part.start_of(i);
                    s.rows - r0 <= rows_bound && s.bytes - y0 <= bytes_bound
                });
                let schema = part.changes.schema();
                let free = match self.by_table.get(&schema.table_id) {
                    Some(&at) => {
                        let d = &self.dispatchers[at];
                        d.held.is_empty() && d.blocked_by.is_none()
                    }
                    // A new table is blocked from the start by a pending DDL.
                    None => self.barriers.is_empty(),
                };
                fits && free
            });
        if !simple {
            // One by one: each transaction passes the stage on its own.
            for txn in run.into_transactions() {
                let own = permit.split(txn.wire_bytes(), 1);
                self.on_event(SourceEvent::Transaction(txn), own, cache)
                    .await?;
            }
            return Ok(());
        }
        self.stage
            .admit_run(&run)
            .map_err(|e| PipelineError::Source(Box::new(e)))?;
        let TransactionRun {
            transactions,
            parts,
            ..
        } = run;
        for part in parts {
            self.dispatch_part(part, &transactions).await?;
        }
        self.progress.transactions += transactions.len() as u64;
        if let Some(last) = transactions.last() {
            self.read_through = self.read_through.max(last.commit_ts);
        }
        for t in transactions {
            if let Some(position) = t.position {
                self.positions.push_back((t.commit_ts, position));
            }
        }
        // The rows are in batches or written: their cache bytes come back.
        drop(permit);
        if self.unacked_bytes > self.config.max_pending_bytes
            || self.last_flush.elapsed() >= self.config.flush_interval
        {
            self.flush_point().await?;
        }
        Ok(())
    }

    /// Append a run's rows of one table to the table's batch, as many
    /// transactions at once as fit; a transaction is never cut (each fits a
    /// batch: see `on_run`).
    async fn dispatch_part(
        &mut self,
        part: RunPart,
        transactions: &[RunTransaction],
    ) -> Result<(), PipelineError> {
        let rows_bound = self.config.max_batch_rows.max(1);
        let bytes_bound = self.config.max_batch_bytes;
        let replay_until = self.config.replay_until;
        let stamp = |txn: u32| {
            let t = &transactions[txn as usize];
            let ts = t.commit_ts;
            (ts, if ts <= replay_until { FLAG_REPLAY } else { 0 }, t.id)
        };
        let at = self.dispatcher(part.changes.schema());
        let rows = part.changes.len();
        self.progress.rows_read += rows as u64;
        self.dispatchers[at].rows_in += rows as u64;
        let mut part = Some(part);
        let mut i = 0;
        loop {
            let p = part.as_ref().expect("kept until moved whole");
            if i >= p.segments.len() {
                break;
            }
            let d = &self.dispatchers[at];
            if d.batch.is_some() && d.schema.version != p.changes.schema().version {
                self.emit_table(at).await?;
                continue;
            }
            // The transactions that fit what is left of the batch.
            let (r0, b0, a0, y0) = p.start_of(i);
            let (room_rows, room_bytes) = (
                rows_bound.saturating_sub(d.rows()),
                bytes_bound.saturating_sub(d.batch_bytes),
            );
            let mut j = i;
            while j < p.segments.len()
                && p.segments[j].rows - r0 <= room_rows
                && p.segments[j].bytes - y0 <= room_bytes
            {
                j += 1;
            }
            if j == i {
                // The next transaction does not fit: write the batch first (it
                // is not empty, as each transaction fits an empty batch).
                self.emit_table(at).await?;
                continue;
            }
            let end = p.segments[j - 1];
            let first_ts = stamp(p.segments[i].txn).0;
            let bytes = end.bytes - y0;
            let d = &mut self.dispatchers[at];
            if !Arc::ptr_eq(&d.schema, p.changes.schema()) {
                d.schema = p.changes.schema().clone();
            }
            if i == 0 && j == p.segments.len() && d.batch.is_none() && d.spare.is_none() {
                // The whole part into an empty batch: moved, not copied.
                let p = part.take().expect("checked");
                let (mut commit_ts, mut ids, mut flags) = (
                    Vec::with_capacity(rows),
                    Vec::with_capacity(rows),
                    Vec::with_capacity(rows),
                );
                let mut from = 0;
                for s in &p.segments {
                    let (ts, f, id) = stamp(s.txn);
                    commit_ts.extend(std::iter::repeat_n(ts.get(), s.rows - from));
                    ids.extend(std::iter::repeat_n(id, s.rows - from));
                    flags.extend(std::iter::repeat_n(f, s.rows - from));
                    from = s.rows;
                }
                d.batch = Some(TableBatch::from_rows(p.changes, commit_ts, ids, flags));
                d.batch_bytes = bytes;
                d.first_unwritten = Some(first_ts);
                if d.rows() >= rows_bound {
                    self.emit_table(at).await?;
                }
                return Ok(());
            }
            let (schema, spare) = (&d.schema, &mut d.spare);
            let batch = d.batch.get_or_insert_with(|| {
                spare
                    .take()
                    .filter(|b| b.table_id == schema.table_id && b.schema_version == schema.version)
                    .unwrap_or_else(|| TableBatch::new(schema))
            });
            let mut from = r0;
            let stamps = p.segments[i..j].iter().map(|s| {
                let (ts, f, id) = stamp(s.txn);
                let n = s.rows - from;
                from = s.rows;
                (ts.get(), id, f, n)
            });
            batch.extend_rows(
                &p.changes,
                r0..end.rows,
                b0..end.before,
                a0..end.after,
                stamps,
            );
            d.batch_bytes += bytes;
            d.first_unwritten.get_or_insert(first_ts);
            if d.rows() >= rows_bound {
                self.emit_table(at).await?;
            }
            i = j;
        }
        Ok(())
    }

    async fn on_event(
        &mut self,
        event: SourceEvent,
        permit: CachePermit,
        cache: &EventCache,
    ) -> Result<(), PipelineError> {
        self.stage
            .admit(&event)
            .map_err(|e| PipelineError::Source(Box::new(e)))?;
        match event {
            SourceEvent::Transaction(txn) => {
                if txn.commit_ts <= CommitTs::from(self.start.ts) {
                    // Already downstream (a source that resumed coarsely).
                    return Ok(());
                }
                self.on_transaction(txn, permit).await?;
                let count_bound = self.config.event_cache_count.max(1);
                if self.held_bytes * 2 > cache.budget() || self.held_parts * 2 > count_bound {
                    // Rows held behind barriers fill half the cache: apply the DDLs now.
                    self.flush_point().await?;
                } else if self.unacked_bytes > self.config.max_pending_bytes
                    || self.last_flush.elapsed() >= self.config.flush_interval
                {
                    self.flush_point().await?;
                }
            }
            SourceEvent::Resolved(ts) => {
                self.progress.resolved_ts = self.progress.resolved_ts.max(ts);
                self.read_through = self.read_through.max(CommitTs::from(ts));
            }
            SourceEvent::Ddl(ddl) => {
                if ddl.commit_ts > CommitTs::from(self.start.ts) {
                    self.on_ddl(ddl);
                }
            }
            SourceEvent::End => {}
        }
        Ok(())
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

    fn dispatcher(&mut self, schema: &Arc<TableSchema>) -> usize {
        if let Some(&at) = self.by_table.get(&schema.table_id) {
            return at;
        }
        let blocked_by = self.barriers.front().map(|d| d.commit_ts);
        self.dispatchers
            .push(Dispatcher::new(schema.clone(), blocked_by));
        let at = self.dispatchers.len() - 1;
        self.by_table.insert(schema.table_id, at);
        at
    }

    async fn on_transaction(
        &mut self,
        txn: Transaction,
        permit: CachePermit,
    ) -> Result<(), PipelineError> {
        let Transaction {
            commit_ts,
            position,
            tables,
            more,
            id,
        } = txn;
        // Rows of a transaction that comes in parts are flagged split, the last
        // part's too (it is the part after one with `more`).
        let split = more || self.open_parts == Some(commit_ts);
        self.open_parts = more.then_some(commit_ts);
        if !more {
            self.progress.transactions += 1;
        }
        let mut permit = Some(permit);
        // A transaction is held whole when any of its tables waits for a DDL:
        // its rows in other tables are not written before the DDL while these
        // wait behind it (no half transaction downstream; a child row never
        // goes ahead of its parent), and those tables' later rows wait too.
        let waits_for = if split && self.open_parts_held.is_some() {
            self.open_parts_held
        } else {
            self.waits_for(&tables)
        };
        self.open_parts_held = if more { waits_for } else { None };
        for changes in tables {
            self.progress.rows_read += changes.len() as u64;
            let at = self.dispatcher(changes.schema());
            let d = &mut self.dispatchers[at];
            d.rows_in += changes.len() as u64;
            if let Some(waits_for) = waits_for {
                // Above a DDL not applied yet: wait for it, keeping the cache
                // bytes (the cache stays bounded).
                self.held_parts += 1;
                self.held_bytes += changes.wire_bytes();
                d.held.push_back(Held {
                    commit_ts,
                    id,
                    waits_for,
                    changes,
                    split,
                    _permit: permit.take(),
                });
                continue;
            }
            self.dispatch(at, commit_ts, id, changes, split).await?;
        }
        if more {
            // Its commit ts is not read through until its last part is in.
            return Ok(());
        }
        // Every row of the transaction is in a batch, written, or held.
        self.read_through = self.read_through.max(commit_ts);
        if let Some(position) = position {
            self.positions.push_back((commit_ts, position));
        }
        Ok(())
    }

    /// Append one transaction's rows of a table to the table's batch: whole
    /// (moved, when the batch is empty) if they fit a batch, else spread over
    /// several batches, flagged split.
    async fn dispatch(
        &mut self,
        at: usize,
        commit_ts: CommitTs,
        id: u64,
        changes: TableChanges,
        split: bool,
    ) -> Result<(), PipelineError> {
        let rows_bound = self.config.max_batch_rows.max(1);
        let bytes_bound = self.config.max_batch_bytes;
        let (rows, bytes) = (changes.len(), changes.wire_bytes());
        if rows == 0 {
            return Ok(());
        }
        let mut flags = if split { FLAG_SPLIT } else { 0 };
        if commit_ts <= self.config.replay_until {
            flags |= FLAG_REPLAY;
        }
        let d = &self.dispatchers[at];
        let new_version = d.batch.is_some() && d.schema.version != changes.schema().version;
        if new_version || d.rows() + rows > rows_bound || d.batch_bytes + bytes > bytes_bound {
            self.emit_table(at).await?;
        }
        let d = &mut self.dispatchers[at];
        if !Arc::ptr_eq(&d.schema, changes.schema()) {
            d.schema = changes.schema().clone();
        }
        if rows <= rows_bound && bytes <= bytes_bound {
            append(d, changes, 0..rows, (commit_ts, id), flags, bytes);
        } else {
            // Bigger than a batch: split, one batch after another, flagged.
            flags |= FLAG_SPLIT;
            let sizes = row_bytes(&changes);
            let mut start = 0;
            while start < rows {
                let (mut end, mut taken) = (start, 0);
                while end < rows
                    && end - start < rows_bound
                    && (end == start || taken + sizes[end] <= bytes_bound)
                {
                    taken += sizes[end];
                    end += 1;
                }
                let d = &mut self.dispatchers[at];
                append_range(d, &changes, start..end, (commit_ts, id), flags, taken);
                if end < rows {
                    self.emit_table(at).await?;
                }
                start = end;
            }
        }
        if self.dispatchers[at].rows() >= rows_bound {
            self.emit_table(at).await?;
        }
        Ok(())
    }

    /// The DDL a transaction touching `tables` must wait for, if any: the
    /// latest pending DDL, or what the held rows of one of its tables wait
    /// for (a table's rows stay in order).
    fn waits_for(&self, tables: &[TableChanges]) -> Option<CommitTs> {
        if self.barriers.is_empty() && self.held_parts == 0 {
            return None;
        }
        let mut waits: Option<CommitTs> = self.barriers.back().map(|b| b.commit_ts);
        for changes in tables {
            let schema = changes.schema();
            let held = self
                .by_table
                .get(&schema.table_id)
                .and_then(|&at| self.dispatchers[at].held.back())
                .map(|h| h.waits_for);
            waits = waits.max(held);
        }
        waits
    }

    /// A DDL is a barrier for every table: rows above it are held until it is
    /// applied; it is applied at the next flush point, after the rows below it
    /// were written and flushed. Holding only the tables it names is not
    /// enough: a row of another table written after it may need it (a child
    /// row whose parent row waits behind the parent table's `ALTER`), so the
    /// sink sees every DDL where upstream ran it among the rows, as a
    /// replica applying the binlog in order does.
    fn on_ddl(&mut self, ddl: DdlEvent) {
        for d in &mut self.dispatchers {
            if d.blocked_by.is_none() {
                d.blocked_by = Some(ddl.commit_ts);
            }
        }
        self.read_through = self.read_through.max(ddl.commit_ts);
        self.barriers.push_back(ddl);
    }

    /// Write every table's batch, flush, and apply the DDLs whose tables are
    /// flushed (each one releases its tables' held rows, which may need another
    /// round).
    async fn flush_point(&mut self) -> Result<(), PipelineError> {
        loop {
            self.emit_all().await?;
            self.flush().await?;
            let Some(ddl) = self.barriers.pop_front() else {
                return Ok(());
            };
            // Everything of its tables below it is written and flushed: apply it
            // (retrying into a fresh sink like any call).
            self.raise_fence(ddl.commit_ts).await?;
            self.call_sink(SinkCall::ApplyDdl(&ddl)).await?;
            self.release(&ddl).await?;
        }
    }

    /// After `ddl` was applied: its tables wait for their next DDL, if any, and
    /// the held rows that waited for it (or for an earlier one) go on, in order.
    async fn release(&mut self, ddl: &DdlEvent) -> Result<(), PipelineError> {
        for at in 0..self.dispatchers.len() {
            let d = &mut self.dispatchers[at];
            if d.blocked_by == Some(ddl.commit_ts) {
                d.blocked_by = self.barriers.front().map(|b| b.commit_ts);
            }
            loop {
                let d = &mut self.dispatchers[at];
                let free = d.held.front().is_some_and(|h| h.waits_for <= ddl.commit_ts);
                if !free {
                    break;
                }
                let held = d.held.pop_front().expect("checked");
                self.held_parts -= 1;
                self.held_bytes -= held.changes.wire_bytes();
                self.dispatch(at, held.commit_ts, held.id, held.changes, held.split)
                    .await?;
            }
        }
        Ok(())
    }

    /// Filter and write one table's batch.
    async fn emit_table(&mut self, at: usize) -> Result<(), PipelineError> {
        let d = &mut self.dispatchers[at];
        let Some(table) = d.batch.take() else {
            return Ok(());
        };
        d.batch_bytes = 0;
        d.first_unwritten = None;
        // The next batch of this table gets room for as much as this full one.
        d.spare = Some(TableBatch::with_capacity_of(&d.schema, &table));
        let schemas = vec![d.schema.clone()];
        self.write(
            schemas,
            Batch {
                tables: vec![table],
            },
        )
        .await
    }

    /// Filter and write every table's batch, several tables in one write while
    /// they fit the batch bounds together.
    async fn emit_all(&mut self) -> Result<(), PipelineError> {
        let rows_bound = self.config.max_batch_rows.max(1);
        let bytes_bound = self.config.max_batch_bytes;
        let (mut schemas, mut batch, mut rows, mut bytes) = (Vec::new(), Batch::default(), 0, 0);
        for at in 0..self.dispatchers.len() {
            let d = &mut self.dispatchers[at];
            let Some(table) = d.batch.take() else {
                continue;
            };
            let (n, b) = (table.len(), d.batch_bytes);
            d.batch_bytes = 0;
            d.first_unwritten = None;
            let schema = d.schema.clone();
            if !batch.tables.is_empty() && (rows + n > rows_bound || bytes + b > bytes_bound) {
                self.write(std::mem::take(&mut schemas), std::mem::take(&mut batch))
                    .await?;
                (rows, bytes) = (0, 0);
            }
            schemas.push(schema);
            batch.tables.push(table);
            rows += n;
            bytes += b;
        }
        if !batch.tables.is_empty() {
            self.write(schemas, batch).await?;
        }
        self.publish();
        Ok(())
    }

    /// Run the filter chain on a batch and write it.
    async fn write(
        &mut self,
        schemas: Vec<Arc<TableSchema>>,
        mut batch: Batch,
    ) -> Result<(), PipelineError> {
        for i in 0..self.filters.len() {
            self.transform(i, &schemas, &mut batch).await?;
            batch.tables.retain(|t| !t.is_empty());
        }
        let rows = batch.row_count() as u64;
        if rows == 0 {
            return Ok(());
        }
        for t in &batch.tables {
            let name = match self.by_table.get(&t.table_id) {
                Some(&at) => self.dispatchers[at].name.clone(),
                None => match schemas.iter().find(|s| s.table_id == t.table_id) {
                    Some(s) => s.qualified_name(),
                    None => continue,
                },
            };
            *self.report.rows_out.entry(name).or_default() += t.len() as u64;
        }
        self.raise_fence(batch.max_commit_ts().unwrap_or_default())
            .await?;
        let bytes = batch.wire_bytes();
        self.unacked_bytes += bytes;
        self.unacked.push(Pending { schemas, batch });
        let last = self.unacked.last_mut().expect("just pushed");
        let started = Instant::now();
        if let Some(Shadow::Sink(shadow)) = &mut self.shadow
            && shadow.write(&last.schemas, &last.batch).is_err()
        {
            self.shadow = None;
        }
        let result = self.sink.write(&last.schemas, &mut last.batch).await;
        if let Some(Shadow::Sink(shadow)) = &self.shadow {
            shadow.live_took(started.elapsed());
        }
        self.retry_sink(result).await?;
        self.wrote_since_flush = true;
        self.progress.rows_written += rows;
        self.progress.bytes_written += bytes as u64;
        Ok(())
    }

    /// Ask the sink to make everything written durable; on success the checkpoint
    /// moves to the minimum over the tables of what each has written, and the
    /// replay buffer is released. Call it after `emit_all`.
    async fn flush(&mut self) -> Result<(), PipelineError> {
        self.last_flush = Instant::now();
        let target = self.read_through;
        if target > self.flushed || self.wrote_since_flush {
            self.call_sink(SinkCall::Flush(target)).await?;
            if let Some(Shadow::Sink(shadow)) = &mut self.shadow
                && shadow.flush(target).is_err()
            {
                self.shadow = None;
            }
            if let Some(p) = &mut self.probation {
                p.flushes += 1;
                p.flushes_left = p.flushes_left.saturating_sub(1);
            }
            self.flushed = target;
            self.wrote_since_flush = false;
            match &mut self.ack_listener {
                Some(listener) => {
                    for p in std::mem::take(&mut self.unacked) {
                        listener.acked(&p.schemas, p.batch);
                    }
                }
                None => self.unacked.clear(),
            }
            self.unacked_bytes = 0;
        }
        let read_through = self.read_through;
        let checkpoint = changefeed_checkpoint(
            self.flushed,
            self.dispatchers
                .iter()
                .map(|d| d.written_through(read_through)),
            self.barriers.iter().map(|d| d.commit_ts),
        );
        if CheckpointTs::from(checkpoint) > self.progress.checkpoint_ts {
            self.progress.checkpoint_ts = CheckpointTs::from(checkpoint);
            while self
                .positions
                .front()
                .is_some_and(|(ts, _)| *ts <= checkpoint)
            {
                self.checkpoint_position = self.positions.pop_front().map(|(_, p)| p);
            }
        }
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
        let checkpoint = self.checkpoint();
        if self
            .last_saved
            .is_some_and(|(saved, _)| saved == checkpoint.ts)
        {
            return Ok(());
        }
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        store
            .save_checkpoint(&checkpoint, self.progress.resolved_ts)
            .await
            .map_err(PipelineError::Persist)?;
        self.last_saved = Some((checkpoint.ts, Instant::now()));
        self.sink.checkpoint_saved(checkpoint.ts);
        Ok(())
    }

    /// The checkpoint last saved durably (where a restart would resume).
    fn saved_checkpoint(&self) -> CheckpointTs {
        self.last_saved.map_or(self.start.ts, |(ts, _)| ts)
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
            if let Some(p) = self.probation.as_mut().filter(|p| p.is_sink()) {
                // Only an error the plugin itself calls retryable is retried on
                // probation; a trap or a quota or deadline stop rolls back.
                if !matches!(error, PluginError::Retryable(_)) || p.retries_left == 0 {
                    // The sink on trial failed: back to the one it replaced.
                    result = self.roll_back(error).await;
                    attempt = 0;
                    continue;
                }
                p.retries_left -= 1;
            }
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

    /// The sink on trial failed with `error`: drop it, open the one it replaced
    /// and replay every unacknowledged batch into it, flagged. Returns how the
    /// replay went (the caller retries it like any sink call).
    async fn roll_back(&mut self, error: PluginError) -> Result<(), PluginError> {
        let p = self.probation.take().expect("on probation");
        let OnTrial::Sink { fallback, verdict } = p.trial else {
            unreachable!("only a sink on trial rolls back here");
        };
        let mut failed = std::mem::replace(&mut self.sink, fallback);
        let saved = self.saved_checkpoint();
        self.sink.checkpoint_saved(saved);
        tracing::warn!(failed = failed.name(), sink = self.sink.name(), %error, checkpoint = %self.progress.checkpoint_ts, "The sink on probation failed; rolling back to the one it replaced.");
        if let Err(e) = failed.close().await {
            tracing::debug!(error = %e, "The failed sink did not close cleanly.");
        }
        let replayed_batches = self.unacked.len();
        let result = self.replay().await;
        let _ = verdict.send(Verdict::RolledBack {
            failed,
            error,
            checkpoint: self.progress.checkpoint_ts,
            replayed_batches,
        });
        result
    }

    /// The filter on trial failed with `error`: put back the one it replaced
    /// (opened again); the caller transforms the failed batch with it.
    async fn roll_back_filter(&mut self, error: PluginError) -> Result<(), PipelineError> {
        let p = self.probation.take().expect("on probation");
        let OnTrial::Filter {
            index,
            fallback,
            verdict,
        } = p.trial
        else {
            unreachable!("only a filter on trial rolls back here");
        };
        let failed = std::mem::replace(&mut self.filters[index], fallback);
        let filter = &mut self.filters[index];
        tracing::warn!(failed = failed.name(), filter = filter.name(), %error, checkpoint = %self.progress.checkpoint_ts, "The filter on probation failed; rolling back to the one it replaced.");
        filter.open().await.map_err(|error| PipelineError::Filter {
            name: filter.name().to_string(),
            error,
        })?;
        let _ = verdict.send(Verdict::RolledBack {
            failed,
            error,
            checkpoint: self.progress.checkpoint_ts,
            replayed_batches: 0,
        });
        Ok(())
    }

    /// Runs filter `i` on `batch`, retrying retryable failures; with a
    /// candidate of it in shadow, the candidate transforms a copy at the same
    /// time and the outputs are compared; with it on probation, a failure
    /// rolls it back and the old filter transforms the batch.
    async fn transform(
        &mut self,
        i: usize,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PipelineError> {
        let mut attempt = 0;
        // The input, kept for a candidate of this filter in shadow, or for
        // the old version if this one is on trial and fails.
        let on_trial = self.probation.as_ref().is_some_and(|p| p.is_filter(i));
        let shadowed = matches!(&self.shadow, Some(Shadow::Filter(s)) if s.index == i);
        let mut input = (on_trial || shadowed).then(|| batch.clone());
        let rows_in = batch.row_count();
        loop {
            let started = Instant::now();
            let result = self.filters[i].transform(schemas, batch).await;
            let error = match result {
                Ok(()) => {
                    let live_took = started.elapsed();
                    if let (Some(input), Some(Shadow::Filter(shadow))) =
                        (input.take().filter(|_| shadowed), &mut self.shadow)
                        && shadow.compare(schemas, input, batch, live_took).is_err()
                    {
                        self.shadow = None;
                    }
                    return Ok(());
                }
                Err(error) => error,
            };
            if let Some(input) = &input {
                // A failed call leaves the input as it was; if it did not,
                // the copy goes back.
                if batch.row_count() != rows_in {
                    *batch = input.clone();
                }
            } else if batch.row_count() != rows_in {
                // The input did not come back (the plugin's thread ended):
                // fail, so that the run starts again from the checkpoint
                // instead of going on without these rows.
                return Err(PipelineError::Filter {
                    name: self.filters[i].name().to_string(),
                    error,
                });
            }
            if let Some(p) = self.probation.as_mut().filter(|p| p.is_filter(i)) {
                if !matches!(error, PluginError::Retryable(_)) || p.retries_left == 0 {
                    self.roll_back_filter(error).await?;
                    attempt = 0;
                    continue;
                }
                p.retries_left -= 1;
            }
            let filter = &self.filters[i];
            if !error.is_retryable() || attempt >= self.config.max_retries {
                return Err(PipelineError::Filter {
                    name: filter.name().to_string(),
                    error,
                });
            }
            attempt += 1;
            self.progress.retries += 1;
            let wait = backoff(&self.config, attempt);
            tracing::warn!(filter = filter.name(), %error, attempt, ?wait, "Filter failed; retrying.");
            tokio::time::sleep(wait).await;
        }
    }

    /// Ends a probation whose time and flushes have both passed.
    fn judge_probation(&mut self) {
        let passed = self
            .probation
            .as_ref()
            .is_some_and(|p| p.flushes_left == 0 && Instant::now() >= p.until);
        if passed {
            let p = self.probation.take().expect("checked");
            let flushes = p.flushes;
            match p.trial {
                OnTrial::Sink { verdict, .. } => {
                    tracing::info!(
                        sink = self.sink.name(),
                        flushes,
                        "The sink passed its probation."
                    );
                    let _ = verdict.send(Verdict::Passed { flushes });
                }
                OnTrial::Filter { index, verdict, .. } => {
                    tracing::info!(
                        filter = self.filters[index].name(),
                        flushes,
                        "The filter passed its probation."
                    );
                    let _ = verdict.send(Verdict::Passed { flushes });
                }
            }
        }
    }

    /// Replaces the sink at a barrier (see the `swap` module).
    async fn swap_sink(&mut self, request: SwapRequest<K>) -> Result<(), PipelineError> {
        let started = Instant::now();
        let SwapRequest {
            sink,
            probation,
            reply,
        } = request;
        if self.probation.is_some() {
            let _ = reply.send(Err(crate::SwapRefused {
                plugin: sink,
                error: on_probation(),
            }));
            return Ok(());
        }
        // Everything read so far is written and flushed by the old sink.
        let flushed = self.flush_point().await;
        let mut replayed_batches = 0;
        let mut old = std::mem::replace(&mut self.sink, sink);
        let saved = self.saved_checkpoint();
        self.sink.checkpoint_saved(saved);
        if let Err(e) = old.close().await {
            tracing::warn!(sink = old.name(), error = %e, "The old sink failed to close after the swap barrier.");
        }
        match flushed {
            Ok(()) => {
                if let Err(error) = self.sink.open().await {
                    // Refused: the old sink opens again and runs on.
                    let new = std::mem::replace(&mut self.sink, old);
                    let result = self.sink.open().await;
                    self.retry_sink(result).await?;
                    let _ = reply.send(Err(crate::SwapRefused { plugin: new, error }));
                    return Ok(());
                }
            }
            Err(PipelineError::Sink(error)) => {
                // The old sink's final flush failed: the new one takes the
                // unacknowledged batches, flagged replay, and flushes them.
                tracing::warn!(%error, "The old sink's final flush failed; the new sink gets its rows again, flagged replay.");
                replayed_batches = self.unacked.len();
                let result = self.replay().await;
                self.retry_sink(result).await?;
                self.flush_point().await?;
            }
            Err(other) => return Err(other),
        }
        let barrier = self.progress.checkpoint_ts;
        let old = match probation {
            Some(p) => {
                self.probation = Some(OnProbation::sink(old, p));
                None
            }
            None => Some(old),
        };
        let swapped = crate::Swapped {
            old,
            barrier,
            replayed_batches,
            pause: started.elapsed(),
        };
        tracing::info!(sink = self.sink.name(), barrier = %swapped.barrier, pause_ms = swapped.pause.as_millis() as u64, replayed_batches, "Sink swapped.");
        let _ = reply.send(Ok(swapped));
        Ok(())
    }

    /// Replaces filter `index` at a barrier (see [`FilterSwapRequest`]).
    async fn swap_filter(&mut self, request: FilterSwapRequest<F>) -> Result<(), PipelineError> {
        let started = Instant::now();
        let FilterSwapRequest {
            index,
            mut filter,
            probation,
            reply,
        } = request;
        let refused = if self.probation.is_some() {
            Some(on_probation())
        } else if index >= self.filters.len() {
            Some(PluginError::Refused(format!(
                "there is no filter at position {index} (the chain has {})",
                self.filters.len()
            )))
        } else {
            None
        };
        if let Some(error) = refused {
            let _ = reply.send(Err(crate::SwapRefused {
                plugin: filter,
                error,
            }));
            return Ok(());
        }
        // Everything the old filter transformed is written and flushed.
        self.flush_point().await?;
        if let Err(error) = filter.open().await {
            let _ = reply.send(Err(crate::SwapRefused {
                plugin: filter,
                error,
            }));
            return Ok(());
        }
        let old = std::mem::replace(&mut self.filters[index], filter);
        let barrier = self.progress.checkpoint_ts;
        let old = match probation {
            Some(p) => {
                self.probation = Some(OnProbation::filter(index, old, p));
                None
            }
            None => Some(old),
        };
        let swapped = crate::Swapped {
            old,
            barrier,
            replayed_batches: 0,
            pause: started.elapsed(),
        };
        tracing::info!(filter = self.filters[index].name(), index, barrier = %swapped.barrier, pause_ms = swapped.pause.as_millis() as u64, "Filter swapped.");
        let _ = reply.send(Ok(swapped));
        Ok(())
    }

    /// Starts or stops the candidate in shadow.
    async fn on_shadow(&mut self, command: ShadowCommand<K, F>) {
        // A shadow running ends first (a start replaces it).
        if let Some(shadow) = self.shadow.take() {
            shadow.stop();
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
            ShadowCandidate::Sink(sink) => {
                tracing::info!(candidate = sink.name(), "Shadow sink started.");
                self.shadow = Some(Shadow::Sink(SinkShadow::start(sink, limits, status)));
            }
            ShadowCandidate::Filter { index, filter } => {
                if index >= self.filters.len() {
                    status.drop_with(format!(
                        "there is no filter at position {index} (the chain has {})",
                        self.filters.len()
                    ));
                    return;
                }
                tracing::info!(candidate = filter.name(), index, "Shadow filter started.");
                self.shadow = Some(Shadow::Filter(FilterShadow::start(
                    index, filter, limits, status,
                )));
            }
        }
    }

    fn publish(&mut self) {
        if let Some(stats) = &self.source_stats {
            use std::sync::atomic::Ordering::Relaxed;
            self.progress.source_events = stats.events.load(Relaxed);
            self.progress.source_skipped_statements = stats.skipped_statements.load(Relaxed);
            self.progress.source_time_ms = stats.upstream_millis.load(Relaxed);
        }
        self.progress_tx.send_replace(self.progress.clone());
    }
}

/// Why a swap is refused while another is on probation.
fn on_probation() -> PluginError {
    PluginError::Refused(
        "the plugin swapped in last is still on probation; swap again once it has passed or rolled back".into(),
    )
}

/// The next message of `rx`, or never when there is no channel (or it closed).
async fn next_message<T>(swaps: &mut Option<tokio::sync::mpsc::Receiver<T>>) -> Option<T> {
    match swaps {
        Some(rx) => match rx.recv().await {
            Some(request) => Some(request),
            None => {
                *swaps = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Append all of `changes` to the dispatcher's batch: moved whole when the batch
/// is empty and no flag must be set, copied per column otherwise.
fn append(
    d: &mut Dispatcher,
    changes: TableChanges,
    rows: std::ops::Range<usize>,
    (commit_ts, id): (CommitTs, u64),
    flags: u8,
    bytes: usize,
) {
    if d.batch.is_none() && d.spare.is_none() {
        d.batch = Some(TableBatch::from_changes(changes, commit_ts, id, flags));
        d.batch_bytes = bytes;
        d.first_unwritten = Some(commit_ts);
        return;
    }
    append_range(d, &changes, rows, (commit_ts, id), flags, bytes);
}

fn append_range(
    d: &mut Dispatcher,
    changes: &TableChanges,
    rows: std::ops::Range<usize>,
    (commit_ts, id): (CommitTs, u64),
    flags: u8,
    bytes: usize,
) {
    let (schema, spare) = (&d.schema, &mut d.spare);
    let batch = d.batch.get_or_insert_with(|| {
        spare
            .take()
            .filter(|b| b.table_id == schema.table_id && b.schema_version == schema.version)
            .unwrap_or_else(|| TableBatch::new(schema))
    });
    batch.extend_from_changes(changes, rows, commit_ts, id, flags);
    d.batch_bytes += bytes;
    d.first_unwritten.get_or_insert(commit_ts);
}

/// The wire bytes of each row of `changes`, counted as `TableChanges` counts them
/// (for splitting a transaction bigger than a batch).
fn row_bytes(changes: &TableChanges) -> Vec<usize> {
    let size = |columns: &[ColumnData], i: usize| -> usize {
        columns
            .iter()
            .map(|c| match c.bytes_at(i) {
                Some(b) if !c.is_null(i) => b.len() + 4,
                _ => 8,
            })
            .sum()
    };
    changes
        .rows()
        .map(|r| {
            10 + r.before_index().map_or(0, |i| size(changes.before(), i))
                + r.after_index().map_or(0, |i| size(changes.after(), i))
        })
        .collect()
}

fn backoff(config: &PipelineConfig, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    config
        .initial_backoff
        .saturating_mul(factor)
        .min(config.max_backoff)
}
