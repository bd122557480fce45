//! Building batches: for tests (sample batches for the native harness) and for
//! filters that drop or rewrite rows.

use crate::types::{ByteValues, ColumnData, ColumnType, ColumnValues, Op, TableBatch, TableSchema};
use crate::view::Value;

/// Appends rows to a column-oriented [`TableBatch`] for one schema.
#[derive(Debug, Clone)]
pub struct TableBatchBuilder {
    types: Vec<ColumnType>,
    batch: TableBatch,
}

impl TableBatchBuilder {
    /// An empty batch for `schema`.
    pub fn new(schema: &TableSchema) -> Self {
        let types: Vec<ColumnType> = schema.columns.iter().map(|c| c.ty).collect();
        let empty = || types.iter().map(|t| empty_column(*t)).collect();
        Self {
            batch: TableBatch {
                table_id: schema.table_id,
                schema_version: schema.version,
                ops: Vec::new(),
                commit_ts: Vec::new(),
                txn_id: Vec::new(),
                row_flags: Vec::new(),
                row_seq: Vec::new(),
                before: empty(),
                after: empty(),
            },
            types,
        }
    }

    /// Append an insert.
    pub fn insert(&mut self, commit_ts: u64, after: &[Value<'_>]) -> &mut Self {
        self.push(Op::Insert, commit_ts, 0, None, Some(after))
    }

    /// Append an update.
    pub fn update(
        &mut self,
        commit_ts: u64,
        before: &[Value<'_>],
        after: &[Value<'_>],
    ) -> &mut Self {
        self.push(Op::Update, commit_ts, 0, Some(before), Some(after))
    }

    /// Append a delete.
    pub fn delete(&mut self, commit_ts: u64, before: &[Value<'_>]) -> &mut Self {
        self.push(Op::Delete, commit_ts, 0, Some(before), None)
    }

    /// Append a row with explicit flags. Images must match the op and the schema.
    /// Its place in its transaction (`row-seq`) is the number of rows of the same
    /// commit ts before it in this batch; [`TableBatchBuilder::push_at`] sets it.
    ///
    /// # Panics
    /// When an image is missing for the op or has the wrong number of values.
    pub fn push(
        &mut self,
        op: Op,
        commit_ts: u64,
        flags: u8,
        before: Option<&[Value<'_>]>,
        after: Option<&[Value<'_>]>,
    ) -> &mut Self {
        let seq = self
            .batch
            .commit_ts
            .iter()
            .rev()
            .take_while(|&&ts| ts == commit_ts)
            .count() as u32;
        self.push_at(op, commit_ts, seq, flags, before, after)
    }

    /// Like [`TableBatchBuilder::push_at`], with the transaction's id (by
    /// default its commit ts).
    #[expect(clippy::too_many_arguments, reason = "one argument per row field")]
    pub fn push_with_id(
        &mut self,
        op: Op,
        commit_ts: u64,
        txn_id: u64,
        seq: u32,
        flags: u8,
        before: Option<&[Value<'_>]>,
        after: Option<&[Value<'_>]>,
    ) -> &mut Self {
        self.push_at(op, commit_ts, seq, flags, before, after);
        if let Some(last) = self.batch.txn_id.last_mut() {
            *last = txn_id;
        }
        self
    }

    /// Append a row that was change `seq` (from 0, over every table) of its
    /// transaction, with explicit flags: to build transactions whose rows in
    /// several tables interleave.
    ///
    /// # Panics
    /// When an image is missing for the op or has the wrong number of values.
    pub fn push_at(
        &mut self,
        op: Op,
        commit_ts: u64,
        seq: u32,
        flags: u8,
        before: Option<&[Value<'_>]>,
        after: Option<&[Value<'_>]>,
    ) -> &mut Self {
        assert_eq!(
            op.has_before(),
            before.is_some(),
            "before image does not match {op:?}"
        );
        assert_eq!(
            op.has_after(),
            after.is_some(),
            "after image does not match {op:?}"
        );
        self.batch.ops.push(op.code());
        self.batch.commit_ts.push(commit_ts);
        self.batch.txn_id.push(commit_ts);
        self.batch.row_flags.push(flags);
        self.batch.row_seq.push(seq);
        if let Some(values) = before {
            append_image(&mut self.batch.before, &self.types, values);
        }
        if let Some(values) = after {
            append_image(&mut self.batch.after, &self.types, values);
        }
        self
    }

    /// Number of rows so far.
    pub fn len(&self) -> usize {
        self.batch.ops.len()
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.batch.ops.is_empty()
    }

    /// The finished batch.
    pub fn finish(self) -> TableBatch {
        self.batch
    }
}

fn empty_column(ty: ColumnType) -> ColumnData {
    let values = match ty {
        ColumnType::Uint => ColumnValues::Uint64(Vec::new()),
        ColumnType::Float => ColumnValues::Float64(Vec::new()),
        t if t.is_bytes() => ColumnValues::Bytes(ByteValues {
            offsets: vec![0],
            data: Vec::new(),
        }),
        _ => ColumnValues::Int64(Vec::new()),
    };
    ColumnData {
        values,
        nulls: Vec::new(),
    }
}

fn append_image(columns: &mut [ColumnData], types: &[ColumnType], values: &[Value<'_>]) {
    assert_eq!(
        values.len(),
        types.len(),
        "image has the wrong number of values"
    );
    for (column, value) in columns.iter_mut().zip(values) {
        append_value(column, value);
    }
}

/// Append one value to a column; a value of the wrong kind is stored as NULL.
pub fn append_value(column: &mut ColumnData, value: &Value<'_>) {
    let i = column.len();
    let mut null = value.is_null();
    match &mut column.values {
        ColumnValues::Int64(v) => v.push(match *value {
            Value::Int(x) | Value::DateTime(x) | Value::Date(x) => x,
            Value::Bool(b) => b as i64,
            _ => {
                null = true;
                0
            }
        }),
        ColumnValues::Uint64(v) => v.push(match *value {
            Value::UInt(x) => x,
            Value::Int(x) if x >= 0 => x as u64,
            _ => {
                null = true;
                0
            }
        }),
        ColumnValues::Float64(v) => v.push(match *value {
            Value::Float(x) => x,
            _ => {
                null = true;
                0.0
            }
        }),
        ColumnValues::Bytes(b) => {
            match value {
                Value::Text(s) | Value::Decimal(s) | Value::Json(s) => {
                    b.data.extend_from_slice(s.as_bytes())
                }
                Value::Blob(x) => b.data.extend_from_slice(x),
                _ => null = true,
            }
            b.offsets.push(b.data.len() as u32);
        }
    }
    if null {
        column.set_null(i);
    }
}

impl TableBatch {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// A batch with only the rows whose `keep` entry is true, in the same order.
    ///
    /// # Panics
    /// When `keep` does not have one entry per row.
    pub fn select(&self, keep: &[bool]) -> TableBatch {
        assert_eq!(keep.len(), self.ops.len(), "one keep flag per row");
        let mut keep_before = Vec::new();
        let mut keep_after = Vec::new();
        for (op, &k) in self.ops.iter().zip(keep) {
            let op = Op::from_code(*op);
            if op.has_before() {
                keep_before.push(k);
            }
            if op.has_after() {
                keep_after.push(k);
            }
        }
        let pick = |v: &[u8]| -> Vec<u8> {
            v.iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(x, _)| *x)
                .collect()
        };
        TableBatch {
            table_id: self.table_id,
            schema_version: self.schema_version,
            ops: pick(&self.ops),
            commit_ts: self
                .commit_ts
                .iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(x, _)| *x)
                .collect(),
            txn_id: self
                .txn_id
                .iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(x, _)| *x)
                .collect(),
            row_flags: pick(&self.row_flags),
            row_seq: self
                .row_seq
                .iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(x, _)| *x)
                .collect(),
            before: self.before.iter().map(|c| c.select(&keep_before)).collect(),
            after: self.after.iter().map(|c| c.select(&keep_after)).collect(),
        }
    }
}

impl ColumnData {
    /// Mark value `i` as NULL. The stored value stays where it is (readers skip it);
    /// overwrite it first when it must not travel on, as a masking filter does.
    pub fn set_null(&mut self, i: usize) {
        if self.nulls.len() <= i / 8 {
            self.nulls.resize(i / 8 + 1, 0);
        }
        self.nulls[i / 8] |= 1 << (i % 8);
    }

    /// A column with only the values whose `keep` entry is true.
    pub fn select(&self, keep: &[bool]) -> ColumnData {
        let mut out = ColumnData {
            values: match &self.values {
                ColumnValues::Int64(v) => ColumnValues::Int64(filter(v, keep)),
                ColumnValues::Uint64(v) => ColumnValues::Uint64(filter(v, keep)),
                ColumnValues::Float64(v) => ColumnValues::Float64(filter(v, keep)),
                ColumnValues::Bytes(b) => {
                    let mut offsets = Vec::with_capacity(keep.len() + 1);
                    offsets.push(0u32);
                    let mut data = Vec::new();
                    for (i, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
                        let (s, e) = (b.offsets[i] as usize, b.offsets[i + 1] as usize);
                        data.extend_from_slice(&b.data[s..e]);
                        offsets.push(data.len() as u32);
                    }
                    ColumnValues::Bytes(ByteValues { offsets, data })
                }
            },
            nulls: Vec::new(),
        };
        if !self.nulls.is_empty() {
            let kept = keep.iter().enumerate().filter(|(_, k)| **k);
            for (j, (i, _)) in kept.enumerate() {
                if self.is_null(i) {
                    out.set_null(j);
                }
            }
        }
        out
    }

    /// Rewrite every non-NULL value of a bytes column with `f` (no-op for other columns).
    pub fn map_bytes(&mut self, mut f: impl FnMut(&[u8], &mut Vec<u8>)) {
        let ColumnValues::Bytes(b) = &mut self.values else {
            return;
        };
        let n = b.offsets.len().saturating_sub(1);
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u32);
        let mut data = Vec::with_capacity(b.data.len());
        for i in 0..n {
            let null = self
                .nulls
                .get(i / 8)
                .is_some_and(|byte| byte & (1 << (i % 8)) != 0);
            if !null {
                f(
                    &b.data[b.offsets[i] as usize..b.offsets[i + 1] as usize],
                    &mut data,
                );
            }
            offsets.push(data.len() as u32);
        }
        b.offsets = offsets;
        b.data = data;
    }
}

fn filter<T: Copy>(v: &[T], keep: &[bool]) -> Vec<T> {
    v.iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(x, _)| *x)
        .collect()
}
