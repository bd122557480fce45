//! Exactly-once apply: every group writes, in its own downstream transaction,
//! a row of the progress table saying which upstream transactions (and which
//! of their rows, by `row-seq`) it applied. When the host delivers rows again
//! (after a restart, a failed flush, a swap), the rows of transactions the
//! progress table shows as applied are left out, and the others are written
//! as they were the first time: no row twice, none lost, and no idempotent
//! rewrite needed (a `REPLACE` would delete a parent row and cascade to its
//! children; replaying a prefix of changes again can break a foreign key
//! check midway).
//!
//! A DDL writes its row after it ran (a DDL commits by itself in MySQL): a
//! DDL delivered again is skipped, so one that is not idempotent (`EXCHANGE
//! PARTITION`, a `RENAME` that swaps two tables) is not undone.
//!
//! Rows of the progress table at or below the changefeed's saved checkpoint
//! are deleted now and then: nothing at or below it is delivered again. The
//! largest bound deleted is kept in a row of its own: rows delivered again
//! below it (a checkpoint overwritten backwards) have no record left and are
//! written idempotently.
//!
//! When the table cannot be created (no privilege), the sink says so once
//! and writes replayed rows idempotently instead (safe mode).

use std::collections::HashMap;

use sluice_sdk::Error;
use sluice_sdk::sql::{self, Statement, Value as SqlValue};

use crate::Dialect;

/// `first-seq` of a DDL's row: above any row's. The row that keeps the
/// largest bound deleted has `first-txn` and `first-seq` 0.
const DDL_SEQ: i64 = u32::MAX as i64;
/// Delete applied rows at most this often (flushes).
const PRUNE_EVERY: u32 = 64;

/// What one group applied of one upstream transaction: its rows with `seq`
/// from `lo` to `hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The transaction's id (`txn-id`: the same each time it is delivered;
    /// its commit ts may not be).
    pub txn: u64,
    /// Its first row's seq in the group.
    pub lo: u32,
    /// Its last row's seq in the group.
    pub hi: u32,
}

/// Encodes what a group applied: 16 bytes per transaction.
pub fn encode(applied: &[Applied]) -> Vec<u8> {
    let mut out = Vec::with_capacity(applied.len() * 16);
    for a in applied {
        out.extend(a.txn.to_le_bytes());
        out.extend(a.lo.to_le_bytes());
        out.extend(a.hi.to_le_bytes());
    }
    out
}

/// Decodes [`encode`]'s bytes; a malformed tail is ignored.
pub fn decode(bytes: &[u8]) -> Vec<Applied> {
    bytes
        .chunks_exact(16)
        .map(|c| Applied {
            txn: u64::from_le_bytes(c[0..8].try_into().expect("8 bytes")),
            lo: u32::from_le_bytes(c[8..12].try_into().expect("4 bytes")),
            hi: u32::from_le_bytes(c[12..16].try_into().expect("4 bytes")),
        })
        .collect()
}

/// Which rows were applied already, from the progress table.
#[derive(Debug, Default)]
pub struct AppliedSet {
    by_ts: HashMap<u64, Vec<(u32, u32)>>,
    /// Rows at or below this have no record any more.
    pub pruned_through: u64,
}

impl AppliedSet {
    /// Whether row `seq` of the transaction `txn` was applied.
    pub fn contains(&self, txn: u64, seq: u32) -> bool {
        self.by_ts
            .get(&txn)
            .is_some_and(|ranges| ranges.iter().any(|&(lo, hi)| lo <= seq && seq <= hi))
    }

    /// How many transactions (or parts) it records.
    pub fn transactions(&self) -> usize {
        self.by_ts.values().map(Vec::len).sum()
    }

    fn add(&mut self, a: Applied) {
        self.by_ts.entry(a.txn).or_default().push((a.lo, a.hi));
    }
}

/// The state of the progress table for one sink instance.
pub struct Progress {
    /// `schema.table` as configured.
    table: (String, String),
    changefeed: String,
    state: State,
    flushes_since_prune: u32,
    pruned: u64,
}

enum State {
    /// Not tried yet.
    Unknown,
    /// Created (or there).
    Ready,
    /// Off: `progress-table` is empty, or the table could not be created.
    Off,
}

impl Progress {
    /// The progress table `schema.table` (empty: off) for `changefeed`.
    pub fn new(table: &str, changefeed: String) -> Self {
        let (schema, name) = table.split_once('.').unwrap_or(("", ""));
        let state = if table.is_empty() {
            State::Off
        } else {
            State::Unknown
        };
        Self {
            table: (schema.to_string(), name.to_string()),
            changefeed,
            state,
            flushes_since_prune: 0,
            pruned: 0,
        }
    }

    fn quoted<D: Dialect>(&self) -> String {
        D::table_name(&self.table.0, &self.table.1)
    }

    /// Whether applied rows are recorded (the table is there).
    pub fn enabled<D: Dialect>(&mut self, database: &str) -> Result<bool, Error> {
        if let State::Unknown = self.state {
            let group = D::progress_table(&self.table.0, &self.table.1);
            match sql::execute(database, vec![group]) {
                Ok(_) => {
                    sluice_sdk::host::log(
                        sluice_sdk::host::Level::Debug,
                        &format!(
                            "applied rows are recorded in {}.{}",
                            self.table.0, self.table.1
                        ),
                    );
                    self.state = State::Ready
                }
                Err(e) if e.kind == sql::ErrorKind::Retryable => return Err(e.into_error()),
                Err(e) => {
                    sluice_sdk::host::warn(&format!(
                        "exactly-once apply is off: the progress table {}.{} cannot be created ({}); \
                         rows delivered again after a restart are written idempotently instead \
                         (safe mode), which tables with cascading foreign keys do not survive \
                         exactly. Grant the sink's user CREATE on it, or name another table in \
                         progress-table.",
                        self.table.0, self.table.1, e.message
                    ));
                    self.state = State::Off;
                }
            }
        }
        Ok(matches!(self.state, State::Ready))
    }

    /// The statement a group ends with: it applied `applied` (the first of
    /// which is its first transaction), of commit ts (as delivered this time)
    /// up to `last`, from `first`.
    pub fn record<D: Dialect>(
        &self,
        first: u64,
        last: u64,
        applied: &[Applied],
    ) -> Option<Statement> {
        let head = applied.first()?;
        Some(self.row::<D>(
            (head.txn, i64::from(head.lo)),
            first as i64,
            last as i64,
            encode(applied),
        ))
    }

    /// A row of the progress table: its key (a transaction id and a seq),
    /// its commit ts range, what it applied.
    fn row<D: Dialect>(
        &self,
        (txn, seq): (u64, i64),
        first_ts: i64,
        last_ts: i64,
        txns: Vec<u8>,
    ) -> Statement {
        let p: Vec<String> = (1..=6).map(D::placeholder).collect();
        Statement::new(
            format!(
                "INSERT INTO {} (changefeed, first_txn, first_seq, first_ts, last_ts, txns) \
                 VALUES ({}, {}, {}, {}, {}, {})",
                self.quoted::<D>(),
                p[0],
                p[1],
                p[2],
                p[3],
                p[4],
                p[5]
            ),
            vec![
                SqlValue::Text(self.changefeed.clone()),
                SqlValue::Int(txn as i64),
                SqlValue::Int(seq),
                SqlValue::Int(first_ts),
                SqlValue::Int(last_ts),
                SqlValue::Bytes(txns),
            ],
        )
    }

    /// What was applied above the saved checkpoint `saved` (nothing at or
    /// below it is delivered again): the rows of the progress table that may
    /// name a transaction delivered again, and the bound below which rows were
    /// deleted.
    pub fn applied<D: Dialect>(&self, database: &str, saved: u64) -> Result<AppliedSet, Error> {
        let rows = sql::query(
            database,
            Statement::new(
                format!(
                    "SELECT first_txn, first_seq, last_ts, txns FROM {} WHERE changefeed = {} \
                     AND (last_ts > {} OR (first_txn = 0 AND first_seq = 0))",
                    self.quoted::<D>(),
                    D::placeholder(1),
                    D::placeholder(2)
                ),
                vec![
                    SqlValue::Text(self.changefeed.clone()),
                    SqlValue::Int(saved as i64),
                ],
            ),
            crate::MAX_QUERY_ROWS,
        )
        .map_err(sql::SqlError::into_error)?;
        let mut set = AppliedSet::default();
        for row in rows {
            let int = |at: usize| match row.get(at) {
                Some(SqlValue::Int(i)) => *i as u64,
                Some(SqlValue::Uint(u)) => *u,
                _ => 0,
            };
            if int(0) == 0 && int(1) == 0 {
                set.pruned_through = set.pruned_through.max(int(2));
                continue;
            }
            // MySQL results give bytes that read as UTF-8 as text.
            let bytes = match row.get(3) {
                Some(SqlValue::Bytes(b)) => b.as_slice(),
                Some(SqlValue::Text(t)) => t.as_bytes(),
                _ => &[],
            };
            for a in decode(bytes) {
                set.add(a);
            }
        }
        Ok(set)
    }

    /// Whether the DDL `id` ran already.
    pub fn ddl_applied<D: Dialect>(&self, database: &str, id: u64) -> Result<bool, Error> {
        let rows = sql::query(
            database,
            Statement::new(
                format!(
                    "SELECT 1 FROM {} WHERE changefeed = {} AND first_txn = {} AND first_seq = {}",
                    self.quoted::<D>(),
                    D::placeholder(1),
                    D::placeholder(2),
                    D::placeholder(3)
                ),
                vec![
                    SqlValue::Text(self.changefeed.clone()),
                    SqlValue::Int(id as i64),
                    SqlValue::Int(DDL_SEQ),
                ],
            ),
            1,
        )
        .map_err(sql::SqlError::into_error)?;
        Ok(!rows.is_empty())
    }

    /// The statement that records the DDL `id` (at `commit_ts`) as run.
    pub fn ddl_done<D: Dialect>(&self, id: u64, commit_ts: u64) -> Statement {
        self.row::<D>(
            (id, DDL_SEQ),
            commit_ts as i64,
            commit_ts as i64,
            Vec::new(),
        )
    }

    /// Now and then, the statements that delete what the saved checkpoint
    /// `saved` covers (nothing at or below it is delivered again).
    pub fn prune<D: Dialect>(&mut self, saved: u64) -> Vec<Statement> {
        self.flushes_since_prune += 1;
        if saved <= self.pruned || self.flushes_since_prune < PRUNE_EVERY {
            return Vec::new();
        }
        self.flushes_since_prune = 0;
        self.pruned = saved;
        let table = self.quoted::<D>();
        vec![
            Statement::new(
                format!(
                    "DELETE FROM {table} WHERE changefeed = {} AND last_ts <= {} \
                     AND NOT (first_txn = 0 AND first_seq = 0)",
                    D::placeholder(1),
                    D::placeholder(2)
                ),
                vec![
                    SqlValue::Text(self.changefeed.clone()),
                    SqlValue::Int(saved as i64),
                ],
            ),
            D::upsert_pruned(&table, &self.changefeed, saved as i64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_group_applied_encodes_and_decodes() {
        let applied = vec![
            Applied {
                txn: 1 << 40,
                lo: 0,
                hi: 3,
            },
            Applied {
                txn: (1 << 40) + 1,
                lo: 100,
                hi: u32::MAX - 1,
            },
        ];
        let bytes = encode(&applied);
        assert_eq!(bytes.len(), 32);
        assert_eq!(decode(&bytes), applied);
        let mut set = AppliedSet::default();
        for a in decode(&bytes) {
            set.add(a);
        }
        assert!(set.contains(1 << 40, 0) && set.contains(1 << 40, 3));
        assert!(!set.contains(1 << 40, 4));
        assert!(!set.contains((1 << 40) + 1, 99));
        assert!(set.contains((1 << 40) + 1, 100));
        assert!(!set.contains(7, 0));
    }
}
