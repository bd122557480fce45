//! Column-oriented batches: the shape the plugin contract carries (see
//! `wit/plugin.wit`), built here from row changes.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::error::BatchError;
use crate::event::{Op, TableChanges, Transaction, Value};
use crate::ts::CommitTs;

/// Row flag bit: delivered again after a restart, swap or retry.
pub const FLAG_REPLAY: u8 = 1;
/// Row flag bit: the upstream transaction was split over several batches.
pub const FLAG_SPLIT: u8 = 2;
/// Row flag bit: the upstream statement ran with foreign key checks off
/// (`foreign_key_checks = 0`): a sink applying it neither checks nor cascades
/// foreign keys for it, as the upstream did not.
pub const FLAG_NO_FK_CHECKS: u8 = 4;

/// Logical column type; mirrors `types.column-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ColumnType {
    /// Signed integer, carried as `i64`.
    Int,
    /// Unsigned integer, carried as `u64` (in `i64` bits).
    Uint,
    /// Floating point, carried as `f64`.
    Float,
    /// Exact decimal, carried as its text.
    Decimal,
    /// Character data, carried as UTF-8 bytes.
    Text,
    /// Binary data.
    Blob,
    /// Date and time, carried as its text.
    Datetime,
    /// Date, carried as its text.
    Date,
    /// JSON, carried as its text.
    Json,
    /// Boolean, carried as 0 or 1.
    Boolean,
}

impl ColumnType {
    /// Whether values travel in a bytes column.
    pub const fn is_bytes(self) -> bool {
        matches!(
            self,
            ColumnType::Decimal | ColumnType::Text | ColumnType::Blob | ColumnType::Json
        )
    }

    /// Whether byte values must be UTF-8.
    pub const fn is_text(self) -> bool {
        matches!(
            self,
            ColumnType::Decimal | ColumnType::Text | ColumnType::Json
        )
    }

    fn empty_values(self) -> ColumnValues {
        match self {
            ColumnType::Uint => ColumnValues::Uint64(Vec::new()),
            ColumnType::Float => ColumnValues::Float64(Vec::new()),
            t if t.is_bytes() => ColumnValues::Bytes(ByteValues::default()),
            _ => ColumnValues::Int64(Vec::new()),
        }
    }
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// The column's name upstream.
    pub name: String,
    /// How its values travel in a batch.
    pub ty: ColumnType,
    /// Its upstream SQL type as written there (`varchar(64)`, `decimal(10,2)`).
    pub sql_type: String,
    /// Whether it may hold NULL.
    pub nullable: bool,
    /// Whether it is part of the table's primary (or chosen unique) key.
    pub key: bool,
}

/// A table's schema at one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    /// The id batches refer to the table by, stable for the changefeed.
    pub table_id: u32,
    /// Bumped by every DDL that changes the table's columns.
    pub version: u32,
    /// The database (schema) the table is in.
    pub schema_name: String,
    /// The table's name.
    pub table_name: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
}

impl TableSchema {
    /// `schema.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema_name, self.table_name)
    }
}

/// Offsets plus one data buffer; value `i` is `data[offsets[i]..offsets[i+1]]`.
/// `offsets` is empty (no values yet: nothing allocated) or holds one entry more
/// than there are values, the first being 0.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ByteValues {
    /// Where each value starts, and the end of the last.
    pub offsets: Vec<u32>,
    /// The values, back to back (serialized as bytes, not a sequence of u8:
    /// one copy, not a call per byte).
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// The values of one column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ColumnValues {
    /// Int, datetime, date and boolean columns.
    Int64(Vec<i64>),
    /// Uint columns.
    Uint64(Vec<u64>),
    /// Float columns.
    Float64(Vec<f64>),
    /// Decimal, text, blob and JSON columns.
    Bytes(ByteValues),
}

/// One column of an image with its NULL bitmap (empty, or shorter than the
/// values, when the rest is not NULL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnData {
    /// The values (a NULL holds a zero or an empty value).
    pub values: ColumnValues,
    /// Bit `i % 8` of byte `i / 8` set: value `i` is NULL.
    #[serde(with = "serde_bytes")]
    pub nulls: Vec<u8>,
}

/// How much a column holds: its values (offsets, for bytes), its bytes of
/// data and its bytes of NULL bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColumnSize {
    /// Values (for bytes, offsets: one more than the values).
    pub values: usize,
    /// Bytes of byte values.
    pub data: usize,
    /// Bytes of the NULL bitmap.
    pub nulls: usize,
}

/// Appends formatted text to a byte buffer.
struct Appender<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Appender<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl ColumnData {
    /// One empty column per column of `schema` (nothing allocated per column).
    pub fn empty_image(schema: &TableSchema) -> Vec<ColumnData> {
        schema
            .columns
            .iter()
            .map(|c| ColumnData {
                values: c.ty.empty_values(),
                nulls: Vec::new(),
            })
            .collect()
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match &self.values {
            ColumnValues::Int64(v) => v.len(),
            ColumnValues::Uint64(v) => v.len(),
            ColumnValues::Float64(v) => v.len(),
            ColumnValues::Bytes(b) => b.offsets.len().saturating_sub(1),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether value `i` is NULL.
    pub fn is_null(&self, i: usize) -> bool {
        self.nulls
            .get(i / 8)
            .is_some_and(|b| b & (1 << (i % 8)) != 0)
    }

    /// Bytes the values occupy on the wire.
    pub fn wire_bytes(&self) -> usize {
        self.nulls.len()
            + match &self.values {
                ColumnValues::Int64(v) => v.len() * 8,
                ColumnValues::Uint64(v) => v.len() * 8,
                ColumnValues::Float64(v) => v.len() * 8,
                ColumnValues::Bytes(b) => b.offsets.len() * 4 + b.data.len(),
            }
    }

    /// The bytes of value `i` of a bytes column (empty for NULL), `None` for
    /// other columns.
    pub fn bytes_at(&self, i: usize) -> Option<&[u8]> {
        match &self.values {
            ColumnValues::Bytes(b) => {
                Some(&b.data[b.offsets[i] as usize..b.offsets[i + 1] as usize])
            }
            _ => None,
        }
    }

    /// Value `i` as an owned [`Value`].
    pub fn value(&self, i: usize) -> Value {
        if self.is_null(i) {
            return Value::Null;
        }
        match &self.values {
            ColumnValues::Int64(v) => Value::Int(v[i]),
            ColumnValues::Uint64(v) => Value::UInt(v[i]),
            ColumnValues::Float64(v) => Value::Float(v[i]),
            ColumnValues::Bytes(b) => {
                Value::Bytes(b.data[b.offsets[i] as usize..b.offsets[i + 1] as usize].to_vec())
            }
        }
    }

    /// How much it holds: room to reserve in a column that will hold as much
    /// ([`ColumnData::reserve_size`]).
    pub fn size(&self) -> ColumnSize {
        let (values, data) = match &self.values {
            ColumnValues::Int64(v) => (v.len(), 0),
            ColumnValues::Uint64(v) => (v.len(), 0),
            ColumnValues::Float64(v) => (v.len(), 0),
            ColumnValues::Bytes(b) => (b.offsets.len(), b.data.len()),
        };
        ColumnSize {
            values,
            data,
            nulls: self.nulls.len(),
        }
    }

    /// Reserve room for what `size` says (see [`ColumnData::size`]).
    pub fn reserve_size(&mut self, size: &ColumnSize) {
        match &mut self.values {
            ColumnValues::Int64(v) => v.reserve(size.values),
            ColumnValues::Uint64(v) => v.reserve(size.values),
            ColumnValues::Float64(v) => v.reserve(size.values),
            ColumnValues::Bytes(b) => {
                b.offsets.reserve(size.values);
                b.data.reserve(size.data);
            }
        }
        self.nulls.reserve(size.nulls);
    }

    /// Reserve room for as many values (and bytes) as `other` holds.
    pub fn reserve_like(&mut self, other: &ColumnData) {
        match (&mut self.values, &other.values) {
            (ColumnValues::Int64(a), ColumnValues::Int64(b)) => a.reserve(b.len()),
            (ColumnValues::Uint64(a), ColumnValues::Uint64(b)) => a.reserve(b.len()),
            (ColumnValues::Float64(a), ColumnValues::Float64(b)) => a.reserve(b.len()),
            (ColumnValues::Bytes(a), ColumnValues::Bytes(b)) => {
                a.offsets.reserve(b.offsets.len());
                a.data.reserve(b.data.len());
            }
            _ => {}
        }
    }

    /// Remove every value, keeping the buffers.
    pub fn clear(&mut self) {
        match &mut self.values {
            ColumnValues::Int64(v) => v.clear(),
            ColumnValues::Uint64(v) => v.clear(),
            ColumnValues::Float64(v) => v.clear(),
            ColumnValues::Bytes(b) => {
                b.offsets.clear();
                b.data.clear();
            }
        }
        self.nulls.clear();
    }

    fn set_null(&mut self, i: usize) {
        if self.nulls.len() <= i / 8 {
            self.nulls.resize(i / 8 + 1, 0);
        }
        self.nulls[i / 8] |= 1 << (i % 8);
    }

    /// Append a NULL.
    pub fn push_null(&mut self) {
        let i = self.len();
        match &mut self.values {
            ColumnValues::Int64(v) => v.push(0),
            ColumnValues::Uint64(v) => v.push(0),
            ColumnValues::Float64(v) => v.push(0.0),
            ColumnValues::Bytes(b) => {
                if b.offsets.is_empty() {
                    b.offsets.push(0);
                }
                b.offsets.push(b.data.len() as u32)
            }
        }
        self.set_null(i);
    }

    /// Append a signed integer (NULL if this is not an int-like column).
    pub fn push_int(&mut self, x: i64) {
        match &mut self.values {
            ColumnValues::Int64(v) => v.push(x),
            _ => self.push_null(),
        }
    }

    /// Append an unsigned integer (NULL if this is not a uint column).
    pub fn push_uint(&mut self, x: u64) {
        match &mut self.values {
            ColumnValues::Uint64(v) => v.push(x),
            _ => self.push_null(),
        }
    }

    /// Append a float (NULL if this is not a float column).
    pub fn push_float(&mut self, x: f64) {
        match &mut self.values {
            ColumnValues::Float64(v) => v.push(x),
            _ => self.push_null(),
        }
    }

    /// Append bytes; returns false (and stores NULL) if this is not a bytes column.
    pub fn push_bytes(&mut self, x: &[u8]) -> bool {
        match &mut self.values {
            ColumnValues::Bytes(b) => {
                if b.offsets.is_empty() {
                    b.offsets.push(0);
                }
                b.data.extend_from_slice(x);
                b.offsets.push(b.data.len() as u32);
                true
            }
            _ => {
                self.push_null();
                false
            }
        }
    }

    /// Append formatted text; returns its length, or `None` (and stores NULL) if
    /// this is not a bytes column.
    pub fn push_fmt(&mut self, args: std::fmt::Arguments<'_>) -> Option<usize> {
        match &mut self.values {
            ColumnValues::Bytes(b) => {
                if b.offsets.is_empty() {
                    b.offsets.push(0);
                }
                let start = b.data.len();
                match args.as_str() {
                    Some(s) => b.data.extend_from_slice(s.as_bytes()),
                    None => {
                        let _ = std::fmt::Write::write_fmt(&mut Appender(&mut b.data), args);
                    }
                }
                b.offsets.push(b.data.len() as u32);
                Some(b.data.len() - start)
            }
            _ => {
                self.push_null();
                None
            }
        }
    }

    /// Append a byte value that `write` appends to the column's data buffer (it
    /// must only append); returns its length, or `None` (and stores NULL) if
    /// this is not a bytes column.
    pub fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Option<usize> {
        match &mut self.values {
            ColumnValues::Bytes(b) => {
                if b.offsets.is_empty() {
                    b.offsets.push(0);
                }
                let start = b.data.len();
                write(&mut b.data);
                // A writer that shortened the buffer (a caller bug) must not leave
                // offsets out of order.
                debug_assert!(b.data.len() >= start, "push_with must only append");
                if b.data.len() < start {
                    b.data.resize(start, 0);
                }
                b.offsets.push(b.data.len() as u32);
                Some(b.data.len() - start)
            }
            _ => {
                self.push_null();
                None
            }
        }
    }

    /// Append an owned value (NULL if it has the wrong kind for this column).
    pub fn push(&mut self, value: &Value) {
        match value {
            Value::Null => self.push_null(),
            Value::Int(x) => self.push_int(*x),
            Value::UInt(x) => self.push_uint(*x),
            Value::Float(x) => self.push_float(*x),
            Value::Bytes(x) => {
                self.push_bytes(x);
            }
        }
    }

    /// Append values `range` of `other` (a column of the same kind): one copy
    /// per buffer, no per-value work unless `other` has NULLs.
    pub fn extend_from(&mut self, other: &ColumnData, range: std::ops::Range<usize>) {
        if range.is_empty() {
            return;
        }
        let base = self.len();
        match (&mut self.values, &other.values) {
            (ColumnValues::Int64(a), ColumnValues::Int64(b)) => {
                a.extend_from_slice(&b[range.clone()])
            }
            (ColumnValues::Uint64(a), ColumnValues::Uint64(b)) => {
                a.extend_from_slice(&b[range.clone()])
            }
            (ColumnValues::Float64(a), ColumnValues::Float64(b)) => {
                a.extend_from_slice(&b[range.clone()])
            }
            (ColumnValues::Bytes(a), ColumnValues::Bytes(b)) => {
                if a.offsets.is_empty() {
                    a.offsets.push(0);
                }
                let from = b.offsets[range.start] as usize;
                let to = b.offsets[range.end] as usize;
                let shift = a.data.len() as i64 - from as i64;
                a.data.extend_from_slice(&b.data[from..to]);
                a.offsets.extend(
                    b.offsets[range.start + 1..=range.end]
                        .iter()
                        .map(|&o| (o as i64 + shift) as u32),
                );
            }
            _ => {
                // Columns of different kinds (a caller bug): NULLs keep the image dense.
                for _ in range {
                    self.push_null();
                }
                return;
            }
        }
        if !other.nulls.is_empty() {
            for (k, i) in range.enumerate() {
                if other.is_null(i) {
                    self.set_null(base + k);
                }
            }
        }
    }
}

/// One row of a table batch (or of a transaction's table changes): its op and
/// where its images are.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// Index of the row (into ops, commit ts and flags).
    pub index: usize,
    /// The op.
    pub op: Op,
    before_at: Option<usize>,
    after_at: Option<usize>,
    before: &'a [ColumnData],
    after: &'a [ColumnData],
}

impl<'a> Row<'a> {
    /// Index of the before image in the before columns.
    pub fn before_index(&self) -> Option<usize> {
        self.before_at
    }

    /// Index of the after image in the after columns.
    pub fn after_index(&self) -> Option<usize> {
        self.after_at
    }

    /// The before image as owned values.
    pub fn before(&self) -> Option<Vec<Value>> {
        self.before_at
            .map(|i| self.before.iter().map(|c| c.value(i)).collect())
    }

    /// The after image as owned values.
    pub fn after(&self) -> Option<Vec<Value>> {
        self.after_at
            .map(|i| self.after.iter().map(|c| c.value(i)).collect())
    }

    /// The after image of an insert or update, the before image of a delete.
    pub fn image(&self) -> Vec<Value> {
        self.after().or_else(|| self.before()).unwrap_or_default()
    }

    /// Value `column` of the after image (or of the before image, for a delete).
    pub fn value(&self, column: usize) -> Value {
        match (self.after_at, self.before_at) {
            (Some(i), _) => self.after[column].value(i),
            (None, Some(i)) => self.before[column].value(i),
            (None, None) => Value::Null,
        }
    }
}

/// The rows of dense images `before`/`after` with `ops`.
pub(crate) fn rows_of<'a>(
    ops: &'a [u8],
    before: &'a [ColumnData],
    after: &'a [ColumnData],
) -> impl Iterator<Item = Row<'a>> + 'a {
    let (mut b, mut a) = (0, 0);
    ops.iter().enumerate().map(move |(index, &code)| {
        let op = Op::from_code(code).unwrap_or(Op::Insert);
        let before_at = op.has_before().then(|| {
            b += 1;
            b - 1
        });
        let after_at = op.has_after().then(|| {
            a += 1;
            a - 1
        });
        Row {
            index,
            op,
            before_at,
            after_at,
            before,
            after,
        }
    })
}

/// The rows of one table in commit-ts order; images are dense (see `wit/plugin.wit`).
#[derive(Debug, Clone, PartialEq)]
pub struct TableBatch {
    /// The table's id ([`TableSchema::table_id`]).
    pub table_id: u32,
    /// The schema version every row of the batch has.
    pub schema_version: u32,
    /// Per row: [`Op`](crate::Op) as a byte (0 insert, 1 update, 2 delete).
    pub ops: Vec<u8>,
    /// Per row: its transaction's commit ts, never decreasing.
    pub commit_ts: Vec<u64>,
    /// Per row: its transaction's id ([`crate::Transaction::id`]).
    pub txn: Vec<u64>,
    /// Per row: [`FLAG_REPLAY`], [`FLAG_SPLIT`] and [`FLAG_NO_FK_CHECKS`] bits.
    pub flags: Vec<u8>,
    /// Per row: its place among its transaction's row changes over every table
    /// (`row-seq` in the contract).
    pub seq: Vec<u32>,
    /// One column per schema column: a value for every update and delete row.
    pub before: Vec<ColumnData>,
    /// One column per schema column: a value for every insert and update row.
    pub after: Vec<ColumnData>,
}

impl TableBatch {
    /// An empty batch for `schema`.
    pub fn new(schema: &TableSchema) -> Self {
        Self {
            table_id: schema.table_id,
            schema_version: schema.version,
            ops: Vec::new(),
            commit_ts: Vec::new(),
            txn: Vec::new(),
            flags: Vec::new(),
            seq: Vec::new(),
            before: ColumnData::empty_image(schema),
            after: ColumnData::empty_image(schema),
        }
    }

    /// An empty batch for `schema` with room for as many rows and bytes per
    /// column as `like` holds, so that filling it up to that size copies nothing
    /// twice.
    pub fn with_capacity_of(schema: &TableSchema, like: &TableBatch) -> Self {
        let mut batch = Self::new(schema);
        let rows = like.len();
        batch.ops.reserve(rows);
        batch.commit_ts.reserve(rows);
        batch.txn.reserve(rows);
        batch.flags.reserve(rows);
        batch.seq.reserve(rows);
        for (mine, theirs) in batch
            .before
            .iter_mut()
            .zip(&like.before)
            .chain(batch.after.iter_mut().zip(&like.after))
        {
            mine.reserve_like(theirs);
        }
        batch
    }

    /// A batch made of one transaction's changes of a table, moved (not copied).
    pub fn from_changes(changes: TableChanges, commit_ts: CommitTs, txn: u64, flags: u8) -> Self {
        let (table_id, schema_version) = (changes.schema().table_id, changes.schema().version);
        let (ops, seq, source_flags, before, after) = changes.into_parts();
        let n = ops.len();
        let mut all = vec![flags; n];
        for (f, s) in all.iter_mut().zip(&source_flags) {
            *f |= s;
        }
        Self {
            table_id,
            schema_version,
            ops,
            commit_ts: vec![commit_ts.get(); n],
            txn: vec![txn; n],
            flags: all,
            seq,
            before,
            after,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Append rows `rows` of one transaction's `changes` (of this table and
    /// schema version), with `commit_ts` and `flags`: one copy per column.
    pub fn extend_from_changes(
        &mut self,
        changes: &TableChanges,
        rows: std::ops::Range<usize>,
        commit_ts: CommitTs,
        txn: u64,
        flags: u8,
    ) {
        let ops = &changes.ops()[rows.clone()];
        let count = |upto: usize, pred: fn(Op) -> bool| {
            changes.ops()[..upto]
                .iter()
                .filter(|&&c| Op::from_code(c).is_some_and(pred))
                .count()
        };
        let whole = rows.start == 0 && rows.end == changes.len();
        let (b0, a0) = if rows.start == 0 {
            (0, 0)
        } else {
            (
                count(rows.start, Op::has_before),
                count(rows.start, Op::has_after),
            )
        };
        let (b1, a1) = if whole {
            (
                changes.before().first().map_or(0, ColumnData::len),
                changes.after().first().map_or(0, ColumnData::len),
            )
        } else {
            (
                count(rows.end, Op::has_before),
                count(rows.end, Op::has_after),
            )
        };
        self.ops.extend_from_slice(ops);
        self.seq.extend_from_slice(&changes.seq()[rows.clone()]);
        self.commit_ts
            .extend(std::iter::repeat_n(commit_ts.get(), ops.len()));
        self.txn.extend(std::iter::repeat_n(txn, ops.len()));
        let from = self.flags.len();
        self.flags.extend(std::iter::repeat_n(flags, ops.len()));
        changes.or_flags(rows, &mut self.flags[from..]);
        for (mine, theirs) in self.before.iter_mut().zip(changes.before()) {
            mine.extend_from(theirs, b0..b1);
        }
        for (mine, theirs) in self.after.iter_mut().zip(changes.after()) {
            mine.extend_from(theirs, a0..a1);
        }
    }

    /// A batch made of `changes` (rows of several transactions), moved (not
    /// copied), with one commit ts and one flag byte per row.
    ///
    /// # Panics
    /// If `commit_ts` or `flags` do not have one entry per row.
    pub fn from_rows(
        changes: TableChanges,
        commit_ts: Vec<u64>,
        txn: Vec<u64>,
        flags: Vec<u8>,
    ) -> Self {
        let (table_id, schema_version) = (changes.schema().table_id, changes.schema().version);
        let (ops, seq, source_flags, before, after) = changes.into_parts();
        assert!(commit_ts.len() == ops.len() && txn.len() == ops.len() && flags.len() == ops.len());
        let mut flags = flags;
        for (f, s) in flags.iter_mut().zip(&source_flags) {
            *f |= s;
        }
        Self {
            table_id,
            schema_version,
            ops,
            commit_ts,
            txn,
            flags,
            seq,
            before,
            after,
        }
    }

    /// Append rows `rows` of `changes` (of this table and schema version), whose
    /// before images are `before` and after images `after`: one copy per column.
    /// `stamps` gives the commit ts and flags of the rows in order, as
    /// (commit ts, flags, rows) runs that add up to `rows.len()`.
    pub fn extend_rows(
        &mut self,
        changes: &TableChanges,
        rows: std::ops::Range<usize>,
        before: std::ops::Range<usize>,
        after: std::ops::Range<usize>,
        stamps: impl IntoIterator<Item = (u64, u64, u8, usize)>,
    ) {
        let n = rows.len();
        self.seq.extend_from_slice(&changes.seq()[rows.clone()]);
        self.ops.extend_from_slice(&changes.ops()[rows.clone()]);
        let start = self.commit_ts.len();
        for (ts, txn, flags, count) in stamps {
            self.commit_ts.extend(std::iter::repeat_n(ts, count));
            self.txn.extend(std::iter::repeat_n(txn, count));
            self.flags.extend(std::iter::repeat_n(flags, count));
        }
        changes.or_flags(rows, &mut self.flags[start..]);
        debug_assert_eq!(self.commit_ts.len() - start, n, "stamps cover the rows");
        for (mine, theirs) in self.before.iter_mut().zip(changes.before()) {
            mine.extend_from(theirs, before.clone());
        }
        for (mine, theirs) in self.after.iter_mut().zip(changes.after()) {
            mine.extend_from(theirs, after.clone());
        }
    }

    /// Append a row from owned values (tests and slow paths); its place in its
    /// transaction is the number of rows of that transaction before it here.
    pub fn push_values(
        &mut self,
        commit_ts: CommitTs,
        flags: u8,
        op: Op,
        before: Option<&[Value]>,
        after: Option<&[Value]>,
    ) {
        let seq = self
            .commit_ts
            .iter()
            .rev()
            .take_while(|&&ts| ts == commit_ts.get())
            .count() as u32;
        self.push_values_at(commit_ts, commit_ts.get(), seq, flags, op, before, after);
    }

    /// Append a row from owned values that was change `seq` of its transaction.
    #[expect(clippy::too_many_arguments, reason = "one argument per row field")]
    pub fn push_values_at(
        &mut self,
        commit_ts: CommitTs,
        txn: u64,
        seq: u32,
        flags: u8,
        op: Op,
        before: Option<&[Value]>,
        after: Option<&[Value]>,
    ) {
        self.ops.push(op.code());
        self.seq.push(seq);
        self.commit_ts.push(commit_ts.get());
        self.txn.push(txn);
        self.flags.push(flags);
        for (image, values) in [(&mut self.before, before), (&mut self.after, after)] {
            if let Some(values) = values {
                for (i, col) in image.iter_mut().enumerate() {
                    col.push(values.get(i).unwrap_or(&Value::Null));
                }
            }
        }
    }

    /// The rows, for reading them back (commit ts and flags by `Row::index`).
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        rows_of(&self.ops, &self.before, &self.after)
    }

    /// Rows `rows` of the batch, as a batch of their own (a copy per
    /// column; images are dense, so their ranges follow from the ops).
    pub fn slice(&self, schema: &TableSchema, rows: std::ops::Range<usize>) -> TableBatch {
        // 0 insert, 1 update, 2 delete.
        let images = |range: std::ops::Range<usize>, before: bool| {
            self.ops[range]
                .iter()
                .filter(|&&op| if before { op != 0 } else { op != 2 })
                .count()
        };
        let b0 = images(0..rows.start, true);
        let b1 = b0 + images(rows.clone(), true);
        let a0 = images(0..rows.start, false);
        let a1 = a0 + images(rows.clone(), false);
        let mut out = TableBatch::new(schema);
        out.ops.extend_from_slice(&self.ops[rows.clone()]);
        out.commit_ts
            .extend_from_slice(&self.commit_ts[rows.clone()]);
        out.txn.extend_from_slice(&self.txn[rows.clone()]);
        out.flags.extend_from_slice(&self.flags[rows.clone()]);
        out.seq.extend_from_slice(&self.seq[rows]);
        for (mine, theirs) in out.before.iter_mut().zip(&self.before) {
            mine.extend_from(theirs, b0..b1);
        }
        for (mine, theirs) in out.after.iter_mut().zip(&self.after) {
            mine.extend_from(theirs, a0..a1);
        }
        out
    }

    /// The rows for which `keep` holds, in order, flags kept.
    pub fn select(&self, schema: &TableSchema, keep: impl Fn(&Row<'_>) -> bool) -> TableBatch {
        let mut out = TableBatch::new(schema);
        for row in self.rows() {
            if keep(&row) {
                out.push_values_at(
                    CommitTs::new(self.commit_ts[row.index]),
                    self.txn[row.index],
                    self.seq[row.index],
                    self.flags[row.index],
                    row.op,
                    row.before().as_deref(),
                    row.after().as_deref(),
                );
            }
        }
        out
    }

    /// Bytes the batch occupies on the wire (roughly what lowering allocates in the guest).
    pub fn wire_bytes(&self) -> usize {
        self.ops.len() * crate::event::ROW_OVERHEAD_BYTES
            + self
                .before
                .iter()
                .map(ColumnData::wire_bytes)
                .sum::<usize>()
            + self.after.iter().map(ColumnData::wire_bytes).sum::<usize>()
    }

    /// Mark every row as replayed.
    pub fn mark_replay(&mut self) {
        for f in &mut self.flags {
            *f |= FLAG_REPLAY;
        }
    }

    /// Check that the batch is consistent with itself and `schema`: equal per-row
    /// list lengths, dense images of the right size, value kinds matching column
    /// types, offsets in bounds and non-decreasing, text that is UTF-8.
    pub fn validate(&self, schema: &TableSchema) -> Result<(), BatchError> {
        let fail = |reason: String| BatchError {
            table_id: self.table_id,
            reason,
        };
        let n = self.ops.len();
        if self.commit_ts.len() != n
            || self.txn.len() != n
            || self.flags.len() != n
            || self.seq.len() != n
        {
            return Err(fail(format!(
                "{n} ops but {} commit ts, {} transaction ids, {} flags and {} row seq",
                self.commit_ts.len(),
                self.txn.len(),
                self.flags.len(),
                self.seq.len()
            )));
        }
        if self.commit_ts.windows(2).any(|w| w[0] > w[1]) {
            return Err(fail("rows are not in commit-ts order".into()));
        }
        check_images(self.table_id, schema, &self.ops, &self.before, &self.after)
    }
}

/// Checks row images against `schema`: known op codes, one column per schema
/// column of the kind its type stores, a value for every row that has that
/// image, sound NULL bitmaps and offsets, UTF-8 text.
pub(crate) fn check_images(
    table_id: u32,
    schema: &TableSchema,
    ops: &[u8],
    before: &[ColumnData],
    after: &[ColumnData],
) -> Result<(), BatchError> {
    let fail = |reason: String| BatchError { table_id, reason };
    let (mut n_before, mut n_after) = (0, 0);
    for (i, &op) in ops.iter().enumerate() {
        match op {
            0 => n_after += 1,
            1 => {
                n_before += 1;
                n_after += 1
            }
            2 => n_before += 1,
            other => return Err(fail(format!("row {i} has unknown op code {other}"))),
        }
    }
    for (image, columns, rows) in [("before", before, n_before), ("after", after, n_after)] {
        if columns.len() != schema.columns.len() {
            return Err(fail(format!(
                "{image} image has {} columns, schema version {} has {}",
                columns.len(),
                schema.version,
                schema.columns.len()
            )));
        }
        for (data, column) in columns.iter().zip(&schema.columns) {
            let kind_ok = matches!(
                (&data.values, column.ty),
                (ColumnValues::Uint64(_), ColumnType::Uint)
                    | (ColumnValues::Float64(_), ColumnType::Float)
                    | (
                        ColumnValues::Bytes(_),
                        ColumnType::Decimal
                            | ColumnType::Text
                            | ColumnType::Blob
                            | ColumnType::Json
                    )
                    | (
                        ColumnValues::Int64(_),
                        ColumnType::Int
                            | ColumnType::Datetime
                            | ColumnType::Date
                            | ColumnType::Boolean
                    )
            );
            if !kind_ok {
                return Err(fail(format!(
                    "{image} column `{}` carries the wrong value kind for {:?}",
                    column.name, column.ty
                )));
            }
            if data.len() != rows {
                return Err(fail(format!(
                    "{image} column `{}` has {} values for {rows} rows",
                    column.name,
                    data.len()
                )));
            }
            if data.nulls.len() > rows.div_ceil(8) {
                return Err(fail(format!(
                    "{image} column `{}` has an oversized NULL bitmap",
                    column.name
                )));
            }
            if let ColumnValues::Bytes(b) = &data.values {
                let empty = b.offsets.is_empty() && b.data.is_empty();
                if !empty
                    && (b.offsets.first() != Some(&0)
                        || b.offsets.windows(2).any(|w| w[0] > w[1])
                        || *b.offsets.last().unwrap_or(&0) as usize != b.data.len())
                {
                    return Err(fail(format!(
                        "{image} column `{}` has bad offsets",
                        column.name
                    )));
                }
                if column.ty.is_text() {
                    for i in 0..rows {
                        let v = &b.data[b.offsets[i] as usize..b.offsets[i + 1] as usize];
                        if std::str::from_utf8(v).is_err() {
                            return Err(fail(format!(
                                "{image} column `{}` row {i} is not UTF-8",
                                column.name
                            )));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// What one sink write carries: table batches, each referring to its schema.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    /// One entry per table (a table may appear more than once, in order).
    pub tables: Vec<TableBatch>,
}

impl Batch {
    /// Total rows.
    pub fn row_count(&self) -> usize {
        self.tables.iter().map(TableBatch::len).sum()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(TableBatch::is_empty)
    }

    /// Bytes on the wire.
    pub fn wire_bytes(&self) -> usize {
        self.tables.iter().map(TableBatch::wire_bytes).sum()
    }

    /// Mark every row as replayed.
    pub fn mark_replay(&mut self) {
        self.tables.iter_mut().for_each(TableBatch::mark_replay);
    }

    /// The largest commit ts in the batch.
    pub fn max_commit_ts(&self) -> Option<CommitTs> {
        self.tables
            .iter()
            .filter_map(|t| t.commit_ts.last().copied())
            .max()
            .map(CommitTs::new)
    }
}

/// Groups rows into one [`TableBatch`] per table (first-seen order), keeping
/// per-table commit-ts order. For tests, tools and benchmarks; the pipeline's
/// dispatchers build batches per table themselves.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    tables: Vec<(Arc<TableSchema>, TableBatch)>,
    rows: usize,
    bytes: usize,
}

impl BatchBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&mut self, schema: &Arc<TableSchema>) -> &mut TableBatch {
        let key = (schema.table_id, schema.version);
        let pos = match self
            .tables
            .iter()
            .position(|(s, _)| (s.table_id, s.version) == key)
        {
            Some(p) => p,
            None => {
                self.tables.push((schema.clone(), TableBatch::new(schema)));
                self.tables.len() - 1
            }
        };
        &mut self.tables[pos].1
    }

    /// Append every row of a transaction.
    pub fn push_transaction(&mut self, txn: &Transaction, flags: u8) {
        for changes in &txn.tables {
            self.table(changes.schema()).extend_from_changes(
                changes,
                0..changes.len(),
                txn.commit_ts,
                txn.id,
                flags,
            );
            self.rows += changes.len();
            self.bytes += changes.wire_bytes();
        }
    }

    /// Append a row from owned values.
    pub fn push_values(
        &mut self,
        schema: &Arc<TableSchema>,
        commit_ts: CommitTs,
        flags: u8,
        op: Op,
        before: Option<&[Value]>,
        after: Option<&[Value]>,
    ) {
        let mut one = TableChanges::new(schema.clone());
        one.push_values(op, before, after);
        self.bytes += one.wire_bytes();
        self.rows += 1;
        self.table(schema)
            .extend_from_changes(&one, 0..1, commit_ts, commit_ts.get(), flags);
    }

    /// Rows so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Approximate wire bytes so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The schemas used, and the batch.
    pub fn finish(self) -> (Vec<Arc<TableSchema>>, Batch) {
        let (schemas, tables) = self.tables.into_iter().unzip();
        (schemas, Batch { tables })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Arc<TableSchema> {
        Arc::new(TableSchema {
            table_id: 1,
            version: 1,
            schema_name: "db".into(),
            table_name: "t".into(),
            columns: vec![
                Column {
                    name: "id".into(),
                    ty: ColumnType::Int,
                    sql_type: "bigint".into(),
                    nullable: false,
                    key: true,
                },
                Column {
                    name: "name".into(),
                    ty: ColumnType::Text,
                    sql_type: "text".into(),
                    nullable: true,
                    key: false,
                },
            ],
        })
    }

    #[test]
    fn a_slice_is_the_rows_of_its_range_with_their_images() {
        let s = schema();
        let mut t = TableBatch::new(&s);
        for i in 0..40i64 {
            let (op, before, after) = match i % 3 {
                0 => (
                    Op::Insert,
                    None,
                    Some(vec![
                        Value::Int(i),
                        Value::Bytes(format!("n{i}").into_bytes()),
                    ]),
                ),
                1 => (
                    Op::Update,
                    Some(vec![Value::Int(i), Value::Null]),
                    Some(vec![
                        Value::Int(i),
                        Value::Bytes(format!("u{i}").into_bytes()),
                    ]),
                ),
                _ => (
                    Op::Delete,
                    Some(vec![Value::Int(i), Value::Bytes(b"gone".to_vec())]),
                    None,
                ),
            };
            t.push_values(
                CommitTs::new(10 + i as u64 / 4),
                0,
                op,
                before.as_deref(),
                after.as_deref(),
            );
        }
        for range in [0..0, 0..40, 0..7, 5..6, 7..29, 13..40, 39..40] {
            let slice = t.slice(&s, range.clone());
            slice.validate(&s).unwrap();
            let want = t.select(&s, |row| range.contains(&row.index));
            assert_eq!(slice, want, "{range:?}");
        }
    }

    #[test]
    fn builder_keeps_images_dense_and_valid() {
        let s = schema();
        let mut b = BatchBuilder::new();
        b.push_values(
            &s,
            CommitTs::new(5),
            0,
            Op::Insert,
            None,
            Some(&[Value::Int(1), Value::Bytes(b"a".to_vec())]),
        );
        b.push_values(
            &s,
            CommitTs::new(6),
            0,
            Op::Delete,
            Some(&[Value::Int(1), Value::Null]),
            None,
        );
        let (schemas, batch) = b.finish();
        assert_eq!(schemas.len(), 1);
        let t = &batch.tables[0];
        assert_eq!(t.ops, vec![0, 2]);
        assert_eq!(t.after[0].len(), 1);
        assert_eq!(t.before[0].len(), 1);
        assert!(t.before[1].is_null(0));
        assert_eq!(t.after[1].value(0), Value::Bytes(b"a".to_vec()));
        t.validate(&s).unwrap();
    }

    #[test]
    fn row_writer_counts_bytes_and_fills_missing_columns_with_null() {
        let s = schema();
        let mut c = TableChanges::new(s.clone());
        c.insert().int(1).text(format_args!("n{}", 7));
        c.update().int(1).null().int(1).bytes(b"xy");
        // Too few values: the rest is NULL; a wrong kind is NULL too.
        c.delete().bytes(b"not an int");
        assert_eq!(c.len(), 3);
        assert_eq!(c.wire_bytes(), 3 * 22 + (8 + 6) + (8 + 8 + 8 + 6) + (8 + 8));
        let rows: Vec<_> = c.rows().map(|r| (r.op, r.before(), r.after())).collect();
        assert_eq!(
            rows,
            vec![
                (
                    Op::Insert,
                    None,
                    Some(vec![Value::Int(1), Value::Bytes(b"n7".to_vec())])
                ),
                (
                    Op::Update,
                    Some(vec![Value::Int(1), Value::Null]),
                    Some(vec![Value::Int(1), Value::Bytes(b"xy".to_vec())])
                ),
                (Op::Delete, Some(vec![Value::Null, Value::Null]), None),
            ]
        );
        let batch = TableBatch::from_changes(c.clone(), CommitTs::new(9), 9, FLAG_SPLIT);
        batch.validate(&s).unwrap();
        // Appending in two ranges gives the same batch as moving it whole.
        let mut appended = TableBatch::new(&s);
        appended.extend_from_changes(&c, 0..1, CommitTs::new(9), 9, FLAG_SPLIT);
        appended.extend_from_changes(&c, 1..3, CommitTs::new(9), 9, FLAG_SPLIT);
        assert_eq!(appended, batch);
        let mut twice = TableBatch::new(&s);
        twice.extend_from_changes(&c, 0..3, CommitTs::new(9), 9, 0);
        twice.extend_from_changes(&c, 0..3, CommitTs::new(10), 10, 0);
        twice.validate(&s).unwrap();
        assert_eq!(twice.after[1].value(3), Value::Bytes(b"xy".to_vec()));
        assert!(twice.before[1].is_null(2) && twice.before[0].is_null(3));
        assert!(!twice.before[0].is_null(2));
    }

    #[test]
    fn validate_rejects_inconsistent_batches() {
        let s = schema();
        let mut t = TableBatch::new(&s);
        t.push_values(
            CommitTs::new(1),
            0,
            Op::Insert,
            None,
            Some(&[Value::Int(1), Value::Bytes(vec![0xff])]),
        );
        let err = t.validate(&s).unwrap_err();
        assert!(err.reason.contains("not UTF-8"), "{err}");
        let mut t2 = TableBatch::new(&s);
        t2.ops.push(0);
        let err = t2.validate(&s).unwrap_err();
        assert!(err.reason.contains("1 ops but 0 commit ts"), "{err}");
    }
}
