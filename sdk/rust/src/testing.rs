//! A native test harness: drive a plugin's logic with sample batches, no WebAssembly
//! needed. The harness runs the same glue ([`SinkInstance`], [`FilterInstance`]) the
//! exported component runs, and sends each schema once, as the host does.

use std::collections::HashSet;

use crate::plugin::{Filter, FilterInstance, Sink, SinkInstance};
use crate::types::{Batch, Column, ColumnType, DdlEvent, Error, Op, TableBatch, TableSchema};
use crate::view::{Image, TableView};

/// One image as canonical text per column (`None` for NULL).
pub type ImageText = Vec<Option<String>>;

/// Every row of `batch` as (op, commit ts, before, after), values as canonical text
/// ([`crate::Value::write_text`]): easy to compare with `assert_eq!` in tests.
pub fn rows_as_text(
    schema: &TableSchema,
    batch: &TableBatch,
) -> Vec<(Op, u64, Option<ImageText>, Option<ImageText>)> {
    let text = |image: Image<'_>| image.iter().map(|(_, v)| v.to_text()).collect();
    TableView::new(schema, batch)
        .rows()
        .map(|r| {
            (
                r.op(),
                r.commit_ts(),
                r.before().map(text),
                r.after().map(text),
            )
        })
        .collect()
}

/// Build a schema for tests: `columns` are (name, type, is key).
pub fn schema(
    table_id: u32,
    schema_name: &str,
    table_name: &str,
    columns: &[(&str, ColumnType, bool)],
) -> TableSchema {
    TableSchema {
        table_id,
        version: 1,
        schema_name: schema_name.to_string(),
        table_name: table_name.to_string(),
        columns: columns
            .iter()
            .map(|(name, ty, key)| Column {
                name: name.to_string(),
                ty: *ty,
                sql_type: String::new(),
                nullable: !key,
                key: *key,
            })
            .collect(),
    }
}

#[derive(Default)]
struct SchemaTracker {
    sent: HashSet<(u32, u32)>,
}

impl SchemaTracker {
    fn batch(&mut self, schemas: &[&TableSchema], tables: Vec<TableBatch>) -> Batch {
        let schemas = schemas
            .iter()
            .filter(|s| self.sent.insert((s.table_id, s.version)))
            .map(|s| (*s).clone())
            .collect();
        Batch { schemas, tables }
    }
}

/// Drives a [`Sink`] natively.
pub struct SinkHarness<S: Sink> {
    instance: SinkInstance<S>,
    tracker: SchemaTracker,
}

impl<S: Sink> SinkHarness<S> {
    /// Validate and open the sink with a JSON configuration.
    pub fn open(config: &str) -> Result<Self, Error> {
        SinkInstance::<S>::validate(config)?;
        Ok(Self {
            instance: SinkInstance::open(config)?,
            tracker: SchemaTracker::default(),
        })
    }

    /// Write table batches; schemas the sink has not seen yet are sent along.
    pub fn write(
        &mut self,
        schemas: &[&TableSchema],
        tables: Vec<TableBatch>,
    ) -> Result<(), Error> {
        let batch = self.tracker.batch(schemas, tables);
        self.instance.write(batch)
    }

    /// Write a batch as is.
    pub fn write_batch(&mut self, batch: Batch) -> Result<(), Error> {
        self.instance.write(batch)
    }

    /// Flush up to `ts`.
    pub fn flush(&mut self, ts: u64) -> Result<(), Error> {
        self.instance.flush(ts)
    }

    /// Apply a DDL event.
    pub fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        self.instance.apply_ddl(ddl)
    }

    /// Close the sink.
    pub fn close(&mut self) -> Result<(), Error> {
        self.instance.close()
    }

    /// The sink itself.
    pub fn sink(&self) -> &S {
        self.instance.inner()
    }
}

/// Drives a [`Filter`] natively.
pub struct FilterHarness<F: Filter> {
    instance: FilterInstance<F>,
    tracker: SchemaTracker,
}

impl<F: Filter> FilterHarness<F> {
    /// Validate and open the filter with a JSON configuration.
    pub fn open(config: &str) -> Result<Self, Error> {
        FilterInstance::<F>::validate(config)?;
        Ok(Self {
            instance: FilterInstance::open(config)?,
            tracker: SchemaTracker::default(),
        })
    }

    /// Transform table batches; schemas the filter has not seen yet are sent along.
    pub fn transform(
        &mut self,
        schemas: &[&TableSchema],
        tables: Vec<TableBatch>,
    ) -> Result<Vec<TableBatch>, Error> {
        let batch = self.tracker.batch(schemas, tables);
        Ok(self.instance.transform(batch)?.tables)
    }
}
