//! Per-table state: the batch being built, rows held behind a DDL barrier, and
//! what bounds the table's checkpoint.

use std::collections::VecDeque;
use std::sync::Arc;

use sluice_core::{CommitTs, TableBatch, TableChanges, TableSchema};

use crate::cache::CachePermit;

/// One transaction's rows of a table that wait for a DDL barrier, with the cache
/// bytes they hold.
pub(crate) struct Held {
    pub(crate) commit_ts: CommitTs,
    /// Its transaction's id.
    pub(crate) id: u64,
    /// They go on once the DDL at this ts (and every one before it) is applied:
    /// the latest pending DDL of any table their transaction touches.
    pub(crate) waits_for: CommitTs,
    pub(crate) changes: TableChanges,
    /// Part of a transaction that came in parts.
    pub(crate) split: bool,
    pub(crate) _permit: Option<CachePermit>,
}

/// One table of the changefeed.
pub(crate) struct Dispatcher {
    /// The schema of the rows in `batch` (and of the last rows seen).
    pub(crate) schema: Arc<TableSchema>,
    /// `schema.table`, for the report.
    pub(crate) name: String,
    /// The batch being built.
    pub(crate) batch: Option<TableBatch>,
    pub(crate) batch_bytes: usize,
    /// Commit ts of the first row in `batch`.
    pub(crate) first_unwritten: Option<CommitTs>,
    /// Rows above a pending DDL of this table, in order.
    pub(crate) held: VecDeque<Held>,
    /// The earliest pending DDL affecting this table.
    pub(crate) blocked_by: Option<CommitTs>,
    /// Rows received.
    pub(crate) rows_in: u64,
    /// An empty batch sized like the last full one, to build the next in.
    pub(crate) spare: Option<TableBatch>,
}

impl Dispatcher {
    pub(crate) fn new(schema: Arc<TableSchema>, blocked_by: Option<CommitTs>) -> Self {
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

    pub(crate) fn rows(&self) -> usize {
        self.batch.as_ref().map_or(0, TableBatch::len)
    }

    /// Every row of this table with commit ts <= the result has been written to
    /// the sink, given that every event <= `read_through` has been received: the
    /// table's checkpoint after the next successful flush.
    pub(crate) fn written_through(&self, read_through: CommitTs) -> CommitTs {
        let before = |ts: CommitTs| CommitTs::new(ts.get().saturating_sub(1));
        [
            Some(read_through),
            self.first_unwritten.map(before),
            self.held.front().map(|h| before(h.commit_ts)),
            self.blocked_by.map(before),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("read_through is there")
    }
}

/// The changefeed checkpoint after a flush acknowledged `flushed`: the minimum
/// over its tables of what each has written (a table with nothing pending follows
/// `flushed`, which is where reading has got to), and never past a DDL that is not
/// applied yet.
pub(crate) fn changefeed_checkpoint(
    flushed: CommitTs,
    tables: impl IntoIterator<Item = CommitTs>,
    pending_ddls: impl IntoIterator<Item = CommitTs>,
) -> CommitTs {
    let before = |ts: CommitTs| CommitTs::new(ts.get().saturating_sub(1));
    tables
        .into_iter()
        .chain(pending_ddls.into_iter().map(before))
        .fold(flushed, CommitTs::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
