//! Column-oriented batches: the shape the plugin contract carries (see
//! `wit/plugin.wit`), built here from row changes.

use std::sync::Arc;

use crate::error::BatchError;
use crate::event::{RowChange, Value};
use crate::ts::CommitTs;

/// Row flag bit: delivered again after a restart, swap or retry.
pub const FLAG_REPLAY: u8 = 1;
/// Row flag bit: the upstream transaction was split over several batches.
pub const FLAG_SPLIT: u8 = 2;

/// Logical column type; mirrors `types.column-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    Int,
    Uint,
    Float,
    Decimal,
    Text,
    Blob,
    Datetime,
    Date,
    Json,
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
            t if t.is_bytes() => ColumnValues::Bytes(ByteValues {
                offsets: vec![0],
                data: Vec::new(),
            }),
            _ => ColumnValues::Int64(Vec::new()),
        }
    }
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    pub sql_type: String,
    pub nullable: bool,
    pub key: bool,
}

/// A table's schema at one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    pub table_id: u32,
    pub version: u32,
    pub schema_name: String,
    pub table_name: String,
    pub columns: Vec<Column>,
}

impl TableSchema {
    /// `schema.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema_name, self.table_name)
    }
}

/// Offsets plus one data buffer; value `i` is `data[offsets[i]..offsets[i+1]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ByteValues {
    pub offsets: Vec<u32>,
    pub data: Vec<u8>,
}

/// The values of one column.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnValues {
    Int64(Vec<i64>),
    Uint64(Vec<u64>),
    Float64(Vec<f64>),
    Bytes(ByteValues),
}

/// One column of an image with its NULL bitmap (empty when nothing is NULL).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnData {
    pub values: ColumnValues,
    pub nulls: Vec<u8>,
}

impl ColumnData {
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

    fn push(&mut self, value: &Value) {
        let i = self.len();
        let mut null = matches!(value, Value::Null);
        match (&mut self.values, value) {
            (ColumnValues::Int64(v), Value::Int(x)) => v.push(*x),
            (ColumnValues::Uint64(v), Value::UInt(x)) => v.push(*x),
            (ColumnValues::Float64(v), Value::Float(x)) => v.push(*x),
            (ColumnValues::Bytes(b), Value::Bytes(x)) => {
                b.data.extend_from_slice(x);
                b.offsets.push(b.data.len() as u32);
            }
            (values, _) => {
                // NULL, or a value of the wrong kind (a source bug): store NULL.
                null = true;
                match values {
                    ColumnValues::Int64(v) => v.push(0),
                    ColumnValues::Uint64(v) => v.push(0),
                    ColumnValues::Float64(v) => v.push(0.0),
                    ColumnValues::Bytes(b) => b.offsets.push(b.data.len() as u32),
                }
            }
        }
        if null {
            if self.nulls.len() <= i / 8 {
                self.nulls.resize(i / 8 + 1, 0);
            }
            self.nulls[i / 8] |= 1 << (i % 8);
        }
    }
}

/// The rows of one table in commit-ts order; images are dense (see `wit/plugin.wit`).
#[derive(Debug, Clone, PartialEq)]
pub struct TableBatch {
    pub table_id: u32,
    pub schema_version: u32,
    pub ops: Vec<u8>,
    pub commit_ts: Vec<u64>,
    pub flags: Vec<u8>,
    pub before: Vec<ColumnData>,
    pub after: Vec<ColumnData>,
}

impl TableBatch {
    /// An empty batch for `schema`.
    pub fn new(schema: &TableSchema) -> Self {
        let empty = || {
            schema
                .columns
                .iter()
                .map(|c| ColumnData {
                    values: c.ty.empty_values(),
                    nulls: Vec::new(),
                })
                .collect()
        };
        Self {
            table_id: schema.table_id,
            schema_version: schema.version,
            ops: Vec::new(),
            commit_ts: Vec::new(),
            flags: Vec::new(),
            before: empty(),
            after: empty(),
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

    /// Append a row change.
    pub fn push(&mut self, commit_ts: CommitTs, flags: u8, row: &RowChange) {
        self.ops.push(row.op.code());
        self.commit_ts.push(commit_ts.get());
        self.flags.push(flags);
        if let Some(before) = &row.before {
            for (col, v) in self.before.iter_mut().zip(before) {
                col.push(v);
            }
        }
        if let Some(after) = &row.after {
            for (col, v) in self.after.iter_mut().zip(after) {
                col.push(v);
            }
        }
    }

    /// Bytes the batch occupies on the wire (roughly what lowering allocates in the guest).
    pub fn wire_bytes(&self) -> usize {
        self.ops.len() * 10
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
        if self.commit_ts.len() != n || self.flags.len() != n {
            return Err(fail(format!(
                "{n} ops but {} commit ts and {} flags",
                self.commit_ts.len(),
                self.flags.len()
            )));
        }
        let (mut n_before, mut n_after) = (0, 0);
        for (i, &op) in self.ops.iter().enumerate() {
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
        if self.commit_ts.windows(2).any(|w| w[0] > w[1]) {
            return Err(fail("rows are not in commit-ts order".into()));
        }
        for (image, columns, rows) in [
            ("before", &self.before, n_before),
            ("after", &self.after, n_after),
        ] {
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
                    if b.offsets.first() != Some(&0)
                        || b.offsets.windows(2).any(|w| w[0] > w[1])
                        || *b.offsets.last().unwrap_or(&0) as usize != b.data.len()
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
}

/// What one sink write carries: table batches, each referring to its schema.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
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

/// Groups row changes into one [`TableBatch`] per table (first-seen order), keeping
/// per-table commit-ts order.
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

    /// Append a row change.
    pub fn push(&mut self, commit_ts: CommitTs, flags: u8, row: &RowChange) {
        let key = (row.table.table_id, row.table.version);
        let pos = match self
            .tables
            .iter()
            .position(|(s, _)| (s.table_id, s.version) == key)
        {
            Some(p) => p,
            None => {
                self.tables
                    .push((row.table.clone(), TableBatch::new(&row.table)));
                self.tables.len() - 1
            }
        };
        self.tables[pos].1.push(commit_ts, flags, row);
        self.rows += 1;
        self.bytes += row.wire_bytes();
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
    use crate::event::Op;

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
    fn builder_keeps_images_dense_and_valid() {
        let s = schema();
        let mut b = BatchBuilder::new();
        let ins = RowChange {
            table: s.clone(),
            op: Op::Insert,
            before: None,
            after: Some(vec![Value::Int(1), Value::Bytes(b"a".to_vec())]),
        };
        let del = RowChange {
            table: s.clone(),
            op: Op::Delete,
            before: Some(vec![Value::Int(1), Value::Null]),
            after: None,
        };
        b.push(CommitTs::new(5), 0, &ins);
        b.push(CommitTs::new(6), 0, &del);
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
    fn validate_rejects_inconsistent_batches() {
        let s = schema();
        let mut t = TableBatch::new(&s);
        t.push(
            CommitTs::new(1),
            0,
            &RowChange {
                table: s.clone(),
                op: Op::Insert,
                before: None,
                after: Some(vec![Value::Int(1), Value::Bytes(vec![0xff])]),
            },
        );
        let err = t.validate(&s).unwrap_err();
        assert!(err.reason.contains("not UTF-8"), "{err}");
        let mut t2 = TableBatch::new(&s);
        t2.ops.push(0);
        let err = t2.validate(&s).unwrap_err();
        assert!(err.reason.contains("1 ops but 0 commit ts"), "{err}");
    }
}
