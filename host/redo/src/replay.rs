//! Records turned back into what a sink takes.

use std::sync::Arc;

use sluice_core::{TableBatch, TableSchema};

use crate::format::{TableRows, TxnMark};
use crate::log::Schemas;

/// The rows of one table of a rows record as a batch (commit ts and
/// transaction ids from the record's transactions), checked against its
/// schema: a record that passed its CRC but does not fit is refused, never
/// handed on.
pub fn table_batch(
    rows: TableRows,
    txns: &[TxnMark],
    schemas: &Schemas,
) -> Result<(Arc<TableSchema>, TableBatch), String> {
    let schema = schemas
        .get(rows.table_id, rows.schema_version)
        .ok_or_else(|| {
            format!(
                "rows of table {} version {} come before its schema",
                rows.table_id, rows.schema_version
            )
        })?
        .clone();
    let n = rows.ops.len();
    if rows.txn.len() != n || rows.seq.len() != n || rows.flags.len() > n {
        return Err(format!(
            "table {}: {n} ops but {} transaction indexes, {} row seq and {} flags",
            rows.table_id,
            rows.txn.len(),
            rows.seq.len(),
            rows.flags.len()
        ));
    }
    let mut commit_ts = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for &i in &rows.txn {
        let t = txns.get(i as usize).ok_or_else(|| {
            format!(
                "table {}: a row of transaction {i}, the record has {}",
                rows.table_id,
                txns.len()
            )
        })?;
        commit_ts.push(t.commit_ts);
        ids.push(t.id);
    }
    let mut flags = rows.flags;
    flags.resize(n, 0);
    let batch = TableBatch {
        table_id: rows.table_id,
        schema_version: rows.schema_version,
        ops: rows.ops,
        commit_ts,
        txn: ids,
        flags,
        seq: rows.seq,
        before: rows.before,
        after: rows.after,
    };
    batch.validate(&schema).map_err(|e| e.to_string())?;
    Ok((schema, batch))
}
