//! The redo side of a changefeed with `[consistent] level = "eventual"`.
//!
//! The pipeline hands every event, as the cache gives it, to a [`Fence`]:
//! a copy goes to the redo writer task, which appends it to the log and makes
//! it durable (by size or by time, whichever first: never by a fixed row
//! count), and the event itself waits in the fence until the log's durable
//! resolved ts has passed it. The writer publishes that ts on a watch channel
//! after each flush; the pipeline then takes the events at or below it, in
//! order, one event at a time (a run of transactions the fence cuts through
//! is split at the fence), and dispatches them as it does without redo. So
//! the sink never sees an event above the redo resolved ts persisted in the
//! meta, and the meta's checkpoint (the sink's, sent back) never passes it.
//!
//! Memory: events waiting at the fence keep their event-cache bytes (the
//! sink's share; a run of transactions keeps one of the cache's slots, not
//! one per transaction), and copies handed to the writer take bytes of the
//! redo share until their flush is durable; a slow store fills the share and
//! the pipeline waits, which stops the source: nothing is dropped. The writer
//! never waits for the pipeline: it flushes when the events appended since
//! its last flush fill a quarter of its share or of the cache's bytes, or
//! half the cache's slots (the source would stop for them), and a flush in
//! flight gives its memory back when it is durable, so the two cannot
//! deadlock, and a fast source is not held to one cache-full per flush
//! interval.
//!
//! Encoding happens on the writer task and each flush's writes on a task of
//! their own (the storage's blocking writes on the blocking pool), never on
//! the pipeline's; the next events are encoded while a flush is written.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{CommitTs, DdlEvent, SourceEvent, Transaction, TransactionRun};
use sluice_redo::{Flushed, LogError, LogWriter, Sealed};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

use crate::cache::{CachePermit, Item};
use crate::error::PipelineError;

/// How the redo writer flushes and how much memory it may take.
#[derive(Debug, Clone)]
pub struct RedoConfig {
    /// Appended records are written out at least this often.
    pub flush_interval: Duration,
    /// The meta is written this often when only the resolved ts or the
    /// checkpoint moved.
    pub meta_flush_interval: Duration,
    /// Appended records are written out once this many bytes are pending.
    pub max_log_size: usize,
    /// Bytes of events handed to the writer and not durable yet, at most.
    pub memory_bytes: usize,
    /// Remove files wholly below the checkpoint (`retention = "checkpoint"`).
    pub collect_garbage: bool,
}

impl From<&sluice_config::ConsistentConfig> for RedoConfig {
    /// The writer's settings of a validated `[consistent]` (the memory share
    /// is the caller's to set: it is a part of the event cache's bound).
    fn from(c: &sluice_config::ConsistentConfig) -> Self {
        Self {
            flush_interval: Duration::from_millis(c.flush_interval),
            meta_flush_interval: Duration::from_millis(c.meta_flush_interval),
            max_log_size: usize::try_from(c.max_log_size.0).unwrap_or(usize::MAX),
            memory_bytes: 32 << 20,
            collect_garbage: c.retention == sluice_config::RedoRetention::Checkpoint,
        }
    }
}

/// A changefeed's redo log, ready to be written: give it to
/// [`crate::Pipeline::with_redo`].
pub struct RedoLog {
    writer: LogWriter,
    config: RedoConfig,
}

impl RedoLog {
    /// The log `writer` writes, flushed as `config` says.
    pub fn new(writer: LogWriter, config: RedoConfig) -> Self {
        Self { writer, config }
    }

    /// A run that starts at `checkpoint` logs again what the log holds
    /// above it ([`LogWriter::rewind_to`]).
    pub(crate) async fn rewind_to(&mut self, checkpoint: u64) -> Result<(), PipelineError> {
        self.writer.rewind_to(checkpoint).await.map_err(|e| {
            PipelineError::Redo(format!("the redo log cannot go back to {checkpoint}: {e}"))
        })
    }
}

/// What the redo writer has made durable, and how it went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RedoStatus {
    /// The meta's resolved ts: every event at or below it is in the log.
    pub resolved_ts: CommitTs,
    /// The meta's checkpoint ts.
    pub checkpoint_ts: CommitTs,
    /// Bytes written (files and meta).
    pub bytes_written: u64,
    /// Flushes done, and the time they took in all.
    pub flushes: u64,
    /// Time spent in flushes.
    pub flush_time: Duration,
    /// Time the writer was busy: appending, or a flush being written (the two
    /// overlap; counted once).
    pub busy_time: Duration,
    /// The last write that failed (it is tried again), until one succeeds.
    pub failing: Option<String>,
    /// Why the writer stopped for good (the changefeed fails).
    pub fatal: Option<String>,
}

/// An event copied to the writer, with the redo bytes it holds.
struct ToLog {
    event: Logged,
    permit: Option<OwnedSemaphorePermit>,
}

enum Logged {
    Transaction(Transaction),
    /// Shared with the event cache's item, not copied.
    Run(Arc<TransactionRun>),
    Ddl(DdlEvent),
    Resolved(CommitTs),
    /// Write out what is appended now (the source ended).
    FlushNow,
}

/// The pipeline's side of the redo log: events wait here until the log has
/// them (see the module docs).
pub(crate) struct Fence {
    tee: RedoTee,
    status: watch::Receiver<RedoStatus>,
    checkpoint: watch::Sender<CommitTs>,
    /// Events handed to the log, waiting for the fence, in source order.
    waiting: VecDeque<(CommitTs, Item, CachePermit)>,
    /// Every event at or below this was handed to the log.
    appended_through: CommitTs,
    task: Option<JoinHandle<()>>,
    /// Closed when the fence goes: the writer writes nothing more, not even
    /// a flush it had under way (the next run may have opened the log).
    retired: sluice_core::WriteFence,
}

/// The source's side of the redo log: every event the source reads is copied
/// to the writer as it is read, before it waits in the event cache, so that
/// the log runs ahead of a sink that is slow or hung (by the cache's share of
/// memory at most). Waits while the redo share is full: that stops the
/// source, never drops.
#[derive(Clone)]
pub(crate) struct RedoTee {
    tx: mpsc::UnboundedSender<ToLog>,
    budget: Arc<Semaphore>,
    budget_bytes: usize,
    status: watch::Receiver<RedoStatus>,
}

impl RedoTee {
    /// Copies `item` to the log (waiting for room in the redo share).
    pub(crate) async fn log(&self, item: &Item) -> Result<(), PipelineError> {
        let (event, bytes) = match item {
            Item::Run(run) => (Logged::Run(run.share()), run.wire_bytes()),
            Item::Event(Ok(SourceEvent::Transaction(t))) => {
                (Logged::Transaction(t.clone()), t.wire_bytes())
            }
            Item::Event(Ok(SourceEvent::Ddl(ddl))) => (Logged::Ddl(ddl.clone()), 0),
            Item::Event(Ok(SourceEvent::Resolved(ts))) => {
                (Logged::Resolved(CommitTs::from(*ts)), 0)
            }
            // It goes once everything before it is durable.
            Item::Event(Ok(SourceEvent::End)) => (Logged::FlushNow, 0),
            // The run ends with it: nothing after it is read.
            Item::Event(Err(_)) => return Ok(()),
        };
        let permit = if bytes == 0 {
            None
        } else {
            let n = bytes.min(self.budget_bytes) as u32;
            Some(
                self.budget
                    .clone()
                    .acquire_many_owned(n)
                    .await
                    .expect("the budget is never closed"),
            )
        };
        self.tx.send(ToLog { event, permit }).map_err(|_| {
            PipelineError::Redo(
                self.status
                    .borrow()
                    .fatal
                    .clone()
                    .unwrap_or_else(|| "the redo writer stopped".into()),
            )
        })
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.retired.close();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Fence {
    /// Starts the writer task of `log`; the sink's checkpoint is
    /// `checkpoint`, and the event cache holds `cache_events` events and
    /// `cache_bytes` bytes at most: the writer flushes when half of either
    /// waits for it (the fence holds them, so waiting for the interval would
    /// stop the source).
    pub(crate) fn start(
        mut log: RedoLog,
        checkpoint: CommitTs,
        cache_events: usize,
        cache_bytes: usize,
    ) -> Self {
        let retired = sluice_core::WriteFence::open();
        log.writer.retire_with(retired.clone());
        let budget_bytes = log.config.memory_bytes.max(1);
        let budget = Arc::new(Semaphore::new(budget_bytes));
        let meta = log.writer.meta();
        let (status_tx, status) = watch::channel(RedoStatus {
            resolved_ts: CommitTs::new(meta.resolved_ts),
            checkpoint_ts: CommitTs::new(meta.checkpoint_ts),
            ..RedoStatus::default()
        });
        let (checkpoint_tx, checkpoint_rx) = watch::channel(checkpoint);
        let (tx, rx) = mpsc::unbounded_channel();
        let cache = CacheBound {
            events: cache_events.max(1),
            bytes: cache_bytes.max(1),
        };
        let writing = write_log(log, cache, rx, checkpoint_rx, status_tx);
        let task = match writers() {
            Some(writers) => writers.spawn(writing),
            None => tokio::spawn(writing),
        };
        Self {
            tee: RedoTee {
                tx,
                budget,
                budget_bytes,
                status: status.clone(),
            },
            status,
            checkpoint: checkpoint_tx,
            waiting: VecDeque::new(),
            appended_through: checkpoint,
            task: Some(task),
            retired,
        }
    }

    /// Watch the writer's status (it changes after each flush).
    pub(crate) fn subscribe(&self) -> watch::Receiver<RedoStatus> {
        self.status.clone()
    }

    /// The durable redo resolved ts: events at or below it may go to the sink.
    pub(crate) fn durable(&self) -> CommitTs {
        self.status.borrow().resolved_ts
    }

    /// Why the writer stopped, if it did.
    pub(crate) fn fatal(&self) -> Option<String> {
        self.status.borrow().fatal.clone()
    }

    /// Events waiting for the fence.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The sink's checkpoint moved (the meta's follows, never past the
    /// resolved ts).
    pub(crate) fn checkpoint(&self, ts: CommitTs) {
        self.checkpoint.send_if_modified(|c| {
            let moved = ts > *c;
            *c = (*c).max(ts);
            moved
        });
    }

    /// The copier the source side uses (see [`RedoTee`]).
    pub(crate) fn tee(&self) -> RedoTee {
        self.tee.clone()
    }

    /// Hand `item` to the log (waiting while the redo share is full) and keep
    /// it until the fence passes it: [`RedoTee::log`], then [`Fence::hold`].
    #[cfg(test)]
    pub(crate) async fn admit(
        &mut self,
        item: Item,
        permit: CachePermit,
    ) -> Result<(), PipelineError> {
        self.tee.log(&item).await?;
        self.hold(item, permit);
        Ok(())
    }

    /// Keep `item`, which the source side has copied to the log already (in
    /// this same order), until the fence passes it.
    pub(crate) fn hold(&mut self, item: Item, mut permit: CachePermit) {
        // A run waits here on one slot of the event cache: its transactions
        // share its columns and its bytes bound it, so the slots go back and
        // the source reads on while the log is written (else a cache of N
        // slots would let the source run only N transactions per flush).
        if let Item::Run(run) = &item {
            drop(permit.split(0, run.len().saturating_sub(1)));
        }
        let ts = match &item {
            Item::Run(run) => run
                .transactions
                .last()
                .map_or(CommitTs::ZERO, |t| t.commit_ts),
            Item::Event(Ok(SourceEvent::Transaction(t))) => t.commit_ts,
            Item::Event(Ok(SourceEvent::Ddl(ddl))) => ddl.commit_ts,
            Item::Event(Ok(SourceEvent::Resolved(ts))) => CommitTs::from(*ts),
            Item::Event(Ok(SourceEvent::End)) => {
                let at = self.appended_through;
                self.waiting.push_back((at, item, permit));
                return;
            }
            Item::Event(Err(_)) => {
                self.waiting.push_back((CommitTs::ZERO, item, permit));
                return;
            }
        };
        // A part of a transaction that comes in parts is not read through
        // until its last part is (the writer counts it so too).
        let counts = !matches!(&item, Item::Event(Ok(SourceEvent::Transaction(t))) if t.more);
        if counts {
            self.appended_through = self.appended_through.max(ts);
        }
        self.waiting.push_back((ts, item, permit));
    }

    /// The next event the fence has passed, in order; a run the fence cuts
    /// through is split into its transactions, those at or below it first.
    pub(crate) fn next_passed(&mut self) -> Option<(Item, CachePermit)> {
        let durable = self.durable();
        let (ts, item, _) = self.waiting.front()?;
        if let Item::Run(run) = item
            && *ts > durable
            && run
                .transactions
                .first()
                .is_some_and(|t| t.commit_ts <= durable)
        {
            let (_, item, mut permit) = self.waiting.pop_front().expect("checked");
            let Item::Run(run) = item else {
                unreachable!("checked")
            };
            let txns = run.into_inner().into_transactions();
            for txn in txns.into_iter().rev() {
                let own = permit.split(txn.wire_bytes(), 1);
                self.waiting.push_front((
                    txn.commit_ts,
                    Item::Event(Ok(SourceEvent::Transaction(txn))),
                    own,
                ));
            }
        }
        let (ts, _, _) = self.waiting.front()?;
        if *ts > durable {
            return None;
        }
        self.waiting
            .pop_front()
            .map(|(_, item, permit)| (item, permit))
    }

    /// Stop the writer after it wrote out what it has; its last status.
    pub(crate) async fn close(mut self) -> RedoStatus {
        let (tx, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.tee.tx, tx));
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.status.borrow().clone()
    }
}

/// The runtime the redo writers run on, the process's own (started on first
/// use; `None`, and the caller's runtime then, if the system refuses its
/// threads). Apart from the pipeline's runtime because a writer is woken by
/// its source once per event: on one runtime the wake-up puts the writer in
/// the source's worker's next-task slot, which no other worker takes, so the
/// source and the writer's encoding shared one core while the other idled
/// (measured: one worker busy 408 ms of a 650 ms run, a core 49% idle).
fn writers() -> Option<&'static tokio::runtime::Runtime> {
    static WRITERS: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    WRITERS
        .get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4));
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("sluice-redo")
                .enable_all()
                .build()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "Cannot start the redo writers' threads; they share the pipeline's.");
                })
                .ok()
        })
        .as_ref()
}

/// The event cache's bounds, which the events waiting for the log fill.
#[derive(Clone, Copy)]
struct CacheBound {
    events: usize,
    bytes: usize,
}

/// The slots of the event cache `event` holds while it waits at the fence:
/// one (a run too, see [`Fence::hold`]), none for a flush request.
fn events_of(event: &Logged) -> usize {
    usize::from(!matches!(event, Logged::FlushNow))
}

/// A sealed flush after its write, and how the write went.
type Written = (Sealed, Result<Flushed, LogError>);

/// A flush being written, and the events it makes durable.
struct InFlight {
    /// Polled by the writer task itself: a task of its own would wait behind
    /// the writer (in its worker's next-task slot, which no other worker
    /// takes) for as long as events keep coming, and its completion would be
    /// noticed a scheduling round late.
    write: Pin<Box<dyn Future<Output = Written> + Send>>,
    /// The copies (and their share of the redo memory) it writes.
    held: Vec<ToLog>,
    started: Instant,
}

/// The write of `sealed` (its blocking part runs on the blocking pool), so
/// that appending goes on meanwhile.
fn write_sealed(mut sealed: Sealed, held: Vec<ToLog>, started: Instant) -> InFlight {
    InFlight {
        write: Box::pin(async move {
            let result = sealed.write().await;
            (sealed, result)
        }),
        held,
        started,
    }
}

/// The writer task: append what comes, flush by size or time, publish what is
/// durable. It flushes early when the events appended since the last flush
/// fill a quarter of the event cache's bytes or of the redo share (whichever
/// is less), or half its slots: they wait at the fence, and a full cache
/// stops the source, so waiting for the interval then would only idle both
/// (an unthrottled source would wait a whole interval per cache-full). With
/// one flush in flight of that size and the next filling, about half the
/// bound waits at a time, in flushes of even size (measured against flushing
/// at half the bound counting the flight: 0.94x the run's time on 1 M rows,
/// a fifth less memory). A flush is written on a task of its own while the next
/// events are appended (one flush in flight at a time, so that a meta never
/// lands before the files of the flushes before it): encoding and the
/// storage's writes overlap. A failed write is tried again (with a growing
/// pause) until it succeeds, the events kept; meanwhile the redo share fills
/// and the pipeline waits.
async fn write_log(
    log: RedoLog,
    cache: CacheBound,
    mut rx: mpsc::UnboundedReceiver<ToLog>,
    mut checkpoint: watch::Receiver<CommitTs>,
    status: watch::Sender<RedoStatus>,
) {
    let RedoLog { mut writer, config } = log;
    // Appended since the last seal.
    let mut held: Vec<ToLog> = Vec::new();
    let mut held_bytes = 0usize;
    let mut held_events = 0usize;
    let early_bytes = config.memory_bytes.min(cache.bytes);
    // Under load a file holds what one early flush takes.
    writer.expect_file_size((early_bytes / 4).min(config.max_log_size));
    let mut in_flight: Option<InFlight> = None;
    let mut flush_due = false;
    let mut pause = Duration::from_millis(50);
    let mut data_tick = tokio::time::interval(config.flush_interval);
    let mut meta_tick = tokio::time::interval(config.meta_flush_interval);
    for tick in [&mut data_tick, &mut meta_tick] {
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut stats = RedoStatus {
        resolved_ts: CommitTs::new(writer.meta().resolved_ts),
        checkpoint_ts: CommitTs::new(writer.meta().checkpoint_ts),
        ..RedoStatus::default()
    };
    let mut flushes_since_gc = 0u32;
    let mut open = true;
    while open
        || in_flight.is_some()
        || writer.pending_bytes() > 0
        || writer.appended_through() > writer.meta().resolved_ts
    {
        tokio::select! {
            biased;
            (sealed, result) = async { (&mut in_flight.as_mut().expect("checked").write).await },
                if in_flight.is_some() =>
            {
                let flight = in_flight.take().expect("checked");
                match result {
                    Ok(flushed) => {
                        writer.sealed(sealed);
                        let elapsed = flight.started.elapsed();
                        stats.bytes_written += flushed.bytes;
                        stats.failing = None;
                        stats.flushes += 1;
                        stats.flush_time += elapsed;
                        // Appending while a write was in flight is not
                        // counted again (busy is the time either ran).
                        stats.busy_time += elapsed;
                        stats.resolved_ts = CommitTs::new(writer.meta().resolved_ts);
                        stats.checkpoint_ts = CommitTs::new(writer.meta().checkpoint_ts);
                        pause = Duration::from_millis(50);
                        // What the flush made durable gives its share back.
                        drop(flight.held);
                        status.send_replace(stats.clone());
                        flushes_since_gc += 1;
                        if config.collect_garbage && flushes_since_gc >= 32 {
                            flushes_since_gc = 0;
                            let started = Instant::now();
                            if let Err(e) = writer.collect_garbage().await {
                                tracing::warn!(error = %e, "Removing redo log files below the checkpoint failed.");
                            }
                            stats.busy_time += started.elapsed();
                        }
                    }
                    Err(e @ LogError::TooLarge(_)) => {
                        stats.fatal = Some(format!("the redo log cannot be written: {e}"));
                        status.send_replace(stats);
                        return;
                    }
                    Err(e) => {
                        let why = format!("writing the redo log failed (trying again): {e}");
                        tracing::warn!(error = %e, "Writing the redo log failed; trying again.");
                        stats.failing = Some(why);
                        status.send_replace(stats.clone());
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(5));
                        // The same files, under the same names.
                        in_flight = Some(write_sealed(sealed, flight.held, flight.started));
                        continue;
                    }
                }
            }
            message = rx.recv(), if open => {
                let started = Instant::now();
                match message {
                    None => { open = false; flush_due = true; }
                    Some(m) => {
                        let bytes = m.permit.as_ref().map_or(0, |p| p.num_permits());
                        let appended = match &m.event {
                            Logged::Transaction(t) => writer.append_transaction(t),
                            Logged::Run(r) => writer.append_run(r),
                            Logged::Ddl(d) => writer.append_ddl(d),
                            Logged::Resolved(ts) => { writer.resolved(ts.get()); Ok(()) }
                            Logged::FlushNow => { flush_due = true; Ok(()) }
                        };
                        if let Err(e) = appended {
                            stats.fatal = Some(format!("the redo log cannot take an event: {e}"));
                            status.send_replace(stats);
                            return;
                        }
                        held_bytes += bytes;
                        held_events += events_of(&m.event);
                        held.push(m);
                        flush_due |= writer.pending_bytes() >= config.max_log_size
                            || held_bytes * 4 >= early_bytes
                            || held_events * 2 >= cache.events;
                    }
                }
                if in_flight.is_none() {
                    stats.busy_time += started.elapsed();
                }
            }
            _ = data_tick.tick() => flush_due |= writer.pending_bytes() > 0,
            _ = meta_tick.tick() => {
                // Only the resolved ts or the checkpoint moved: the meta alone.
                let meta = writer.meta();
                flush_due |= in_flight.is_none()
                    && writer.pending_bytes() == 0
                    && (writer.appended_through() > meta.resolved_ts
                        || checkpoint.borrow().get() > meta.checkpoint_ts);
            }
            Ok(()) = checkpoint.changed(), if open => {}
        }
        if !flush_due || in_flight.is_some() {
            continue;
        }
        flush_due = false;
        let started = Instant::now();
        let cp = checkpoint.borrow_and_update().get();
        // Sealing counts in the flush's time.
        let sealed = writer.seal(cp);
        (held_bytes, held_events) = (0, 0);
        in_flight = Some(write_sealed(sealed, std::mem::take(&mut held), started));
        data_tick.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Column, ColumnType, Op, TableSchema, Value};

    fn txn(ts: u64) -> Transaction {
        let schema = Arc::new(TableSchema {
            table_id: 1,
            version: 1,
            schema_name: "shop".into(),
            table_name: "t".into(),
            columns: vec![Column {
                name: "id".into(),
                ty: ColumnType::Int,
                sql_type: String::new(),
                nullable: false,
                key: true,
            }],
        });
        let mut t = Transaction::new(CommitTs::new(ts));
        t.table(&schema)
            .push_values(Op::Insert, None, Some(&[Value::Int(ts as i64)]));
        t
    }

    /// A fence whose durable ts the test sets (no writer task).
    fn fence() -> (
        Fence,
        watch::Sender<RedoStatus>,
        mpsc::UnboundedReceiver<ToLog>,
    ) {
        let (status_tx, status) = watch::channel(RedoStatus::default());
        let (checkpoint, _) = watch::channel(CommitTs::ZERO);
        let (tx, rx) = mpsc::unbounded_channel();
        let fence = Fence {
            tee: RedoTee {
                tx,
                budget: Arc::new(Semaphore::new(1 << 20)),
                budget_bytes: 1 << 20,
                status: status.clone(),
            },
            status,
            checkpoint,
            waiting: VecDeque::new(),
            appended_through: CommitTs::ZERO,
            task: None,
            retired: sluice_core::WriteFence::open(),
        };
        (fence, status_tx, rx)
    }

    fn durable(status: &watch::Sender<RedoStatus>, ts: u64) {
        status.send_modify(|s| s.resolved_ts = CommitTs::new(ts));
    }

    fn ts_of(item: &Item) -> Vec<u64> {
        match item {
            Item::Run(run) => run.transactions.iter().map(|t| t.commit_ts.get()).collect(),
            Item::Event(Ok(SourceEvent::Transaction(t))) => vec![t.commit_ts.get()],
            Item::Event(Ok(SourceEvent::Resolved(ts))) => vec![ts.get()],
            Item::Event(Ok(SourceEvent::End)) => vec![u64::MAX],
            _ => vec![],
        }
    }

    #[tokio::test]
    async fn the_rows_of_a_run_below_the_fence_go_on_while_its_later_rows_wait() {
        let (mut fence, status, mut log) = fence();
        let mut run = TransactionRun::new();
        for ts in [10, 20, 30, 40] {
            run.push(txn(ts)).unwrap();
        }
        fence
            .admit(Item::Run(run.into()), CachePermit::none())
            .await
            .unwrap();
        fence
            .admit(
                Item::Event(Ok(SourceEvent::Resolved(sluice_core::ResolvedTs::new(45)))),
                CachePermit::none(),
            )
            .await
            .unwrap();
        // The log got both, at once.
        assert!(
            matches!(log.try_recv().unwrap().event, Logged::Run(r) if r.transactions.len() == 4)
        );
        assert!(matches!(log.try_recv().unwrap().event, Logged::Resolved(ts) if ts.get() == 45));
        // Nothing is durable: nothing goes on.
        assert!(fence.next_passed().is_none());
        // The fence at 25: the run's first two transactions go on, one by one;
        // 30 and 40 wait.
        durable(&status, 25);
        let passed: Vec<Vec<u64>> = std::iter::from_fn(|| fence.next_passed())
            .map(|(item, _)| ts_of(&item))
            .collect();
        assert_eq!(passed, [vec![10], vec![20]]);
        assert_eq!(fence.waiting(), 3);
        // At 40 the rest of the run; the resolved mark at 45 still waits.
        durable(&status, 40);
        let passed: Vec<Vec<u64>> = std::iter::from_fn(|| fence.next_passed())
            .map(|(item, _)| ts_of(&item))
            .collect();
        assert_eq!(passed, [vec![30], vec![40]]);
        durable(&status, 45);
        assert_eq!(ts_of(&fence.next_passed().unwrap().0), [45]);
        // A run wholly below the fence goes on whole.
        let mut run = TransactionRun::new();
        for ts in [50, 60] {
            run.push(txn(ts)).unwrap();
        }
        fence
            .admit(Item::Run(run.into()), CachePermit::none())
            .await
            .unwrap();
        durable(&status, 70);
        assert_eq!(ts_of(&fence.next_passed().unwrap().0), [50, 60]);
        // The source's end asks for a flush and goes once what came before it
        // is durable.
        fence
            .admit(Item::Event(Ok(SourceEvent::End)), CachePermit::none())
            .await
            .unwrap();
        assert!(matches!(log.try_recv().unwrap().event, Logged::Run(_)));
        assert!(matches!(log.try_recv().unwrap().event, Logged::FlushNow));
        assert_eq!(ts_of(&fence.next_passed().unwrap().0), [u64::MAX]);
    }

    #[tokio::test]
    async fn a_run_is_shared_with_the_log_not_copied_and_passes_the_fence_unshared() {
        let (mut fence, status, mut log) = fence();
        let mut run = TransactionRun::new();
        for ts in [10, 20] {
            run.push(txn(ts)).unwrap();
        }
        fence
            .admit(Item::Run(run.into()), CachePermit::none())
            .await
            .unwrap();
        let logged = log.try_recv().unwrap();
        let Logged::Run(shared) = &logged.event else {
            panic!("a run")
        };
        assert_eq!(
            Arc::strong_count(shared),
            2,
            "the log holds the fence's run, not a copy"
        );
        // The writer lets go of what a flush made durable before it says so.
        drop(logged);
        durable(&status, 20);
        let (Item::Run(mut passed), _) = fence.next_passed().unwrap() else {
            panic!("a run")
        };
        assert!(passed.get_mut().is_some(), "nobody else holds it");
        assert_eq!(ts_of(&Item::Run(passed)), [10, 20]);
    }

    #[tokio::test]
    async fn the_parts_of_a_large_transaction_wait_until_its_last_part_is_durable() {
        let (mut fence, status, _log) = fence();
        for more in [true, true, false] {
            let mut t = txn(10);
            t.more = more;
            fence
                .admit(
                    Item::Event(Ok(SourceEvent::Transaction(t))),
                    CachePermit::none(),
                )
                .await
                .unwrap();
        }
        // Only the last part counts as read through.
        assert_eq!(fence.appended_through, CommitTs::new(10));
        durable(&status, 9);
        assert!(fence.next_passed().is_none());
        durable(&status, 10);
        assert_eq!(std::iter::from_fn(|| fence.next_passed()).count(), 3);
    }
}
