//! Row-oriented change events as sources produce them.

use std::sync::Arc;

use crate::batch::TableSchema;
use crate::ts::CommitTs;

/// The kind of a row change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

impl Op {
    /// The wire code (`table-batch.ops`).
    pub const fn code(self) -> u8 {
        match self {
            Op::Insert => 0,
            Op::Update => 1,
            Op::Delete => 2,
        }
    }

    /// Whether a row of this kind carries a before image.
    pub const fn has_before(self) -> bool {
        !matches!(self, Op::Insert)
    }

    /// Whether a row of this kind carries an after image.
    pub const fn has_after(self) -> bool {
        !matches!(self, Op::Delete)
    }
}

/// One value of one column, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// Signed integers, datetimes (µs since epoch), dates (days), booleans (0/1).
    Int(i64),
    UInt(u64),
    Float(f64),
    /// Text, decimal text, JSON text and blobs.
    Bytes(Vec<u8>),
}

/// One row change of one table.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange {
    pub table: Arc<TableSchema>,
    pub op: Op,
    /// One value per schema column, for updates and deletes.
    pub before: Option<Vec<Value>>,
    /// One value per schema column, for inserts and updates.
    pub after: Option<Vec<Value>>,
}

impl RowChange {
    /// Approximate bytes the row occupies in a batch on the wire (what
    /// `BatchBuilder::bytes` counts): 10 per row, 8 per fixed-size value, length
    /// plus 4 per byte-like value.
    pub fn wire_bytes(&self) -> usize {
        let image = |vals: &Option<Vec<Value>>| -> usize {
            vals.iter()
                .flatten()
                .map(|x| match x {
                    Value::Bytes(b) => b.len() + 4,
                    _ => 8,
                })
                .sum()
        };
        10 + image(&self.before) + image(&self.after)
    }
}

/// The rows of one upstream transaction, all with the same commit ts.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    pub commit_ts: CommitTs,
    pub rows: Vec<RowChange>,
}

/// A schema change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdlEvent {
    pub commit_ts: CommitTs,
    pub schema_name: String,
    pub table_name: String,
    pub query: String,
}
