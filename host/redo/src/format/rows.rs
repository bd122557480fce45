//! Rows records as format version 2 writes them: every fixed-width array of
//! a table's rows (row seq, integers, floats, the offsets of byte values) as
//! its little-endian bytes, and the rows' transactions as runs, so a record
//! is written with a few copies per column and read back with one copy per
//! column. Version 1 wrote every number as a postcard varint, one call per
//! value, and was the redo writer's bound.
//!
//! A table's rows in a version 2 record, after `table_id` and
//! `schema_version` (varints) and `ops` (bytes):
//!
//! ```text
//! txn     seq of (end, index)   runs of rows of one transaction: rows up to
//!                               `end` (exclusive, cumulative) are the
//!                               record's transaction `index`
//! seq     bytes                 u32 LE per row
//! flags   bytes                 a byte per row (empty: none set)
//! before  seq of column         one per schema column
//! after   seq of column
//! column  (kind: u8, nulls: bytes, fixed: bytes, data: bytes)
//!         kind 0 i64, 1 u64, 2 f64: `fixed` holds the values (8 bytes LE
//!         each), `data` is empty; kind 3 bytes: `fixed` holds the offsets
//!         (u32 LE, one more than the values), `data` the values back to back
//! ```
//!
//! Schema, DDL and resumed records are encoded as in version 1.

use std::borrow::Cow;

use serde::ser::{SerializeSeq, SerializeTuple};
use serde::{Deserialize, Serialize, Serializer};
use sluice_core::{ByteValues, ColumnData, ColumnValues, DdlEvent, TableSchema};

use super::{Record, TableRows, TxnMark};

const KIND_I64: u8 = 0;
const KIND_U64: u8 = 1;
const KIND_F64: u8 = 2;
const KIND_BYTES: u8 = 3;

/// The rows of one table, borrowed from what they are written from.
#[derive(Serialize)]
pub(crate) struct TableRowsRef<'a> {
    pub table_id: u32,
    pub schema_version: u32,
    #[serde(with = "serde_bytes")]
    pub ops: &'a [u8],
    /// (end of the rows, index of their transaction in the record).
    pub txn: Vec<(u32, u32)>,
    #[serde(serialize_with = "le_u32s")]
    pub seq: &'a [u32],
    #[serde(with = "serde_bytes")]
    pub flags: &'a [u8],
    #[serde(serialize_with = "columns")]
    pub before: &'a [ColumnData],
    #[serde(serialize_with = "columns")]
    pub after: &'a [ColumnData],
}

/// A rows record, borrowed: the variant's place gives it the tag of
/// [`Record::Rows`].
#[derive(Serialize)]
pub(crate) enum RecordRef<'a> {
    #[allow(dead_code, reason = "the variant's place gives Rows its tag")]
    Schema(()),
    Rows {
        txns: &'a [TxnMark],
        tables: &'a [TableRowsRef<'a>],
    },
}

/// The bytes of `values` as little-endian: the values' own memory on a
/// little-endian machine.
fn le_bytes<T: bytemuck::Pod, const N: usize>(
    values: &[T],
    to_le: fn(T) -> [u8; N],
) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(values))
    } else {
        Cow::Owned(values.iter().flat_map(|&v| to_le(v)).collect())
    }
}

fn le_u32s<S: Serializer>(values: &&[u32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(&le_bytes(values, u32::to_le_bytes))
}

fn columns<S: Serializer>(columns: &&[ColumnData], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(columns.len()))?;
    for c in columns.iter() {
        seq.serialize_element(&ColumnRef(c))?;
    }
    seq.end()
}

struct ColumnRef<'a>(&'a ColumnData);

impl Serialize for ColumnRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (kind, fixed, data): (u8, Cow<'_, [u8]>, &[u8]) = match &self.0.values {
            ColumnValues::Int64(v) => (KIND_I64, le_bytes(v, i64::to_le_bytes), &[]),
            ColumnValues::Uint64(v) => (KIND_U64, le_bytes(v, u64::to_le_bytes), &[]),
            ColumnValues::Float64(v) => (KIND_F64, le_bytes(v, f64::to_le_bytes), &[]),
            ColumnValues::Bytes(b) => (
                KIND_BYTES,
                le_bytes(&b.offsets, u32::to_le_bytes),
                &b.data[..],
            ),
        };
        let mut t = s.serialize_tuple(4)?;
        t.serialize_element(&kind)?;
        t.serialize_element(serde_bytes::Bytes::new(&self.0.nulls))?;
        t.serialize_element(serde_bytes::Bytes::new(&fixed))?;
        t.serialize_element(serde_bytes::Bytes::new(data))?;
        t.end()
    }
}

/// A version 2 record as read, borrowing its arrays from the payload.
#[derive(Deserialize)]
enum RecordIn<'a> {
    Schema(TableSchema),
    Rows {
        txns: Vec<TxnMark>,
        #[serde(borrow)]
        tables: Vec<TableRowsIn<'a>>,
    },
    Ddl(DdlEvent),
    Resumed {
        resolved_ts: u64,
    },
}

#[derive(Deserialize)]
struct TableRowsIn<'a> {
    table_id: u32,
    schema_version: u32,
    #[serde(borrow, with = "serde_bytes")]
    ops: &'a [u8],
    txn: Vec<(u32, u32)>,
    #[serde(borrow, with = "serde_bytes")]
    seq: &'a [u8],
    #[serde(borrow, with = "serde_bytes")]
    flags: &'a [u8],
    #[serde(borrow)]
    before: Vec<ColumnIn<'a>>,
    #[serde(borrow)]
    after: Vec<ColumnIn<'a>>,
}

#[derive(Deserialize)]
struct ColumnIn<'a>(
    u8,
    #[serde(borrow, with = "serde_bytes")] &'a [u8],
    #[serde(borrow, with = "serde_bytes")] &'a [u8],
    #[serde(borrow, with = "serde_bytes")] &'a [u8],
);

/// Decodes a version 2 record's payload; `Err` says why it does not decode.
pub(crate) fn decode(payload: &[u8]) -> Result<Record, String> {
    let record: RecordIn<'_> = postcard::from_bytes(payload).map_err(|e| e.to_string())?;
    Ok(match record {
        RecordIn::Schema(s) => Record::Schema(s),
        RecordIn::Ddl(d) => Record::Ddl(d),
        RecordIn::Resumed { resolved_ts } => Record::Resumed { resolved_ts },
        RecordIn::Rows { txns, tables } => Record::Rows {
            txns,
            tables: tables
                .into_iter()
                .map(TableRowsIn::owned)
                .collect::<Result<_, _>>()?,
        },
    })
}

impl TableRowsIn<'_> {
    fn owned(self) -> Result<TableRows, String> {
        let table = self.table_id;
        let n = self.ops.len();
        let mut txn = Vec::with_capacity(n);
        for (end, index) in self.txn {
            let end = end as usize;
            if end < txn.len() || end > n {
                return Err(format!(
                    "table {table}: a transaction's rows end at {end}, after row {} of {n}",
                    txn.len()
                ));
            }
            txn.resize(end, index);
        }
        if txn.len() != n {
            return Err(format!(
                "table {table}: transactions cover {} of its {n} rows",
                txn.len()
            ));
        }
        let image = |columns: Vec<ColumnIn<'_>>| {
            columns
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    c.owned()
                        .map_err(|e| format!("table {table}: column {i}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(TableRows {
            table_id: table,
            schema_version: self.schema_version,
            ops: self.ops.to_vec(),
            txn,
            seq: from_le(self.seq, u32::from_le_bytes)
                .map_err(|e| format!("table {table}: row seq: {e}"))?,
            flags: self.flags.to_vec(),
            before: image(self.before)?,
            after: image(self.after)?,
        })
    }
}

impl ColumnIn<'_> {
    fn owned(self) -> Result<ColumnData, String> {
        let ColumnIn(kind, nulls, fixed, data) = self;
        if kind != KIND_BYTES && !data.is_empty() {
            return Err(format!(
                "a column of kind {kind} has {} bytes of data",
                data.len()
            ));
        }
        let values = match kind {
            KIND_I64 => ColumnValues::Int64(from_le(fixed, i64::from_le_bytes)?),
            KIND_U64 => ColumnValues::Uint64(from_le(fixed, u64::from_le_bytes)?),
            KIND_F64 => ColumnValues::Float64(from_le(fixed, f64::from_le_bytes)?),
            KIND_BYTES => ColumnValues::Bytes(ByteValues {
                offsets: from_le(fixed, u32::from_le_bytes)?,
                data: data.to_vec(),
            }),
            other => return Err(format!("unknown column kind {other}")),
        };
        Ok(ColumnData {
            values,
            nulls: nulls.to_vec(),
        })
    }
}

/// Values of `N` little-endian bytes each.
fn from_le<T, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Result<Vec<T>, String> {
    if !bytes.len().is_multiple_of(N) {
        return Err(format!("{} bytes of values of {N} bytes each", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(N)
        .map(|c| from(c.try_into().expect("chunks of N bytes")))
        .collect())
}
