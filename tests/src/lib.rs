//! Shared helpers for the integration tests and benchmarks: where the built
//! plugins are, sample batches from the data generator, and the conversion from
//! host batches to SDK batches (to run plugin logic natively on the same data).

pub mod bench;
pub mod etcd;
pub mod mariadb;
pub mod postgres;
pub mod s3;

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

use std::path::PathBuf;
use std::sync::Arc;

use sluice_core as core;
use sluice_sdk as sdk;
use sluice_source::{DatagenConfig, DatagenSource};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// Path of a built plugin (`target/plugins/<name>.wasm`) or test guest
/// (`target/test-plugins/<name>.wasm`).
///
/// # Panics
/// When it was not built, with the command that builds it.
pub fn plugin_path(name: &str) -> PathBuf {
    let root = workspace_root().join("target");
    for dir in ["plugins", "test-plugins"] {
        let p = root.join(dir).join(format!("{name}.wasm"));
        if p.exists() {
            return p;
        }
    }
    panic!(
        "plugin {name} is not built: run `cargo xtask build-plugins` first (the README test command does)"
    );
}

/// Transactions from the data generator with `seed`, `rows` rows in all.
pub fn transactions(seed: u64, rows: u64) -> Vec<core::Transaction> {
    let mut g = DatagenSource::new(DatagenConfig {
        seed,
        total_rows: rows,
        ..Default::default()
    })
    .expect("valid datagen config");
    std::iter::from_fn(|| g.next_transaction()).collect()
}

/// One host batch with every row of `txns`.
pub fn batch_of(txns: &[core::Transaction]) -> (Vec<Arc<core::TableSchema>>, core::Batch) {
    let mut b = core::BatchBuilder::new();
    for t in txns {
        b.push_transaction(t, 0);
    }
    b.finish()
}

/// The SDK's view of a host schema.
pub fn sdk_schema(s: &core::TableSchema) -> sdk::TableSchema {
    use core::ColumnType as C;
    sdk::TableSchema {
        table_id: s.table_id,
        version: s.version,
        schema_name: s.schema_name.clone(),
        table_name: s.table_name.clone(),
        columns: s
            .columns
            .iter()
            .map(|c| sdk::Column {
                name: c.name.clone(),
                ty: match c.ty {
                    C::Int => sdk::ColumnType::Int,
                    C::Uint => sdk::ColumnType::Uint,
                    C::Float => sdk::ColumnType::Float,
                    C::Decimal => sdk::ColumnType::Decimal,
                    C::Text => sdk::ColumnType::Text,
                    C::Blob => sdk::ColumnType::Blob,
                    C::Datetime => sdk::ColumnType::Datetime,
                    C::Date => sdk::ColumnType::Date,
                    C::Json => sdk::ColumnType::Json,
                    C::Boolean => sdk::ColumnType::Boolean,
                },
                sql_type: c.sql_type.clone(),
                nullable: c.nullable,
                key: c.key,
            })
            .collect(),
    }
}

/// The SDK's copy of a host table batch.
pub fn sdk_table(t: &core::TableBatch) -> sdk::TableBatch {
    let col = |c: &core::ColumnData| sdk::ColumnData {
        values: match &c.values {
            core::ColumnValues::Int64(v) => sdk::ColumnValues::Int64(v.clone()),
            core::ColumnValues::Uint64(v) => sdk::ColumnValues::Uint64(v.clone()),
            core::ColumnValues::Float64(v) => sdk::ColumnValues::Float64(v.clone()),
            core::ColumnValues::Bytes(b) => sdk::ColumnValues::Bytes(sdk::ByteValues {
                // The host leaves the offsets of a column without values empty;
                // the wire always has the leading 0.
                offsets: if b.offsets.is_empty() {
                    vec![0]
                } else {
                    b.offsets.clone()
                },
                data: b.data.clone(),
            }),
        },
        nulls: c.nulls.clone(),
    };
    sdk::TableBatch {
        table_id: t.table_id,
        schema_version: t.schema_version,
        ops: t.ops.clone(),
        commit_ts: t.commit_ts.clone(),
        txn_id: t.txn.clone(),
        row_flags: t.flags.clone(),
        row_seq: t.seq.clone(),
        before: t.before.iter().map(col).collect(),
        after: t.after.iter().map(col).collect(),
    }
}

/// The SDK's typed value for a host value in a column of type `ty`.
pub fn sdk_value<'a>(v: &'a core::Value, ty: core::ColumnType) -> sdk::Value<'a> {
    use core::ColumnType as C;
    use core::Value as V;
    match (v, ty) {
        (V::Null, _) => sdk::Value::Null,
        (V::Int(x), C::Datetime) => sdk::Value::DateTime(*x),
        (V::Int(x), C::Date) => sdk::Value::Date(*x),
        (V::Int(x), C::Boolean) => sdk::Value::Bool(*x != 0),
        (V::Int(x), _) => sdk::Value::Int(*x),
        (V::UInt(x), _) => sdk::Value::UInt(*x),
        (V::Float(x), _) => sdk::Value::Float(*x),
        (V::Bytes(b), C::Blob) => sdk::Value::Blob(b),
        (V::Bytes(b), C::Decimal) => sdk::Value::Decimal(std::str::from_utf8(b).expect("utf-8")),
        (V::Bytes(b), C::Json) => sdk::Value::Json(std::str::from_utf8(b).expect("utf-8")),
        (V::Bytes(b), _) => sdk::Value::Text(std::str::from_utf8(b).expect("utf-8")),
    }
}

/// Canonical text of a host value (what sink-file writes), `None` for NULL.
pub fn text_of(v: &core::Value, ty: core::ColumnType) -> Option<String> {
    sdk_value(v, ty).to_text()
}
