//! Moves between `sluice-core` batches and the generated binding types. Every
//! conversion moves the vectors; nothing is copied.

use sluice_core as core;

use crate::bindings::types as wit;

pub(crate) fn schema(s: &core::TableSchema) -> wit::TableSchema {
    wit::TableSchema {
        table_id: s.table_id,
        version: s.version,
        schema_name: s.schema_name.clone(),
        table_name: s.table_name.clone(),
        columns: s
            .columns
            .iter()
            .map(|c| wit::Column {
                name: c.name.clone(),
                ty: column_type(c.ty),
                sql_type: c.sql_type.clone(),
                nullable: c.nullable,
                key: c.key,
            })
            .collect(),
    }
}

fn column_type(t: core::ColumnType) -> wit::ColumnType {
    use core::ColumnType as C;
    match t {
        C::Int => wit::ColumnType::Int,
        C::Uint => wit::ColumnType::Uint,
        C::Float => wit::ColumnType::Float,
        C::Decimal => wit::ColumnType::Decimal,
        C::Text => wit::ColumnType::Text,
        C::Blob => wit::ColumnType::Blob,
        C::Datetime => wit::ColumnType::Datetime,
        C::Date => wit::ColumnType::Date,
        C::Json => wit::ColumnType::Json,
        C::Boolean => wit::ColumnType::Boolean,
    }
}

fn column_to_wit(c: core::ColumnData) -> wit::ColumnData {
    wit::ColumnData {
        values: match c.values {
            core::ColumnValues::Int64(v) => wit::ColumnValues::Int64(v),
            core::ColumnValues::Uint64(v) => wit::ColumnValues::Uint64(v),
            core::ColumnValues::Float64(v) => wit::ColumnValues::Float64(v),
            core::ColumnValues::Bytes(mut b) => {
                // The host leaves the offsets of a column without values empty
                // (nothing allocated); the wire always has the leading 0.
                if b.offsets.is_empty() {
                    b.offsets.push(0);
                }
                wit::ColumnValues::Bytes(wit::ByteValues {
                    offsets: b.offsets,
                    data: b.data,
                })
            }
        },
        nulls: c.nulls,
    }
}

fn column_from_wit(c: wit::ColumnData) -> core::ColumnData {
    core::ColumnData {
        values: match c.values {
            wit::ColumnValues::Int64(v) => core::ColumnValues::Int64(v),
            wit::ColumnValues::Uint64(v) => core::ColumnValues::Uint64(v),
            wit::ColumnValues::Float64(v) => core::ColumnValues::Float64(v),
            wit::ColumnValues::Bytes(b) => core::ColumnValues::Bytes(core::ByteValues {
                offsets: b.offsets,
                data: b.data,
            }),
        },
        nulls: c.nulls,
    }
}

pub(crate) fn table_to_wit(t: core::TableBatch) -> wit::TableBatch {
    wit::TableBatch {
        table_id: t.table_id,
        schema_version: t.schema_version,
        ops: t.ops,
        commit_ts: t.commit_ts,
        txn_id: t.txn,
        row_flags: t.flags,
        row_seq: t.seq,
        before: t.before.into_iter().map(column_to_wit).collect(),
        after: t.after.into_iter().map(column_to_wit).collect(),
    }
}

pub(crate) fn table_from_wit(t: wit::TableBatch) -> core::TableBatch {
    core::TableBatch {
        table_id: t.table_id,
        schema_version: t.schema_version,
        ops: t.ops,
        commit_ts: t.commit_ts,
        txn: t.txn_id,
        flags: t.row_flags,
        seq: t.row_seq,
        before: t.before.into_iter().map(column_from_wit).collect(),
        after: t.after.into_iter().map(column_from_wit).collect(),
    }
}

pub(crate) fn ddl(d: &core::DdlEvent) -> wit::DdlEvent {
    wit::DdlEvent {
        commit_ts: d.commit_ts.get(),
        txn_id: d.txn_id,
        kind: d.kind.clone(),
        schema_name: d.schema_name.clone(),
        table_name: d.table_name.clone(),
        tables: d
            .tables
            .iter()
            .map(|(schema_name, table_name)| wit::QualifiedName {
                schema_name: schema_name.clone(),
                table_name: table_name.clone(),
            })
            .collect(),
        default_schema: d.default_schema.clone(),
        session: d.session.clone(),
        query: d.query.clone(),
    }
}

/// A plugin's error, its message bounded and escaped before the host logs,
/// stores or returns it.
pub(crate) fn plugin_error(e: wit::Error) -> core::PluginError {
    let bound = |m: String| core::bounded_text(&m, core::MAX_MESSAGE_BYTES);
    match e {
        wit::Error::Config(m) => core::PluginError::Config(bound(m)),
        wit::Error::Retryable(m) => core::PluginError::Retryable(bound(m)),
        wit::Error::Fatal(m) => core::PluginError::Fatal(bound(m)),
    }
}
