//! Shadow runs: a candidate plugin version runs beside the live one on the
//! same batches, and what it does is measured, never delivered.
//!
//! - A **filter** candidate gets a copy of every batch the live filter at its
//!   position transformed, with the live output, on a task of its own fed
//!   through a queue (the live path never waits for it); it transforms the
//!   copy and the two outputs are compared row by row (rows paired by table,
//!   commit ts and key), the differences counted, the first few kept with
//!   their table, key and column. Only the live output goes on.
//! - A **sink** candidate (with its own config: a staging target) gets a copy
//!   of every batch the live sink gets and a flush at each of its flushes, on
//!   the same kind of queue: the live sink never waits for it, so it cannot
//!   hold back the checkpoint.
//!
//! Either is dropped when it falls behind past a bound (the age of the oldest
//! batch it has not taken, or the bytes queued for it), or fails too often in
//! a row; once stopped it gets a few seconds to take what was queued.
//!
//! A shadow is started and stopped with [`ShadowCommand`]s sent through
//! [`Pipeline::shadows`](crate::Pipeline::shadows); what it did so far is read
//! from its [`ShadowStatus`] at any time.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_core::{Batch, CommitTs, PluginError, Sink, TableBatch, TableSchema, Value};
use tokio::sync::mpsc;

/// Differences kept with their detail (the first ones).
pub const MAX_DIFFERENCES: usize = 10;
/// Failures in a row after which a candidate is dropped.
pub const MAX_FAILURES_IN_A_ROW: u32 = 5;
/// Characters of a value shown in a difference.
const MAX_VALUE_CHARS: usize = 64;
/// Call latencies kept for the quantiles (the latest).
const LATENCY_SAMPLES: usize = 1024;

/// What runs in shadow.
pub enum ShadowCandidate<K, F> {
    /// A sink with its own config, fed the live sink's batches.
    Sink(K),
    /// A filter beside the live filter at `index`.
    Filter {
        /// The live filter's position in the chain.
        index: usize,
        /// The candidate (not opened yet).
        filter: F,
    },
}

/// When a sink candidate is dropped for falling behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowLimits {
    /// The oldest batch it has not taken yet is older than this.
    pub max_lag: Duration,
    /// Or batches waiting for it hold more bytes than this.
    pub max_queued_bytes: usize,
}

impl Default for ShadowLimits {
    fn default() -> Self {
        Self {
            max_lag: Duration::from_secs(30),
            max_queued_bytes: 64 << 20,
        }
    }
}

/// Starts or stops the shadow of a running pipeline.
pub enum ShadowCommand<K, F> {
    /// Run `candidate` in shadow (replacing any shadow running), counting into
    /// `status`.
    Start {
        /// What runs.
        candidate: ShadowCandidate<K, F>,
        /// When a sink candidate is dropped.
        limits: ShadowLimits,
        /// Where what it does is counted.
        status: Arc<ShadowStatus>,
    },
    /// Stop the shadow running (a sink candidate takes what was queued for it,
    /// flushes and closes).
    Stop,
}

/// What a shadow did so far (shared between the pipeline and its readers).
#[derive(Debug, Default)]
pub struct ShadowStatus(Mutex<ShadowSnapshot>);

impl ShadowStatus {
    /// A copy of the counts now.
    pub fn snapshot(&self) -> ShadowSnapshot {
        self.0.lock().expect("not poisoned").clone()
    }

    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut ShadowSnapshot) -> R) -> R {
        change(&mut self.0.lock().expect("not poisoned"))
    }

    fn failed(&self, error: &PluginError, in_a_row: u32, what: &str) {
        self.update(|s| {
            s.errors += 1;
            s.last_error = Some(bounded(&error.to_string(), 1024));
            if in_a_row >= MAX_FAILURES_IN_A_ROW && s.dropped.is_none() {
                s.dropped = Some(format!(
                    "the candidate {what} failed {in_a_row} times in a row; last: {error}"
                ));
            }
        });
    }

    /// Marks the shadow dropped, with why (the first reason stays).
    pub fn drop_with(&self, why: String) {
        self.update(|s| {
            if s.dropped.is_none() {
                s.dropped = Some(why);
            }
        });
    }

    /// Why the shadow was dropped, if it was.
    pub fn dropped(&self) -> Option<String> {
        self.update(|s| s.dropped.clone())
    }
}

/// Counts of a shadow run at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShadowSnapshot {
    /// Batches the candidate got.
    pub batches: u64,
    /// Rows whose live and candidate outputs were compared (a filter).
    pub rows_compared: u64,
    /// Rows whose outputs differ (a filter).
    pub rows_differing: u64,
    /// The first differences, with their detail.
    pub differences: Vec<Difference>,
    /// Candidate calls that failed.
    pub errors: u64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Call latency of the live plugin in the same role (its calls while the
    /// shadow runs).
    pub live: CallLatency,
    /// Call latency of the candidate.
    pub candidate: CallLatency,
    /// Rows a sink candidate wrote.
    pub rows_written: u64,
    /// Flushes a sink candidate acknowledged.
    pub flushes: u64,
    /// How far a sink candidate was behind the live sink when last seen: the
    /// age of the oldest batch it had not taken yet.
    pub lag: Duration,
    /// Why the candidate was dropped; none while it runs.
    pub dropped: Option<String>,
}

/// Where the outputs of the live filter and the candidate differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// `schema.table`.
    pub table: String,
    /// The row's key (`id=5`), or its place in the batch for a table without
    /// key columns (`#3`).
    pub key: String,
    /// The first column that differs; `(row)` when one side has no such row,
    /// `(op)` when the ops differ.
    pub column: String,
    /// The live output's value (bounded, escaped).
    pub live: String,
    /// The candidate's value.
    pub candidate: String,
}

/// Latencies of a plugin's calls: all of them counted, the latest kept for
/// quantiles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallLatency {
    /// Calls timed.
    pub calls: u64,
    /// Their total (µs).
    pub total_us: u64,
    /// The longest (µs).
    pub max_us: u64,
    recent: VecDeque<u32>,
}

impl CallLatency {
    /// Counts one call of `took`.
    pub fn record(&mut self, took: Duration) {
        let us = took.as_micros().min(u128::from(u32::MAX)) as u64;
        self.calls += 1;
        self.total_us = self.total_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
        if self.recent.len() == LATENCY_SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(us as u32);
    }

    /// The mean over every call (µs).
    pub fn mean_us(&self) -> u64 {
        self.total_us.checked_div(self.calls).unwrap_or(0)
    }

    /// Quantile `q` (0..=1) of the latest calls (µs).
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.recent.is_empty() {
            return 0;
        }
        let mut sorted: Vec<u32> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        let at = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        u64::from(sorted[at])
    }
}

/// `text` cut to at most `max` characters, escaped (no control characters).
fn bounded(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars().take(max) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// A value as shown in a difference.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "NULL".into(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bytes(b) => bounded(&String::from_utf8_lossy(b), MAX_VALUE_CHARS),
    }
}

/// One row of a batch, with its table.
struct RowAt<'a> {
    table: &'a TableBatch,
    row: sluice_core::Row<'a>,
}

impl<'a> RowAt<'a> {
    fn row(&self) -> sluice_core::Row<'a> {
        self.row
    }

    fn commit_ts(&self) -> u64 {
        self.table.commit_ts[self.row.index]
    }
}

/// The rows of `batch` by table id, in order.
fn rows_by_table(batch: &Batch) -> HashMap<u32, Vec<RowAt<'_>>> {
    let mut out: HashMap<u32, Vec<RowAt<'_>>> = HashMap::new();
    for table in &batch.tables {
        let rows = out.entry(table.table_id).or_default();
        rows.extend(table.rows().map(|row| RowAt { table, row }));
    }
    out
}

/// What pairs a row of one output with a row of the other: its commit ts and
/// key (its place among the table's rows when the table has no key), and
/// which occurrence of that pair it is.
fn pairing_key(
    schema: Option<&TableSchema>,
    row: &sluice_core::Row<'_>,
    commit_ts: u64,
    place: usize,
) -> String {
    let keys: Vec<String> = schema
        .map(|s| {
            s.columns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.key)
                .map(|(i, c)| format!("{}={}", c.name, shown(&row.value(i))))
                .collect()
        })
        .unwrap_or_default();
    if keys.is_empty() {
        return format!("{commit_ts}/#{place}");
    }
    format!("{commit_ts}/{}", keys.join(","))
}

fn shown_key(pairing: &str) -> String {
    pairing
        .split_once('/')
        .map_or(pairing, |(_, key)| key)
        .to_string()
}

/// Compares the live filter's output with the candidate's and counts into
/// `into`.
pub(crate) fn compare(
    schemas: &[Arc<TableSchema>],
    live: &Batch,
    candidate: &Batch,
    into: &mut ShadowSnapshot,
) {
    into.batches += 1;
    if live.tables == candidate.tables {
        into.rows_compared += live.row_count() as u64;
        return;
    }
    let schema_of = |id: u32| schemas.iter().find(|s| s.table_id == id).map(|s| &**s);
    let (live_rows, mut candidate_rows) = (rows_by_table(live), rows_by_table(candidate));
    let mut differ = |table: u32, key: &str, column: &str, l: String, c: String| {
        into.rows_differing += 1;
        if into.differences.len() < MAX_DIFFERENCES {
            into.differences.push(Difference {
                table: schema_of(table).map_or_else(|| format!("#{table}"), |s| s.qualified_name()),
                key: bounded(&shown_key(key), 2 * MAX_VALUE_CHARS),
                column: column.into(),
                live: l,
                candidate: c,
            });
        }
    };
    let mut compared = 0u64;
    let mut table_ids: Vec<u32> = live_rows.keys().copied().collect();
    table_ids.extend(
        candidate_rows
            .keys()
            .filter(|id| !live_rows.contains_key(id)),
    );
    table_ids.sort_unstable();
    let empty = Vec::new();
    for id in table_ids {
        let schema = schema_of(id);
        // Candidate rows by what pairs them.
        let mut theirs: HashMap<String, VecDeque<&RowAt<'_>>> = HashMap::new();
        let candidates = candidate_rows.remove(&id).unwrap_or_default();
        for (place, at) in candidates.iter().enumerate() {
            let row = at.row();
            let key = pairing_key(schema, &row, at.commit_ts(), place);
            theirs.entry(key).or_default().push_back(at);
        }
        for (place, at) in live_rows.get(&id).unwrap_or(&empty).iter().enumerate() {
            compared += 1;
            let row = at.row();
            let key = pairing_key(schema, &row, at.commit_ts(), place);
            let Some(other) = theirs.get_mut(&key).and_then(VecDeque::pop_front) else {
                differ(id, &key, "(row)", "present".into(), "absent".into());
                continue;
            };
            let other_row = other.row();
            if row.op != other_row.op {
                let op = |o: sluice_core::Op| format!("{o:?}").to_lowercase();
                differ(id, &key, "(op)", op(row.op), op(other_row.op));
                continue;
            }
            let columns = at.table.after.len().max(at.table.before.len());
            let images = [
                (row.after(), other_row.after()),
                (row.before(), other_row.before()),
            ];
            let found = images.iter().find_map(|(mine, theirs)| {
                let (mine, theirs) = (mine.as_ref()?, theirs.as_ref()?);
                (0..columns).find_map(|c| {
                    let (a, b) = (mine.get(c)?, theirs.get(c)?);
                    (a != b).then(|| (c, shown(a), shown(b)))
                })
            });
            if let Some((c, l, r)) = found {
                let name = schema
                    .and_then(|s| s.columns.get(c))
                    .map_or_else(|| format!("#{c}"), |col| col.name.clone());
                differ(id, &key, &name, l, r);
            }
        }
        for (key, left) in theirs {
            for _ in left {
                compared += 1;
                differ(id, &key, "(row)", "absent".into(), "present".into());
            }
        }
    }
    into.rows_compared += compared;
}

/// How long a stopped candidate may take to finish what was queued for it
/// (then its task is aborted).
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// A candidate running on a task of its own, fed through a queue the
/// pipeline never waits on: what was sent and not taken yet is bounded by
/// age and bytes, past which the candidate is dropped.
pub(crate) struct ShadowTask<M> {
    tx: Option<mpsc::UnboundedSender<(u64, M)>>,
    /// What was sent and not taken yet: (seq, when, bytes).
    sent: VecDeque<(u64, Instant, usize)>,
    queued_bytes: usize,
    next_seq: u64,
    /// The last seq the task finished.
    done: Arc<AtomicU64>,
    limits: ShadowLimits,
    pub(crate) status: Arc<ShadowStatus>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// `filter` or `sink`, for messages.
    what: &'static str,
}

impl<M: Send + 'static> ShadowTask<M> {
    /// Starts `run` on its own task with the queue's receiving end.
    fn start<Fut>(
        what: &'static str,
        limits: ShadowLimits,
        status: Arc<ShadowStatus>,
        run: impl FnOnce(mpsc::UnboundedReceiver<(u64, M)>, Arc<AtomicU64>) -> Fut,
    ) -> Self
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let done = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(rx, done.clone()));
        Self {
            tx: Some(tx),
            sent: VecDeque::new(),
            queued_bytes: 0,
            next_seq: 1,
            done,
            limits,
            status,
            task: Some(task),
            what,
        }
    }

    /// Forgets what the task has taken; `Err` (with the candidate aborted and
    /// the reason in its status) when it failed or fell behind past its
    /// limits.
    fn catch_up(&mut self, adding: usize) -> Result<(), ()> {
        let done = self.done.load(Ordering::Acquire);
        while self.sent.front().is_some_and(|(seq, _, _)| *seq <= done) {
            let (_, _, bytes) = self.sent.pop_front().expect("checked");
            self.queued_bytes -= bytes;
        }
        let lag = self
            .sent
            .front()
            .map_or(Duration::ZERO, |(_, at, _)| at.elapsed());
        self.status.update(|s| s.lag = lag);
        let ended = self.task.as_ref().is_none_or(|t| t.is_finished());
        let why = if self.status.dropped().is_some() || ended {
            Some(None)
        } else if lag > self.limits.max_lag {
            Some(Some(format!(
                "the candidate {} fell {} ms behind the live one (bound {} ms)",
                self.what,
                lag.as_millis(),
                self.limits.max_lag.as_millis()
            )))
        } else if self.queued_bytes + adding > self.limits.max_queued_bytes {
            Some(Some(format!(
                "{} bytes were waiting for the candidate {} (bound {})",
                self.queued_bytes + adding,
                self.what,
                self.limits.max_queued_bytes
            )))
        } else {
            None
        };
        match why {
            None => Ok(()),
            Some(reason) => {
                if let Some(reason) = reason {
                    self.status.drop_with(reason);
                }
                self.abort();
                Err(())
            }
        }
    }

    /// Queues `message` (of `bytes` wire bytes); `Err` when the candidate is
    /// (now) dropped.
    fn send(&mut self, bytes: usize, message: M) -> Result<(), ()> {
        self.catch_up(bytes)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send((seq, message)).is_ok());
        if !sent {
            return Err(());
        }
        self.sent.push_back((seq, Instant::now(), bytes));
        self.queued_bytes += bytes;
        Ok(())
    }

    fn abort(&mut self) {
        self.tx = None;
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Ends the shadow: the candidate takes what was queued (bounded by its
    /// limits) within [`STOP_DEADLINE`], then its task is aborted; nothing
    /// waits for it.
    pub(crate) fn stop(mut self) {
        self.tx = None;
        if let Some(mut task) = self.task.take() {
            tokio::spawn(async move {
                if tokio::time::timeout(STOP_DEADLINE, &mut task)
                    .await
                    .is_err()
                {
                    task.abort();
                }
            });
        }
    }
}

impl<M> Drop for ShadowTask<M> {
    /// A shadow dropped without `stop` (the pipeline failed) ends at once.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// What the filter candidate's task compares: the live filter's input and
/// output, and how long the live call took.
pub(crate) struct FilterJob {
    schemas: Vec<Arc<TableSchema>>,
    input: Batch,
    live: Batch,
    live_took: Duration,
}

/// A filter candidate on its own task.
pub(crate) struct FilterShadow {
    queue: ShadowTask<FilterJob>,
}

impl FilterShadow {
    /// Starts `filter` (opened on its task) beside a live filter.
    pub(crate) fn start<F: sluice_core::Filter + 'static>(
        filter: F,
        limits: ShadowLimits,
        status: Arc<ShadowStatus>,
    ) -> Self {
        let queue = ShadowTask::start("filter", limits, status.clone(), |rx, done| {
            transform_candidate(filter, rx, done, status)
        });
        Self { queue }
    }

    /// Hands the candidate the live filter's input and output of one call;
    /// `Err` when it is dropped.
    pub(crate) fn compare(
        &mut self,
        schemas: &[Arc<TableSchema>],
        input: Batch,
        live: &Batch,
        live_took: Duration,
    ) -> Result<(), ()> {
        let bytes = input.wire_bytes() + live.wire_bytes();
        let job = FilterJob {
            schemas: schemas.to_vec(),
            input,
            live: live.clone(),
            live_took,
        };
        self.queue.send(bytes, job)
    }

    pub(crate) fn stop(self) {
        self.queue.stop();
    }
}

/// The filter candidate's task: opens it, then transforms each input and
/// compares its output with the live one.
async fn transform_candidate<F: sluice_core::Filter>(
    mut filter: F,
    mut rx: mpsc::UnboundedReceiver<(u64, FilterJob)>,
    done: Arc<AtomicU64>,
    status: Arc<ShadowStatus>,
) {
    if let Err(error) = filter.open().await {
        status.drop_with(format!("the candidate filter did not open: {error}"));
        return;
    }
    let mut in_a_row = 0u32;
    while let Some((seq, mut job)) = rx.recv().await {
        let started = Instant::now();
        let result = filter.transform(&job.schemas, &mut job.input).await;
        let took = started.elapsed();
        match result {
            Ok(()) => {
                in_a_row = 0;
                job.input.tables.retain(|t| !t.is_empty());
                status.update(|s| {
                    s.live.record(job.live_took);
                    s.candidate.record(took);
                    compare(&job.schemas, &job.live, &job.input, s);
                });
            }
            Err(error) => {
                in_a_row += 1;
                status.failed(&error, in_a_row, filter.name());
                if in_a_row >= MAX_FAILURES_IN_A_ROW {
                    return;
                }
            }
        }
        done.store(seq, Ordering::Release);
    }
}

/// What the sink candidate's task is asked to do.
pub(crate) enum ToShadow {
    Write {
        schemas: Vec<Arc<TableSchema>>,
        batch: Batch,
    },
    Flush(CommitTs),
}

/// A sink candidate on its own task.
pub(crate) struct SinkShadow {
    queue: ShadowTask<ToShadow>,
}

impl SinkShadow {
    /// Starts `sink` on its own task (it opens there).
    pub(crate) fn start<K: Sink + 'static>(
        sink: K,
        limits: ShadowLimits,
        status: Arc<ShadowStatus>,
    ) -> Self {
        let queue = ShadowTask::start("sink", limits, status.clone(), |rx, done| {
            feed(sink, rx, done, status)
        });
        Self { queue }
    }

    /// Counts a live sink call of `took`.
    pub(crate) fn live_took(&self, took: Duration) {
        self.queue.status.update(|s| s.live.record(took));
    }

    /// Hands a copy of a batch the live sink got to the candidate.
    pub(crate) fn write(&mut self, schemas: &[Arc<TableSchema>], batch: &Batch) -> Result<(), ()> {
        let bytes = batch.wire_bytes();
        let message = ToShadow::Write {
            schemas: schemas.to_vec(),
            batch: batch.clone(),
        };
        self.queue.send(bytes, message)
    }

    /// Asks the candidate to flush up to `ts` (the live sink did).
    pub(crate) fn flush(&mut self, ts: CommitTs) -> Result<(), ()> {
        self.queue.send(0, ToShadow::Flush(ts))
    }

    pub(crate) fn stop(self) {
        self.queue.stop();
    }
}

/// The candidate sink's task: opens it, then takes writes and flushes in
/// order until the pipeline drops its end of the queue.
async fn feed<K: Sink>(
    mut sink: K,
    mut rx: mpsc::UnboundedReceiver<(u64, ToShadow)>,
    done: Arc<AtomicU64>,
    status: Arc<ShadowStatus>,
) {
    if let Err(error) = sink.open().await {
        status.drop_with(format!("the candidate sink did not open: {error}"));
        return;
    }
    let mut in_a_row = 0u32;
    let mut last_ts = None;
    while let Some((seq, message)) = rx.recv().await {
        let result = match message {
            ToShadow::Write { schemas, mut batch } => {
                let rows = batch.row_count() as u64;
                let started = Instant::now();
                let result = sink.write(&schemas, &mut batch).await;
                let took = started.elapsed();
                status.update(|s| {
                    s.batches += 1;
                    s.candidate.record(took);
                    if result.is_ok() {
                        s.rows_written += rows;
                    }
                });
                result
            }
            ToShadow::Flush(ts) => {
                last_ts = Some(ts);
                let result = sink.flush(ts).await;
                if result.is_ok() {
                    status.update(|s| s.flushes += 1);
                }
                result
            }
        };
        if let Err(error) = result {
            in_a_row += 1;
            status.failed(&error, in_a_row, sink.name());
            if in_a_row >= MAX_FAILURES_IN_A_ROW {
                return;
            }
            // A fresh instance for what comes next (what it lost is lost: a
            // shadow is measured, not relied on).
            if let Err(error) = sink.open().await {
                status.drop_with(format!("the candidate sink did not open again: {error}"));
                return;
            }
        } else {
            in_a_row = 0;
        }
        done.store(seq, Ordering::Release);
    }
    if let Some(ts) = last_ts
        && let Err(error) = sink.flush(ts).await
    {
        tracing::debug!(%error, "The candidate sink's last flush failed.");
    }
    if let Err(error) = sink.close().await {
        tracing::debug!(%error, "The candidate sink did not close cleanly.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Column, ColumnType, Op, Value};

    fn schema() -> Arc<TableSchema> {
        let col = |name: &str, ty, key| Column {
            name: name.into(),
            ty,
            sql_type: String::new(),
            nullable: true,
            key,
        };
        Arc::new(TableSchema {
            table_id: 7,
            version: 1,
            schema_name: "shop".into(),
            table_name: "orders".into(),
            columns: vec![
                col("id", ColumnType::Int, true),
                col("note", ColumnType::Text, false),
            ],
        })
    }

    fn batch(rows: &[(i64, &str)]) -> Batch {
        let schema = schema();
        let mut t = TableBatch::new(&schema);
        for (i, (id, note)) in rows.iter().enumerate() {
            t.push_values(
                CommitTs::new(100 + i as u64),
                0,
                Op::Insert,
                None,
                Some(&[Value::Int(*id), Value::Bytes(note.as_bytes().to_vec())]),
            );
        }
        Batch { tables: vec![t] }
    }

    #[test]
    fn equal_outputs_count_rows_and_no_difference() {
        let mut s = ShadowSnapshot::default();
        let b = batch(&[(1, "a"), (2, "b")]);
        compare(&[schema()], &b, &b.clone(), &mut s);
        assert_eq!((s.rows_compared, s.rows_differing), (2, 0));
        assert!(s.differences.is_empty());
    }

    #[test]
    fn a_differing_column_is_named_with_table_key_and_both_values() {
        let mut s = ShadowSnapshot::default();
        let live = batch(&[(1, "a"), (2, "b"), (3, "c")]);
        let candidate = batch(&[(1, "a"), (2, "B"), (3, "c")]);
        compare(&[schema()], &live, &candidate, &mut s);
        assert_eq!((s.rows_compared, s.rows_differing), (3, 1));
        assert_eq!(
            s.differences,
            vec![Difference {
                table: "shop.orders".into(),
                key: "id=2".into(),
                column: "note".into(),
                live: "b".into(),
                candidate: "B".into(),
            }]
        );
    }

    #[test]
    fn a_row_only_one_side_has_is_a_difference_and_the_rest_still_pair() {
        let mut s = ShadowSnapshot::default();
        let live = batch(&[(1, "a"), (2, "b"), (3, "c")]);
        let mut candidate = live.clone();
        let schema = schema();
        // The candidate drops row id=2 (and keeps the commit ts of the others).
        candidate.tables[0] = candidate.tables[0].select(&schema, |r| r.value(0) != Value::Int(2));
        compare(std::slice::from_ref(&schema), &live, &candidate, &mut s);
        assert_eq!((s.rows_compared, s.rows_differing), (3, 1));
        assert_eq!(s.differences[0].key, "id=2");
        assert_eq!(s.differences[0].column, "(row)");
        assert_eq!(
            (
                s.differences[0].live.as_str(),
                s.differences[0].candidate.as_str()
            ),
            ("present", "absent")
        );
    }

    #[test]
    fn only_the_first_differences_are_kept_but_all_are_counted() {
        let mut s = ShadowSnapshot::default();
        let rows: Vec<(i64, String)> = (0..50).map(|i| (i, format!("v{i}"))).collect();
        let live = batch(
            &rows
                .iter()
                .map(|(i, v)| (*i, v.as_str()))
                .collect::<Vec<_>>(),
        );
        let upper: Vec<(i64, String)> = rows.iter().map(|(i, v)| (*i, v.to_uppercase())).collect();
        let candidate = batch(
            &upper
                .iter()
                .map(|(i, v)| (*i, v.as_str()))
                .collect::<Vec<_>>(),
        );
        compare(&[schema()], &live, &candidate, &mut s);
        assert_eq!((s.rows_compared, s.rows_differing), (50, 50));
        assert_eq!(s.differences.len(), MAX_DIFFERENCES);
    }

    #[test]
    fn shown_values_are_bounded_and_escaped() {
        let long = "x\n".repeat(200);
        let v = shown(&Value::Bytes(long.into_bytes()));
        assert!(v.len() < 3 * MAX_VALUE_CHARS, "{v}");
        assert!(!v.contains('\n'));
        assert!(v.ends_with('…'));
    }

    #[test]
    fn latency_quantiles_come_from_the_latest_calls() {
        let mut l = CallLatency::default();
        for us in 1..=100u64 {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.calls, 100);
        assert_eq!(l.max_us, 100);
        assert_eq!(l.mean_us(), 50);
        assert_eq!(l.quantile_us(0.5), 51);
        assert_eq!(l.quantile_us(0.99), 99);
    }
}
