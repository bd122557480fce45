//! Barriers: why a table's rows wait.
//!
//! A barrier stands at a commit ts; rows above it are held by their table's
//! dispatcher until it has passed, and no table's checkpoint passes it
//! before then. A DDL is a barrier for every table: rows above it wait until
//! it is applied downstream (a row of another table may need it: a child row
//! whose parent row waits behind the parent table's `ALTER`), so the sink sees
//! every DDL where upstream ran it among the rows, as a replica applying the
//! binlog in order does. The redo log's fence (rows above the redo resolved ts
//! wait until the log has them) is to be the second kind, held and released
//! by the same dispatchers.

use std::collections::VecDeque;

use sluice_core::{CommitTs, DdlEvent};

/// What held rows wait for. Barriers are ordered by their ts: rows that wait
/// for a later barrier wait for every earlier one too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Barrier {
    /// The DDL at this commit ts must be applied downstream.
    Ddl(CommitTs),
}

impl Barrier {
    /// Where it stands.
    pub(crate) fn ts(self) -> CommitTs {
        match self {
            Barrier::Ddl(ts) => ts,
        }
    }
}

/// The DDLs read but not applied yet, in commit-ts order.
#[derive(Default)]
pub(crate) struct Barriers {
    pending: VecDeque<DdlEvent>,
}

impl Barriers {
    /// `ddl` was read: a barrier for every table from now on.
    pub(crate) fn push(&mut self, ddl: DdlEvent) -> Barrier {
        let barrier = Barrier::Ddl(ddl.commit_ts);
        self.pending.push_back(ddl);
        barrier
    }

    /// The earliest barrier not passed.
    pub(crate) fn first(&self) -> Option<Barrier> {
        self.pending.front().map(|d| Barrier::Ddl(d.commit_ts))
    }

    /// The latest barrier not passed: rows read now wait for it.
    pub(crate) fn last(&self) -> Option<Barrier> {
        self.pending.back().map(|d| Barrier::Ddl(d.commit_ts))
    }

    /// The earliest DDL, to be applied (every row below it is written and
    /// flushed).
    pub(crate) fn pop(&mut self) -> Option<DdlEvent> {
        self.pending.pop_front()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Where each barrier stands, in order.
    pub(crate) fn ts(&self) -> impl Iterator<Item = CommitTs> + '_ {
        self.pending.iter().map(|d| d.commit_ts)
    }
}
