//! One table of the changefeed: its dispatcher appends the table's rows to the
//! batch it builds, writes full batches to its [`Output`], holds rows behind a
//! [`Barrier`], and tells the ts up to which it has written everything.

use std::collections::VecDeque;
use std::sync::Arc;

use sluice_core::{
    Batch, ColumnData, CommitTs, FLAG_REPLAY, FLAG_SPLIT, RunPart, RunTransaction, TableBatch,
    TableChanges, TableSchema,
};

use crate::barrier::Barrier;
use crate::cache::CachePermit;
use crate::error::PipelineError;

/// Where a dispatcher's batches go (the sink writer).
pub(crate) trait Output {
    /// Write `batch` (of one or more tables; `schemas` are theirs) downstream.
    async fn write(
        &mut self,
        schemas: Vec<Arc<TableSchema>>,
        batch: Batch,
    ) -> Result<(), PipelineError>;
}

/// How big a batch may grow.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) rows: usize,
    pub(crate) bytes: usize,
    /// Rows with commit ts <= this are flagged replay.
    pub(crate) replay_until: CommitTs,
}

/// One transaction's rows of a table that wait for a barrier, with the cache
/// bytes they hold.
pub(crate) struct Held {
    pub(crate) commit_ts: CommitTs,
    /// Its transaction's id.
    pub(crate) id: u64,
    /// They go on once this barrier (and every one before it) has passed.
    pub(crate) waits_for: Barrier,
    pub(crate) changes: TableChanges,
    /// Part of a transaction that came in parts.
    pub(crate) split: bool,
    pub(crate) _permit: Option<CachePermit>,
}

/// One table of the changefeed.
pub(crate) struct Dispatcher {
    /// The schema of the rows in `batch` (and of the last rows seen).
    schema: Arc<TableSchema>,
    /// `schema.table`, for the report.
    pub(crate) name: String,
    /// The batch being built.
    batch: Option<TableBatch>,
    batch_bytes: usize,
    /// Commit ts of the first row in `batch`.
    first_unwritten: Option<CommitTs>,
    /// Rows above a barrier that has not passed, in order.
    held: VecDeque<Held>,
    /// The earliest barrier this table waits for.
    blocked_by: Option<Barrier>,
    /// Rows received.
    pub(crate) rows_in: u64,
    /// An empty batch sized like the last full one, to build the next in.
    spare: Option<TableBatch>,
}

impl Dispatcher {
    pub(crate) fn new(schema: Arc<TableSchema>, blocked_by: Option<Barrier>) -> Self {
        Self {
            name: schema.qualified_name(),
            schema,
            batch: None,
            batch_bytes: 0,
            first_unwritten: None,
            held: VecDeque::new(),
            blocked_by,
            rows_in: 0,
            spare: None,
        }
    }

    fn rows(&self) -> usize {
        self.batch.as_ref().map_or(0, TableBatch::len)
    }

    /// Nothing of this table waits for a barrier.
    pub(crate) fn is_free(&self) -> bool {
        self.held.is_empty() && self.blocked_by.is_none()
    }

    /// What the last rows held wait for.
    pub(crate) fn last_held(&self) -> Option<Barrier> {
        self.held.back().map(|h| h.waits_for)
    }

    /// A barrier came in: the table's later rows wait for it (unless they
    /// already wait for an earlier one).
    pub(crate) fn block(&mut self, barrier: Barrier) {
        self.blocked_by.get_or_insert(barrier);
    }

    /// Keep `held` until its barrier passes.
    pub(crate) fn hold(&mut self, held: Held) {
        self.held.push_back(held);
    }

    /// Every row of this table with commit ts <= the result has been written to
    /// the output, given that every event <= `read_through` has been received:
    /// the table's checkpoint after the next successful flush.
    pub(crate) fn written_through(&self, read_through: CommitTs) -> CommitTs {
        let before = |ts: CommitTs| CommitTs::new(ts.get().saturating_sub(1));
        [
            Some(read_through),
            self.first_unwritten.map(before),
            self.held.front().map(|h| before(h.commit_ts)),
            self.blocked_by.map(|b| before(b.ts())),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("read_through is there")
    }

    /// `passed` has passed: the table waits for `next` (the next barrier, if
    /// any), and the held rows that waited for `passed` (or an earlier one) go
    /// on, in order. Returns the held parts and their wire bytes released.
    pub(crate) async fn release(
        &mut self,
        passed: Barrier,
        next: Option<Barrier>,
        bounds: Bounds,
        out: &mut impl Output,
    ) -> Result<(usize, usize), PipelineError> {
        if self.blocked_by == Some(passed) {
            self.blocked_by = next;
        }
        let (mut parts, mut bytes) = (0, 0);
        while self.held.front().is_some_and(|h| h.waits_for <= passed) {
            let held = self.held.pop_front().expect("checked");
            parts += 1;
            bytes += held.changes.wire_bytes();
            self.push(
                held.commit_ts,
                held.id,
                held.changes,
                held.split,
                bounds,
                out,
            )
            .await?;
        }
        Ok((parts, bytes))
    }

    /// Take the batch being built (with its wire bytes), to be written.
    pub(crate) fn take_batch(&mut self) -> Option<(Arc<TableSchema>, TableBatch, usize)> {
        let table = self.batch.take()?;
        let bytes = std::mem::take(&mut self.batch_bytes);
        self.first_unwritten = None;
        Some((self.schema.clone(), table, bytes))
    }

    /// Write the batch being built, if any.
    pub(crate) async fn emit(&mut self, out: &mut impl Output) -> Result<(), PipelineError> {
        let Some((schema, table, _)) = self.take_batch() else {
            return Ok(());
        };
        // The next batch of this table gets room for as much as this full one.
        self.spare = Some(TableBatch::with_capacity_of(&schema, &table));
        out.write(
            vec![schema],
            Batch {
                tables: vec![table],
            },
        )
        .await
    }

    /// Append one transaction's rows of this table to the batch: whole (moved,
    /// when the batch is empty) if they fit a batch, else spread over several
    /// batches, flagged split.
    pub(crate) async fn push(
        &mut self,
        commit_ts: CommitTs,
        id: u64,
        changes: TableChanges,
        split: bool,
        bounds: Bounds,
        out: &mut impl Output,
    ) -> Result<(), PipelineError> {
        let rows_bound = bounds.rows.max(1);
        let bytes_bound = bounds.bytes;
        let (rows, bytes) = (changes.len(), changes.wire_bytes());
        if rows == 0 {
            return Ok(());
        }
        let mut flags = if split { FLAG_SPLIT } else { 0 };
        if commit_ts <= bounds.replay_until {
            flags |= FLAG_REPLAY;
        }
        let new_version = self.batch.is_some() && self.schema.version != changes.schema().version;
        if new_version || self.rows() + rows > rows_bound || self.batch_bytes + bytes > bytes_bound
        {
            self.emit(out).await?;
        }
        if !Arc::ptr_eq(&self.schema, changes.schema()) {
            self.schema = changes.schema().clone();
        }
        if rows <= rows_bound && bytes <= bytes_bound {
            self.append(changes, 0..rows, (commit_ts, id), flags, bytes);
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
                self.append_range(&changes, start..end, (commit_ts, id), flags, taken);
                if end < rows {
                    self.emit(out).await?;
                }
                start = end;
            }
        }
        if self.rows() >= rows_bound {
            self.emit(out).await?;
        }
        Ok(())
    }

    /// Append a run's rows of this table to the batch, as many transactions at
    /// once as fit; a transaction is never cut (each fits a batch: the caller
    /// checks).
    pub(crate) async fn push_part(
        &mut self,
        part: RunPart,
        transactions: &[RunTransaction],
        bounds: Bounds,
        out: &mut impl Output,
    ) -> Result<(), PipelineError> {
        let rows_bound = bounds.rows.max(1);
        let bytes_bound = bounds.bytes;
        let stamp = |txn: u32| {
            let t = &transactions[txn as usize];
            let ts = t.commit_ts;
            let flags = if ts <= bounds.replay_until {
                FLAG_REPLAY
            } else {
                0
            };
            (ts, flags, t.id)
        };
        let rows = part.changes.len();
        self.rows_in += rows as u64;
        let mut part = Some(part);
        let mut i = 0;
        loop {
            let p = part.as_ref().expect("kept until moved whole");
            if i >= p.segments.len() {
                break;
            }
            if self.batch.is_some() && self.schema.version != p.changes.schema().version {
                self.emit(out).await?;
                continue;
            }
            // A large part that fits a batch whole is moved into one of its
            // own rather than copied after the rows gathered so far (they are
            // written first): a burst of runs, as the redo fence releases
            // them, would otherwise be copied once more, row by row.
            if i == 0 && self.batch.is_some() && moves_whole(p, rows_bound, bytes_bound) {
                self.emit(out).await?;
                continue;
            }
            // The transactions that fit what is left of the batch.
            let (r0, b0, a0, y0) = p.start_of(i);
            let (room_rows, room_bytes) = (
                rows_bound.saturating_sub(self.rows()),
                bytes_bound.saturating_sub(self.batch_bytes),
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
                self.emit(out).await?;
                continue;
            }
            let end = p.segments[j - 1];
            let first_ts = stamp(p.segments[i].txn).0;
            let bytes = end.bytes - y0;
            if !Arc::ptr_eq(&self.schema, p.changes.schema()) {
                self.schema = p.changes.schema().clone();
            }
            if i == 0
                && j == p.segments.len()
                && self.batch.is_none()
                && (self.spare.is_none() || moves_whole(p, rows_bound, bytes_bound))
            {
                // The whole part into an empty batch: moved, not copied (the
                // spare, if any, is kept for small appends).
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
                self.batch = Some(TableBatch::from_rows(p.changes, commit_ts, ids, flags));
                self.batch_bytes = bytes;
                self.first_unwritten = Some(first_ts);
                if self.rows() >= rows_bound {
                    self.emit(out).await?;
                }
                return Ok(());
            }
            let batch = self.batch_to_extend();
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
            self.batch_bytes += bytes;
            self.first_unwritten.get_or_insert(first_ts);
            if self.rows() >= rows_bound {
                self.emit(out).await?;
            }
            i = j;
        }
        Ok(())
    }

    /// The batch being built, or a new one (in the spare, if it fits the schema).
    fn batch_to_extend(&mut self) -> &mut TableBatch {
        let (schema, spare) = (&self.schema, &mut self.spare);
        self.batch.get_or_insert_with(|| {
            spare
                .take()
                .filter(|b| b.table_id == schema.table_id && b.schema_version == schema.version)
                .unwrap_or_else(|| TableBatch::new(schema))
        })
    }

    /// Append all of `changes`: moved whole when the batch is empty and no flag
    /// must be set, copied per column otherwise.
    fn append(
        &mut self,
        changes: TableChanges,
        rows: std::ops::Range<usize>,
        (commit_ts, id): (CommitTs, u64),
        flags: u8,
        bytes: usize,
    ) {
        if self.batch.is_none() && self.spare.is_none() {
            self.batch = Some(TableBatch::from_changes(changes, commit_ts, id, flags));
            self.batch_bytes = bytes;
            self.first_unwritten = Some(commit_ts);
            return;
        }
        self.append_range(&changes, rows, (commit_ts, id), flags, bytes);
    }

    fn append_range(
        &mut self,
        changes: &TableChanges,
        rows: std::ops::Range<usize>,
        (commit_ts, id): (CommitTs, u64),
        flags: u8,
        bytes: usize,
    ) {
        self.batch_to_extend()
            .extend_from_changes(changes, rows, commit_ts, id, flags);
        self.batch_bytes += bytes;
        self.first_unwritten.get_or_insert(commit_ts);
    }
}

/// `part` fits a batch whole and fills at least half of one (by rows or
/// bytes): it is worth a batch of its own, moved, rather than a copy.
fn moves_whole(part: &RunPart, rows_bound: usize, bytes_bound: usize) -> bool {
    part.segments.last().is_some_and(|end| {
        end.rows <= rows_bound
            && end.bytes <= bytes_bound
            && (end.rows * 2 >= rows_bound || end.bytes * 2 >= bytes_bound)
    })
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

/// The changefeed checkpoint after a flush acknowledged `flushed`: the minimum
/// over its tables of what each has written (a table with nothing pending follows
/// `flushed`, which is where reading has got to), and never past a barrier that
/// has not passed.
pub(crate) fn changefeed_checkpoint(
    flushed: CommitTs,
    tables: impl IntoIterator<Item = CommitTs>,
    barriers: impl IntoIterator<Item = CommitTs>,
) -> CommitTs {
    let before = |ts: CommitTs| CommitTs::new(ts.get().saturating_sub(1));
    tables
        .into_iter()
        .chain(barriers.into_iter().map(before))
        .fold(flushed, CommitTs::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_core::{Column, ColumnType, Op, Transaction, TransactionRun, Value};

    /// The batches written, as (first id, rows) of each.
    #[derive(Default)]
    struct Written(Vec<(i64, usize)>);

    impl Output for Written {
        async fn write(
            &mut self,
            _schemas: Vec<Arc<TableSchema>>,
            batch: Batch,
        ) -> Result<(), PipelineError> {
            for t in batch.tables {
                let row = t.rows().next().expect("a batch has rows");
                let first = match row.after().expect("inserts")[0] {
                    Value::Int(id) => id,
                    ref other => panic!("an int key, got {other:?}"),
                };
                self.0.push((first, t.len()));
            }
            Ok(())
        }
    }

    /// A run of one transaction per id in `ids`, one row each.
    fn run(schema: &Arc<TableSchema>, ids: std::ops::Range<i64>) -> TransactionRun {
        let mut run = TransactionRun::new();
        for id in ids {
            let mut t = Transaction::new(CommitTs::new(id as u64 + 1));
            t.table(schema)
                .push_values(Op::Insert, None, Some(&[Value::Int(id)]));
            run.push(t).unwrap();
        }
        run
    }

    #[tokio::test]
    async fn a_large_part_gets_a_batch_of_its_own_and_small_ones_are_gathered() {
        let schema = Arc::new(TableSchema {
            table_id: 1,
            version: 1,
            schema_name: "s".into(),
            table_name: "t".into(),
            columns: vec![Column {
                name: "id".into(),
                ty: ColumnType::Int,
                sql_type: "bigint".into(),
                nullable: false,
                key: true,
            }],
        });
        let bounds = Bounds {
            rows: 100,
            bytes: usize::MAX,
            replay_until: CommitTs::ZERO,
        };
        let mut d = Dispatcher::new(schema.clone(), None);
        let mut out = Written::default();
        let push = async |d: &mut Dispatcher, out: &mut Written, ids| {
            let r = run(&schema, ids);
            let part = r.parts.into_iter().next().unwrap();
            d.push_part(part, &r.transactions, bounds, out)
                .await
                .unwrap();
        };
        // Small parts (under half a batch) are gathered into one batch...
        push(&mut d, &mut out, 0..10).await;
        push(&mut d, &mut out, 10..20).await;
        assert!(out.0.is_empty());
        assert_eq!(d.rows(), 20);
        // ...a large one that fits a batch is not copied after them: they
        // are written, and it is moved into a batch of its own...
        push(&mut d, &mut out, 20..80).await;
        assert_eq!(out.0, [(0, 20)]);
        assert_eq!(d.rows(), 60);
        // ...and so is the next large one, though a spare batch is there.
        push(&mut d, &mut out, 80..140).await;
        assert_eq!(out.0, [(0, 20), (20, 60)]);
        assert_eq!(d.rows(), 60);
        // A small one is gathered after it; one larger than a batch is
        // spread over batches as before, filling the one being built first.
        push(&mut d, &mut out, 140..150).await;
        push(&mut d, &mut out, 150..400).await;
        d.emit(&mut out).await.unwrap();
        assert_eq!(
            out.0,
            [
                (0, 20),
                (20, 60),
                (80, 100),
                (180, 100),
                (280, 100),
                (380, 20)
            ]
        );
        assert_eq!(d.rows_in, 400);
    }

    proptest! {
        #[test]
        fn the_checkpoint_is_the_minimum_over_tables_and_never_passes_a_pending_ddl(
            flushed in 0u64..1000,
            tables in proptest::collection::vec(0u64..1000, 0..8),
            ddls in proptest::collection::vec(1u64..1000, 0..3),
        ) {
            let cp = changefeed_checkpoint(
                CommitTs::new(flushed),
                tables.iter().copied().map(CommitTs::new),
                ddls.iter().copied().map(CommitTs::new),
            )
            .get();
            prop_assert!(cp <= flushed);
            prop_assert!(tables.iter().all(|&t| cp <= t));
            prop_assert!(ddls.iter().all(|&d| cp < d));
            // And it is the largest such ts: one of the bounds.
            let bounds: Vec<u64> = std::iter::once(flushed)
                .chain(tables.iter().copied())
                .chain(ddls.iter().map(|d| d - 1))
                .collect();
            prop_assert!(bounds.contains(&cp));
        }
    }
}
