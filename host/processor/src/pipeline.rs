//! The pipeline of one changefeed: the loop that takes the event cache's
//! items in source order and routes each table's rows to the table's
//! dispatcher, which writes its batches to the sink writer. The loop also
//! keeps the barriers (a DDL holds every table until it is applied), decides
//! the flush points (the source has nothing more ready, the flush interval,
//! the bytes written since the last flush) and computes the checkpoint, and
//! carries out swaps and shadow commands between two chunks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{
    Batch, Checkpoint, CheckpointTs, CommitTs, DdlEvent, Filter, ResolvedTs, Sink, Source,
    SourceEvent, SourcePosition, TableChanges, TableSchema, Transaction, TransactionRun,
};
use tokio::sync::{mpsc, watch};

use crate::barrier::{Barrier, Barriers};
use crate::cache::{CachePermit, Chunk, EventCache, Item};
use crate::config::{PipelineConfig, Retry};
use crate::dispatcher::{Bounds, Dispatcher, Held, Output, changefeed_checkpoint};
use crate::elsewhere::{Elsewhere, TablesElsewhere};
use crate::error::PipelineError;
use crate::persist::{ProgressStore, Saver};
use crate::redo::{Fence, RedoLog, RedoStatus};
use crate::shadow::ShadowCommand;
use crate::swap::{FilterSwapRequest, Probation, SwapRefused, SwapRequest, Swapped};
use crate::writer::{SinkSwap, SinkWriter};

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
    /// The checkpoint last saved (with the source position): a run that
    /// starts again starts here.
    pub saved_checkpoint_ts: CheckpointTs,
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
    /// The redo log's writer, with consistent replication.
    pub redo: Option<RedoStatus>,
    /// Events waiting at the redo fence (the log does not have them durably
    /// yet).
    pub redo_waiting: u64,
    /// Rows received per `schema.table` so far, refreshed at most once a
    /// second (for the load by table the owner balances).
    pub table_rows: Arc<Vec<(String, u64)>>,
}

/// How often [`Progress::table_rows`] is refreshed.
const TABLE_ROWS_EVERY: Duration = Duration::from_secs(1);

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

/// Told of every batch the sink acknowledged, in order, once the flush that
/// covers it returned (a continuous validator re-reads its rows
/// downstream). It must not block: it runs on the pipeline's task.
pub trait AckListener: Send {
    /// `batch` (as the sink got it, after filters) is durable downstream;
    /// `schemas` are those of its tables.
    fn acked(&mut self, schemas: &[Arc<TableSchema>], batch: Batch);
}

/// Source positions of transactions above the checkpoint, and the position of
/// the last transaction at or below it (saved with the checkpoint).
#[derive(Default)]
struct Positions {
    above: VecDeque<(CommitTs, SourcePosition)>,
    at_checkpoint: Option<SourcePosition>,
}

impl Positions {
    fn record(&mut self, ts: CommitTs, position: Option<SourcePosition>) {
        if let Some(position) = position {
            self.above.push_back((ts, position));
        }
    }

    /// The checkpoint moved to `checkpoint`.
    fn advance(&mut self, checkpoint: CommitTs) {
        while self.above.front().is_some_and(|(ts, _)| *ts <= checkpoint) {
            self.at_checkpoint = self.above.pop_front().map(|(_, p)| p);
        }
    }
}

/// What can be asked of a running pipeline besides its events.
struct Commands<K, F> {
    /// Sink swaps asked for (see [`Pipeline::swaps`]).
    swaps: Option<mpsc::Receiver<SwapRequest<K>>>,
    /// Filter swaps asked for (see [`Pipeline::filter_swaps`]).
    filter_swaps: Option<mpsc::Receiver<FilterSwapRequest<F>>>,
    /// Shadows started and stopped (see [`Pipeline::shadows`]).
    shadows: Option<mpsc::Receiver<ShadowCommand<K, F>>>,
}

enum Command<K, F> {
    Swap(SwapRequest<K>),
    SwapFilter(FilterSwapRequest<F>),
    Shadow(ShadowCommand<K, F>),
}

impl<K, F> Commands<K, F> {
    /// The next command; never, when no channel is open.
    async fn next(&mut self) -> Command<K, F> {
        tokio::select! {
            Some(r) = next_message(&mut self.swaps) => Command::Swap(r),
            Some(r) = next_message(&mut self.filter_swaps) => Command::SwapFilter(r),
            Some(c) = next_message(&mut self.shadows) => Command::Shadow(c),
        }
    }
}

/// One changefeed: a source, a filter chain and a sink.
pub struct Pipeline<K: Sink, F: Filter> {
    config: PipelineConfig,
    writer: SinkWriter<K, F>,
    progress: Progress,
    progress_tx: watch::Sender<Progress>,
    /// Where the run starts (the checkpoint it resumes from).
    start: Checkpoint,
    dispatchers: Vec<Dispatcher>,
    by_table: HashMap<u32, usize>,
    /// Every event with commit ts <= this has been received and dispatched (or held).
    read_through: CommitTs,
    /// The commit ts of a transaction whose parts are coming (its last part not
    /// in yet).
    open_parts: Option<CommitTs>,
    /// That transaction's parts are held until this barrier passes (its later
    /// parts are held with them).
    open_parts_held: Option<Barrier>,
    /// The source's own counters (published with the progress).
    source_stats: Option<Arc<sluice_core::SourceStats>>,
    /// DDLs read and not applied yet.
    barriers: Barriers,
    /// Rows held behind barriers: count of held parts, and their wire bytes.
    held_parts: usize,
    held_bytes: usize,
    positions: Positions,
    /// When the last flush point ended.
    last_flush: Instant,
    /// When [`Progress::table_rows`] was last refreshed.
    tables_published: Option<Instant>,
    /// Something was read since the last flush point.
    unflushed: bool,
    commands: Commands<K, F>,
    /// The redo log to start, with consistent replication.
    redo: Option<RedoLog>,
    /// Its fence, while running.
    fence: Option<Fence>,
    /// The source's End was read (it waits at the redo fence): nothing more
    /// comes from the cache.
    source_ended: bool,
    interrupted: bool,
    /// The captures running this changefeed's other tables (their events
    /// shipped from this one's source).
    elsewhere: TablesElsewhere,
}

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
        let saver = Saver::new(&config, start.ts, from.max(config.replay_until));
        let writer = SinkWriter::new(Retry::from(&config), filters, sink, saver, from, start.ts);
        Self {
            config,
            writer,
            progress,
            progress_tx,
            positions: Positions {
                at_checkpoint: start.position.clone(),
                ..Positions::default()
            },
            start,
            dispatchers: Vec::new(),
            by_table: HashMap::new(),
            read_through: from,
            open_parts: None,
            open_parts_held: None,
            source_stats: None,
            barriers: Barriers::default(),
            held_parts: 0,
            held_bytes: 0,
            last_flush: Instant::now(),
            tables_published: None,
            unflushed: false,
            commands: Commands {
                swaps: None,
                filter_swaps: None,
                shadows: None,
            },
            redo: None,
            fence: None,
            source_ended: false,
            interrupted: false,
            elsewhere: TablesElsewhere::default(),
        }
    }

    /// Write every event to `redo` before the sink sees it: the sink gets an
    /// event only once the log's durable resolved ts has passed it (see the
    /// `redo` module).
    pub fn with_redo(mut self, redo: RedoLog) -> Self {
        self.redo = Some(redo);
        self
    }

    /// Hold the checkpoint at what the captures running the changefeed's
    /// other tables saved (one watch per capture): their rows come from this
    /// pipeline's source, so its saved position must not pass them. A DDL
    /// across captures (the source says which) is applied only once they
    /// flushed everything below it, and the source is told the commit ts of
    /// every DDL applied (or found downstream already), to ship what follows.
    pub fn with_tables_elsewhere(mut self, elsewhere: Elsewhere) -> Self {
        self.elsewhere = TablesElsewhere::new(elsewhere);
        self
    }

    /// Tell `listener` of every batch the sink acknowledges from now on.
    pub fn set_ack_listener(&mut self, listener: Box<dyn AckListener>) {
        self.writer.set_ack_listener(listener);
    }

    /// Takes the listener out (dropping it tells it that nothing more will
    /// come).
    pub fn take_ack_listener(&mut self) -> Option<Box<dyn AckListener>> {
        self.writer.take_ack_listener()
    }

    /// Run the sink on trial from the start, with `fallback` to swap back to if
    /// it fails within `probation` (a swap that was still on trial when the
    /// previous run ended).
    pub fn with_probation(mut self, fallback: K, probation: Probation<K>) -> Self {
        self.writer.sink_trial(fallback, probation);
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
        self.writer.filter_trial(index, fallback, probation);
        self
    }

    /// Where to send [`SwapRequest`]s: each replaces the sink at a barrier
    /// while the pipeline runs (see the `swap` module). Call before `run`; a
    /// later call replaces the channel.
    pub fn swaps(&mut self) -> mpsc::Sender<SwapRequest<K>> {
        let (tx, rx) = mpsc::channel(1);
        self.commands.swaps = Some(rx);
        tx
    }

    /// Where to send [`FilterSwapRequest`]s: each replaces one filter at a
    /// barrier while the pipeline runs. Call before `run`.
    pub fn filter_swaps(&mut self) -> mpsc::Sender<FilterSwapRequest<F>> {
        let (tx, rx) = mpsc::channel(1);
        self.commands.filter_swaps = Some(rx);
        tx
    }

    /// Where to send [`ShadowCommand`]s: each starts or stops a candidate
    /// running in shadow (see the `shadow` module). Call before `run`.
    pub fn shadows(&mut self) -> mpsc::Sender<ShadowCommand<K, F>> {
        let (tx, rx) = mpsc::channel(1);
        self.commands.shadows = Some(rx);
        tx
    }

    /// Save positions in `store`: a fence before rows reach the sink and the
    /// checkpoint (with the source position) after acknowledged flushes.
    pub fn with_progress_store(mut self, store: Box<dyn ProgressStore>) -> Self {
        self.writer.set_store(store);
        self
    }

    /// Watch progress while the pipeline runs.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress_tx.subscribe()
    }

    /// The sink (for inspection after a run).
    pub fn sink(&self) -> &K {
        self.writer.sink()
    }

    /// The filters (for inspection after a run).
    pub fn filters(&self) -> Vec<&F> {
        self.writer.filters().collect()
    }

    /// The checkpoint reached so far, with the source position saved with it.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            ts: self.progress.checkpoint_ts,
            position: self.positions.at_checkpoint.clone(),
        }
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            rows: self.config.max_batch_rows.max(1),
            bytes: self.config.max_batch_bytes,
            replay_until: self.config.replay_until,
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
        let result = self.run_to_end(source, shutdown).await;
        // A run that failed stops its redo writer now, a flush under way
        // included, rather than when the pipeline is dropped: the next run
        // may open the log as soon as this one's end is reported.
        drop(self.fence.take());
        result
    }

    async fn run_to_end<S>(
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
        // With redo, the source side copies every event to the log as it
        // is read (so the log runs ahead of a slow sink), and the fence
        // holds it until the log has it.
        let mut redo_status = match self.redo.take() {
            Some(mut log) => {
                // What the log holds above this run's start is read again
                // and logged again (see `LogWriter::rewind_to`).
                log.rewind_to(self.start.ts.get()).await?;
                let fence = Fence::start(
                    log,
                    CommitTs::from(self.start.ts),
                    self.config.event_cache_count,
                    self.config.event_cache_bytes,
                );
                let status = fence.subscribe();
                self.fence = Some(fence);
                if let Some(logged) = self.elsewhere.take_logged() {
                    // The outboxes of the other captures' tables ship only
                    // what the log has; the task ends with the writer.
                    tokio::spawn(forward_durable(status.clone(), logged));
                }
                Some(status)
            }
            None if self.elsewhere.logs_every_table() => {
                return Err(PipelineError::Redo(
                    "the source hands this pipeline every table's events for a redo log, \
                     but it writes none"
                        .into(),
                ));
            }
            None => None,
        };
        let mut cache = EventCache::start(
            source,
            &self.start,
            self.config.event_cache_count,
            self.config.event_cache_bytes,
            // A run is dispatched whole before the next flush check: keep it well
            // below the replay buffer's bound.
            self.config.max_pending_bytes / 4,
            self.fence.as_ref().map(Fence::tee),
        )?;

        self.writer.open(self.start.ts).await?;
        let mut commands = std::mem::replace(
            &mut self.commands,
            Commands {
                swaps: None,
                filter_swaps: None,
                shadows: None,
            },
        );
        // The first tick one interval from now (nothing is read yet).
        let period = self.config.flush_interval;
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let result = loop {
            // Something was read since the last flush point, and the source
            // has nothing more ready: it goes downstream now rather than at
            // the next tick, so that the lag follows the downstream's speed
            // (while a flush runs, what comes in waits in the cache and goes
            // in the next one).
            let idle_flush = self.config.flush_when_idle && self.unflushed;
            tokio::select! {
                biased;
                _ = &mut shutdown => {
                    self.interrupted = true;
                    break Ok(());
                }
                command = commands.next() => {
                    let result = match command {
                        Command::Swap(request) => self.swap_sink(request).await,
                        Command::SwapFilter(request) => self.swap_filter(request).await,
                        Command::Shadow(command) => {
                            self.writer.on_shadow(command);
                            Ok(())
                        }
                    };
                    if let Err(e) = result { break Err(e); }
                }
                changed = redo_advanced(&mut redo_status) => {
                    if changed.is_err() || self.fence.as_ref().and_then(Fence::fatal).is_some() {
                        let why = self.fence.as_ref().and_then(Fence::fatal).unwrap_or_else(|| "the redo writer stopped".into());
                        break Err(PipelineError::Redo(why));
                    }
                    if let Some(end) = self.take_passed(&mut cache).await {
                        break end;
                    }
                    self.unflushed = true;
                    self.publish();
                }
                _ = ticker.tick() => {
                    if let Err(e) = self.flush_point().await { break Err(e); }
                    self.writer.judge_trials();
                    if let Some(after) = self.config.release_idle {
                        self.writer.release_idle(after).await;
                    }
                }
                chunk = cache.rx.recv(), if !self.source_ended => {
                    let Some(chunk) = chunk else {
                        // The reader stopped without saying End: it panicked (or was cancelled).
                        break Err(PipelineError::Source("the source task stopped unexpectedly (it panicked); see the log".into()));
                    };
                    let held = cache.held_bytes();
                    self.progress.event_cache_peak_bytes = self.progress.event_cache_peak_bytes.max(held);
                    self.progress.event_cache_bytes = held;
                    if let Some(end) = self.on_chunk(chunk, &mut cache).await {
                        break end;
                    }
                    self.unflushed = true;
                },
                _ = std::future::ready(()), if idle_flush => {
                    if let Err(e) = self.flush_point().await { break Err(e); }
                }
            }
        };
        drop(cache);
        result?;
        if self.interrupted {
            self.flush_point().await?;
        } else {
            // The source ended: the last DDLs are applied, waiting for the
            // other captures if they must.
            self.flush_and_apply(true).await?;
        }
        self.save_checkpoint().await?;
        if let Some(fence) = self.fence.take() {
            fence.checkpoint(CommitTs::from(self.progress.checkpoint_ts));
            self.progress.redo = Some(fence.close().await);
            self.progress.redo_waiting = 0;
            self.progress_tx.send_replace(self.progress.clone());
        }
        self.writer.close().await;
        let mut report = Report {
            progress: self.progress.clone(),
            rows_out: self.writer.stats.rows_out.clone(),
            interrupted: self.interrupted,
            elapsed: started.elapsed(),
            ..Report::default()
        };
        for d in &self.dispatchers {
            *report.rows_in.entry(d.name.clone()).or_default() += d.rows_in;
        }
        Ok(report)
    }

    /// Take a chunk's items in order; `Some` when the run ends with one of them
    /// (the source's End, or an error).
    async fn on_chunk(
        &mut self,
        chunk: Chunk,
        cache: &mut EventCache,
    ) -> Option<Result<(), PipelineError>> {
        for (item, permit) in chunk.into_items() {
            if matches!(item, Item::Event(Ok(SourceEvent::End))) {
                self.source_ended = true;
            }
            let end = match &mut self.fence {
                // With redo: in the log already (the source side copied
                // it), on once the fence passes it.
                Some(fence) => {
                    fence.hold(item, permit);
                    None
                }
                None => self.take(item, permit, cache).await,
            };
            if end.is_some() {
                return end;
            }
        }
        self.take_passed(cache).await
    }

    /// Dispatch the events the redo fence has passed, in order. Chunks the
    /// source sends meanwhile are taken to the fence between them: a flush
    /// passes many events at once, and while the sink takes them the chunks
    /// waiting in the channel would keep their slots of the cache (the fence
    /// gives a run's back) and stop the source.
    async fn take_passed(&mut self, cache: &mut EventCache) -> Option<Result<(), PipelineError>> {
        loop {
            self.hold_ready(cache);
            let (item, permit) = self.fence.as_mut().and_then(Fence::next_passed)?;
            if let Some(end) = self.take(item, permit, cache).await {
                return Some(end);
            }
        }
    }

    /// Hold at the redo fence the chunks the source has sent (none without
    /// redo, or once the source's End was read).
    fn hold_ready(&mut self, cache: &mut EventCache) {
        let Some(fence) = &mut self.fence else {
            return;
        };
        while !self.source_ended
            && let Ok(chunk) = cache.rx.try_recv()
        {
            for (item, permit) in chunk.into_items() {
                if matches!(item, Item::Event(Ok(SourceEvent::End))) {
                    self.source_ended = true;
                }
                fence.hold(item, permit);
            }
        }
    }

    /// Dispatch one item; `Some` when the run ends with it.
    async fn take(
        &mut self,
        item: Item,
        permit: CachePermit,
        cache: &EventCache,
    ) -> Option<Result<(), PipelineError>> {
        let result = match item {
            Item::Event(Ok(SourceEvent::End)) => return Some(Ok(())),
            Item::Event(Err(e)) => return Some(Err(e)),
            Item::Event(Ok(event)) => match self.elsewhere.keep_here(event) {
                Some(event) => self.on_event(event, permit, cache).await,
                None => Ok(()),
            },
            Item::Run(run) => {
                let mut run = run.into_inner();
                self.elsewhere.keep_parts_here(&mut run);
                self.on_run(run, permit, cache).await
            }
        };
        result.err().map(Err)
    }

    /// Transactions in a row: each table's rows are moved or copied into its
    /// batch many transactions at a time. Runs that need care (rows already
    /// downstream, a table behind a barrier, a transaction larger than a batch)
    /// go through the transaction-by-transaction path instead.
    async fn on_run(
        &mut self,
        run: TransactionRun,
        mut permit: CachePermit,
        cache: &EventCache,
    ) -> Result<(), PipelineError> {
        let bounds = self.bounds();
        let start = CommitTs::from(self.start.ts);
        let simple = run
            .transactions
            .first()
            .is_some_and(|t| t.commit_ts > start)
            && run.parts.iter().all(|part| {
                let fits = part.segments.iter().enumerate().all(|(i, s)| {
                    let (r0, _, _, y0) = part.start_of(i);
                    s.rows - r0 <= bounds.rows && s.bytes - y0 <= bounds.bytes
                });
                let free = match self.by_table.get(&part.changes.schema().table_id) {
                    Some(&at) => self.dispatchers[at].is_free(),
                    // A new table is blocked from the start by a pending barrier.
                    None => self.barriers.is_empty(),
                };
                fits && free
            });
        if !simple {
            // One by one.
            for txn in run.into_transactions() {
                let own = permit.split(txn.wire_bytes(), 1);
                self.on_event(SourceEvent::Transaction(txn), own, cache)
                    .await?;
            }
            return Ok(());
        }
        let TransactionRun {
            transactions,
            parts,
            ..
        } = run;
        for part in parts {
            self.progress.rows_read += part.changes.len() as u64;
            let at = self.dispatcher(part.changes.schema());
            self.dispatchers[at]
                .push_part(part, &transactions, bounds, &mut self.writer)
                .await?;
        }
        self.progress.transactions += transactions.len() as u64;
        if let Some(last) = transactions.last() {
            self.read_through = self.read_through.max(last.commit_ts);
        }
        for t in transactions {
            self.positions.record(t.commit_ts, t.position);
        }
        // The rows are in batches or written: their cache bytes come back.
        drop(permit);
        if self.flush_due() {
            self.flush_point().await?;
        }
        Ok(())
    }

    /// Under load (the source always has more ready), a flush point comes by
    /// bytes written or by time.
    fn flush_due(&self) -> bool {
        self.writer.unacked_bytes() > self.config.max_pending_bytes
            || self.last_flush.elapsed() >= self.config.flush_interval
    }

    async fn on_event(
        &mut self,
        event: SourceEvent,
        permit: CachePermit,
        cache: &EventCache,
    ) -> Result<(), PipelineError> {
        match event {
            SourceEvent::Transaction(txn) => {
                if txn.commit_ts <= CommitTs::from(self.start.ts) {
                    // Already downstream (a source that resumed coarsely).
                    return Ok(());
                }
                self.on_transaction(txn, permit).await?;
                let count_bound = self.config.event_cache_count.max(1);
                // Rows held behind barriers fill half the cache: pass the
                // barriers now.
                let held_full =
                    self.held_bytes * 2 > cache.budget() || self.held_parts * 2 > count_bound;
                if held_full || self.flush_due() {
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
                } else {
                    self.elsewhere.passed(ddl.commit_ts);
                }
            }
            SourceEvent::End => {}
        }
        Ok(())
    }

    fn dispatcher(&mut self, schema: &Arc<TableSchema>) -> usize {
        if let Some(&at) = self.by_table.get(&schema.table_id) {
            return at;
        }
        self.dispatchers
            .push(Dispatcher::new(schema.clone(), self.barriers.first()));
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
        // A transaction is held whole when any of its tables waits for a
        // barrier: its rows in other tables are not written before the DDL
        // while these wait behind it (no half transaction downstream; a child
        // row never goes ahead of its parent), and those tables' later rows
        // wait too.
        // Its later parts wait for the barrier its first ones waited for, as
        // long as that barrier has not passed (a flush point may pass it
        // between two parts, releasing those parts: the rest goes on too).
        let waits_for = match self.open_parts_held {
            Some(barrier) if split && self.barriers.first().is_some_and(|b| b <= barrier) => {
                Some(barrier)
            }
            _ => self.waits_for(&tables),
        };
        self.open_parts_held = if more { waits_for } else { None };
        let bounds = self.bounds();
        for changes in tables {
            self.progress.rows_read += changes.len() as u64;
            let at = self.dispatcher(changes.schema());
            let d = &mut self.dispatchers[at];
            d.rows_in += changes.len() as u64;
            if let Some(waits_for) = waits_for {
                // Above a barrier that has not passed: wait for it, keeping the
                // cache bytes (the cache stays bounded).
                self.held_parts += 1;
                self.held_bytes += changes.wire_bytes();
                d.hold(Held {
                    commit_ts,
                    id,
                    waits_for,
                    changes,
                    split,
                    _permit: permit.take(),
                });
                continue;
            }
            d.push(commit_ts, id, changes, split, bounds, &mut self.writer)
                .await?;
        }
        if more {
            // Its commit ts is not read through until its last part is in.
            return Ok(());
        }
        // Every row of the transaction is in a batch, written, or held.
        self.read_through = self.read_through.max(commit_ts);
        self.positions.record(commit_ts, position);
        Ok(())
    }

    /// The barrier a transaction touching `tables` must wait for, if any: the
    /// latest pending one, or what the held rows of one of its tables wait
    /// for (a table's rows stay in order).
    fn waits_for(&self, tables: &[TableChanges]) -> Option<Barrier> {
        if self.barriers.is_empty() && self.held_parts == 0 {
            return None;
        }
        let mut waits = self.barriers.last();
        for changes in tables {
            let held = self
                .by_table
                .get(&changes.schema().table_id)
                .and_then(|&at| self.dispatchers[at].last_held());
            waits = waits.max(held);
        }
        waits
    }

    /// A DDL is a barrier for every table (see the `barrier` module): rows
    /// above it are held until it is applied, at the next flush point, after
    /// the rows below it were written and flushed.
    fn on_ddl(&mut self, ddl: DdlEvent) {
        self.read_through = self.read_through.max(ddl.commit_ts);
        let barrier = self.barriers.push(ddl);
        for d in &mut self.dispatchers {
            d.block(barrier);
        }
    }

    /// A flush point: write every table's batch, flush, and apply the DDLs
    /// (each one releases the rows held behind it, which may need another
    /// round).
    async fn flush_point(&mut self) -> Result<(), PipelineError> {
        self.flush_and_apply(false).await?;
        self.unflushed = false;
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Writes and flushes, then applies the DDLs whose rows below are all
    /// flushed. A DDL across captures waits for the others to flush theirs:
    /// until a later flush point (the loop goes on meanwhile: stops, swaps),
    /// or, at the end of the run (`wait`), here.
    async fn flush_and_apply(&mut self, wait: bool) -> Result<(), PipelineError> {
        loop {
            self.emit_all().await?;
            self.flush().await?;
            let Some(next) = self.barriers.first() else {
                return Ok(());
            };
            if wait {
                self.elsewhere.reach(next.ts()).await?;
            } else if !self.elsewhere.ready(next.ts())? {
                return Ok(());
            }
            let ddl = self.barriers.pop().expect("the first barrier");
            // Every row below it is written and flushed, here and on the
            // captures running the other tables: apply it (retrying into a
            // fresh sink like any call).
            self.writer.apply_ddl(&ddl).await?;
            self.elsewhere.passed(ddl.commit_ts);
            self.release(Barrier::Ddl(ddl.commit_ts)).await?;
        }
    }

    /// After `passed`: each table waits for the next barrier, if any, and the
    /// held rows that waited for it (or for an earlier one) go on, in order.
    async fn release(&mut self, passed: Barrier) -> Result<(), PipelineError> {
        let (next, bounds) = (self.barriers.first(), self.bounds());
        for d in &mut self.dispatchers {
            let (parts, bytes) = d.release(passed, next, bounds, &mut self.writer).await?;
            self.held_parts -= parts;
            self.held_bytes -= bytes;
        }
        Ok(())
    }

    /// Filter and write every table's batch, several tables in one write while
    /// they fit the batch bounds together.
    async fn emit_all(&mut self) -> Result<(), PipelineError> {
        let bounds = self.bounds();
        let (mut schemas, mut batch, mut rows, mut bytes) = (Vec::new(), Batch::default(), 0, 0);
        for d in &mut self.dispatchers {
            let Some((schema, table, b)) = d.take_batch() else {
                continue;
            };
            let n = table.len();
            if !batch.tables.is_empty() && (rows + n > bounds.rows || bytes + b > bounds.bytes) {
                self.writer
                    .write(std::mem::take(&mut schemas), std::mem::take(&mut batch))
                    .await?;
                (rows, bytes) = (0, 0);
            }
            schemas.push(schema);
            batch.tables.push(table);
            rows += n;
            bytes += b;
        }
        if !batch.tables.is_empty() {
            self.writer.write(schemas, batch).await?;
        }
        self.publish();
        Ok(())
    }

    /// Ask the sink to make everything read so far durable; on success the
    /// checkpoint moves to the minimum over the tables of what each has
    /// written. Call it after `emit_all`.
    async fn flush(&mut self) -> Result<(), PipelineError> {
        self.writer.flush(self.read_through).await?;
        let read_through = self.read_through;
        let checkpoint = changefeed_checkpoint(
            self.writer.flushed(),
            self.dispatchers
                .iter()
                .map(|d| d.written_through(read_through))
                .chain(self.elsewhere.saved()),
            self.barriers.ts(),
        );
        if CheckpointTs::from(checkpoint) > self.progress.checkpoint_ts {
            self.progress.checkpoint_ts = CheckpointTs::from(checkpoint);
            self.writer.checkpoint = self.progress.checkpoint_ts;
            self.positions.advance(checkpoint);
            if let Some(fence) = &self.fence {
                fence.checkpoint(checkpoint);
            }
        }
        self.publish();
        if self.writer.save_due() {
            self.save_checkpoint().await?;
        }
        Ok(())
    }

    async fn save_checkpoint(&mut self) -> Result<(), PipelineError> {
        let checkpoint = self.checkpoint();
        self.writer
            .save_checkpoint(&checkpoint, self.progress.resolved_ts)
            .await?;
        if checkpoint.ts > self.progress.saved_checkpoint_ts {
            self.progress.saved_checkpoint_ts = checkpoint.ts;
            self.publish();
        }
        Ok(())
    }

    /// Replaces the sink at a barrier (see the `swap` module).
    async fn swap_sink(&mut self, request: SwapRequest<K>) -> Result<(), PipelineError> {
        let started = Instant::now();
        let SwapRequest {
            sink,
            probation,
            reply,
        } = request;
        if let Some(error) = self.writer.refuse_sink_swap() {
            let _ = reply.send(Err(SwapRefused {
                plugin: sink,
                error,
            }));
            return Ok(());
        }
        // Everything read so far is written and flushed by the old sink.
        let flushed = self.flush_point().await;
        let (old, replayed) = match self.writer.swap_sink(sink, flushed).await? {
            SinkSwap::Refused { new, error } => {
                let _ = reply.send(Err(SwapRefused { plugin: new, error }));
                return Ok(());
            }
            SinkSwap::Swapped { old, replayed } => (old, replayed),
        };
        if replayed.is_some() {
            self.flush_point().await?;
        }
        let swapped = Swapped {
            old: self.writer.keep_old_sink(old, probation),
            barrier: self.progress.checkpoint_ts,
            replayed_batches: replayed.unwrap_or(0),
            pause: started.elapsed(),
        };
        tracing::info!(sink = self.writer.sink().name(), barrier = %swapped.barrier, pause_ms = swapped.pause.as_millis() as u64, replayed_batches = swapped.replayed_batches, "Sink swapped.");
        let _ = reply.send(Ok(swapped));
        Ok(())
    }

    /// Replaces filter `index` at a barrier (see [`FilterSwapRequest`]).
    async fn swap_filter(&mut self, request: FilterSwapRequest<F>) -> Result<(), PipelineError> {
        let started = Instant::now();
        let FilterSwapRequest {
            index,
            filter,
            probation,
            reply,
        } = request;
        if let Some(error) = self.writer.refuse_filter_swap(index) {
            let _ = reply.send(Err(SwapRefused {
                plugin: filter,
                error,
            }));
            return Ok(());
        }
        // Everything the old filter transformed is written and flushed.
        self.flush_point().await?;
        let old = match self.writer.swap_filter(index, filter, probation).await {
            Ok(old) => old,
            Err((filter, error)) => {
                let _ = reply.send(Err(SwapRefused {
                    plugin: filter,
                    error,
                }));
                return Ok(());
            }
        };
        let swapped = Swapped {
            old,
            barrier: self.progress.checkpoint_ts,
            replayed_batches: 0,
            pause: started.elapsed(),
        };
        tracing::info!(filter = self.writer.filter_name(index), index, barrier = %swapped.barrier, pause_ms = swapped.pause.as_millis() as u64, "Filter swapped.");
        let _ = reply.send(Ok(swapped));
        Ok(())
    }

    fn publish(&mut self) {
        if let Some(stats) = &self.source_stats {
            use std::sync::atomic::Ordering::Relaxed;
            self.progress.source_events = stats.events.load(Relaxed);
            self.progress.source_skipped_statements = stats.skipped_statements.load(Relaxed);
            self.progress.source_time_ms = stats.upstream_millis.load(Relaxed);
        }
        let w = &self.writer.stats;
        self.progress.rows_written = w.rows_written;
        self.progress.bytes_written = w.bytes_written;
        self.progress.retries = w.retries;
        if let Some(fence) = &self.fence {
            self.progress.redo = Some(fence.subscribe().borrow().clone());
            self.progress.redo_waiting = fence.waiting() as u64;
        }
        if self
            .tables_published
            .is_none_or(|at| at.elapsed() >= TABLE_ROWS_EVERY)
        {
            self.tables_published = Some(Instant::now());
            // A table created again has a second dispatcher under its name.
            let mut rows: BTreeMap<&str, u64> = BTreeMap::new();
            for d in &self.dispatchers {
                *rows.entry(&d.name).or_default() += d.rows_in;
            }
            self.progress.table_rows = Arc::new(
                rows.into_iter()
                    .map(|(name, n)| (name.to_string(), n))
                    .collect(),
            );
        }
        self.progress_tx.send_replace(self.progress.clone());
    }
}

/// The next message of `rx`, or never when there is no channel (or it closed).
async fn next_message<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(r) => match r.recv().await {
            Some(message) => Some(message),
            None => {
                *rx = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// The redo writer published a new status; never, without redo.
async fn redo_advanced(
    status: &mut Option<watch::Receiver<RedoStatus>>,
) -> Result<(), watch::error::RecvError> {
    match status {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

/// Tells `logged` the redo log's durable resolved ts each time it moves,
/// until the writer is gone.
async fn forward_durable(mut status: watch::Receiver<RedoStatus>, logged: watch::Sender<u64>) {
    loop {
        let durable = status.borrow_and_update().resolved_ts.get();
        logged.send_if_modified(|at| {
            let later = durable > *at;
            *at = (*at).max(durable);
            later
        });
        if status.changed().await.is_err() {
            return;
        }
    }
}
