//! Change events as sources produce them: column-oriented, one chunk per table per
//! transaction, in the same column shapes a batch carries, so that the pipeline
//! appends them to a table's batch with per-column copies (or moves them whole)
//! and no value is ever its own heap object.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::batch::{ColumnData, ColumnSize, Row, TableSchema, check_images, rows_of};
use crate::error::BatchError;
use crate::ts::{CheckpointTs, CommitTs};

/// The kind of a row change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A new row: an after image.
    Insert,
    /// A changed row: a before and an after image.
    Update,
    /// A removed row: a before image.
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

    /// The op of a wire code, if it is one.
    pub const fn from_code(code: u8) -> Option<Op> {
        match code {
            0 => Some(Op::Insert),
            1 => Some(Op::Update),
            2 => Some(Op::Delete),
            _ => None,
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

/// One value of one column, owned: for tests and for reading rows back, not on
/// the row path (which writes into columns directly).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Signed integers, datetimes (µs since epoch), dates (days), booleans (0/1).
    Int(i64),
    /// Unsigned integers.
    UInt(u64),
    /// Floating point.
    Float(f64),
    /// Text, decimal text, JSON text and blobs.
    Bytes(Vec<u8>),
}

/// Where a source is, after an event: opaque to everything but the source that
/// wrote it (datagen: transactions generated so far; a binlog: a GTID set or a
/// file and offset). `version` says how `bytes` is laid out, so that a source can
/// refuse a position it cannot read with a clear error instead of misreading it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourcePosition {
    /// Layout version of `bytes`, defined by the source.
    pub version: u32,
    /// The position, in the source's own encoding.
    pub bytes: Vec<u8>,
}

/// Where a changefeed resumes: every event with commit ts <= `ts` is downstream;
/// `position`, when known, is the source position after the last transaction at
/// or below `ts` (saved with the checkpoint, valid only together with it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The checkpoint ts.
    pub ts: CheckpointTs,
    /// The source position of the last transaction at or below `ts`.
    pub position: Option<SourcePosition>,
}

impl From<CheckpointTs> for Checkpoint {
    fn from(ts: CheckpointTs) -> Self {
        Checkpoint { ts, position: None }
    }
}

/// Approximate wire bytes of a row, besides its values (op, commit ts,
/// transaction id, flag, row seq).
pub const ROW_OVERHEAD_BYTES: usize = 22;
/// Approximate wire bytes of a fixed-size value (or a NULL).
pub const FIXED_VALUE_BYTES: usize = 8;
/// Approximate wire bytes of a byte-like value, besides its length (the offset).
pub const BYTES_VALUE_OVERHEAD: usize = 4;

/// The rows one transaction changed in one table: ops and dense before/after
/// images, one [`ColumnData`] per schema column (the shapes of
/// [`crate::TableBatch`]). Written through [`TableChanges::insert`],
/// [`TableChanges::update`] and [`TableChanges::delete`]; the wire size is
/// counted as values are pushed.
#[derive(Debug, Clone)]
pub struct TableChanges {
    schema: Arc<TableSchema>,
    pub(crate) ops: Vec<u8>,
    /// Per row: its place among its transaction's row changes (see
    /// [`TableChanges::insert_at`]).
    pub(crate) seq: Vec<u32>,
    /// Per row: flag bits the source set ([`crate::FLAG_NO_FK_CHECKS`]); rows
    /// past its end have none (empty while no row has any).
    pub(crate) flags: Vec<u8>,
    pub(crate) before: Vec<ColumnData>,
    pub(crate) after: Vec<ColumnData>,
    bytes: usize,
    /// Where the buffers go back when dropped (see [`ChangesPool`]).
    pool: Option<ChangesPool>,
}

impl PartialEq for TableChanges {
    /// The same rows of the same schema; where the buffers go back is not part
    /// of the data.
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
            && self.ops == other.ops
            && self.seq == other.seq
            && (0..self.ops.len()).all(|i| self.flag(i) == other.flag(i))
            && self.before == other.before
            && self.after == other.after
            && self.bytes == other.bytes
    }
}

/// What [`TableChanges`] is made of: ops, row seq, source flags (empty: none),
/// before and after images.
pub(crate) type ChangesParts = (Vec<u8>, Vec<u32>, Vec<u8>, Vec<ColumnData>, Vec<ColumnData>);

/// Most spare [`TableChanges`] a pool keeps.
const POOL_MAX: usize = 4096;

/// Spare [`TableChanges`] buffers for a source to reuse. Changes taken from a
/// pool go back to it when they are dropped (once the pipeline has copied them
/// into a batch), emptied but keeping their capacity, so that a steady stream
/// of small transactions allocates nothing per transaction. Changes moved whole
/// into a batch leave nothing behind.
#[derive(Clone, Default)]
pub struct ChangesPool(Arc<Mutex<Vec<TableChanges>>>);

impl std::fmt::Debug for ChangesPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangesPool")
    }
}

impl PartialEq for ChangesPool {
    /// Where buffers are recycled is not part of the data.
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl ChangesPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty changes for `schema`, reusing spare buffers when there are some.
    pub fn take(&self, schema: &Arc<TableSchema>) -> TableChanges {
        let spare = self.0.lock().ok().and_then(|mut spare| {
            spare
                .iter()
                .rposition(|c| Arc::ptr_eq(&c.schema, schema))
                .map(|at| spare.swap_remove(at))
        });
        let mut changes = spare.unwrap_or_else(|| TableChanges::new(schema.clone()));
        changes.pool = Some(self.clone());
        changes
    }
}

impl Drop for TableChanges {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        if self.ops.capacity() == 0 {
            return;
        }
        let mut spare = TableChanges {
            schema: self.schema.clone(),
            ops: std::mem::take(&mut self.ops),
            seq: std::mem::take(&mut self.seq),
            flags: std::mem::take(&mut self.flags),
            before: std::mem::take(&mut self.before),
            after: std::mem::take(&mut self.after),
            bytes: 0,
            pool: None,
        };
        spare.ops.clear();
        spare.seq.clear();
        spare.flags.clear();
        spare
            .before
            .iter_mut()
            .chain(spare.after.iter_mut())
            .for_each(ColumnData::clear);
        if let Ok(mut spares) = pool.0.lock()
            && spares.len() < POOL_MAX
        {
            spares.push(spare);
        }
    }
}

impl TableChanges {
    /// No rows yet, for `schema`.
    pub fn new(schema: Arc<TableSchema>) -> Self {
        let before = ColumnData::empty_image(&schema);
        let after = ColumnData::empty_image(&schema);
        Self {
            schema,
            ops: Vec::new(),
            seq: Vec::new(),
            flags: Vec::new(),
            before,
            after,
            bytes: 0,
            pool: None,
        }
    }

    /// Changes made of columns read back from elsewhere (another capture's
    /// shipment): `seq` per row and `flags` (rows past their end have none),
    /// images checked against `schema` as a batch's are; `bytes` is their wire
    /// size as the writer counted it. Columns that do not fit are refused.
    pub fn from_columns(
        schema: Arc<TableSchema>,
        ops: Vec<u8>,
        seq: Vec<u32>,
        flags: Vec<u8>,
        before: Vec<ColumnData>,
        after: Vec<ColumnData>,
        bytes: usize,
    ) -> Result<Self, BatchError> {
        let n = ops.len();
        // Flags may stop short: rows past their end have none.
        if seq.len() != n || flags.len() > n {
            return Err(BatchError {
                table_id: schema.table_id,
                reason: format!(
                    "{n} ops but {} row seq and {} flags",
                    seq.len(),
                    flags.len()
                ),
            });
        }
        check_images(schema.table_id, &schema, &ops, &before, &after)?;
        Ok(Self {
            schema,
            ops,
            seq,
            flags,
            before,
            after,
            bytes,
            pool: None,
        })
    }

    /// The table's schema.
    pub fn schema(&self) -> &Arc<TableSchema> {
        &self.schema
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Approximate wire bytes (as a batch counts them), kept as values are pushed.
    pub fn wire_bytes(&self) -> usize {
        self.bytes
    }

    /// The op codes, one per row.
    pub fn ops(&self) -> &[u8] {
        &self.ops
    }

    /// Per row, its place among its transaction's row changes over every
    /// table (see [`TableChanges::insert_at`]).
    pub fn seq(&self) -> &[u32] {
        &self.seq
    }

    /// The flag bits the source set, per row; rows past its end have none
    /// (empty while no row has any).
    pub fn flags(&self) -> &[u8] {
        &self.flags
    }

    /// The flag bits the source set on row `i` (0 for most rows).
    pub fn flag(&self, i: usize) -> u8 {
        self.flags.get(i).copied().unwrap_or(0)
    }

    /// Sets `bits` on every row from `start` on (the rows of one upstream
    /// statement, say [`crate::FLAG_NO_FK_CHECKS`]).
    pub fn flag_rows_from(&mut self, start: usize, bits: u8) {
        if bits == 0 || start >= self.ops.len() {
            return;
        }
        self.flags.resize(self.ops.len(), 0);
        for f in &mut self.flags[start..] {
            *f |= bits;
        }
    }

    /// ORs the source's flags of rows `rows` into `out` (one entry per row).
    pub(crate) fn or_flags(&self, rows: std::ops::Range<usize>, out: &mut [u8]) {
        if self.flags.is_empty() {
            return;
        }
        for (o, i) in out.iter_mut().zip(rows) {
            *o |= self.flag(i);
        }
    }

    /// Before images (rows with a before image only, in order).
    pub fn before(&self) -> &[ColumnData] {
        &self.before
    }

    /// After images (rows with an after image only, in order).
    pub fn after(&self) -> &[ColumnData] {
        &self.after
    }

    /// Start an insert; write its after image through the returned writer.
    /// Its place in the transaction is its place in this table (a source that
    /// knows the order of a transaction's changes across tables uses
    /// [`TableChanges::insert_at`]).
    pub fn insert(&mut self) -> RowWriter<'_> {
        let seq = self.ops.len() as u32;
        self.begin(Op::Insert, seq)
    }

    /// Start an update; write its before image, then its after image.
    pub fn update(&mut self) -> RowWriter<'_> {
        let seq = self.ops.len() as u32;
        self.begin(Op::Update, seq)
    }

    /// Start a delete; write its before image.
    pub fn delete(&mut self) -> RowWriter<'_> {
        let seq = self.ops.len() as u32;
        self.begin(Op::Delete, seq)
    }

    /// Start an insert that was change number `seq` (from 0) of its
    /// transaction, counted over every table it touched: the order in which a
    /// sink applying the transaction must make its changes (foreign keys).
    pub fn insert_at(&mut self, seq: u32) -> RowWriter<'_> {
        self.begin(Op::Insert, seq)
    }

    /// Like [`TableChanges::insert_at`], for an update.
    pub fn update_at(&mut self, seq: u32) -> RowWriter<'_> {
        self.begin(Op::Update, seq)
    }

    /// Like [`TableChanges::insert_at`], for a delete.
    pub fn delete_at(&mut self, seq: u32) -> RowWriter<'_> {
        self.begin(Op::Delete, seq)
    }

    /// Append a row from owned values (tests and slow paths): `before` for
    /// updates and deletes, `after` for inserts and updates.
    pub fn push_values(&mut self, op: Op, before: Option<&[Value]>, after: Option<&[Value]>) {
        let seq = self.ops.len() as u32;
        let mut w = self.begin(op, seq);
        for v in before.into_iter().chain(after).flatten() {
            w.value(v);
        }
    }

    /// The rows, for reading them back.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        rows_of(&self.ops, &self.before, &self.after)
    }

    /// Append every row of `other` (changes of the same table and version).
    pub fn append(&mut self, other: &TableChanges) {
        if !self.flags.is_empty() || !other.flags.is_empty() {
            self.flags.resize(self.ops.len(), 0);
            self.flags
                .extend((0..other.ops.len()).map(|i| other.flag(i)));
        }
        self.ops.extend_from_slice(&other.ops);
        self.seq.extend_from_slice(&other.seq);
        for (image, theirs) in [
            (&mut self.before, &other.before),
            (&mut self.after, &other.after),
        ] {
            for (mine, col) in image.iter_mut().zip(theirs) {
                mine.extend_from(col, 0..col.len());
            }
        }
        self.bytes += other.bytes;
    }

    /// The parts, to move them into a batch.
    pub(crate) fn into_parts(mut self) -> ChangesParts {
        if !self.flags.is_empty() {
            self.flags.resize(self.ops.len(), 0);
        }
        (
            std::mem::take(&mut self.ops),
            std::mem::take(&mut self.seq),
            std::mem::take(&mut self.flags),
            std::mem::take(&mut self.before),
            std::mem::take(&mut self.after),
        )
    }

    fn begin(&mut self, op: Op, seq: u32) -> RowWriter<'_> {
        self.ops.push(op.code());
        self.seq.push(seq);
        self.bytes += ROW_OVERHEAD_BYTES;
        RowWriter {
            changes: self,
            after: !op.has_before(),
            column: 0,
            both: op.has_before() && op.has_after(),
        }
    }
}

/// Writes one row's images, column by column, straight into the columns. A value
/// of the wrong kind for its column is stored as NULL (a source bug must not make
/// a malformed batch), and columns left unwritten are filled with NULL when the
/// writer is dropped, so images stay dense.
pub struct RowWriter<'a> {
    changes: &'a mut TableChanges,
    /// Writing the after image (else the before image).
    after: bool,
    /// Next column of the image being written.
    column: usize,
    /// An update: the after image follows the before image.
    both: bool,
}

impl RowWriter<'_> {
    fn column(&mut self) -> Option<&mut ColumnData> {
        let width = self.changes.schema.columns.len();
        if self.column == width && self.both && !self.after {
            self.after = true;
            self.column = 0;
        }
        if self.column >= width {
            return None;
        }
        self.column += 1;
        let image = if self.after {
            &mut self.changes.after
        } else {
            &mut self.changes.before
        };
        Some(&mut image[self.column - 1])
    }

    /// A signed integer (or datetime, date, boolean) value.
    pub fn int(&mut self, v: i64) -> &mut Self {
        if let Some(c) = self.column() {
            c.push_int(v);
            self.changes.bytes += FIXED_VALUE_BYTES;
        }
        self
    }

    /// An unsigned integer value.
    pub fn uint(&mut self, v: u64) -> &mut Self {
        if let Some(c) = self.column() {
            c.push_uint(v);
            self.changes.bytes += FIXED_VALUE_BYTES;
        }
        self
    }

    /// A floating-point value.
    pub fn float(&mut self, v: f64) -> &mut Self {
        if let Some(c) = self.column() {
            c.push_float(v);
            self.changes.bytes += FIXED_VALUE_BYTES;
        }
        self
    }

    /// A byte-like value (text, decimal, JSON, blob).
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        if let Some(c) = self.column() {
            let stored = c.push_bytes(v);
            self.changes.bytes += if stored {
                v.len() + BYTES_VALUE_OVERHEAD
            } else {
                FIXED_VALUE_BYTES
            };
        }
        self
    }

    /// A text value formatted in place (`format_args!`), without a temporary string.
    pub fn text(&mut self, args: std::fmt::Arguments<'_>) -> &mut Self {
        if let Some(c) = self.column() {
            let len = c.push_fmt(args);
            self.changes.bytes += match len {
                Some(n) => n + BYTES_VALUE_OVERHEAD,
                None => FIXED_VALUE_BYTES,
            };
        }
        self
    }

    /// A byte-like value that `write` appends straight to the column's buffer
    /// (digits and pieces, without formatting machinery or a temporary). `write`
    /// must only append.
    pub fn bytes_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        if let Some(c) = self.column() {
            let len = c.push_with(write);
            self.changes.bytes += match len {
                Some(n) => n + BYTES_VALUE_OVERHEAD,
                None => FIXED_VALUE_BYTES,
            };
        }
        self
    }

    /// A NULL.
    pub fn null(&mut self) -> &mut Self {
        if let Some(c) = self.column() {
            c.push_null();
            self.changes.bytes += FIXED_VALUE_BYTES;
        }
        self
    }

    /// An owned value.
    pub fn value(&mut self, v: &Value) -> &mut Self {
        match v {
            Value::Null => self.null(),
            Value::Int(x) => self.int(*x),
            Value::UInt(x) => self.uint(*x),
            Value::Float(x) => self.float(*x),
            Value::Bytes(b) => self.bytes(b),
        }
    }
}

impl Drop for RowWriter<'_> {
    fn drop(&mut self) {
        let width = self.changes.schema.columns.len();
        while self.column < width || (self.both && !self.after) {
            self.null();
        }
    }
}

/// One upstream transaction: its commit ts, the source position after it, and
/// its rows grouped per table (in first-touched order).
///
/// A transaction too large to hold whole comes as several parts with the same
/// commit ts, in order: every part but the last has `more` set and no position.
/// Its rows are written as they come (flagged split); the commit ts counts as
/// read, and the checkpoint may pass it, only once the last part is in.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// The commit ts of every row.
    pub commit_ts: CommitTs,
    /// Where the source is after this transaction (see [`SourcePosition`]).
    pub position: Option<SourcePosition>,
    /// The rows, per table.
    pub tables: Vec<TableChanges>,
    /// More parts of this transaction follow.
    pub more: bool,
    /// The source's identity of the transaction: the same each time it is
    /// read (its commit ts may not be, for a source whose commit ts follow the
    /// clock), different for different transactions. Defaults to the commit
    /// ts.
    pub id: u64,
}

impl Transaction {
    /// An empty transaction at `commit_ts` (its id the commit ts).
    pub fn new(commit_ts: CommitTs) -> Self {
        Self {
            commit_ts,
            position: None,
            tables: Vec::new(),
            more: false,
            id: commit_ts.get(),
        }
    }

    /// The changes of `schema`'s table (same id and version), added if new.
    pub fn table(&mut self, schema: &Arc<TableSchema>) -> &mut TableChanges {
        let at = match self.tables.iter().position(|t| {
            t.schema.table_id == schema.table_id && t.schema.version == schema.version
        }) {
            Some(at) => at,
            None => {
                self.tables.push(TableChanges::new(schema.clone()));
                self.tables.len() - 1
            }
        };
        &mut self.tables[at]
    }

    /// Like [`Transaction::table`], taking new changes from `pool`.
    pub fn table_from(
        &mut self,
        schema: &Arc<TableSchema>,
        pool: &ChangesPool,
    ) -> &mut TableChanges {
        let at = match self
            .tables
            .iter()
            .position(|t| Arc::ptr_eq(&t.schema, schema))
        {
            Some(at) => at,
            None => {
                self.tables.push(pool.take(schema));
                self.tables.len() - 1
            }
        };
        &mut self.tables[at]
    }

    /// Rows in all tables.
    pub fn row_count(&self) -> usize {
        self.tables.iter().map(TableChanges::len).sum()
    }

    /// Approximate wire bytes of all rows.
    pub fn wire_bytes(&self) -> usize {
        self.tables.iter().map(TableChanges::wire_bytes).sum()
    }

    /// Every row with its table, table by table.
    pub fn rows(&self) -> impl Iterator<Item = (&Arc<TableSchema>, Row<'_>)> {
        self.tables
            .iter()
            .flat_map(|t| t.rows().map(move |r| (&t.schema, r)))
    }
}

/// A schema change.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DdlEvent {
    /// Its commit ts.
    pub commit_ts: CommitTs,
    /// The source's identity of it (see [`Transaction::id`]): the same each
    /// time it is delivered.
    pub txn_id: u64,
    /// What it does, as event filters name it (`create table`, `alter table`,
    /// `create view`, ...).
    pub kind: String,
    /// The database it changes: its first table's, or the database a database
    /// statement names.
    pub schema_name: String,
    /// The table it changes when it names exactly one; empty otherwise.
    pub table_name: String,
    /// Every table (or view, or sequence) it names, as (schema, name), in the
    /// order written: a rename lists each old name, then its new name. Empty
    /// for a statement about a database, which affects all of its tables.
    pub tables: Vec<(String, String)>,
    /// The session's current database when the statement ran upstream (what
    /// its unqualified names refer to); empty when there was none.
    pub default_schema: String,
    /// The session settings it ran under upstream, as (variable, value):
    /// `sql_mode`, `foreign_key_checks`, `time_zone`, character sets and
    /// collations, as `SET SESSION` restores them.
    pub session: Vec<(String, String)>,
    /// The statement.
    pub query: String,
}

impl DdlEvent {
    /// Whether the DDL affects table `schema.table`: one of the tables it
    /// names, or any table of its database when it names none.
    pub fn affects(&self, schema: &str, table: &str) -> bool {
        if self.tables.is_empty() {
            return self.schema_name == schema
                && (self.table_name.is_empty() || self.table_name == table);
        }
        self.tables.iter().any(|(s, t)| s == schema && t == table)
    }

    /// A DDL of one table (`tables` and `table_name` set from it).
    pub fn of_table(commit_ts: CommitTs, schema: &str, table: &str, query: &str) -> Self {
        Self {
            commit_ts,
            txn_id: commit_ts.get(),
            kind: String::new(),
            schema_name: schema.to_string(),
            table_name: table.to_string(),
            tables: vec![(schema.to_string(), table.to_string())],
            default_schema: schema.to_string(),
            session: Vec::new(),
            query: query.to_string(),
        }
    }
}

/// Where one transaction's rows of a table end in a [`RunPart`]: cumulative
/// counts, so segment `i` spans from the ends of segment `i - 1` (or 0) to these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Index of the transaction in [`TransactionRun::transactions`].
    pub txn: u32,
    /// End of its rows (ops).
    pub rows: usize,
    /// End of its before images.
    pub before: usize,
    /// End of its after images.
    pub after: usize,
    /// End of its wire bytes.
    pub bytes: usize,
}

/// The rows of consecutive transactions of one table (one schema version), back
/// to back in one set of columns, and where each transaction's rows end.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPart {
    /// The rows, in commit-ts order.
    pub changes: TableChanges,
    /// One per transaction that touched the table, in order.
    pub segments: Vec<Segment>,
}

impl RunPart {
    /// Where segment `i` starts: (rows, before, after, bytes).
    pub fn start_of(&self, i: usize) -> (usize, usize, usize, usize) {
        match i.checked_sub(1).map(|p| self.segments[p]) {
            Some(s) => (s.rows, s.before, s.after, s.bytes),
            None => (0, 0, 0, 0),
        }
    }

    /// Segment `i`'s rows as changes of their own (a copy).
    pub fn segment(&self, i: usize) -> TableChanges {
        let (r0, b0, a0, y0) = self.start_of(i);
        let end = self.segments[i];
        let mut out = TableChanges::new(self.changes.schema.clone());
        out.ops.extend_from_slice(&self.changes.ops[r0..end.rows]);
        out.seq.extend_from_slice(&self.changes.seq[r0..end.rows]);
        if !self.changes.flags.is_empty() {
            out.flags
                .extend((r0..end.rows).map(|i| self.changes.flag(i)));
        }
        for (mine, theirs) in out.before.iter_mut().zip(&self.changes.before) {
            mine.extend_from(theirs, b0..end.before);
        }
        for (mine, theirs) in out.after.iter_mut().zip(&self.changes.after) {
            mine.extend_from(theirs, a0..end.after);
        }
        out.bytes = end.bytes - y0;
        out
    }
}

/// One transaction of a [`TransactionRun`].
#[derive(Debug, Clone, PartialEq)]
pub struct RunTransaction {
    /// Its commit ts.
    pub commit_ts: CommitTs,
    /// Its id ([`Transaction::id`]).
    pub id: u64,
    /// Where the source is after it.
    pub position: Option<SourcePosition>,
}

/// Consecutive transactions gathered into one set of columns per table, so that
/// the pipeline moves or copies many transactions' rows at once. The event
/// cache's reader builds runs from the transactions a source yields, on the
/// source's thread, while their columns are still in its cache.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransactionRun {
    /// The transactions, in commit-ts order.
    pub transactions: Vec<RunTransaction>,
    /// One part per table touched, in first-touched order.
    pub parts: Vec<RunPart>,
    rows: usize,
    bytes: usize,
    /// How large its tables' columns start.
    shape: RunShape,
}

/// How large a run's tables' columns grew: a source that builds runs one
/// after another starts each as large as the last ([`TransactionRun::shaped`]),
/// so that its columns are not grown by doubling, each growth a copy of all
/// so far. That matters most when earlier runs are still held (the redo
/// fence holds a flush's worth): the allocator then has no free room next to
/// a column to grow it in place, and every growth is a copy into memory not
/// touched yet.
#[derive(Debug, Clone, Default)]
pub struct RunShape(Vec<PartShape>);

#[derive(Debug, Clone)]
struct PartShape {
    table_id: u32,
    version: u32,
    rows: usize,
    flags: usize,
    before: Vec<ColumnSize>,
    after: Vec<ColumnSize>,
}

impl PartialEq for RunShape {
    /// How large buffers start is not part of the data.
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl TransactionRun {
    /// An empty run.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty run whose tables' columns start as large as `shape` says
    /// (a table it does not name starts empty).
    pub fn shaped(shape: RunShape) -> Self {
        Self {
            shape,
            ..Self::default()
        }
    }

    /// How large its tables' columns are now: the shape of the next run.
    pub fn shape(&self) -> RunShape {
        RunShape(
            self.parts
                .iter()
                .map(|p| {
                    let c = &p.changes;
                    PartShape {
                        table_id: c.schema.table_id,
                        version: c.schema.version,
                        rows: c.ops.len(),
                        flags: c.flags.len(),
                        before: c.before.iter().map(ColumnData::size).collect(),
                        after: c.after.iter().map(ColumnData::size).collect(),
                    }
                })
                .collect(),
        )
    }

    /// New changes of `schema`'s table, as large as the run's shape says.
    fn new_changes(&self, schema: &Arc<TableSchema>) -> TableChanges {
        let mut changes = TableChanges::new(schema.clone());
        let shape = self
            .shape
            .0
            .iter()
            .find(|p| p.table_id == schema.table_id && p.version == schema.version);
        if let Some(shape) = shape {
            changes.ops.reserve(shape.rows);
            changes.seq.reserve(shape.rows);
            changes.flags.reserve(shape.flags);
            for (column, size) in changes.before.iter_mut().zip(&shape.before) {
                column.reserve_size(size);
            }
            for (column, size) in changes.after.iter_mut().zip(&shape.after) {
                column.reserve_size(size);
            }
        }
        changes
    }

    /// Add `txn` at the end, moving its first changes of a table and copying
    /// later ones. A transaction that has a table at another schema version than
    /// the run's part of it is given back: it starts the next run. A part of a
    /// large transaction (`more` set) is given back too: it goes on its own,
    /// never in a run.
    pub fn push(&mut self, txn: Transaction) -> Result<(), Transaction> {
        let clash = txn.tables.iter().any(|t| {
            self.parts.iter().any(|p| {
                p.changes.schema.table_id == t.schema.table_id
                    && p.changes.schema.version != t.schema.version
            })
        });
        if clash {
            return Err(txn);
        }
        let at = self.transactions.len() as u32;
        if txn.more {
            // A part of a large transaction goes on its own.
            return Err(txn);
        }
        let Transaction {
            commit_ts,
            position,
            tables,
            more: _,
            id,
        } = txn;
        for changes in tables {
            if changes.is_empty() {
                continue;
            }
            self.rows += changes.len();
            self.bytes += changes.bytes;
            match self
                .parts
                .iter_mut()
                .find(|p| p.changes.schema.table_id == changes.schema.table_id)
            {
                Some(part) => {
                    part.changes.append(&changes);
                    let c = &part.changes;
                    part.segments.push(Segment {
                        txn: at,
                        rows: c.ops.len(),
                        before: c.before.first().map_or(0, ColumnData::len),
                        after: c.after.first().map_or(0, ColumnData::len),
                        bytes: c.bytes,
                    });
                }
                None => {
                    let mut changes = changes;
                    // Moved in: the buffers stay with the run, not the pool.
                    changes.pool = None;
                    let segment = Segment {
                        txn: at,
                        rows: changes.ops.len(),
                        before: changes.before.first().map_or(0, ColumnData::len),
                        after: changes.after.first().map_or(0, ColumnData::len),
                        bytes: changes.bytes,
                    };
                    self.parts.push(RunPart {
                        changes,
                        segments: vec![segment],
                    });
                }
            }
        }
        self.transactions.push(RunTransaction {
            commit_ts,
            id,
            position,
        });
        Ok(())
    }

    /// The changes of `schema`'s table in the transaction being written (the
    /// rows written since the last [`TransactionRun::end_transaction`]), or
    /// `None` if the run holds the table at another schema version (end the run
    /// first).
    pub fn table(&mut self, schema: &Arc<TableSchema>) -> Option<&mut TableChanges> {
        let at = match self
            .parts
            .iter()
            .position(|p| p.changes.schema.table_id == schema.table_id)
        {
            Some(at) if self.parts[at].changes.schema.version != schema.version => return None,
            Some(at) => at,
            None => {
                self.parts.push(RunPart {
                    changes: self.new_changes(schema),
                    segments: Vec::new(),
                });
                self.parts.len() - 1
            }
        };
        Some(&mut self.parts[at].changes)
    }

    /// End the transaction whose rows were written through
    /// [`TransactionRun::table`], at `commit_ts`, with the source position after it.
    pub fn end_transaction(&mut self, commit_ts: CommitTs, position: Option<SourcePosition>) {
        self.end_transaction_with_id(commit_ts, commit_ts.get(), position);
    }

    /// Like [`TransactionRun::end_transaction`], with the transaction's id.
    pub fn end_transaction_with_id(
        &mut self,
        commit_ts: CommitTs,
        id: u64,
        position: Option<SourcePosition>,
    ) {
        let at = self.transactions.len() as u32;
        for part in &mut self.parts {
            let c = &part.changes;
            let done = part.segments.last().map_or(0, |s| s.rows);
            if c.ops.len() > done {
                self.rows += c.ops.len() - done;
                self.bytes += c.bytes - part.segments.last().map_or(0, |s| s.bytes);
                part.segments.push(Segment {
                    txn: at,
                    rows: c.ops.len(),
                    before: c.before.first().map_or(0, ColumnData::len),
                    after: c.after.first().map_or(0, ColumnData::len),
                    bytes: c.bytes,
                });
            }
        }
        self.transactions.push(RunTransaction {
            commit_ts,
            id,
            position,
        });
    }

    /// A run of `transactions` whose rows are `parts` (each segment naming a
    /// transaction by its index); refused when a segment names a transaction
    /// the run does not have, segments do not follow each other or do not
    /// match their rows' images, or two parts hold one table.
    pub fn from_parts(
        transactions: Vec<RunTransaction>,
        parts: Vec<RunPart>,
    ) -> Result<Self, BatchError> {
        let (mut rows, mut bytes) = (0usize, 0usize);
        let mut tables = std::collections::HashSet::new();
        for part in &parts {
            let c = &part.changes;
            let fail = |reason: String| BatchError {
                table_id: c.schema.table_id,
                reason,
            };
            if !tables.insert(c.schema.table_id) {
                return Err(fail("two parts of one run hold the same table".into()));
            }
            // Where each segment must end: its rows' before and after images
            // counted from their ops.
            let (mut at, mut before, mut after) = (0usize, 0usize, 0usize);
            let mut last: Option<Segment> = None;
            for (i, s) in part.segments.iter().enumerate() {
                let follows = last.is_none_or(|l| s.txn > l.txn && s.bytes >= l.bytes);
                if !follows
                    || s.txn as usize >= transactions.len()
                    || s.rows > c.ops.len()
                    || s.rows < at
                {
                    return Err(fail(format!(
                        "segment {i} (transaction {} of {}, rows to {} of {}) does not follow the one before",
                        s.txn,
                        transactions.len(),
                        s.rows,
                        c.ops.len()
                    )));
                }
                for &code in &c.ops[at..s.rows] {
                    let op = Op::from_code(code)
                        .ok_or_else(|| fail(format!("unknown op code {code}")))?;
                    before += usize::from(op.has_before());
                    after += usize::from(op.has_after());
                }
                at = s.rows;
                if (s.before, s.after) != (before, after) {
                    return Err(fail(format!(
                        "segment {i} says its images end at {} and {}, its rows' end at {before} and {after}",
                        s.before, s.after
                    )));
                }
                last = Some(*s);
            }
            if (at, last.map_or(0, |l| l.bytes)) != (c.ops.len(), c.bytes) {
                return Err(fail(format!(
                    "segments end at row {at} but the part has {} rows",
                    c.ops.len()
                )));
            }
            rows += c.ops.len();
            bytes = bytes
                .checked_add(c.bytes)
                .ok_or_else(|| fail("the run's size overflows".into()))?;
        }
        Ok(Self {
            transactions,
            parts,
            rows,
            bytes,
            shape: RunShape::default(),
        })
    }

    /// Takes out the parts of the tables `keep` refuses (their rows go
    /// elsewhere); the transactions stay, so the run still carries every
    /// transaction's commit ts and source position.
    pub fn take_parts(&mut self, keep: impl Fn(&TableSchema) -> bool) -> Vec<RunPart> {
        if self.parts.iter().all(|p| keep(&p.changes.schema)) {
            return Vec::new();
        }
        let (kept, taken): (Vec<RunPart>, Vec<RunPart>) = std::mem::take(&mut self.parts)
            .into_iter()
            .partition(|p| keep(&p.changes.schema));
        self.parts = kept;
        for part in &taken {
            self.rows -= part.changes.len();
            self.bytes -= part.changes.bytes;
        }
        taken
    }

    /// Transactions in the run.
    pub fn len(&self) -> usize {
        self.transactions.len()
    }

    /// Whether the run has no transactions.
    pub fn is_empty(&self) -> bool {
        self.transactions.is_empty()
    }

    /// Rows in all tables.
    pub fn row_count(&self) -> usize {
        self.rows
    }

    /// Approximate wire bytes of all rows.
    pub fn wire_bytes(&self) -> usize {
        self.bytes
    }

    /// The transactions again, one by one (copies of their rows).
    pub fn into_transactions(self) -> Vec<Transaction> {
        let mut out: Vec<Transaction> = self
            .transactions
            .into_iter()
            .map(|t| Transaction {
                commit_ts: t.commit_ts,
                position: t.position,
                tables: Vec::new(),
                more: false,
                id: t.id,
            })
            .collect();
        // Parts are in first-touched order, so each transaction gets its tables
        // in the order it touched them among the run's tables.
        for part in &self.parts {
            for (i, s) in part.segments.iter().enumerate() {
                out[s.txn as usize].tables.push(part.segment(i));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Column, ColumnType};

    fn schema(table_id: u32, version: u32) -> Arc<TableSchema> {
        let col = |name: &str, ty| Column {
            name: name.into(),
            ty,
            sql_type: String::new(),
            nullable: true,
            key: false,
        };
        Arc::new(TableSchema {
            table_id,
            version,
            schema_name: "s".into(),
            table_name: format!("t{table_id}"),
            columns: vec![col("id", ColumnType::Int), col("name", ColumnType::Text)],
        })
    }

    fn txn(ts: u64, rows: &[(&Arc<TableSchema>, Op, i64)]) -> Transaction {
        let mut t = Transaction::new(CommitTs::new(ts));
        t.position = Some(SourcePosition {
            version: 1,
            bytes: ts.to_le_bytes().to_vec(),
        });
        for &(schema, op, id) in rows {
            let image = [Value::Int(id), Value::Bytes(format!("n{id}").into_bytes())];
            let null = [Value::Int(id), Value::Null];
            let changes = t.table(schema);
            match op {
                Op::Insert => changes.push_values(op, None, Some(&image)),
                Op::Update => changes.push_values(op, Some(&null), Some(&image)),
                Op::Delete => changes.push_values(op, Some(&image), None),
            }
        }
        t
    }

    #[test]
    fn a_run_gives_back_exactly_its_transactions() {
        let (a, b) = (schema(1, 1), schema(2, 1));
        let txns = vec![
            txn(10, &[(&a, Op::Insert, 1), (&b, Op::Insert, 2)]),
            txn(11, &[(&b, Op::Update, 2)]),
            txn(12, &[]),
            txn(
                13,
                &[
                    (&a, Op::Delete, 1),
                    (&a, Op::Insert, 3),
                    (&b, Op::Delete, 2),
                ],
            ),
        ];
        let mut run = TransactionRun::new();
        for t in txns.clone() {
            run.push(t).unwrap();
        }
        assert_eq!(run.len(), 4);
        assert_eq!(run.row_count(), 6);
        assert_eq!(
            run.wire_bytes(),
            txns.iter().map(Transaction::wire_bytes).sum::<usize>()
        );
        // Two parts, their rows back to back, each transaction's rows a segment.
        assert_eq!(run.parts.len(), 2);
        assert_eq!(run.parts[0].changes.len(), 3);
        assert_eq!(
            run.parts[0]
                .segments
                .iter()
                .map(|s| s.txn)
                .collect::<Vec<_>>(),
            vec![0, 3]
        );
        assert_eq!(run.into_transactions(), txns);
    }

    #[test]
    fn parts_taken_out_and_put_back_together_give_the_same_rows() {
        let (a, b) = (schema(1, 1), schema(2, 1));
        let txns = vec![
            txn(10, &[(&a, Op::Insert, 1), (&b, Op::Insert, 2)]),
            txn(11, &[(&b, Op::Update, 2)]),
            txn(13, &[(&a, Op::Delete, 1), (&b, Op::Delete, 2)]),
        ];
        let mut run = TransactionRun::new();
        for t in txns.clone() {
            run.push(t).unwrap();
        }
        let taken = run.take_parts(|s| s.table_id == 1);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            (run.len(), run.row_count()),
            (3, 2),
            "every transaction stays"
        );
        assert_eq!(run.wire_bytes(), run.parts[0].changes.wire_bytes());
        // Table 2's rows rebuilt from their columns, as a receiver does.
        let part = &taken[0];
        let c = &part.changes;
        let rebuilt = TableChanges::from_columns(
            c.schema().clone(),
            c.ops().to_vec(),
            c.seq().to_vec(),
            c.flags().to_vec(),
            c.before().to_vec(),
            c.after().to_vec(),
            c.wire_bytes(),
        )
        .unwrap();
        let marks = run.transactions.clone();
        let alone = TransactionRun::from_parts(
            marks.clone(),
            vec![RunPart {
                changes: rebuilt,
                segments: part.segments.clone(),
            }],
        )
        .unwrap();
        assert_eq!(alone.row_count(), 3);
        let got: Vec<_> = alone
            .into_transactions()
            .into_iter()
            .map(|t| (t.commit_ts, t.tables))
            .collect();
        let want: Vec<_> = txns
            .iter()
            .map(|t| {
                let tables = t
                    .tables
                    .iter()
                    .filter(|c| c.schema().table_id == 2)
                    .cloned();
                (t.commit_ts, tables.collect::<Vec<_>>())
            })
            .collect();
        assert_eq!(got, want);
        // Segments that name a transaction the run lacks, or overrun the
        // rows, are refused.
        let mut bad = part.segments.clone();
        bad[0].txn = 9;
        let refused = TransactionRun::from_parts(
            marks.clone(),
            vec![RunPart {
                changes: part.changes.clone(),
                segments: bad,
            }],
        );
        assert!(refused.is_err());
        let mut short = part.segments.clone();
        short.pop();
        assert!(
            TransactionRun::from_parts(
                marks,
                vec![RunPart {
                    changes: part.changes.clone(),
                    segments: short,
                }],
            )
            .is_err()
        );
        // Segments whose image ends do not match their rows' ops, and two
        // parts of one table, are refused.
        let mut images = part.segments.clone();
        images[0].after += 1;
        let refused = TransactionRun::from_parts(
            run.transactions.clone(),
            vec![RunPart {
                changes: part.changes.clone(),
                segments: images,
            }],
        );
        assert!(refused.is_err());
        let twice =
            TransactionRun::from_parts(run.transactions.clone(), vec![part.clone(), part.clone()]);
        assert!(twice.is_err());
        // Columns that do not fit the schema are refused.
        let wrong = TableChanges::from_columns(
            c.schema().clone(),
            vec![0],
            vec![0],
            Vec::new(),
            ColumnData::empty_image(c.schema()),
            ColumnData::empty_image(c.schema()),
            0,
        );
        assert!(wrong.is_err());
    }

    /// Capacities of a run's first part: ops, and each after-image column's
    /// values and bytes.
    fn capacities(run: &TransactionRun) -> (usize, Vec<(usize, usize)>) {
        let c = &run.parts[0].changes;
        let columns = c
            .after
            .iter()
            .map(|col| match &col.values {
                crate::ColumnValues::Int64(v) => (v.capacity(), 0),
                crate::ColumnValues::Bytes(b) => (b.offsets.capacity(), b.data.capacity()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        (c.ops.capacity(), columns)
    }

    #[test]
    fn a_run_shaped_like_the_last_starts_as_large_and_does_not_grow() {
        let s = schema(1, 1);
        let fill = |run: &mut TransactionRun| {
            for ts in 1..=300u64 {
                let image = [Value::Int(ts as i64), Value::Bytes(vec![b'x'; 40])];
                run.table(&s)
                    .unwrap()
                    .push_values(Op::Insert, None, Some(&image));
                run.end_transaction(CommitTs::new(ts), None);
            }
        };
        let mut first = TransactionRun::new();
        fill(&mut first);
        let shape = first.shape();
        let mut next = TransactionRun::shaped(shape);
        // Room for all of it from the first row on.
        next.table(&s).unwrap();
        let (ops, columns) = capacities(&next);
        assert!(ops >= 300, "{ops}");
        assert!(columns[0].0 >= 300 && columns[1].0 >= 301, "{columns:?}");
        assert!(columns[1].1 >= 300 * 40, "{columns:?}");
        fill(&mut next);
        assert_eq!(capacities(&next), (ops, columns), "grown");
        // The same data: the shape is not part of it.
        assert_eq!(next, first);
        assert_eq!(next.into_transactions(), first.into_transactions());
        // Another table, or another version, starts empty.
        let mut other = TransactionRun::shaped(next_shape_of(&s));
        other.table(&schema(1, 2)).unwrap();
        assert_eq!(capacities(&other).0, 0);
    }

    fn next_shape_of(s: &Arc<TableSchema>) -> RunShape {
        let mut run = TransactionRun::new();
        run.table(s)
            .unwrap()
            .push_values(Op::Insert, None, Some(&[Value::Int(1), Value::Null]));
        run.end_transaction(CommitTs::new(1), None);
        run.shape()
    }

    #[test]
    fn a_run_refuses_a_table_at_another_schema_version() {
        let (v1, v2) = (schema(1, 1), schema(1, 2));
        let mut run = TransactionRun::new();
        run.push(txn(10, &[(&v1, Op::Insert, 1)])).unwrap();
        let refused = run.push(txn(11, &[(&v2, Op::Insert, 2)])).unwrap_err();
        assert_eq!(refused.commit_ts, CommitTs::new(11));
        assert_eq!(run.len(), 1);
    }
}
