//! Typed, zero-copy read access to batches: tables, rows, images and values.

use std::collections::HashMap;
use std::rc::Rc;

use crate::types::{
    ColumnData, ColumnType, ColumnValues, FLAG_NO_FK_CHECKS, FLAG_REPLAY, FLAG_SPLIT, Op,
    TableBatch, TableSchema,
};

/// The schemas an instance has been sent, keyed by (table id, version).
#[derive(Debug, Default, Clone)]
pub struct Schemas {
    by_version: HashMap<(u32, u32), Rc<TableSchema>>,
}

impl Schemas {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remember a schema (a later copy of the same version replaces the earlier one).
    pub fn insert(&mut self, schema: TableSchema) {
        self.by_version
            .insert((schema.table_id, schema.version), Rc::new(schema));
    }

    /// The schema of `table_id` at `version`.
    pub fn get(&self, table_id: u32, version: u32) -> Option<&Rc<TableSchema>> {
        self.by_version.get(&(table_id, version))
    }

    /// The schema a table batch refers to.
    pub fn of(&self, batch: &TableBatch) -> Option<&Rc<TableSchema>> {
        self.get(batch.table_id, batch.schema_version)
    }

    /// Number of known schema versions.
    pub fn len(&self) -> usize {
        self.by_version.len()
    }

    /// Whether no schema is known.
    pub fn is_empty(&self) -> bool {
        self.by_version.is_empty()
    }
}

/// A batch as a sink sees it: its table batches, each with its schema resolved.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    pub(crate) schemas: &'a Schemas,
    pub(crate) tables: &'a [TableBatch],
}

impl<'a> BatchView<'a> {
    /// A view over `tables`, resolving schemas in `schemas`.
    pub fn new(schemas: &'a Schemas, tables: &'a [TableBatch]) -> Self {
        Self { schemas, tables }
    }

    /// The table batches, in the order the host sent them.
    pub fn tables(&self) -> impl Iterator<Item = TableView<'a>> + 'a {
        let schemas = self.schemas;
        self.tables.iter().map(move |batch| {
            let schema = schemas
                .of(batch)
                .expect("the host sends every schema before the first batch that uses it");
            TableView::new(schema, batch)
        })
    }

    /// Total number of rows over all tables.
    pub fn row_count(&self) -> usize {
        self.tables.iter().map(|t| t.ops.len()).sum()
    }

    /// The largest commit ts in the batch, if it has rows.
    pub fn max_commit_ts(&self) -> Option<u64> {
        self.tables
            .iter()
            .filter_map(|t| t.commit_ts.iter().copied().max())
            .max()
    }
}

/// The rows of one table in one batch.
#[derive(Debug, Clone)]
pub struct TableView<'a> {
    schema: &'a TableSchema,
    batch: &'a TableBatch,
    before_text: Vec<Option<&'a str>>,
    after_text: Vec<Option<&'a str>>,
}

/// Each text-like column's whole data buffer as `&str`, validated once per batch
/// (much faster than validating value by value); `None` where the column is not
/// text-like or not valid UTF-8.
fn text_index<'a>(schema: &TableSchema, columns: &'a [ColumnData]) -> Vec<Option<&'a str>> {
    columns
        .iter()
        .zip(&schema.columns)
        .map(|(data, column)| match (&data.values, column.ty) {
            (ColumnValues::Bytes(b), ColumnType::Text | ColumnType::Decimal | ColumnType::Json) => {
                simdutf8::basic::from_utf8(&b.data).ok()
            }
            _ => None,
        })
        .collect()
}

impl<'a> TableView<'a> {
    /// A view of `batch` read with `schema`.
    pub fn new(schema: &'a TableSchema, batch: &'a TableBatch) -> Self {
        Self {
            schema,
            batch,
            before_text: text_index(schema, &batch.before),
            after_text: text_index(schema, &batch.after),
        }
    }

    /// The table's schema at this batch's version.
    pub fn schema(&self) -> &'a TableSchema {
        self.schema
    }

    /// The raw column-oriented batch.
    pub fn raw(&self) -> &'a TableBatch {
        self.batch
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.batch.ops.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.batch.ops.is_empty()
    }

    /// The rows in commit-ts order.
    pub fn rows(&self) -> Rows<'_> {
        Rows {
            schema: self.schema,
            batch: self.batch,
            before_text: &self.before_text,
            after_text: &self.after_text,
            next: 0,
            before: 0,
            after: 0,
        }
    }
}

/// Iterator over the rows of a [`TableView`].
#[derive(Debug, Clone)]
pub struct Rows<'a> {
    schema: &'a TableSchema,
    batch: &'a TableBatch,
    before_text: &'a [Option<&'a str>],
    after_text: &'a [Option<&'a str>],
    next: usize,
    before: usize,
    after: usize,
}

impl<'a> Iterator for Rows<'a> {
    type Item = Row<'a>;

    #[inline]
    fn next(&mut self) -> Option<Row<'a>> {
        let i = self.next;
        let op = Op::from_code(*self.batch.ops.get(i)?);
        self.next += 1;
        let before = op.has_before().then(|| {
            let image = Image {
                schema: self.schema,
                columns: &self.batch.before,
                text: self.before_text,
                pos: self.before,
            };
            self.before += 1;
            image
        });
        let after = op.has_after().then(|| {
            let image = Image {
                schema: self.schema,
                columns: &self.batch.after,
                text: self.after_text,
                pos: self.after,
            };
            self.after += 1;
            image
        });
        Some(Row {
            index: i,
            op,
            commit_ts: self.batch.commit_ts.get(i).copied().unwrap_or(0),
            flags: self.batch.row_flags.get(i).copied().unwrap_or(0),
            seq: self.batch.row_seq.get(i).copied().unwrap_or(i as u32),
            txn_id: self.batch.txn_id.get(i).copied().unwrap_or(0),
            before,
            after,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batch.ops.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Rows<'_> {}

/// One row change.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    index: usize,
    op: Op,
    commit_ts: u64,
    flags: u8,
    seq: u32,
    txn_id: u64,
    before: Option<Image<'a>>,
    after: Option<Image<'a>>,
}

impl<'a> Row<'a> {
    /// Position of the row in its table batch.
    pub fn index(&self) -> usize {
        self.index
    }
    /// Insert, update or delete.
    pub fn op(&self) -> Op {
        self.op
    }
    /// Commit ts of the row's upstream transaction.
    pub fn commit_ts(&self) -> u64 {
        self.commit_ts
    }
    /// Delivered again after a restart, swap or retry: write it idempotently.
    pub fn is_replay(&self) -> bool {
        self.flags & FLAG_REPLAY != 0
    }
    /// Its transaction was split over several batches.
    pub fn is_split(&self) -> bool {
        self.flags & FLAG_SPLIT != 0
    }
    /// The upstream statement ran with foreign key checks off: apply it without
    /// checking (or cascading) foreign keys.
    pub fn no_fk_checks(&self) -> bool {
        self.flags & FLAG_NO_FK_CHECKS != 0
    }
    /// Its place among its transaction's row changes over every table (from
    /// 0): rows of one transaction in several tables were made in this order.
    pub fn seq(&self) -> u32 {
        self.seq
    }
    /// Its transaction's identity: the same each time the transaction is
    /// delivered (its commit ts may differ), different for different ones.
    pub fn txn_id(&self) -> u64 {
        self.txn_id
    }
    /// The raw flag bits.
    pub fn flags(&self) -> u8 {
        self.flags
    }
    /// The image before the change (updates and deletes).
    pub fn before(&self) -> Option<Image<'a>> {
        self.before
    }
    /// The image after the change (inserts and updates).
    pub fn after(&self) -> Option<Image<'a>> {
        self.after
    }
    /// The after image if there is one, else the before image: the row as it now is,
    /// or as it was when deleted.
    pub fn image(&self) -> Image<'a> {
        self.after
            .or(self.before)
            .expect("every row has at least one image")
    }
}

/// The values of one row at one moment (before or after the change).
#[derive(Debug, Clone, Copy)]
pub struct Image<'a> {
    schema: &'a TableSchema,
    columns: &'a [ColumnData],
    text: &'a [Option<&'a str>],
    pos: usize,
}

impl<'a> Image<'a> {
    /// Number of columns.
    pub fn len(&self) -> usize {
        self.schema.columns.len()
    }

    /// Whether the table has no columns.
    pub fn is_empty(&self) -> bool {
        self.schema.columns.is_empty()
    }

    /// Value of column `index` (schema order).
    #[inline]
    pub fn value(&self, index: usize) -> Value<'a> {
        let Some(column) = self.columns.get(index) else {
            return Value::Null;
        };
        let i = self.pos;
        if column.is_null(i) {
            return Value::Null;
        }
        let ty = self.schema.columns[index].ty;
        match &column.values {
            ColumnValues::Int64(v) => {
                let x = v[i];
                match ty {
                    ColumnType::Datetime => Value::DateTime(x),
                    ColumnType::Date => Value::Date(x),
                    ColumnType::Boolean => Value::Bool(x != 0),
                    _ => Value::Int(x),
                }
            }
            ColumnValues::Uint64(v) => Value::UInt(v[i]),
            ColumnValues::Float64(v) => Value::Float(v[i]),
            ColumnValues::Bytes(b) => {
                let (start, end) = (b.offsets[i] as usize, b.offsets[i + 1] as usize);
                let text = || match self.text.get(index) {
                    Some(Some(all)) => all.get(start..end).unwrap_or("\u{FFFD}"),
                    _ => as_str(&b.data[start..end]),
                };
                match ty {
                    ColumnType::Text => Value::Text(text()),
                    ColumnType::Decimal => Value::Decimal(text()),
                    ColumnType::Json => Value::Json(text()),
                    _ => Value::Blob(&b.data[start..end]),
                }
            }
        }
    }

    /// Value of the column called `name`, or `None` when the table has no such column.
    pub fn get(&self, name: &str) -> Option<Value<'a>> {
        self.schema.column_index(name).map(|i| self.value(i))
    }

    /// The values in schema order, with their column.
    pub fn iter(&self) -> impl Iterator<Item = (&'a crate::types::Column, Value<'a>)> + '_ {
        self.schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c, self.value(i)))
    }
}

/// A value of a column whose buffer as a whole is not UTF-8 (the host validates
/// text, but check rather than trust): the bad values read as U+FFFD.
fn as_str(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or("\u{FFFD}")
}

/// One typed value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// SQL NULL, whatever the column's type (also what a column index past the
    /// schema reads as).
    Null,
    /// A signed integer column (TINYINT to BIGINT).
    Int(i64),
    /// An unsigned integer column (TINYINT UNSIGNED to BIGINT UNSIGNED); may exceed
    /// `i64::MAX`.
    UInt(u64),
    /// A FLOAT or DOUBLE column (a FLOAT widened to `f64`).
    Float(f64),
    /// Canonical decimal text, e.g. `-12.50`.
    Decimal(&'a str),
    /// A UTF-8 text column (CHAR, VARCHAR, TEXT, ENUM, SET); invalid UTF-8 reads
    /// as U+FFFD.
    Text(&'a str),
    /// A binary column (BINARY, VARBINARY, BLOB): the raw bytes.
    Blob(&'a [u8]),
    /// Microseconds since the Unix epoch (UTC).
    DateTime(i64),
    /// Days since the Unix epoch.
    Date(i64),
    /// A JSON document as UTF-8 text; parse it yourself to reach its fields.
    Json(&'a str),
    /// A BOOLEAN column (stored upstream as 0 / 1).
    Bool(bool),
}

impl Value<'_> {
    /// Whether the value is SQL NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as `i64` when it is an integer-like value that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(x) | Value::DateTime(x) | Value::Date(x) => Some(x),
            Value::UInt(x) => i64::try_from(x).ok(),
            Value::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// The value as text when it is text-like (text, decimal, json).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) | Value::Decimal(s) | Value::Json(s) => Some(s),
            _ => None,
        }
    }
}
