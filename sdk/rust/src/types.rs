//! The contract's data types, re-exported from the generated bindings, plus
//! constructors and small conveniences.

pub use crate::bindings::sink_world::sluice::plugin::types::{
    Batch, ByteValues, Column, ColumnData, ColumnType, ColumnValues, DdlEvent, Error,
    QualifiedName, TableBatch, TableSchema,
};

impl Error {
    /// The configuration is wrong: the changefeed is rejected (or failed) at once.
    pub fn config(message: impl Into<String>) -> Self {
        Error::Config(message.into())
    }

    /// A transient failure: the host backs off and retries from the checkpoint.
    pub fn retryable(message: impl Into<String>) -> Self {
        Error::Retryable(message.into())
    }

    /// Retrying will not help: the changefeed is failed.
    pub fn fatal(message: impl Into<String>) -> Self {
        Error::Fatal(message.into())
    }

    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            Error::Config(m) | Error::Retryable(m) | Error::Fatal(m) => m,
        }
    }
}

impl DdlEvent {
    /// A DDL of `schema.table` (of the database `schema` when `table` is
    /// empty) at `commit_ts`, as the host delivers it from a session whose
    /// current database was `schema` and that changed no setting: for tests.
    pub fn new(commit_ts: u64, schema: &str, table: &str, query: &str) -> Self {
        DdlEvent {
            commit_ts,
            txn_id: commit_ts,
            kind: String::new(),
            schema_name: schema.to_string(),
            table_name: table.to_string(),
            tables: if table.is_empty() {
                Vec::new()
            } else {
                vec![QualifiedName {
                    schema_name: schema.to_string(),
                    table_name: table.to_string(),
                }]
            },
            default_schema: schema.to_string(),
            session: Vec::new(),
            query: query.to_string(),
        }
    }

    /// With its kind, as event filters name it (`create table`, ...).
    pub fn with_kind(mut self, kind: &str) -> Self {
        self.kind = kind.to_string();
        self
    }
}

impl From<std::io::Error> for Error {
    /// I/O errors are retryable by default; map them yourself where they are not.
    fn from(err: std::io::Error) -> Self {
        Error::Retryable(err.to_string())
    }
}

/// The kind of a row change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A new row: only an after image.
    Insert,
    /// A changed row: a before image (the old values) and an after image (the new).
    Update,
    /// A removed row: only a before image.
    Delete,
}

impl Op {
    /// The wire code used in `table-batch.ops`.
    pub const fn code(self) -> u8 {
        match self {
            Op::Insert => 0,
            Op::Update => 1,
            Op::Delete => 2,
        }
    }

    /// Decode a wire code; unknown codes are treated as updates (both images present
    /// is the safest reading) but never produced by the host.
    pub const fn from_code(code: u8) -> Op {
        match code {
            0 => Op::Insert,
            2 => Op::Delete,
            _ => Op::Update,
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

/// Row flag bit: the row is delivered again (after a restart, swap or retry).
pub const FLAG_REPLAY: u8 = 1;
/// Row flag bit: the upstream transaction was split over several batches.
pub const FLAG_SPLIT: u8 = 2;
/// Row flag bit: the upstream statement ran with foreign key checks off.
pub const FLAG_NO_FK_CHECKS: u8 = 4;

impl ColumnType {
    /// Whether values of this type travel in a `bytes` column.
    pub const fn is_bytes(self) -> bool {
        matches!(
            self,
            ColumnType::Decimal | ColumnType::Text | ColumnType::Blob | ColumnType::Json
        )
    }
}

impl TableSchema {
    /// Index of the column called `name`, if any.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Indexes of the key columns, in schema order.
    pub fn key_indexes(&self) -> Vec<usize> {
        self.columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.key)
            .map(|(i, _)| i)
            .collect()
    }
}

impl ColumnData {
    /// Number of values in this column.
    pub fn len(&self) -> usize {
        match &self.values {
            ColumnValues::Int64(v) => v.len(),
            ColumnValues::Uint64(v) => v.len(),
            ColumnValues::Float64(v) => v.len(),
            ColumnValues::Bytes(b) => b.offsets.len().saturating_sub(1),
        }
    }

    /// Whether the column holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of NULL values.
    pub fn null_count(&self) -> usize {
        let n = self.len();
        let full = n / 8;
        let mut count: usize = self
            .nulls
            .iter()
            .take(full)
            .map(|b| b.count_ones() as usize)
            .sum();
        if let Some(last) = self.nulls.get(full) {
            count += (last & ((1u16 << (n % 8)) - 1) as u8).count_ones() as usize;
        }
        count
    }

    /// Whether value `i` is NULL.
    #[inline]
    pub fn is_null(&self, i: usize) -> bool {
        self.nulls
            .get(i / 8)
            .is_some_and(|byte| byte & (1 << (i % 8)) != 0)
    }

    /// The raw bytes of value `i` of a bytes column (`None` for other columns).
    #[inline]
    pub fn bytes_at(&self, i: usize) -> Option<&[u8]> {
        match &self.values {
            ColumnValues::Bytes(b) => {
                let start = *b.offsets.get(i)? as usize;
                let end = *b.offsets.get(i + 1)? as usize;
                b.data.get(start..end)
            }
            _ => None,
        }
    }
}
