//! Tests of the pipeline against in-memory fakes of the sink and filters (the
//! side-effect context), so that failure, replay and checkpoint paths can be
//! driven step by step without WASM. The source is the deterministic
//! `DatagenSource`; what it should deliver comes from draining a second,
//! identical generator.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use sluice_core::{
    Batch, Checkpoint, CheckpointTs, CommitTs, DdlEvent, FLAG_REPLAY, FLAG_SPLIT, Filter, Op,
    PluginError, ResumeError, Row, Sink, Source, SourceEvent, TableBatch, TableSchema, Transaction,
    Value,
};
use sluice_source::{DatagenConfig, DatagenSource};
use tokio::sync::watch;

use crate::{Pipeline, PipelineConfig, PipelineError, Progress, Report};

// ---------------------------------------------------------------------------
// Row identity
// ---------------------------------------------------------------------------

/// What identifies one row change: table, key (column 0 of its image), op and
/// commit ts, plus the row version datagen keeps in the last column (one
/// transaction may update the same key twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct RowId {
    table_id: u32,
    key: i64,
    version: i64,
    op: u8,
    commit_ts: u64,
}

impl RowId {
    fn of(commit_ts: CommitTs, table: &TableSchema, row: &Row<'_>) -> Self {
        // Inserts and updates are identified by their after image, deletes by their before image.
        let image = row.image();
        Self {
            table_id: table.table_id,
            key: int(&image[0]),
            version: int(image.last().expect("datagen images end with a version")),
            op: row.op.code(),
            commit_ts: commit_ts.get(),
        }
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(x) => *x,
        Value::UInt(x) => *x as i64,
        other => panic!("expected an integer key or version, got {other:?}"),
    }
}

/// The rows of a table batch as (commit ts, flags, row id).
fn row_changes(table: &TableBatch, schema: &TableSchema) -> Vec<(CommitTs, u8, RowId)> {
    table
        .rows()
        .map(|row| {
            let ts = CommitTs::new(table.commit_ts[row.index]);
            (ts, table.flags[row.index], RowId::of(ts, schema, &row))
        })
        .collect()
}

fn schema_of<'a>(
    schemas: &'a [Arc<TableSchema>],
    table: &TableBatch,
) -> Option<&'a Arc<TableSchema>> {
    schemas
        .iter()
        .find(|s| s.table_id == table.table_id && s.version == table.schema_version)
}

// ---------------------------------------------------------------------------
// Fakes
// ---------------------------------------------------------------------------

/// One row as the sink received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Delivered {
    row: RowId,
    flags: u8,
    /// Index of the `write` call that carried it.
    write_call: usize,
}

impl Delivered {
    fn replay(&self) -> bool {
        self.flags & FLAG_REPLAY != 0
    }

    fn split(&self) -> bool {
        self.flags & FLAG_SPLIT != 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Write,
    Flush,
}

/// A sink call that failed on schedule, and the state it failed in.
#[derive(Debug, Clone)]
struct Failure {
    call: Call,
    /// `write` calls made so far (the failed one included).
    writes_so_far: usize,
    /// The checkpoint the pipeline had published when the call failed.
    checkpoint: CheckpointTs,
    /// The highest ts this sink had acknowledged when the call failed.
    acked: u64,
}

/// A sink that keeps rows in memory: `write` buffers, a successful `flush(ts)`
/// makes buffered rows with commit ts <= ts durable, and any failure loses the
/// buffer (as a real sink's would be lost with its instance).
#[derive(Default)]
struct MemorySink {
    /// Times the instance was released while idle, and written to again
    /// after (a fresh instance each time).
    idle_releases: usize,
    reopened: usize,
    released: bool,
    /// Releases while rows were written but not flushed (there must be none).
    released_unflushed: usize,
    /// `write` call index -> the error that call fails with.
    fail_writes: HashMap<usize, PluginError>,
    /// `flush` call index -> the error that call fails with.
    fail_flushes: HashMap<usize, PluginError>,
    write_calls: usize,
    flush_calls: usize,
    /// When each `flush` call came (tokio time, so paused tests measure it).
    flush_times: Vec<tokio::time::Instant>,
    opens: usize,
    /// The next `open` fails with this.
    fail_open: Option<PluginError>,
    closed: bool,
    /// Every row ever received, in write order, replays included.
    delivered: Vec<Delivered>,
    /// Received since the last successful flush.
    buffered: Vec<Delivered>,
    /// Acknowledged by a successful flush, in write order.
    durable: Vec<Delivered>,
    /// The ts of each successful flush.
    flushes: Vec<u64>,
    /// Rows per successful write.
    batch_rows: Vec<usize>,
    /// Table batches that failed `TableBatch::validate`.
    malformed: Vec<String>,
    failures: Vec<Failure>,
    /// Highest ts acknowledged by a successful flush, readable from other tasks.
    acked: Arc<AtomicU64>,
    /// The pipeline's progress, set once the pipeline exists.
    probe: Arc<OnceLock<watch::Receiver<Progress>>>,
    /// (published checkpoint, highest acknowledged ts) at the start of every call.
    observed: Vec<(u64, u64)>,
    /// Commit ts of every row the source generates (one entry per row), if known:
    /// every call then checks that all rows at or below the published checkpoint
    /// are durable here.
    expected_ts: Option<Vec<u64>>,
    /// Checkpoints published while rows at or below them were not durable.
    unbacked_checkpoints: Vec<u64>,
    /// The next `apply_ddl` fails with this.
    fail_next_ddl: Option<PluginError>,
    /// Applied DDL: (its ts, rows delivered so far, highest acknowledged ts).
    ddls: Vec<(u64, usize, u64)>,
    /// `apply_ddl` takes this long.
    ddl_delay: Option<Duration>,
    /// The progress store's log, to check fences against writes.
    store_log: Option<Arc<std::sync::Mutex<StoreLog>>>,
    /// Rows written above the fence saved at the time.
    above_fence: Vec<u64>,
    /// Every `write` takes this long.
    write_delay: Option<Duration>,
    /// The redo log's meta file: every call reads what is persisted there.
    redo_meta: Option<std::path::PathBuf>,
    /// Rows and DDLs the sink got above the redo resolved ts persisted then
    /// (shared: a shadow candidate is moved into its own task).
    above_redo: Arc<std::sync::Mutex<Vec<u64>>>,
    /// Redo metas read whose checkpoint was above their resolved ts.
    bad_redo_metas: Vec<(u64, u64)>,
}

impl MemorySink {
    fn fail_write(mut self, call: usize, error: PluginError) -> Self {
        self.fail_writes.insert(call, error);
        self
    }

    fn fail_flush(mut self, call: usize, error: PluginError) -> Self {
        self.fail_flushes.insert(call, error);
        self
    }

    fn checkpoint(&self) -> CheckpointTs {
        self.probe
            .get()
            .map(|rx| rx.borrow().checkpoint_ts)
            .unwrap_or_default()
    }

    /// The redo resolved ts persisted now (0 before the first meta).
    fn redo_resolved(&mut self) -> u64 {
        let Some(path) = &self.redo_meta else {
            return u64::MAX;
        };
        let Ok(bytes) = std::fs::read(path) else {
            return 0;
        };
        let meta = sluice_redo::Meta::decode(&bytes).expect("the meta is whole");
        if meta.checkpoint_ts > meta.resolved_ts {
            self.bad_redo_metas
                .push((meta.checkpoint_ts, meta.resolved_ts));
        }
        meta.resolved_ts
    }

    fn observe(&mut self) {
        let checkpoint = self.checkpoint().get();
        if let Some(expected) = &self.expected_ts {
            let want = expected.iter().filter(|&&ts| ts <= checkpoint).count();
            let have = self
                .durable
                .iter()
                .filter(|d| d.row.commit_ts <= checkpoint)
                .map(|d| d.row)
                .collect::<HashSet<_>>()
                .len();
            if have < want {
                self.unbacked_checkpoints.push(checkpoint);
            }
        }
        self.observed
            .push((checkpoint, self.acked.load(Ordering::SeqCst)));
    }

    fn fail(&mut self, call: Call, error: PluginError) -> Result<(), PluginError> {
        self.buffered.clear();
        self.failures.push(Failure {
            call,
            writes_so_far: self.write_calls,
            checkpoint: self.checkpoint(),
            acked: self.acked.load(Ordering::SeqCst),
        });
        Err(error)
    }

    fn durable_ids(&self) -> Vec<RowId> {
        self.durable.iter().map(|d| d.row).collect()
    }
}

impl Sink for MemorySink {
    fn name(&self) -> &str {
        "memory"
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        self.observe();
        if let Some(error) = self.fail_open.take() {
            return Err(error);
        }
        self.opens += 1;
        // A fresh instance starts with an empty buffer.
        self.buffered.clear();
        Ok(())
    }

    async fn write(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        self.observe();
        if self.released {
            // A fresh instance, as the runtime makes at the next call.
            self.released = false;
            self.reopened += 1;
            self.buffered.clear();
        }
        let call = self.write_calls;
        self.write_calls += 1;
        if let Some(error) = self.fail_writes.remove(&call) {
            return self.fail(Call::Write, error);
        }
        if let Some(delay) = self.write_delay {
            tokio::time::sleep(delay).await;
        }
        self.batch_rows.push(batch.row_count());
        let redo = self.redo_resolved();
        for t in &batch.tables {
            self.above_redo
                .lock()
                .unwrap()
                .extend(t.commit_ts.iter().filter(|&&ts| ts > redo));
        }
        if let Some(log) = &self.store_log {
            let fence = log.lock().unwrap().fences.last().copied().unwrap_or(0);
            for t in &batch.tables {
                self.above_fence
                    .extend(t.commit_ts.iter().filter(|&&ts| ts > fence));
            }
        }
        for table in &batch.tables {
            let Some(schema) = schema_of(schemas, table) else {
                self.malformed.push(format!(
                    "table {} v{} has no schema",
                    table.table_id, table.schema_version
                ));
                continue;
            };
            if let Err(e) = table.validate(schema) {
                self.malformed.push(e.to_string());
            }
            for (_, flags, row) in row_changes(table, schema) {
                let delivered = Delivered {
                    row,
                    flags,
                    write_call: call,
                };
                self.delivered.push(delivered);
                self.buffered.push(delivered);
            }
        }
        Ok(())
    }

    async fn flush(&mut self, ts: CommitTs) -> Result<(), PluginError> {
        self.observe();
        let call = self.flush_calls;
        self.flush_calls += 1;
        self.flush_times.push(tokio::time::Instant::now());
        if let Some(error) = self.fail_flushes.remove(&call) {
            return self.fail(Call::Flush, error);
        }
        let (done, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.buffered)
            .into_iter()
            .partition(|d| d.row.commit_ts <= ts.get());
        self.durable.extend(done);
        self.buffered = rest;
        self.flushes.push(ts.get());
        self.acked.fetch_max(ts.get(), Ordering::SeqCst);
        Ok(())
    }

    async fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), PluginError> {
        self.observe();
        if let Some(error) = self.fail_next_ddl.take() {
            self.buffered.clear();
            return Err(error);
        }
        if let Some(delay) = self.ddl_delay {
            tokio::time::sleep(delay).await;
        }
        if ddl.commit_ts.get() > self.redo_resolved() {
            self.above_redo.lock().unwrap().push(ddl.commit_ts.get());
        }
        self.ddls.push((
            ddl.commit_ts.get(),
            self.delivered.len(),
            self.acked.load(Ordering::SeqCst),
        ));
        Ok(())
    }

    async fn close(&mut self) -> Result<(), PluginError> {
        self.closed = true;
        Ok(())
    }

    async fn release_idle(&mut self) {
        if !self.buffered.is_empty() {
            self.released_unflushed += 1;
        }
        self.idle_releases += 1;
        self.released = true;
    }
}

/// Drops every delete.
#[derive(Default)]
struct DropDeletes {
    calls: usize,
}

impl Filter for DropDeletes {
    fn name(&self) -> &str {
        "drop-deletes"
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        Ok(())
    }

    async fn transform(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        self.calls += 1;
        for table in &mut batch.tables {
            let schema = schema_of(schemas, table).ok_or_else(|| {
                PluginError::Fatal(format!("no schema for table {}", table.table_id))
            })?;
            *table = table.select(schema, |row| row.op != Op::Delete);
        }
        Ok(())
    }
}

/// Passes batches through unchanged; transform call `fail_at` fails retryably.
struct FailingFilter {
    fail_at: usize,
    calls: usize,
}

impl Filter for FailingFilter {
    fn name(&self) -> &str {
        "failing"
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        Ok(())
    }

    async fn transform(
        &mut self,
        _schemas: &[Arc<TableSchema>],
        _batch: &mut Batch,
    ) -> Result<(), PluginError> {
        let call = self.calls;
        self.calls += 1;
        if call == self.fail_at {
            return Err(PluginError::Retryable("filter instance busy".into()));
        }
        Ok(())
    }
}

fn no_filters() -> Vec<DropDeletes> {
    Vec::new()
}

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

fn workload(total_rows: u64) -> DatagenConfig {
    DatagenConfig {
        total_rows,
        rate: 0,
        ..DatagenConfig::default()
    }
}

/// The transactions `source` generates, drained from a second identical generator.
fn transactions(source: &DatagenConfig) -> Vec<Transaction> {
    let mut generator = DatagenSource::new(source.clone()).expect("valid datagen config");
    std::iter::from_fn(|| generator.next_transaction()).collect()
}

fn row_ids(txns: &[Transaction]) -> Vec<RowId> {
    let ids: Vec<RowId> = txns
        .iter()
        .flat_map(|t| t.rows().map(|(s, r)| RowId::of(t.commit_ts, s, &r)))
        .collect();
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "row ids must identify rows for these tests to mean anything"
    );
    ids
}

/// Rows grouped by table, each table's rows in the order given.
fn per_table(rows: impl IntoIterator<Item = RowId>) -> BTreeMap<u32, Vec<RowId>> {
    let mut tables: BTreeMap<u32, Vec<RowId>> = BTreeMap::new();
    for row in rows {
        tables.entry(row.table_id).or_default().push(row);
    }
    tables
}

/// Rows per `schema.table`.
fn counts_by_name(txns: &[Transaction], keep: impl Fn(&Row<'_>) -> bool) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (schema, row) in txns.iter().flat_map(Transaction::rows) {
        if keep(&row) {
            *counts.entry(schema.qualified_name()).or_default() += 1;
        }
    }
    counts
}

/// Small backoffs, no timed flushes (flushes come from `max_pending_bytes`, so the
/// schedule of sink calls is deterministic).
fn config() -> PipelineConfig {
    PipelineConfig {
        flush_interval: Duration::from_secs(3600),
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
        ..PipelineConfig::default()
    }
}

async fn run_pipeline<F: Filter + 'static>(
    config: PipelineConfig,
    filters: Vec<F>,
    sink: MemorySink,
    source: DatagenConfig,
    shutdown: impl Future<Output = ()>,
) -> (Pipeline<MemorySink, F>, Result<Report, PipelineError>) {
    let probe = sink.probe.clone();
    let mut pipeline = Pipeline::new(config, filters, sink, CheckpointTs::ZERO);
    probe
        .set(pipeline.progress())
        .expect("the probe is set once");
    let source = DatagenSource::new(source).expect("valid datagen config");
    let result = pipeline.run(source, shutdown).await;
    (pipeline, result)
}

/// Every delivery of a row after its first is flagged replay and follows a
/// failure whose checkpoint the row is above.
fn check_replays(sink: &MemorySink) -> Result<usize, String> {
    let mut seen = HashSet::new();
    let mut redelivered = 0;
    for d in &sink.delivered {
        if seen.insert(d.row) {
            continue;
        }
        redelivered += 1;
        if !d.replay() {
            return Err(format!("{d:?} was delivered again without the replay flag"));
        }
        let failure = sink
            .failures
            .iter()
            .rev()
            .find(|f| f.writes_so_far <= d.write_call)
            .ok_or_else(|| format!("{d:?} was delivered again with no failure before it"))?;
        if d.row.commit_ts <= failure.checkpoint.get() {
            return Err(format!(
                "{d:?} was replayed but is at or below the checkpoint {}",
                failure.checkpoint
            ));
        }
    }
    Ok(redelivered)
}

/// Each row's first durable occurrence, per table, in order.
fn first_durable_per_table(sink: &MemorySink) -> BTreeMap<u32, Vec<RowId>> {
    let mut seen = HashSet::new();
    per_table(
        sink.durable
            .iter()
            .map(|d| d.row)
            .filter(|r| seen.insert(*r)),
    )
}

fn is_sorted_by_commit_ts(tables: &BTreeMap<u32, Vec<RowId>>) -> bool {
    tables
        .values()
        .all(|rows| rows.windows(2).all(|w| w[0].commit_ts <= w[1].commit_ts))
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test]
async fn delivers_every_generated_row_once_in_commit_ts_order_without_failures() {
    let source = workload(3000);
    let txns = transactions(&source);
    let expected = row_ids(&txns);
    let last_ts = txns.last().unwrap().commit_ts.get();
    let config = PipelineConfig {
        max_batch_rows: 100,
        max_pending_bytes: 20_000,
        ..config()
    };

    let (pipeline, result) = run_pipeline(
        config,
        no_filters(),
        MemorySink::default(),
        source,
        std::future::pending(),
    )
    .await;
    let report = result.expect("the pipeline succeeds");
    let sink = pipeline.sink();

    assert_eq!(per_table(sink.durable_ids()), per_table(expected.clone()));
    assert_eq!(sink.delivered.len(), 3000, "nothing was written twice");
    assert!(sink.buffered.is_empty());
    assert!(
        sink.durable.iter().all(|d| d.flags == 0),
        "no replay (or split) flags"
    );
    assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);
    assert!(
        sink.batch_rows.iter().all(|&n| (1..=100).contains(&n)),
        "{:?}",
        sink.batch_rows
    );
    assert!(
        sink.flushes.len() > 1,
        "max_pending_bytes forced intermediate flushes"
    );
    assert!(
        sink.flushes.windows(2).all(|w| w[0] < w[1]),
        "{:?}",
        sink.flushes
    );
    assert_eq!(sink.flushes.last(), Some(&last_ts));
    assert_eq!((sink.opens, sink.closed), (1, true));

    assert_eq!(report.progress.checkpoint_ts, CheckpointTs::new(last_ts));
    assert_eq!(report.progress.rows_read, 3000);
    assert_eq!(report.progress.rows_written, 3000);
    assert_eq!(report.progress.transactions, txns.len() as u64);
    assert_eq!(report.progress.retries, 0);
    assert!(!report.interrupted);
    let counts = counts_by_name(&txns, |_| true);
    assert_eq!(counts.len(), 3);
    assert_eq!(report.rows_in, counts);
    assert_eq!(report.rows_out, counts);
}

#[tokio::test]
async fn the_checkpoint_waits_for_the_tables_run_elsewhere() {
    let source = workload(2000);
    let txns = transactions(&source);
    let last_ts = txns.last().unwrap().commit_ts.get();
    let held_at = txns[txns.len() / 3].commit_ts.get();
    let (elsewhere_tx, elsewhere) = watch::channel((0, 0));
    let (behind_tx, behind) = watch::channel((last_ts, last_ts));
    // Flushed further than saved: the checkpoint waits for the saved one.
    elsewhere_tx.send_replace((last_ts, held_at));
    let config = PipelineConfig {
        max_batch_rows: 100,
        max_pending_bytes: 20_000,
        ..config()
    };
    let sink = MemorySink::default();
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO)
        .with_tables_elsewhere(crate::Elsewhere {
            durable: vec![elsewhere, behind],
            across: watch::channel(0).1,
            passed: watch::channel(0).0,
            log: None,
        });
    let generator = DatagenSource::new(source).expect("valid datagen config");
    let report = pipeline
        .run(generator, std::future::pending())
        .await
        .expect("the pipeline succeeds");
    // Every row reached this sink; the checkpoint stopped where the other
    // capture's durable ts is (the lowest of the two captures').
    assert_eq!(pipeline.sink().durable_ids().len(), 2000);
    assert_eq!(report.progress.checkpoint_ts, CheckpointTs::new(held_at));
    drop((elsewhere_tx, behind_tx));
}

#[tokio::test]
async fn replays_unacknowledged_batches_into_a_fresh_sink_after_a_retryable_failure() {
    let source = workload(2000);
    let txns = transactions(&source);
    let expected = row_ids(&txns);
    let config = PipelineConfig {
        max_batch_rows: 50,
        max_pending_bytes: 10_000,
        ..config()
    };
    let sink = MemorySink::default()
        .fail_write(7, PluginError::Stopped("instance trapped".into()))
        .fail_flush(3, PluginError::Stopped("connection reset".into()));

    let (pipeline, result) =
        run_pipeline(config, no_filters(), sink, source, std::future::pending()).await;
    let report = result.expect("retryable failures are retried");
    let sink = pipeline.sink();

    let kinds: Vec<Call> = sink.failures.iter().map(|f| f.call).collect();
    assert_eq!(
        kinds.len(),
        2,
        "both scheduled failures happened: {kinds:?}"
    );
    assert!(kinds.contains(&Call::Write) && kinds.contains(&Call::Flush));
    for f in &sink.failures {
        assert_eq!(
            f.checkpoint,
            CheckpointTs::new(f.acked),
            "the checkpoint is what the sink acknowledged: {f:?}"
        );
    }
    assert!(
        sink.failures
            .iter()
            .any(|f| f.checkpoint > CheckpointTs::ZERO),
        "a failure after a flush"
    );

    // Every row is durable exactly once, in commit-ts order per table: what was
    // lost with the failed instance was replayed, what was acknowledged was not.
    assert_eq!(per_table(sink.durable_ids()), per_table(expected.clone()));
    assert!(is_sorted_by_commit_ts(&first_durable_per_table(sink)));
    let redelivered = check_replays(sink).unwrap();
    assert!(
        redelivered > 0,
        "the failures made the pipeline replay rows"
    );
    assert!(sink.durable.iter().any(Delivered::replay));
    assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);

    assert_eq!(report.progress.retries, 2);
    assert_eq!(sink.opens, 3, "one fresh instance per failure");
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(txns.last().unwrap().commit_ts)
    );
    assert_eq!(
        report.progress.rows_written, 2000,
        "replays are not counted as new rows"
    );
}

#[tokio::test]
async fn fatal_sink_error_fails_the_pipeline() {
    let source = workload(2000);
    let expected = row_ids(&transactions(&source));
    let config = PipelineConfig {
        max_batch_rows: 50,
        max_pending_bytes: 10_000,
        ..config()
    };
    let sink = MemorySink::default().fail_write(6, PluginError::Fatal("disk on fire".into()));

    let (pipeline, result) =
        run_pipeline(config, no_filters(), sink, source, std::future::pending()).await;
    match result {
        Err(PipelineError::Sink(PluginError::Fatal(message))) => {
            assert_eq!(message, "disk on fire")
        }
        other => panic!("expected the fatal sink error, got {other:?}"),
    }
    let progress = pipeline.progress().borrow().clone();
    let sink = pipeline.sink();
    assert_eq!(progress.retries, 0);
    assert_eq!(
        (sink.opens, sink.write_calls, sink.closed),
        (1, 7, false),
        "no retry, no replay"
    );
    // What was acknowledged before the failure stays durable, and nothing else.
    assert!(progress.checkpoint_ts > CheckpointTs::ZERO);
    let acknowledged = expected
        .iter()
        .copied()
        .filter(|r| r.commit_ts <= progress.checkpoint_ts.get());
    assert_eq!(per_table(sink.durable_ids()), per_table(acknowledged));
}

#[tokio::test(start_paused = true)]
async fn a_failing_flush_backs_off_doubling_like_a_failing_write() {
    let source = workload(200);
    let config = PipelineConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(5),
        max_retries: 8,
        ..config()
    };
    let mut sink = MemorySink::default();
    for call in 0..7 {
        sink = sink.fail_flush(call, PluginError::Stopped("connection reset".into()));
    }
    let (pipeline, result) =
        run_pipeline(config, no_filters(), sink, source, std::future::pending()).await;
    result.unwrap();
    let gaps: Vec<u128> = pipeline
        .sink()
        .flush_times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    // Seven failures, then success: waits of 100 ms doubling up to 5 s.
    assert_eq!(
        gaps[..7],
        [100, 200, 400, 800, 1600, 3200, 5000],
        "{gaps:?}"
    );
    assert_eq!(pipeline.progress().borrow().retries, 7);
}

#[tokio::test(start_paused = true)]
async fn a_flush_that_keeps_failing_fails_after_max_retries() {
    let source = workload(200);
    let config = PipelineConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(5),
        max_retries: 3,
        ..config()
    };
    let mut sink = MemorySink::default();
    for call in 0..100 {
        sink = sink.fail_flush(call, PluginError::Stopped("connection reset".into()));
    }
    let (pipeline, result) =
        run_pipeline(config, no_filters(), sink, source, std::future::pending()).await;
    assert!(matches!(result, Err(PipelineError::Sink(_))), "{result:?}");
    assert_eq!(pipeline.sink().flush_calls, 4, "the call and three retries");
}

#[tokio::test]
async fn config_error_is_not_retried() {
    let source = workload(2000);
    let expected = row_ids(&transactions(&source));
    let config = PipelineConfig {
        max_batch_rows: 50,
        max_pending_bytes: 10_000,
        ..config()
    };
    let sink = MemorySink::default().fail_flush(
        1,
        PluginError::Config("table `shop.users` is not mapped".into()),
    );

    let (pipeline, result) =
        run_pipeline(config, no_filters(), sink, source, std::future::pending()).await;
    match result {
        Err(PipelineError::Sink(PluginError::Config(message))) => {
            assert!(message.contains("not mapped"))
        }
        other => panic!("expected the config error, got {other:?}"),
    }
    let progress = pipeline.progress().borrow().clone();
    let sink = pipeline.sink();
    assert_eq!(progress.retries, 0);
    assert_eq!((sink.opens, sink.flush_calls), (1, 2));
    assert_eq!(progress.checkpoint_ts, CheckpointTs::new(sink.flushes[0]));
    let acknowledged = expected
        .iter()
        .copied()
        .filter(|r| r.commit_ts <= sink.flushes[0]);
    assert_eq!(per_table(sink.durable_ids()), per_table(acknowledged));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_never_passes_an_unacknowledged_ts() {
    let source = workload(3000);
    let txns = transactions(&source);
    let config = PipelineConfig {
        max_batch_rows: 40,
        max_pending_bytes: 8_000,
        ..config()
    };
    let sink = MemorySink {
        expected_ts: Some(
            txns.iter()
                .flat_map(|t| std::iter::repeat_n(t.commit_ts.get(), t.row_count()))
                .collect(),
        ),
        ..MemorySink::default()
    }
    .fail_flush(2, PluginError::Stopped("connection reset".into()))
    .fail_write(20, PluginError::Retryable("throttled".into()));
    let acked = sink.acked.clone();
    let probe = sink.probe.clone();
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO);
    probe.set(pipeline.progress()).unwrap();

    // Watch every published checkpoint from another thread while the pipeline runs.
    let mut rx = pipeline.progress();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while rx.changed().await.is_ok() {
            let checkpoint = rx.borrow_and_update().checkpoint_ts.get();
            seen.push((checkpoint, acked.load(Ordering::SeqCst)));
        }
        seen
    });
    let report = pipeline
        .run(DatagenSource::new(source).unwrap(), std::future::pending())
        .await
        .expect("retryable failures are retried");
    let sink = pipeline.sink();
    let (observed, flushes, failures) = (
        sink.observed.clone(),
        sink.flushes.clone(),
        sink.failures.len(),
    );
    // Every row at or below each published checkpoint was durable when it was seen.
    assert!(
        sink.unbacked_checkpoints.is_empty(),
        "{:?}",
        sink.unbacked_checkpoints
    );
    drop(pipeline);
    let seen = watcher.await.unwrap();

    assert_eq!(failures, 2);
    assert!(flushes.len() > 3);
    for (name, pairs) in [("sink calls", &observed), ("watcher", &seen)] {
        assert!(
            pairs.iter().any(|&(checkpoint, _)| checkpoint > 0),
            "{name} saw the checkpoint move"
        );
        for &(checkpoint, acked) in pairs {
            assert!(
                checkpoint <= acked,
                "{name}: checkpoint {checkpoint} passed the acknowledged {acked}"
            );
            assert!(
                checkpoint == 0 || flushes.contains(&checkpoint),
                "{name}: {checkpoint} was never flushed"
            );
        }
        assert!(
            pairs.windows(2).all(|w| w[0].0 <= w[1].0),
            "{name}: the checkpoint went back"
        );
    }
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(txns.last().unwrap().commit_ts)
    );
}

#[tokio::test]
async fn filter_drops_rows_before_the_sink() {
    let source = workload(1500);
    let txns = transactions(&source);
    let kept = txns.iter().flat_map(|t| {
        t.rows()
            .filter(|(_, r)| r.op != Op::Delete)
            .map(|(s, r)| RowId::of(t.commit_ts, s, &r))
    });
    let config = PipelineConfig {
        max_batch_rows: 64,
        ..config()
    };

    let (pipeline, result) = run_pipeline(
        config,
        vec![DropDeletes::default()],
        MemorySink::default(),
        source,
        std::future::pending(),
    )
    .await;
    let report = result.expect("the pipeline succeeds");
    let sink = pipeline.sink();

    assert_eq!(per_table(sink.durable_ids()), per_table(kept));
    assert!(sink.delivered.iter().all(|d| d.row.op != Op::Delete.code()));
    assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);
    assert_eq!(
        pipeline.filters()[0].calls,
        sink.write_calls,
        "every batch was filtered once"
    );

    let rows_in = counts_by_name(&txns, |_| true);
    let rows_out = counts_by_name(&txns, |r| r.op != Op::Delete);
    assert_eq!(report.rows_in, rows_in);
    assert_eq!(report.rows_out, rows_out);
    for (table, n_in) in &rows_in {
        assert!(
            rows_out[table] < *n_in,
            "{table}: the workload has deletes to drop"
        );
    }
    assert_eq!(report.progress.rows_read, 1500);
    assert_eq!(report.progress.rows_written, rows_out.values().sum::<u64>());
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(txns.last().unwrap().commit_ts)
    );
}

#[tokio::test]
async fn retryable_filter_failure_is_retried() {
    let source = workload(1000);
    let expected = row_ids(&transactions(&source));
    let config = PipelineConfig {
        max_batch_rows: 64,
        ..config()
    };
    let filter = FailingFilter {
        fail_at: 3,
        calls: 0,
    };

    let (pipeline, result) = run_pipeline(
        config,
        vec![filter],
        MemorySink::default(),
        source,
        std::future::pending(),
    )
    .await;
    let report = result.expect("a retryable filter failure is retried");
    let sink = pipeline.sink();

    assert_eq!(per_table(sink.durable_ids()), per_table(expected));
    assert_eq!(
        sink.delivered.len(),
        1000,
        "the batch went to the sink once, after the retry"
    );
    assert!(sink.delivered.iter().all(|d| d.flags == 0));
    assert_eq!(report.progress.retries, 1);
    assert_eq!(pipeline.filters()[0].calls, sink.write_calls + 1);
    assert_eq!(sink.opens, 1, "a filter failure does not restart the sink");
}

#[tokio::test]
async fn large_transaction_is_split_and_flagged() {
    let source = DatagenConfig {
        max_txn_rows: 10,
        ..workload(600)
    };
    let txns = transactions(&source);
    // Per (transaction, table): a transaction's rows of one table travel in one
    // batch unless they exceed the batch bound.
    let size: HashMap<(u64, u32), usize> = txns
        .iter()
        .flat_map(|t| {
            t.tables
                .iter()
                .map(|c| ((t.commit_ts.get(), c.schema().table_id), c.len()))
        })
        .collect();
    assert!(size.values().any(|&n| n > 3) && size.values().any(|&n| n <= 3));
    let config = PipelineConfig {
        max_batch_rows: 3,
        ..config()
    };

    let (pipeline, result) = run_pipeline(
        config,
        no_filters(),
        MemorySink::default(),
        source,
        std::future::pending(),
    )
    .await;
    result.expect("the pipeline succeeds");
    let sink = pipeline.sink();

    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
    assert!(
        sink.batch_rows.iter().all(|&n| n <= 3),
        "{:?}",
        sink.batch_rows
    );
    for d in &sink.durable {
        let n = size[&(d.row.commit_ts, d.row.table_id)];
        assert_eq!(d.split(), n > 3, "a row of a {n}-row table part: {d:?}");
        assert!(!d.replay());
    }
    let mut calls: HashMap<(u64, u32), HashSet<usize>> = HashMap::new();
    for d in &sink.durable {
        calls
            .entry((d.row.commit_ts, d.row.table_id))
            .or_default()
            .insert(d.write_call);
    }
    for (key, n) in &size {
        assert_eq!(
            calls[key].len() > 1,
            *n > 3,
            "transaction part {key:?} of {n} rows"
        );
    }
}

#[tokio::test]
async fn transaction_split_by_the_byte_bound_is_flagged() {
    let source = DatagenConfig {
        max_txn_rows: 6,
        ..workload(600)
    };
    let txns = transactions(&source);
    let config = PipelineConfig {
        max_batch_rows: 1000,
        max_batch_bytes: 600,
        ..config()
    };

    let (pipeline, result) = run_pipeline(
        config,
        no_filters(),
        MemorySink::default(),
        source,
        std::future::pending(),
    )
    .await;
    result.expect("the pipeline succeeds");
    let sink = pipeline.sink();

    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
    // Per (transaction, table): one table's rows of a transaction in several writes.
    let mut calls: HashMap<(u64, u32), HashSet<usize>> = HashMap::new();
    for d in &sink.durable {
        calls
            .entry((d.row.commit_ts, d.row.table_id))
            .or_default()
            .insert(d.write_call);
    }
    let split: HashSet<(u64, u32)> = calls
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .map(|(ts, _)| *ts)
        .collect();
    assert!(!split.is_empty(), "the byte bound split some transactions");
    for d in sink
        .durable
        .iter()
        .filter(|d| split.contains(&(d.row.commit_ts, d.row.table_id)))
    {
        assert!(
            d.split(),
            "a row of a transaction spread over several batches is not flagged: {d:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_flushes_what_was_read() {
    // Slow enough that 200 ms of (paused, auto-advancing) time reads a few hundred rows.
    let source = DatagenConfig {
        rate: 1000,
        ..workload(1_000_000)
    };
    let mut generator = DatagenSource::new(source.clone()).unwrap();
    let config = PipelineConfig {
        max_batch_rows: 32,
        flush_interval: Duration::from_millis(50),
        ..config()
    };
    let shutdown = tokio::time::sleep(Duration::from_millis(200));

    let (pipeline, result) = run_pipeline(
        config,
        no_filters(),
        MemorySink::default(),
        source,
        shutdown,
    )
    .await;
    let report = result.expect("the pipeline stops cleanly");
    let sink = pipeline.sink();

    assert!(report.interrupted);
    let read = report.progress.rows_read;
    assert!(read > 0 && read < 1_000_000, "{read} rows read");
    // The transactions read are a prefix of what the generator produces.
    let mut prefix = Vec::new();
    let mut rows = 0;
    while rows < read {
        let txn = generator.next_transaction().unwrap();
        rows += txn.row_count() as u64;
        prefix.push(txn);
    }
    assert_eq!(rows, read, "whole transactions were read");
    assert_eq!(report.progress.transactions, prefix.len() as u64);

    let last_ts = prefix.last().unwrap().commit_ts.get();
    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&prefix)));
    assert!(sink.buffered.is_empty());
    assert_eq!(report.progress.checkpoint_ts, CheckpointTs::new(last_ts));
    assert_eq!(sink.flushes.last(), Some(&last_ts));
    assert!(
        sink.flushes.len() > 1,
        "the ticker flushed before the shutdown"
    );
    assert!(sink.closed);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn any_failure_schedule_loses_no_row(
        write_failure in proptest::option::of(0usize..40),
        flush_failure in proptest::option::of(0usize..10),
        stopped in any::<bool>(),
        max_batch_rows in 1usize..64,
        max_pending_bytes in 0usize..16_000,
        total_rows in 50u64..400,
        seed in any::<u64>(),
    ) {
        let source = DatagenConfig { seed, ..workload(total_rows) };
        let txns = transactions(&source);
        let expected = row_ids(&txns);
        let error = |what: &str| if stopped {
            PluginError::Stopped(what.to_string())
        } else {
            PluginError::Retryable(what.to_string())
        };
        let mut sink = MemorySink::default();
        if let Some(call) = write_failure {
            sink = sink.fail_write(call, error("write failed"));
        }
        if let Some(call) = flush_failure {
            sink = sink.fail_flush(call, error("flush failed"));
        }
        let config = PipelineConfig { max_batch_rows, max_pending_bytes, ..config() };

        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let (pipeline, result) = runtime.block_on(run_pipeline(
            config,
            no_filters(),
            sink,
            source,
            std::future::pending(),
        ));
        let report = result.map_err(|e| TestCaseError::fail(format!("pipeline failed: {e:?}")))?;
        let sink = pipeline.sink();

        let first = first_durable_per_table(sink);
        prop_assert_eq!(&first, &per_table(expected.clone()), "every row durable, in commit-ts order per table");
        prop_assert!(is_sorted_by_commit_ts(&first));
        prop_assert_eq!(sink.durable.len(), expected.len(), "and only once: acknowledged rows are not replayed");
        check_replays(sink).map_err(TestCaseError::fail)?;
        prop_assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);
        let reached = usize::from(write_failure.is_some_and(|c| c < sink.write_calls))
            + usize::from(flush_failure.is_some_and(|c| c < sink.flush_calls));
        prop_assert_eq!(sink.failures.len(), reached);
        prop_assert_eq!(report.progress.retries, reached as u64);
        prop_assert_eq!(report.progress.checkpoint_ts, CheckpointTs::from(txns.last().unwrap().commit_ts));
    }
}

/// Datagen with one DDL event injected right after the `after`-th transaction.
struct WithDdl {
    inner: DatagenSource,
    after: u64,
    seen: u64,
    pending: Option<DdlEvent>,
    /// The DDL's table (empty: the whole schema).
    table: String,
    /// Or the tables it names.
    tables: Vec<(String, String)>,
}

impl Source for WithDdl {
    type Error = <DatagenSource as Source>::Error;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        if let Some(ddl) = self.pending.take() {
            return Ok(SourceEvent::Ddl(ddl));
        }
        let event = self.inner.next_event().await?;
        if let SourceEvent::Transaction(txn) = &event {
            self.seen += 1;
            if self.seen == self.after {
                self.pending = Some(DdlEvent {
                    commit_ts: CommitTs::new(txn.commit_ts.get() + 1),
                    schema_name: "shop".into(),
                    table_name: self.table.clone(),
                    tables: self.tables.clone(),
                    query: "ALTER TABLE users ADD COLUMN note TEXT".into(),
                    ..DdlEvent::default()
                });
            }
        }
        Ok(event)
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.inner.resume(from)
    }
}

fn with_ddl(source: &DatagenConfig, after: u64, table: &str) -> WithDdl {
    WithDdl {
        inner: DatagenSource::new(source.clone()).unwrap(),
        after,
        seen: 0,
        pending: None,
        table: table.into(),
        tables: Vec::new(),
    }
}

/// Whether every transaction's rows were delivered on one side of the DDL
/// (none torn by the barrier): `Err` names a torn one.
fn no_torn_transaction(sink: &MemorySink, delivered: usize) -> Result<(), u64> {
    let mut side: HashMap<u64, bool> = HashMap::new();
    for (i, d) in sink.delivered.iter().enumerate() {
        let before = i < delivered;
        if *side.entry(d.row.commit_ts).or_insert(before) != before {
            return Err(d.row.commit_ts);
        }
    }
    Ok(())
}

#[tokio::test]
async fn ddl_is_a_barrier_and_is_retried_after_a_failure() {
    let source = workload(600);
    let txns = transactions(&source);
    let after = 40;
    let ddl_ts = txns[after - 1].commit_ts.get() + 1;
    let users = 1;
    let users_before: Vec<RowId> = row_ids(&txns[..after])
        .into_iter()
        .filter(|r| r.table_id == users)
        .collect();
    let sink = MemorySink {
        fail_next_ddl: Some(PluginError::Stopped("trap in apply-ddl".into())),
        ..MemorySink::default()
    };
    let mut pipeline = Pipeline::new(config(), no_filters(), sink, CheckpointTs::ZERO);
    let report = pipeline
        .run(
            with_ddl(&source, after as u64, "users"),
            std::future::pending(),
        )
        .await
        .unwrap();
    let sink = pipeline.sink();
    // Applied exactly once, after the failed attempt was retried in a fresh sink.
    assert_eq!(sink.ddls.len(), 1, "{:?}", sink.ddls);
    let (ts, delivered, acked) = sink.ddls[0];
    assert_eq!(ts, ddl_ts);
    // Every row of the DDL's table below it was written and acknowledged before
    // it, none after it.
    let (before, after_ddl) = sink.delivered.split_at(delivered);
    let users_then: Vec<RowId> = before
        .iter()
        .filter(|d| d.row.table_id == users)
        .map(|d| d.row)
        .collect();
    assert_eq!(users_then, users_before);
    assert!(acked >= users_before.last().unwrap().commit_ts);
    assert!(
        after_ddl
            .iter()
            .filter(|d| d.row.table_id == users)
            .all(|d| d.row.commit_ts > ddl_ts)
    );
    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
    assert_eq!(report.progress.retries, 1);
}

#[tokio::test]
async fn every_table_waits_for_a_slow_ddl() {
    // Two tables; a DDL on `users` whose apply is slow. The barrier waits for the
    // next flush point, and no row of either table above it is written before
    // it is applied (a row of `orders` may need it: a child of a `users` row).
    let source = DatagenConfig {
        tables: vec!["users".into(), "orders".into()],
        max_txn_rows: 1,
        ..workload(2_000)
    };
    let txns = transactions(&source);
    let after = 100;
    let ddl_ts = txns[after - 1].commit_ts.get() + 1;
    let config = PipelineConfig {
        max_batch_rows: 16,
        ..config()
    };
    let sink = MemorySink {
        ddl_delay: Some(Duration::from_millis(200)),
        ..MemorySink::default()
    };
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO);
    let report = pipeline
        .run(
            with_ddl(&source, after as u64, "users"),
            std::future::pending(),
        )
        .await
        .unwrap();
    let sink = pipeline.sink();
    assert_eq!(sink.ddls.len(), 1);
    let (_, delivered, _) = sink.ddls[0];
    let (before, after_ddl) = sink.delivered.split_at(delivered);
    let above = |id: u32| {
        before
            .iter()
            .filter(|d| d.row.table_id == id && d.row.commit_ts > ddl_ts)
            .count()
    };
    assert_eq!((above(1), above(2)), (0, 0), "rows above the DDL passed it");
    assert_eq!(before.len(), row_ids(&txns[..after]).len());
    assert!(after_ddl.iter().all(|d| d.row.commit_ts > ddl_ts));
    // Both tables' outputs are exact: every row once, in commit-ts order per table.
    assert_eq!(sink.delivered.len(), 2_000);
    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
    assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(txns.last().unwrap().commit_ts)
    );
}

#[tokio::test]
async fn a_transaction_with_a_table_behind_a_ddl_waits_whole_and_its_other_tables_wait_too() {
    // Transactions of up to 8 rows over three tables: many touch `users` (held
    // behind the DDL) and other tables together.
    let source = DatagenConfig {
        max_txn_rows: 8,
        ..workload(3_000)
    };
    let txns = transactions(&source);
    let after = 50;
    let config = PipelineConfig {
        max_batch_rows: 16,
        ..config()
    };
    let sink = MemorySink {
        ddl_delay: Some(Duration::from_millis(100)),
        ..MemorySink::default()
    };
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO);
    pipeline
        .run(
            with_ddl(&source, after as u64, "users"),
            std::future::pending(),
        )
        .await
        .unwrap();
    let sink = pipeline.sink();
    let (_, delivered, _) = sink.ddls[0];
    no_torn_transaction(sink, delivered)
        .unwrap_or_else(|ts| panic!("the transaction at {ts} was torn by the barrier"));
    // The first transaction above the DDL that touches users: nothing of it, nor
    // anything later of the tables it touches, went before the DDL.
    let first = txns[after..]
        .iter()
        .find(|t| t.tables.iter().any(|c| c.schema().table_name == "users"))
        .unwrap();
    let (before, _) = sink.delivered.split_at(delivered);
    for changes in &first.tables {
        let id = changes.schema().table_id;
        assert!(
            before
                .iter()
                .all(|d| d.row.table_id != id || d.row.commit_ts < first.commit_ts.get()),
            "a row of table {id} at or after {} went before the DDL",
            first.commit_ts
        );
    }
    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
    assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);
}

#[tokio::test]
async fn a_ddl_naming_two_tables_holds_them_and_every_other_table() {
    // RENAME TABLE a TO b, c TO d, EXCHANGE PARTITION: every table waits.
    let source = DatagenConfig {
        max_txn_rows: 1,
        ..workload(3_000)
    };
    let txns = transactions(&source);
    let after = 80;
    let ddl_ts = txns[after - 1].commit_ts.get() + 1;
    let config = PipelineConfig {
        max_batch_rows: 16,
        ..config()
    };
    let sink = MemorySink {
        ddl_delay: Some(Duration::from_millis(200)),
        ..MemorySink::default()
    };
    let mut ddl_source = with_ddl(&source, after as u64, "");
    ddl_source.tables = vec![
        ("shop".into(), "users".into()),
        ("shop".into(), "orders".into()),
    ];
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO);
    pipeline
        .run(ddl_source, std::future::pending())
        .await
        .unwrap();
    let sink = pipeline.sink();
    let (_, delivered, _) = sink.ddls[0];
    let (before, _) = sink.delivered.split_at(delivered);
    let above = |id: u32| {
        before
            .iter()
            .filter(|d| d.row.table_id == id && d.row.commit_ts > ddl_ts)
            .count()
    };
    assert_eq!(
        (above(1), above(2), above(3)),
        (0, 0, 0),
        "rows above the DDL passed it"
    );
    assert_eq!(before.len(), row_ids(&txns[..after]).len());
    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
}

#[tokio::test]
async fn a_ddl_without_a_table_holds_every_table_of_its_schema() {
    let source = workload(1_000);
    let txns = transactions(&source);
    let after = 60;
    let ddl_ts = txns[after - 1].commit_ts.get() + 1;
    let config = PipelineConfig {
        max_batch_rows: 8,
        ..config()
    };
    let mut pipeline = Pipeline::new(
        config,
        no_filters(),
        MemorySink::default(),
        CheckpointTs::ZERO,
    );
    pipeline
        .run(with_ddl(&source, after as u64, ""), std::future::pending())
        .await
        .unwrap();
    let sink = pipeline.sink();
    let (_, delivered, _) = sink.ddls[0];
    let (before, after_ddl) = sink.delivered.split_at(delivered);
    assert_eq!(
        before.iter().map(|d| d.row).collect::<Vec<_>>().len(),
        row_ids(&txns[..after]).len()
    );
    assert!(before.iter().all(|d| d.row.commit_ts < ddl_ts));
    assert!(after_ddl.iter().all(|d| d.row.commit_ts > ddl_ts));
    assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
}

/// What a fake progress store was asked to save.
#[derive(Debug, Default)]
struct StoreLog {
    fences: Vec<u64>,
    /// (checkpoint, resolved, highest ts the sink had acknowledged by then)
    checkpoints: Vec<(u64, u64)>,
    /// Fail the n-th fence save (0-based) as fenced.
    fence_at: Option<usize>,
    /// Every checkpoint saved, with its source position.
    positions: Vec<Checkpoint>,
}

struct FakeStore {
    log: Arc<std::sync::Mutex<StoreLog>>,
}

impl crate::ProgressStore for FakeStore {
    fn save_fence(&mut self, fence: CommitTs) -> crate::StoreFuture<'_> {
        let log = self.log.clone();
        Box::pin(async move {
            let mut log = log.lock().unwrap();
            if log.fence_at == Some(log.fences.len()) {
                return Err(crate::ProgressStoreError::Fenced(
                    "epoch 2 runs elsewhere".into(),
                ));
            }
            log.fences.push(fence.get());
            Ok(())
        })
    }

    fn save_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        resolved: sluice_core::ResolvedTs,
    ) -> crate::StoreFuture<'_> {
        let log = self.log.clone();
        let checkpoint = checkpoint.clone();
        Box::pin(async move {
            let mut log = log.lock().unwrap();
            log.checkpoints.push((checkpoint.ts.get(), resolved.get()));
            log.positions.push(checkpoint);
            Ok(())
        })
    }
}

async fn run_with_store(
    config: PipelineConfig,
    source: DatagenConfig,
    log: Arc<std::sync::Mutex<StoreLog>>,
) -> (
    Pipeline<MemorySink, DropDeletes>,
    Result<Report, PipelineError>,
) {
    let sink = MemorySink {
        store_log: Some(log.clone()),
        ..MemorySink::default()
    };
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO)
        .with_progress_store(Box::new(FakeStore { log }));
    let result = pipeline
        .run(DatagenSource::new(source).unwrap(), std::future::pending())
        .await;
    (pipeline, result)
}

#[tokio::test]
async fn fence_is_saved_before_rows_reach_the_sink_and_checkpoints_follow_flushes() {
    let log = Arc::new(std::sync::Mutex::new(StoreLog::default()));
    let source = workload(3000);
    let txns = transactions(&source);
    let config = PipelineConfig {
        max_batch_rows: 50,
        fence_ahead: Duration::from_millis(100),
        checkpoint_interval: Duration::ZERO,
        max_pending_bytes: 20_000,
        ..config()
    };
    let (pipeline, result) = run_with_store(config, source, log.clone()).await;
    let report = result.unwrap();
    let sink = pipeline.sink();
    let log = log.lock().unwrap();
    assert!(
        sink.above_fence.is_empty(),
        "rows written above the saved fence: {:?}",
        &sink.above_fence[..5.min(sink.above_fence.len())]
    );
    // The fence moved in steps (fence-ahead), not once per batch.
    assert!(
        log.fences.len() > 1 && log.fences.len() < sink.write_calls,
        "{} fences for {} writes",
        log.fences.len(),
        sink.write_calls
    );
    assert!(log.fences.windows(2).all(|w| w[0] < w[1]));
    // Checkpoints saved: increasing, each acknowledged by the sink, the last one final.
    assert!(log.checkpoints.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(
        log.checkpoints
            .iter()
            .all(|(c, _)| sink.flushes.contains(c))
    );
    let last = txns.last().unwrap().commit_ts.get();
    assert_eq!(log.checkpoints.last().unwrap().0, last);
    assert_eq!(report.progress.checkpoint_ts.get(), last);
}

#[tokio::test]
async fn while_catching_up_the_fence_lead_grows_so_saves_stay_rare() {
    // Upstream time runs far ahead of wall time (no pacing): with a fixed 1 ms
    // lead nearly every batch would need a fence save.
    let log = Arc::new(std::sync::Mutex::new(StoreLog::default()));
    let source = workload(20_000);
    let config = PipelineConfig {
        max_batch_rows: 20,
        fence_ahead: Duration::from_millis(1),
        checkpoint_interval: Duration::from_secs(3600),
        ..config()
    };
    let (pipeline, result) = run_with_store(config, source, log.clone()).await;
    result.unwrap();
    let sink = pipeline.sink();
    let log = log.lock().unwrap();
    assert!(
        sink.above_fence.is_empty(),
        "rows written above the saved fence"
    );
    assert_eq!(sink.durable.len(), 20_000);
    // Doubling from 1 ms reaches a lead of 1024 ms within 11 saves; after that one
    // save covers hundreds of batches.
    assert!(
        log.fences.len() < 40 && sink.write_calls > 500,
        "{} fence saves for {} writes",
        log.fences.len(),
        sink.write_calls
    );
}

#[tokio::test]
async fn rows_up_to_replay_until_are_flagged_replay() {
    let source = workload(400);
    let txns = transactions(&source);
    let until = txns[60].commit_ts;
    let config = PipelineConfig {
        replay_until: until,
        ..config()
    };
    let (pipeline, result) = run_pipeline(
        config,
        no_filters(),
        MemorySink::default(),
        source,
        std::future::pending(),
    )
    .await;
    result.unwrap();
    let sink = pipeline.sink();
    assert_eq!(sink.durable.len(), 400);
    for d in &sink.durable {
        assert_eq!(d.replay(), d.row.commit_ts <= until.get(), "{d:?}");
    }
    assert!(sink.durable.iter().filter(|d| d.replay()).count() > 60);
}

#[tokio::test]
async fn a_fenced_store_stops_the_pipeline_before_more_rows_reach_the_sink() {
    let log = Arc::new(std::sync::Mutex::new(StoreLog {
        fence_at: Some(2),
        ..StoreLog::default()
    }));
    let config = PipelineConfig {
        max_batch_rows: 20,
        fence_ahead: Duration::from_millis(10),
        ..config()
    };
    let (pipeline, result) = run_with_store(config, workload(2000), log.clone()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, PipelineError::Persist(crate::ProgressStoreError::Fenced(m)) if m == "epoch 2 runs elsewhere"),
        "{err:?}"
    );
    let sink = pipeline.sink();
    let log = log.lock().unwrap();
    assert_eq!(log.fences.len(), 2);
    assert!(sink.above_fence.is_empty());
    assert!(
        sink.delivered
            .iter()
            .all(|d| d.row.commit_ts <= log.fences[1])
    );
}

#[tokio::test]
async fn a_restarted_pipeline_never_saves_a_fence_below_the_previous_one() {
    let source = workload(1500);
    let txns = transactions(&source);
    // As after a crash: resume from an early checkpoint, with the previous run's
    // (higher) fence as replay_until.
    let checkpoint = txns[100].commit_ts;
    let previous_fence = txns[350].commit_ts;
    let log = Arc::new(std::sync::Mutex::new(StoreLog::default()));
    let config = PipelineConfig {
        replay_until: previous_fence,
        fence_ahead: Duration::from_millis(10),
        max_batch_rows: 40,
        ..config()
    };
    let sink = MemorySink {
        store_log: Some(log.clone()),
        ..MemorySink::default()
    };
    let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::from(checkpoint))
        .with_progress_store(Box::new(FakeStore { log: log.clone() }));
    pipeline
        .run(DatagenSource::new(source).unwrap(), std::future::pending())
        .await
        .unwrap();
    let log = log.lock().unwrap();
    assert!(
        !log.fences.is_empty(),
        "rows above the old fence needed a new one"
    );
    assert!(
        log.fences.iter().all(|&f| f > previous_fence.get()),
        "{:?} vs {}",
        log.fences,
        previous_fence
    );
    // Rows up to the old fence were flagged replay, none after it.
    let sink = pipeline.sink();
    assert!(
        sink.durable
            .iter()
            .all(|d| d.replay() == (d.row.commit_ts <= previous_fence.get()))
    );
    assert!(
        sink.durable
            .iter()
            .all(|d| d.row.commit_ts > checkpoint.get())
    );
}

/// A source of `rows` transactions with one row each, a 1 MiB blob.
struct BigRows {
    schema: Arc<TableSchema>,
    next: u64,
    rows: u64,
    resolved: Option<CommitTs>,
}

impl BigRows {
    fn new(rows: u64) -> Self {
        let schema = Arc::new(TableSchema {
            table_id: 1,
            version: 1,
            schema_name: "big".into(),
            table_name: "blobs".into(),
            columns: vec![
                sluice_core::Column {
                    name: "id".into(),
                    ty: sluice_core::ColumnType::Int,
                    sql_type: "bigint".into(),
                    nullable: false,
                    key: true,
                },
                sluice_core::Column {
                    name: "data".into(),
                    ty: sluice_core::ColumnType::Blob,
                    sql_type: "longblob".into(),
                    nullable: true,
                    key: false,
                },
            ],
        });
        Self {
            schema,
            next: 0,
            rows,
            resolved: None,
        }
    }
}

impl Source for BigRows {
    type Error = std::convert::Infallible;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        if let Some(ts) = self.resolved.take() {
            return Ok(SourceEvent::Resolved(sluice_core::ResolvedTs::from(ts)));
        }
        if self.next == self.rows {
            return Ok(SourceEvent::End);
        }
        self.next += 1;
        let commit_ts = CommitTs::compose(1_000 + self.next, 0);
        self.resolved = Some(commit_ts);
        let mut txn = Transaction::new(commit_ts);
        txn.table(&self.schema)
            .insert()
            .int(self.next as i64)
            .bytes(&vec![7u8; 1 << 20]);
        Ok(SourceEvent::Transaction(txn))
    }

    fn resume(&mut self, _from: &Checkpoint) -> Result<(), ResumeError> {
        Ok(())
    }
}

/// A sink that takes 20 ms per write, so that the event cache fills up.
#[derive(Default)]
struct SlowSink {
    rows: u64,
}

impl Sink for SlowSink {
    fn name(&self) -> &str {
        "slow"
    }
    async fn open(&mut self) -> Result<(), PluginError> {
        Ok(())
    }
    async fn write(
        &mut self,
        _schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.rows += batch.row_count() as u64;
        Ok(())
    }
    async fn flush(&mut self, _ts: CommitTs) -> Result<(), PluginError> {
        Ok(())
    }
    async fn apply_ddl(&mut self, _ddl: &DdlEvent) -> Result<(), PluginError> {
        Ok(())
    }
    async fn close(&mut self) -> Result<(), PluginError> {
        Ok(())
    }
}

#[tokio::test]
async fn the_event_cache_holds_at_most_its_byte_bound() {
    let config = PipelineConfig {
        event_cache_count: 10_240,
        event_cache_bytes: 8 << 20,
        max_batch_rows: 1,
        flush_interval: Duration::from_millis(50),
        ..config()
    };
    let mut pipeline = Pipeline::new(
        config,
        no_filters(),
        SlowSink::default(),
        CheckpointTs::ZERO,
    );
    let report = pipeline
        .run(BigRows::new(64), std::future::pending())
        .await
        .unwrap();
    assert_eq!(pipeline.sink().rows, 64, "nothing dropped");
    let peak = report.progress.event_cache_peak_bytes;
    eprintln!(
        "event cache high-water mark: {peak} bytes (bound {} bytes)",
        8 << 20
    );
    // Full (the sink is slow), but never past the bound plus one event.
    assert!(peak >= 6 << 20, "the cache never filled: {peak}");
    assert!(
        peak <= (8 << 20) + (1 << 20) + 1024,
        "over the bound: {peak}"
    );
}

#[tokio::test]
async fn checkpoints_carry_the_source_position_and_a_resume_from_one_gives_exactly_the_rows_after_it()
 {
    let source = workload(3_000);
    let txns = transactions(&source);
    let log = Arc::new(std::sync::Mutex::new(StoreLog::default()));
    let config = PipelineConfig {
        max_batch_rows: 50,
        checkpoint_interval: Duration::ZERO,
        max_pending_bytes: 20_000,
        ..config()
    };
    let (_, result) = run_with_store(config.clone(), source.clone(), log.clone()).await;
    result.unwrap();
    let saved = log.lock().unwrap().positions.clone();
    assert!(saved.len() > 3, "{} checkpoints saved", saved.len());
    for checkpoint in &saved {
        // The position is the one of the last transaction at or below the checkpoint.
        let last = txns
            .iter()
            .rev()
            .find(|t| t.commit_ts <= CommitTs::from(checkpoint.ts))
            .unwrap();
        assert_eq!(checkpoint.position, last.position, "at {}", checkpoint.ts);
    }

    // Resume from a checkpoint in the middle, with its position.
    let middle = saved[saved.len() / 2].clone();
    let sink = MemorySink::default();
    let mut pipeline = Pipeline::new(config, no_filters(), sink, middle.clone());
    pipeline
        .run(DatagenSource::new(source).unwrap(), std::future::pending())
        .await
        .unwrap();
    let after: Vec<RowId> = row_ids(&txns)
        .into_iter()
        .filter(|r| r.commit_ts > middle.ts.get())
        .collect();
    assert!(!after.is_empty());
    assert_eq!(per_table(pipeline.sink().durable_ids()), per_table(after));
    assert_eq!(
        pipeline.sink().delivered.len(),
        pipeline.sink().durable.len()
    );
}

#[tokio::test]
async fn a_position_the_source_cannot_read_fails_the_run_with_its_reason() {
    let source = workload(100);
    let txns = transactions(&source);
    let start = Checkpoint {
        ts: CheckpointTs::from(txns[5].commit_ts),
        position: Some(sluice_core::SourcePosition {
            version: 77,
            bytes: vec![1, 2, 3],
        }),
    };
    let mut pipeline = Pipeline::new(config(), no_filters(), MemorySink::default(), start);
    let err = pipeline
        .run(DatagenSource::new(source).unwrap(), std::future::pending())
        .await
        .unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(
        chain.contains("datagen position version 77 is unknown"),
        "{chain}"
    );
    assert!(pipeline.sink().delivered.is_empty());
}

/// `app.t`: a bigint key `id` and a bigint `second` column.
fn app_t(second: &str) -> Arc<TableSchema> {
    let column = |name: &str, key| sluice_core::Column {
        name: name.into(),
        ty: sluice_core::ColumnType::Int,
        sql_type: "bigint".into(),
        nullable: false,
        key,
    };
    Arc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "app".into(),
        table_name: "t".into(),
        columns: vec![column("id", true), column(second, false)],
    })
}

/// One whole transaction, then one that comes in three parts, then End.
struct InParts {
    schema: Arc<TableSchema>,
    step: usize,
}

impl Source for InParts {
    type Error = std::convert::Infallible;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        self.step += 1;
        let (ts, ids, more) = match self.step {
            1 => (10, 0..1, false),
            2 => (20, 1..6, true),
            3 => (20, 6..11, true),
            4 => (20, 11..16, false),
            _ => return Ok(SourceEvent::End),
        };
        let mut txn = Transaction::new(CommitTs::compose(ts, 0));
        for id in ids {
            txn.table(&self.schema).insert().int(id).int(1);
        }
        txn.more = more;
        if !more {
            txn.position = Some(sluice_core::SourcePosition {
                version: 1,
                bytes: vec![self.step as u8],
            });
        }
        Ok(SourceEvent::Transaction(txn))
    }

    fn resume(&mut self, _from: &Checkpoint) -> Result<(), ResumeError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_transaction_in_parts_arrives_whole_flagged_split_and_is_read_through_only_at_its_end() {
    let schema = app_t("version");
    let sink = MemorySink::default();
    let mut pipeline = Pipeline::new(config(), no_filters(), sink, CheckpointTs::ZERO);
    let report = pipeline
        .run(InParts { schema, step: 0 }, std::future::pending())
        .await
        .expect("the pipeline succeeds");
    let sink = pipeline.sink();
    let ids: Vec<i64> = sink.durable.iter().map(|d| d.row.key).collect();
    assert_eq!(ids, (0..16).collect::<Vec<_>>());
    for d in &sink.durable {
        assert_eq!(d.split(), d.row.key >= 1, "{d:?}");
    }
    // Two transactions (the parts count once), and the checkpoint at the end.
    assert_eq!(report.progress.transactions, 2);
    assert_eq!(report.progress.rows_read, 16);
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(CommitTs::compose(20, 0))
    );
}

/// Events handed out in order, then End.
struct Scripted(std::collections::VecDeque<SourceEvent>);

impl Source for Scripted {
    type Error = std::convert::Infallible;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        Ok(self.0.pop_front().unwrap_or(SourceEvent::End))
    }

    fn resume(&mut self, _from: &Checkpoint) -> Result<(), ResumeError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_ddl_waits_until_the_captures_running_other_tables_made_what_is_below_it_durable() {
    let schema = app_t("n");
    let ddl_ts = CommitTs::compose(15, 0);
    let mut events = std::collections::VecDeque::new();
    let mut first = Transaction::new(CommitTs::compose(10, 0));
    first.table(&schema).insert().int(1).int(0);
    events.push_back(SourceEvent::Transaction(first));
    events.push_back(SourceEvent::Ddl(DdlEvent {
        commit_ts: ddl_ts,
        schema_name: "app".into(),
        query: "DROP DATABASE other".into(),
        ..DdlEvent::default()
    }));
    let mut after = Transaction::new(CommitTs::compose(20, 0));
    after.table(&schema).insert().int(2).int(0);
    events.push_back(SourceEvent::Transaction(after));
    let (durable_tx, durable) = watch::channel((0, 0));
    let (passed_tx, mut passed) = watch::channel(0);
    let mut pipeline = Pipeline::new(
        config(),
        no_filters(),
        MemorySink::default(),
        CheckpointTs::ZERO,
    )
    .with_tables_elsewhere(crate::Elsewhere {
        durable: vec![durable],
        // The source says the DDL is across captures.
        across: watch::channel(ddl_ts.get()).1,
        passed: passed_tx,
        log: None,
    });
    let other_capture = async {
        // Nothing is applied while the other capture is behind the DDL.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            *passed.borrow(),
            0,
            "applied before the other capture reached it"
        );
        // Flushed below the DDL, saved a little less.
        durable_tx.send_replace((ddl_ts.get() - 1, ddl_ts.get() - 2));
        tokio::time::timeout(
            Duration::from_secs(10),
            passed.wait_for(|&p| p == ddl_ts.get()),
        )
        .await
        .expect("the DDL is applied once the other capture reached it")
        .expect("the pipeline keeps the sender");
    };
    let (report, ()) = tokio::join!(
        pipeline.run(Scripted(events), std::future::pending()),
        other_capture
    );
    let report = report.expect("the pipeline succeeds");
    let sink = pipeline.sink();
    let ids: Vec<i64> = sink.durable.iter().map(|d| d.row.key).collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(sink.ddls.len(), 1);
    assert_eq!(sink.ddls[0].1, 1, "between the two rows");
    // The checkpoint stays at what the other capture saved.
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::new(ddl_ts.get() - 2)
    );
}

#[tokio::test]
async fn a_transaction_in_parts_behind_a_ddl_goes_on_whole_when_the_ddl_passes_between_its_parts() {
    // A DDL, then a transaction in 12 parts of 10 rows. Its parts wait
    // behind the DDL until they fill half the cache's slots; that flush
    // point applies the DDL and releases them, and the parts that come
    // after it must go on too (they once stayed held for the DDL that had
    // passed, until the cache was full and the source stopped).
    let schema = app_t("n");
    let mut events = std::collections::VecDeque::new();
    let mut first = Transaction::new(CommitTs::compose(10, 0));
    first.table(&schema).insert().int(0).int(0);
    events.push_back(SourceEvent::Transaction(first));
    events.push_back(SourceEvent::Ddl(DdlEvent {
        commit_ts: CommitTs::compose(15, 0),
        schema_name: "app".into(),
        table_name: "t".into(),
        query: "ALTER TABLE t ADD COLUMN note TEXT".into(),
        ..DdlEvent::default()
    }));
    for part in 0..12 {
        let mut txn = Transaction::new(CommitTs::compose(20, 0));
        txn.id = 7;
        for id in 1 + part * 10..1 + (part + 1) * 10 {
            txn.table(&schema).insert().int(id).int(1);
        }
        txn.more = part < 11;
        events.push_back(SourceEvent::Transaction(txn));
    }
    let mut after = Transaction::new(CommitTs::compose(30, 0));
    after.table(&schema).insert().int(1000).int(2);
    events.push_back(SourceEvent::Transaction(after));
    let config = PipelineConfig {
        event_cache_count: 8,
        ..config()
    };
    let mut pipeline = Pipeline::new(
        config,
        no_filters(),
        MemorySink::default(),
        CheckpointTs::ZERO,
    );
    let report = tokio::time::timeout(
        Duration::from_secs(30),
        pipeline.run(Scripted(events), std::future::pending()),
    )
    .await
    .expect("the run ends (the source is not stopped by rows held for a DDL that passed)")
    .expect("the pipeline succeeds");
    let sink = pipeline.sink();
    let ids: Vec<i64> = sink.durable.iter().map(|d| d.row.key).collect();
    let want: Vec<i64> = (0..121).chain([1000]).collect();
    assert_eq!(ids, want);
    assert_eq!(sink.ddls.len(), 1);
    // The DDL went between the first transaction and the parts.
    assert_eq!(sink.ddls[0].1, 1);
    assert_eq!(report.progress.rows_read, 122);
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(CommitTs::compose(30, 0))
    );
}

/// With and without redo: the new version starts at the barrier, and with
/// redo neither version sees an event past the persisted redo resolved ts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_swapped_at_a_barrier_gets_every_row_above_it_and_the_old_one_every_row_below() {
    for redo in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let dir = redo.then_some(dir.path());
        let (mut pipeline, generator, txns) = paced(dir, no_filters()).await;
        let swapper = swap_soon(
            &mut pipeline,
            dir.map_or_else(MemorySink::default, behind_redo),
        );
        let report = pipeline
            .run(generator, std::future::pending())
            .await
            .expect("the pipeline succeeds");
        let swapped = swapper.await.unwrap().expect("the swap happened");
        let (old, new) = (swapped.old.as_ref().expect("handed back"), pipeline.sink());
        let barrier = swapped.barrier.get();
        assert_eq!(swapped.replayed_batches, 0);
        assert!(
            !old.durable.is_empty() && !new.durable.is_empty(),
            "the swap came mid-stream"
        );
        // The old sink has every row up to the barrier, the new one every row above.
        assert!(old.durable.iter().all(|d| d.row.commit_ts <= barrier));
        assert!(new.durable.iter().all(|d| d.row.commit_ts > barrier));
        assert!(old.closed, "the old sink was closed");
        // Together: every generated row exactly once, nothing flagged replay, per
        // table in commit-ts order.
        let both: Vec<RowId> = old
            .durable_ids()
            .into_iter()
            .chain(new.durable_ids())
            .collect();
        assert_eq!(both.len(), row_ids(&txns).len());
        assert_eq!(per_table(both), per_table(row_ids(&txns)));
        assert!(old.durable.iter().chain(&new.durable).all(|d| !d.replay()));
        assert_eq!(report.progress.rows_written, row_ids(&txns).len() as u64);
        if let Some(dir) = dir {
            for (name, sink) in [("old", old), ("new", new)] {
                assert_not_past_redo(name, &sink.above_redo);
                assert!(sink.bad_redo_metas.is_empty(), "{:?}", sink.bad_redo_metas);
            }
            // The barrier lies at or below what the redo log holds.
            let (_, _, meta) = redo_contents(dir).await;
            assert!(
                barrier <= meta.resolved_ts,
                "{barrier} > {}",
                meta.resolved_ts
            );
        }
    }
}

/// Asks `pipeline` for a swap to `new` 120 ms from now; the task ends with
/// the pipeline's answer.
fn swap_soon<F: Filter + Send + 'static>(
    pipeline: &mut Pipeline<MemorySink, F>,
    new: MemorySink,
) -> tokio::task::JoinHandle<Result<crate::Swapped<MemorySink>, crate::SwapRefused<MemorySink>>> {
    let swaps = pipeline.swaps();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(120)).await;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = crate::SwapRequest {
            sink: new,
            probation: None,
            reply,
        };
        assert!(
            swaps.send(request).await.is_ok(),
            "the pipeline takes swaps"
        );
        answer.await.expect("a reply")
    })
}

/// Runs 20000 generated rows (1 s at 20k rows/s) into `old` and asks for a swap to `new` 120 ms in.
async fn run_with_swap(
    old: MemorySink,
    new: MemorySink,
) -> (
    Pipeline<MemorySink, DropDeletes>,
    Result<crate::Swapped<MemorySink>, crate::SwapRefused<MemorySink>>,
    Vec<Transaction>,
) {
    let source = DatagenConfig {
        rate: 20_000,
        ..workload(20_000)
    };
    let txns = transactions(&source);
    // No periodic flush: the swap's flush is the old sink's first.
    let config = PipelineConfig {
        flush_when_idle: false,
        ..config()
    };
    let mut pipeline = Pipeline::new(config, no_filters(), old, CheckpointTs::ZERO);
    let swapper = swap_soon(&mut pipeline, new);
    let generator = DatagenSource::new(source).expect("valid datagen config");
    pipeline
        .run(generator, std::future::pending())
        .await
        .expect("the pipeline succeeds");
    (pipeline, swapper.await.unwrap(), txns)
}

#[tokio::test]
async fn when_the_old_sinks_final_flush_fails_the_new_one_gets_its_rows_flagged_replay() {
    let old = MemorySink::default().fail_flush(0, PluginError::Fatal("disk gone".into()));
    let (pipeline, swapped, txns) = run_with_swap(old, MemorySink::default()).await;
    let swapped = swapped.expect("the swap happened");
    assert!(swapped.replayed_batches > 0);
    assert!(
        swapped.old.as_ref().unwrap().durable.is_empty(),
        "the old sink acknowledged nothing"
    );
    let new = pipeline.sink();
    // Every row reached the new sink; those written before the barrier again,
    // flagged replay.
    assert_eq!(per_table(new.durable_ids()), per_table(row_ids(&txns)));
    let barrier = swapped.barrier.get();
    assert!(new.durable.iter().any(|d| d.replay()));
    assert!(
        new.durable
            .iter()
            .filter(|d| d.replay())
            .all(|d| d.row.commit_ts <= barrier)
    );
}

#[tokio::test]
async fn a_new_sink_that_does_not_open_is_refused_and_the_old_one_runs_on() {
    let new = MemorySink {
        fail_open: Some(PluginError::Config("bad option".into())),
        ..MemorySink::default()
    };
    let (pipeline, refused, txns) = run_with_swap(MemorySink::default(), new).await;
    let refused = refused.err().expect("the swap was refused");
    assert!(
        refused.error.to_string().contains("bad option"),
        "{:?}",
        refused
    );
    assert!(refused.plugin.durable.is_empty());
    // The old sink got everything, nothing twice.
    let old = pipeline.sink();
    assert_eq!(old.durable_ids().len(), row_ids(&txns).len());
    assert_eq!(per_table(old.durable_ids()), per_table(row_ids(&txns)));
}

/// Runs 20000 generated rows (1 s at 20k rows/s, flushing every 20 ms) into
/// `old` and swaps to `new` on probation (`window`, 3 flushes, 1 retry) 120 ms in.
async fn run_with_probation(
    old: MemorySink,
    new: MemorySink,
    window: Duration,
) -> (
    Pipeline<MemorySink, DropDeletes>,
    crate::Swapped<MemorySink>,
    Option<crate::Verdict<MemorySink>>,
    Vec<Transaction>,
    Vec<CheckpointTs>,
) {
    let source = DatagenConfig {
        rate: 20_000,
        ..workload(20_000)
    };
    let txns = transactions(&source);
    let mut pipeline = Pipeline::new(
        PipelineConfig {
            flush_interval: Duration::from_millis(20),
            ..config()
        },
        no_filters(),
        old,
        CheckpointTs::ZERO,
    );
    let swaps = pipeline.swaps();
    let mut progress = pipeline.progress();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let watcher = tokio::spawn({
        let seen = seen.clone();
        async move {
            while progress.changed().await.is_ok() {
                let checkpoint = progress.borrow_and_update().checkpoint_ts;
                seen.lock().unwrap().push(checkpoint);
            }
        }
    });
    let swapper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(120)).await;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let (verdict, judged) = tokio::sync::oneshot::channel();
        let request = crate::SwapRequest {
            sink: new,
            probation: Some(crate::Probation {
                duration: window,
                flushes: 3,
                max_retries: 1,
                verdict,
            }),
            reply,
        };
        assert!(
            swaps.send(request).await.is_ok(),
            "the pipeline takes swaps"
        );
        let swapped = answer.await.expect("a reply").expect("the swap happened");
        (swapped, judged.await.ok())
    });
    let generator = DatagenSource::new(source).expect("valid datagen config");
    pipeline
        .run(generator, std::future::pending())
        .await
        .expect("the pipeline succeeds");
    let (swapped, verdict) = swapper.await.unwrap();
    watcher.abort();
    let seen = seen.lock().unwrap().clone();
    (pipeline, swapped, verdict, txns, seen)
}

#[tokio::test]
async fn a_sink_that_fails_on_probation_is_rolled_back_and_every_row_arrives_once_or_flagged() {
    for (label, new) in [
        (
            "trap on its second write",
            MemorySink::default()
                .fail_write(1, PluginError::Stopped("wasm trap: unreachable".into())),
        ),
        (
            "fatal from its second flush",
            MemorySink::default().fail_flush(1, PluginError::Fatal("target refused".into())),
        ),
        (
            "retryable errors past the bound",
            MemorySink::default()
                .fail_write(1, PluginError::Retryable("busy".into()))
                .fail_write(2, PluginError::Retryable("busy".into())),
        ),
    ] {
        let (pipeline, swapped, verdict, txns, checkpoints) =
            run_with_probation(MemorySink::default(), new, Duration::from_secs(60)).await;
        assert!(
            checkpoints.windows(2).all(|w| w[0] <= w[1]),
            "{label}: the published checkpoint never moved backwards"
        );
        assert!(
            swapped.old.is_none(),
            "{label}: the old sink is kept on probation"
        );
        let Some(crate::Verdict::RolledBack {
            failed,
            error,
            checkpoint,
            replayed_batches,
        }) = verdict
        else {
            panic!("{label}: rolled back");
        };
        let expected = match label {
            "trap on its second write" => "wasm trap",
            "fatal from its second flush" => "target refused",
            _ => "busy",
        };
        assert!(error.to_string().contains(expected), "{label}: {error}");
        let barrier = swapped.barrier.get();
        let old = pipeline.sink();
        assert!(failed.closed, "{label}: the failed sink was closed");
        // The old sink: every row up to the barrier, then (after the rollback)
        // every row above the failed sink's last acknowledged checkpoint, those
        // it had been handed flagged replay.
        assert!(
            checkpoint.get() >= barrier,
            "{label}: the checkpoint never went back"
        );
        assert!(
            failed
                .durable
                .iter()
                .all(|d| d.row.commit_ts > barrier && d.row.commit_ts <= checkpoint.get()),
            "{label}: the failed sink acknowledged only rows between the barrier and the rollback checkpoint"
        );
        assert!(
            old.durable
                .iter()
                .all(|d| d.row.commit_ts <= barrier || d.row.commit_ts > checkpoint.get()),
            "{label}"
        );
        if replayed_batches > 0 {
            assert!(old.durable.iter().any(|d| d.replay()), "{label}");
        }
        assert!(
            old.durable
                .iter()
                .filter(|d| d.replay())
                .all(|d| d.row.commit_ts > checkpoint.get()),
            "{label}: only rows above the rollback checkpoint come again"
        );
        // In delivery order (old up to the barrier, the failed sink, old after
        // the rollback): every generated row exactly once, in order per table.
        let cp = checkpoint.get();
        let delivered: Vec<RowId> = old
            .durable_ids()
            .into_iter()
            .filter(|r| r.commit_ts <= barrier)
            .chain(failed.durable_ids())
            .chain(old.durable_ids().into_iter().filter(|r| r.commit_ts > cp))
            .collect();
        assert_eq!(delivered.len(), row_ids(&txns).len(), "{label}");
        assert_eq!(per_table(delivered), per_table(row_ids(&txns)), "{label}");
    }
}

#[tokio::test]
async fn a_sink_that_passes_its_probation_stays_and_the_old_one_is_dropped() {
    let (pipeline, swapped, verdict, txns, _) = run_with_probation(
        MemorySink::default(),
        MemorySink::default(),
        Duration::from_millis(100),
    )
    .await;
    let Some(crate::Verdict::Passed { flushes }) = verdict else {
        panic!("passed");
    };
    assert!(flushes >= 3, "at least the flushes asked for: {flushes}");
    let new = pipeline.sink();
    let barrier = swapped.barrier.get();
    assert!(
        new.durable
            .iter()
            .all(|d| d.row.commit_ts > barrier && !d.replay())
    );
    assert!(!new.durable.is_empty());
    let _ = txns;
}

// ---------------------------------------------------------------------------
// Filter swaps and shadows
// ---------------------------------------------------------------------------

/// A filter in two versions: one drops deletes, the other keeps them; either
/// fails (fatally) from transform call `fail_from` on.
#[derive(Default)]
struct Versioned {
    keeps_deletes: bool,
    fail_from: Option<usize>,
    calls: usize,
    opens: usize,
}

impl Versioned {
    fn dropping() -> Self {
        Self::default()
    }

    fn keeping() -> Self {
        Self {
            keeps_deletes: true,
            ..Self::default()
        }
    }
}

impl Filter for Versioned {
    fn name(&self) -> &str {
        if self.keeps_deletes {
            "keeping"
        } else {
            "dropping"
        }
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        self.opens += 1;
        Ok(())
    }

    async fn transform(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        let call = self.calls;
        self.calls += 1;
        if self.fail_from.is_some_and(|from| call >= from) {
            return Err(PluginError::Stopped("wasm trap: out of fuel".into()));
        }
        if !self.keeps_deletes {
            for table in &mut batch.tables {
                let schema = schema_of(schemas, table).expect("a schema");
                *table = table.select(schema, |row| row.op != Op::Delete);
            }
        }
        Ok(())
    }
}

/// 20000 generated rows at 20k rows/s through `filter` into a memory sink,
/// with `act` run against the pipeline's channels 120 ms in.
async fn run_filtered<T: Send + 'static>(
    filter: Versioned,
    act: impl FnOnce(
        tokio::sync::mpsc::Sender<crate::FilterSwapRequest<Versioned>>,
        tokio::sync::mpsc::Sender<crate::ShadowCommand<MemorySink, Versioned>>,
    ) -> std::pin::Pin<Box<dyn Future<Output = T> + Send>>
    + Send
    + 'static,
) -> (Pipeline<MemorySink, Versioned>, T, Vec<Transaction>) {
    let source = DatagenConfig {
        rate: 20_000,
        ..workload(20_000)
    };
    let txns = transactions(&source);
    let mut pipeline = Pipeline::new(
        PipelineConfig {
            flush_interval: Duration::from_millis(20),
            ..config()
        },
        vec![filter],
        MemorySink::default(),
        CheckpointTs::ZERO,
    );
    let (swaps, shadows) = (pipeline.filter_swaps(), pipeline.shadows());
    let actor = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(120)).await;
        act(swaps, shadows).await
    });
    let generator = DatagenSource::new(source).expect("valid datagen config");
    pipeline
        .run(generator, std::future::pending())
        .await
        .expect("the pipeline succeeds");
    (pipeline, actor.await.unwrap(), txns)
}

async fn swap_filter_to(
    filter: Versioned,
    probation: Option<crate::Probation<Versioned>>,
    swaps: tokio::sync::mpsc::Sender<crate::FilterSwapRequest<Versioned>>,
) -> crate::Swapped<Versioned> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let request = crate::FilterSwapRequest {
        index: 0,
        filter,
        probation,
        reply,
    };
    assert!(swaps.send(request).await.is_ok());
    answer
        .await
        .expect("a reply")
        .map_err(|r| r.error)
        .expect("the swap happened")
}

#[tokio::test]
async fn a_filter_swapped_at_a_barrier_transforms_every_batch_above_it() {
    let (pipeline, swapped, txns) = run_filtered(Versioned::dropping(), |swaps, _| {
        Box::pin(swap_filter_to(Versioned::keeping(), None, swaps))
    })
    .await;
    let barrier = swapped.barrier.get();
    let sink = pipeline.sink();
    assert!(
        swapped
            .old
            .is_some_and(|old| !old.keeps_deletes && old.calls > 0)
    );
    assert_eq!(pipeline.filters()[0].opens, 1);
    // Up to the barrier the old version dropped deletes; above it the new one
    // kept them: exactly the generated rows that either version lets through,
    // once each, in order per table, none flagged.
    let want: Vec<RowId> = row_ids(&txns)
        .into_iter()
        .filter(|r| r.op != Op::Delete.code() || r.commit_ts > barrier)
        .collect();
    assert!(
        want.iter().any(|r| r.op == Op::Delete.code()),
        "the swap came mid-stream"
    );
    assert!(sink.durable.iter().any(|d| d.row.commit_ts <= barrier));
    assert_eq!(sink.durable.len(), want.len());
    assert_eq!(per_table(sink.durable_ids()), per_table(want));
    assert!(sink.durable.iter().all(|d| !d.replay()));
}

#[tokio::test]
async fn a_filter_that_fails_on_probation_is_rolled_back_and_the_failed_batch_goes_through_the_old_one()
 {
    let failing = Versioned {
        fail_from: Some(3),
        ..Versioned::keeping()
    };
    let (pipeline, (swapped, verdict), txns) = run_filtered(Versioned::dropping(), |swaps, _| {
        Box::pin(async move {
            let (verdict, judged) = tokio::sync::oneshot::channel();
            let probation = crate::Probation {
                duration: Duration::from_secs(60),
                flushes: 3,
                max_retries: 2,
                verdict,
            };
            let swapped = swap_filter_to(failing, Some(probation), swaps).await;
            (swapped, judged.await.ok())
        })
    })
    .await;
    let Some(crate::Verdict::RolledBack {
        failed,
        error,
        checkpoint,
        replayed_batches,
    }) = verdict
    else {
        panic!("rolled back");
    };
    assert!(error.to_string().contains("out of fuel"), "{error}");
    assert_eq!(replayed_batches, 0);
    assert!(checkpoint >= swapped.barrier);
    assert!(
        failed.keeps_deletes && failed.calls == 4,
        "3 good calls, then the trap"
    );
    let live = &pipeline.filters()[0];
    assert!(!live.keeps_deletes, "the old version runs again");
    assert_eq!(live.opens, 2, "opened again at the rollback");
    // The new version kept the deletes of its three batches; everything else
    // went through the old one. No row lost, none twice.
    let sink = pipeline.sink();
    let kept_deletes: Vec<RowId> = sink
        .durable_ids()
        .into_iter()
        .filter(|r| r.op == Op::Delete.code())
        .collect();
    assert!(
        kept_deletes
            .iter()
            .all(|r| r.commit_ts > swapped.barrier.get())
    );
    let want: Vec<RowId> = row_ids(&txns)
        .into_iter()
        .filter(|r| r.op != Op::Delete.code() || kept_deletes.contains(r))
        .collect();
    assert_eq!(sink.durable.len(), want.len());
    assert_eq!(per_table(sink.durable_ids()), per_table(want));
}

#[tokio::test]
async fn a_filter_in_shadow_is_compared_row_by_row_and_never_reaches_the_sink() {
    let status = Arc::new(crate::ShadowStatus::default());
    let (pipeline, (), txns) = run_filtered(Versioned::dropping(), {
        let status = status.clone();
        move |_, shadows| {
            Box::pin(async move {
                let command = crate::ShadowCommand::Start {
                    candidate: crate::ShadowCandidate::Filter {
                        index: 0,
                        filter: Versioned::keeping(),
                    },
                    limits: crate::ShadowLimits::default(),
                    status,
                };
                assert!(shadows.send(command).await.is_ok());
            })
        }
    })
    .await;
    // The candidate's task takes what was queued for it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = status.snapshot();
    // The live output is exactly the old version's: every row but deletes.
    let sink = pipeline.sink();
    let want: Vec<RowId> = row_ids(&txns)
        .into_iter()
        .filter(|r| r.op != Op::Delete.code())
        .collect();
    assert_eq!(per_table(sink.durable_ids()), per_table(want));
    // Every delete the candidate saw is a row only it output.
    assert!(s.batches > 0 && s.rows_compared > 0);
    assert!(s.rows_differing > 0, "{s:?}");
    assert_eq!(s.dropped, None);
    assert_eq!(s.errors, 0);
    let deletes = row_ids(&txns)
        .iter()
        .filter(|r| r.op == Op::Delete.code())
        .count() as u64;
    assert!(s.rows_differing <= deletes);
    assert_eq!(s.differences.len(), crate::MAX_DIFFERENCES);
    for d in &s.differences {
        assert_eq!(d.column, "(row)");
        assert_eq!(
            (d.live.as_str(), d.candidate.as_str()),
            ("absent", "present")
        );
        assert!(d.table.starts_with("shop."), "{d:?}");
        assert!(d.key.contains('='), "{d:?}");
    }
    assert_eq!(s.live.calls, s.candidate.calls);
    assert_eq!(s.live.calls, s.batches);
}

#[tokio::test]
async fn a_sink_in_shadow_gets_every_batch_and_cannot_hold_the_live_one_back() {
    for slow in [false, true] {
        let status = Arc::new(crate::ShadowStatus::default());
        let candidate = MemorySink {
            write_delay: slow.then_some(Duration::from_millis(40)),
            ..MemorySink::default()
        };
        let acked = candidate.acked.clone();
        let (pipeline, (), txns) = run_filtered(Versioned::keeping(), {
            let status = status.clone();
            move |_, shadows| {
                Box::pin(async move {
                    let command = crate::ShadowCommand::Start {
                        candidate: crate::ShadowCandidate::Sink(candidate),
                        limits: crate::ShadowLimits {
                            max_lag: Duration::from_millis(100),
                            max_queued_bytes: 64 << 20,
                        },
                        status,
                    };
                    assert!(shadows.send(command).await.is_ok());
                })
            }
        })
        .await;
        // The live sink has every row once, whatever the candidate did.
        let sink = pipeline.sink();
        assert_eq!(per_table(sink.durable_ids()), per_table(row_ids(&txns)));
        // Its task finishes what was queued.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = status.snapshot();
        if slow {
            let why = s.dropped.expect("a candidate 40 ms per write falls behind");
            assert!(why.contains("behind"), "{why}");
        } else {
            assert_eq!(s.dropped, None);
            assert!(s.rows_written > 0 && s.flushes > 0, "{s:?}");
            // It got every batch from its start on, and the last flush.
            assert!(acked.load(Ordering::SeqCst) >= txns.last().unwrap().commit_ts.get());
            assert_eq!(s.live.calls, s.candidate.calls);
        }
    }
}

/// The first `left` transactions of datagen, then nothing more: the source
/// waits, as a binlog source does between upstream commits.
struct ThenIdle {
    inner: DatagenSource,
    left: usize,
}

impl Source for ThenIdle {
    type Error = <DatagenSource as Source>::Error;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        if self.left == 0 {
            std::future::pending::<()>().await;
        }
        let event = self.inner.next_event().await?;
        if matches!(event, SourceEvent::Transaction(_)) {
            self.left -= 1;
        }
        Ok(event)
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.inner.resume(from)
    }
}

#[tokio::test]
async fn rows_are_flushed_as_soon_as_the_source_has_nothing_more_ready() {
    let source = workload(400);
    let txns = transactions(&source);
    let n = 25;
    let last = CheckpointTs::from(txns[n - 1].commit_ts);
    // No periodic flush: only the source going idle can flush.
    let mut pipeline = Pipeline::new(
        config(),
        no_filters(),
        MemorySink::default(),
        CheckpointTs::ZERO,
    );
    let mut progress = pipeline.progress();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = async move {
        // A guard against a hang, not a measure of speed.
        let reached = tokio::time::timeout(
            Duration::from_secs(60),
            progress.wait_for(|p| p.checkpoint_ts >= last),
        )
        .await
        .is_ok();
        let _ = stop.send(());
        reached
    };
    let idle = ThenIdle {
        inner: DatagenSource::new(source).unwrap(),
        left: n,
    };
    let (result, reached) = tokio::join!(
        pipeline.run(idle, async {
            let _ = stopped.await;
        }),
        watcher
    );
    let report = result.expect("the pipeline succeeds");
    assert!(
        reached,
        "the checkpoint passed the last transaction while the source waited"
    );
    assert!(report.interrupted);
    let want = row_ids(&txns[..n]);
    assert_eq!(per_table(pipeline.sink().durable_ids()), per_table(want));
}

// ---------------------------------------------------------------------------
// Consistent replication: the redo fence
// ---------------------------------------------------------------------------

/// A redo log in `dir` for changefeed `cf`, flushed as given.
async fn redo_log(dir: &std::path::Path, config: crate::RedoConfig) -> crate::RedoLog {
    let uri = sluice_redo::StorageUri::Local(dir.to_path_buf());
    let storage = sluice_redo::Storage::open(&uri, "cf").await.unwrap();
    crate::RedoLog::new(sluice_redo::LogWriter::open(storage).await.unwrap(), config)
}

/// Every row change in the redo log under `dir` up to its resolved ts:
/// (commit ts, table id) per row, and the DDLs' commit ts.
async fn redo_contents(dir: &std::path::Path) -> (Vec<(u64, u32)>, Vec<u64>, sluice_redo::Meta) {
    let uri = sluice_redo::StorageUri::Local(dir.to_path_buf());
    let storage = sluice_redo::Storage::open(&uri, "cf").await.unwrap();
    let reader = sluice_redo::LogReader::open(storage).await.unwrap();
    let meta = reader.listing().meta.unwrap();
    let (mut rows, mut ddls) = (Vec::new(), Vec::new());
    for kind in [sluice_redo::LogKind::Rows, sluice_redo::LogKind::Ddl] {
        for file in reader.files_for(kind, sluice_redo::Meta::default()) {
            for record in reader.read(file, meta.resolved_ts).await.unwrap().records {
                match record {
                    sluice_redo::Record::Rows { txns, tables } => {
                        for t in tables {
                            rows.extend(
                                t.txn
                                    .iter()
                                    .map(|&i| (txns[i as usize].commit_ts, t.table_id)),
                            );
                        }
                    }
                    sluice_redo::Record::Ddl(d) => ddls.push(d.commit_ts.get()),
                    _ => {}
                }
            }
        }
    }
    (rows, ddls, meta)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Over random schedules (redo flushes by time or size at random
    /// settings, a small redo share, a slow or fast sink, a DDL at a random
    /// place, small batches): the sink never sees an event above the redo
    /// resolved ts persisted at the time, the meta's checkpoint is never
    /// above its resolved ts, and in the end both the sink and the log have
    /// every row.
    #[test]
    fn the_sink_never_sees_an_event_above_the_persisted_redo_resolved_ts(
        flush_ms in 1u64..30,
        meta_flush_ms in 1u64..30,
        max_log_size in 256usize..64_000,
        memory_bytes in 1_000usize..200_000,
        max_batch_rows in 1usize..128,
        write_delay_ms in proptest::option::of(0u64..3),
        ddl_at in any::<prop::sample::Index>(),
        total_rows in 50u64..400,
        seed in any::<u64>(),
    ) {
        let source = DatagenConfig { seed, ..workload(total_rows) };
        let txns = transactions(&source);
        let expected = row_ids(&txns);
        // After one of the transactions (the last one's DDL still comes).
        let ddl_after = 1 + ddl_at.index(txns.len()) as u64;
        let dir = tempfile::tempdir().unwrap();
        let sink = MemorySink {
            redo_meta: Some(dir.path().join("cf").join("meta")),
            write_delay: write_delay_ms.map(Duration::from_millis),
            ..MemorySink::default()
        };
        let config = PipelineConfig { max_batch_rows, flush_interval: Duration::from_millis(5), ..config() };
        let redo = crate::RedoConfig {
            flush_interval: Duration::from_millis(flush_ms),
            meta_flush_interval: Duration::from_millis(meta_flush_ms),
            max_log_size,
            memory_bytes,
            // The log is read back whole below (GC has its own tests).
            collect_garbage: false,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (sink, logged) = runtime.block_on(async {
            let log = redo_log(dir.path(), redo).await;
            let probe = sink.probe.clone();
            let mut pipeline = Pipeline::new(config, no_filters(), sink, CheckpointTs::ZERO).with_redo(log);
            probe.set(pipeline.progress()).unwrap();
            let report = pipeline.run(with_ddl(&source, ddl_after, "users"), std::future::pending()).await;
            let report = report.map_err(|e| format!("pipeline failed: {e:?}"))?;
            let redo = report.progress.redo.clone().expect("redo status is published");
            if redo.flushes == 0 {
                return Err("the redo writer never flushed".to_string());
            }
            let logged = redo_contents(dir.path()).await;
            Ok::<_, String>((pipeline, logged))
        }).map_err(TestCaseError::fail)?;
        let sink = sink.sink();
        let above = sink.above_redo.lock().unwrap().clone();
        prop_assert!(above.is_empty(), "the sink saw {:?} above the persisted redo resolved ts", &above[..above.len().min(10)]);
        prop_assert!(sink.bad_redo_metas.is_empty(), "{:?}", sink.bad_redo_metas);
        let first = first_durable_per_table(sink);
        prop_assert_eq!(&first, &per_table(expected.clone()), "every row durable, in commit-ts order per table");
        prop_assert_eq!(sink.ddls.len(), 1);
        let (rows, ddls, meta) = logged;
        prop_assert_eq!(rows.len(), expected.len(), "the log has every row once");
        let mut logged_rows: Vec<(u64, u32)> = rows;
        let mut want: Vec<(u64, u32)> = expected.iter().map(|r| (r.commit_ts, r.table_id)).collect();
        logged_rows.sort_unstable();
        want.sort_unstable();
        prop_assert_eq!(logged_rows, want);
        prop_assert_eq!(ddls, vec![sink.ddls[0].0]);
        prop_assert!(meta.checkpoint_ts <= meta.resolved_ts);
        prop_assert!(meta.resolved_ts >= txns.last().unwrap().commit_ts.get().max(sink.ddls[0].0));
        prop_assert_eq!(meta.checkpoint_ts, sink.flushes.last().copied().unwrap());
    }
}

/// Redo flushed every 10 ms, into `dir`, with a 4 MiB share.
fn fast_redo() -> crate::RedoConfig {
    crate::RedoConfig {
        flush_interval: Duration::from_millis(10),
        meta_flush_interval: Duration::from_millis(10),
        max_log_size: 1 << 20,
        memory_bytes: 4 << 20,
        collect_garbage: true,
    }
}

/// A sink that checks every call against the redo meta in `dir`.
fn behind_redo(dir: &std::path::Path) -> MemorySink {
    MemorySink {
        redo_meta: Some(dir.join("cf").join("meta")),
        ..MemorySink::default()
    }
}

/// 20,000 generated rows at 20k rows/s (flushed every 20 ms) through
/// `filters` into a sink; with a `dir`, behind a redo log there.
async fn paced<F: Filter + Send + 'static>(
    dir: Option<&std::path::Path>,
    filters: Vec<F>,
) -> (Pipeline<MemorySink, F>, DatagenSource, Vec<Transaction>) {
    let source = DatagenConfig {
        rate: 20_000,
        ..workload(20_000)
    };
    let txns = transactions(&source);
    let config = PipelineConfig {
        flush_interval: Duration::from_millis(20),
        ..config()
    };
    let sink = dir.map_or_else(MemorySink::default, behind_redo);
    let mut pipeline = Pipeline::new(config, filters, sink, CheckpointTs::ZERO);
    if let Some(dir) = dir {
        pipeline = pipeline.with_redo(redo_log(dir, fast_redo()).await);
    }
    let generator = DatagenSource::new(source).expect("valid datagen config");
    (pipeline, generator, txns)
}

fn assert_not_past_redo(name: &str, above: &std::sync::Mutex<Vec<u64>>) {
    let above = above.lock().unwrap();
    assert!(
        above.is_empty(),
        "the {name} sink saw {:?} above the persisted redo resolved ts",
        &above[..above.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_in_shadow_under_redo_never_sees_past_the_fence() {
    let dir = tempfile::tempdir().unwrap();
    let (mut pipeline, generator, txns) = paced(Some(dir.path()), vec![Versioned::keeping()]).await;
    let shadows = pipeline.shadows();
    let candidate = behind_redo(dir.path());
    let (acked, candidate_above) = (candidate.acked.clone(), candidate.above_redo.clone());
    let status = Arc::new(crate::ShadowStatus::default());
    let starter = tokio::spawn({
        let status = status.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(120)).await;
            let command = crate::ShadowCommand::Start {
                candidate: crate::ShadowCandidate::Sink(candidate),
                limits: crate::ShadowLimits {
                    max_lag: Duration::from_secs(10),
                    max_queued_bytes: 64 << 20,
                },
                status,
            };
            assert!(shadows.send(command).await.is_ok());
        }
    });
    pipeline
        .run(generator, std::future::pending())
        .await
        .expect("the pipeline succeeds");
    starter.await.unwrap();
    let live = pipeline.sink();
    assert_eq!(per_table(live.durable_ids()), per_table(row_ids(&txns)));
    // The candidate's task finishes what was queued.
    let last = txns.last().unwrap().commit_ts.get();
    for _ in 0..100 {
        if acked.load(Ordering::SeqCst) >= last {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = status.snapshot();
    assert_eq!(s.dropped, None);
    assert!(s.rows_written > 0, "{s:?}");
    assert!(
        acked.load(Ordering::SeqCst) >= last,
        "the candidate got the last flush"
    );
    assert_not_past_redo("live", &live.above_redo);
    assert_not_past_redo("candidate", &candidate_above);
}

/// Datagen in bursts: `plan[i] = (at, n)` lets `n` more transactions out at
/// `at` (tokio time after the first read); between bursts and after the
/// last, nothing (the source is idle, not ended).
struct Bursts {
    inner: DatagenSource,
    started: Option<tokio::time::Instant>,
    plan: Vec<(Duration, u64)>,
    sent: u64,
}

impl Source for Bursts {
    type Error = <DatagenSource as Source>::Error;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        let started = *self.started.get_or_insert_with(tokio::time::Instant::now);
        loop {
            let mut allowed = 0;
            let mut next = None;
            for (at, n) in &self.plan {
                if started.elapsed() >= *at {
                    allowed += n;
                } else {
                    next = Some(started + *at);
                    break;
                }
            }
            if self.sent < allowed {
                let event = self.inner.next_event().await?;
                if matches!(event, SourceEvent::Transaction(_)) {
                    self.sent += 1;
                }
                return Ok(event);
            }
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.inner.resume(from)
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_sink_is_released_once_flushed_and_reopened_by_the_next_rows() {
    // Ten transactions, two minutes idle, ten more, idle again; instances
    // are released after a minute without rows.
    let source = workload(1_000_000);
    let mut generator = DatagenSource::new(source.clone()).unwrap();
    let generated: Vec<Transaction> = (0..20)
        .map(|_| generator.next_transaction().unwrap())
        .collect();
    let config = PipelineConfig {
        flush_interval: Duration::from_millis(50),
        release_idle: Some(Duration::from_secs(60)),
        ..config()
    };
    let mut pipeline = Pipeline::new(
        config,
        no_filters(),
        MemorySink::default(),
        CheckpointTs::ZERO,
    );
    let bursts = Bursts {
        inner: DatagenSource::new(source).unwrap(),
        started: None,
        plan: vec![(Duration::ZERO, 10), (Duration::from_secs(120), 10)],
        sent: 0,
    };
    let report = pipeline
        .run(bursts, tokio::time::sleep(Duration::from_secs(300)))
        .await
        .expect("the pipeline stops cleanly");
    let sink = pipeline.sink();
    assert_eq!(sink.idle_releases, 2, "once after each burst");
    assert_eq!(sink.reopened, 1, "the second burst started a new instance");
    assert_eq!(
        sink.released_unflushed, 0,
        "nothing written was waiting for a flush"
    );
    // Every row of both bursts is durable, once.
    assert_eq!(
        per_table(sink.durable_ids()),
        per_table(row_ids(&generated))
    );
    assert_eq!(sink.durable.len(), row_ids(&generated).len());
    assert_eq!(
        report.progress.checkpoint_ts,
        CheckpointTs::from(generated.last().unwrap().commit_ts)
    );
}

#[tokio::test(start_paused = true)]
async fn a_changefeed_that_keeps_its_instances_never_releases_them() {
    let config = PipelineConfig {
        flush_interval: Duration::from_millis(50),
        release_idle: None,
        ..config()
    };
    let mut pipeline = Pipeline::new(
        config,
        no_filters(),
        MemorySink::default(),
        CheckpointTs::ZERO,
    );
    let bursts = Bursts {
        inner: DatagenSource::new(workload(1_000_000)).unwrap(),
        started: None,
        plan: vec![(Duration::ZERO, 10)],
        sent: 0,
    };
    pipeline
        .run(bursts, tokio::time::sleep(Duration::from_secs(300)))
        .await
        .expect("the pipeline stops cleanly");
    assert_eq!(pipeline.sink().idle_releases, 0);
}
