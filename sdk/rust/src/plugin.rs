//! The traits a plugin implements, and the glue that runs them (shared by the
//! WebAssembly exports and the native test harness, so both run the same code).

use serde::de::DeserializeOwned;

use crate::types::{Batch, DdlEvent, Error, TableBatch};
use crate::view::{BatchView, Schemas};

/// A sink: delivers row changes downstream.
///
/// The host calls `open` once per instance, then `write` with batches, `flush(ts)`
/// when it wants every row with commit ts <= `ts` durable, `apply_ddl` between
/// flushes, and `close` at the end. Returning from `flush` is the acknowledgement.
pub trait Sink: Sized + 'static {
    /// The plugin's configuration, deserialized from the changefeed's sink options.
    type Config: DeserializeOwned;

    /// Check a configuration without side effects (no I/O). The default accepts
    /// anything that deserializes.
    fn validate(config: &Self::Config) -> Result<(), Error> {
        let _ = config;
        Ok(())
    }

    /// Start an instance.
    fn open(config: Self::Config) -> Result<Self, Error>;

    /// Accept a batch; it need not be durable before `flush`.
    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error>;

    /// Make every row with commit ts <= `ts` durable, then return.
    fn flush(&mut self, ts: u64) -> Result<(), Error>;

    /// Apply a schema change (every row below its commit ts was flushed). Default: ignore.
    fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        let _ = ddl;
        Ok(())
    }

    /// Release resources. Default: nothing.
    fn close(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// A filter: transforms batches between the source and the sink.
pub trait Filter: Sized + 'static {
    /// The plugin's configuration, deserialized from the filter's options.
    type Config: DeserializeOwned;

    /// Check a configuration without side effects (no I/O).
    fn validate(config: &Self::Config) -> Result<(), Error> {
        let _ = config;
        Ok(())
    }

    /// Start an instance.
    fn open(config: Self::Config) -> Result<Self, Error>;

    /// Transform the table batches of one batch. `schemas` resolves every table
    /// batch's schema. Return the batches to pass on (drop a table by leaving it out,
    /// drop rows with [`TableBatch::select`], rewrite values in place).
    fn transform(
        &mut self,
        schemas: &Schemas,
        tables: Vec<TableBatch>,
    ) -> Result<Vec<TableBatch>, Error>;
}

/// Parse a JSON configuration into `C`, as a `config` error on failure.
pub fn parse_config<C: DeserializeOwned>(config: &str) -> Result<C, Error> {
    let text = if config.trim().is_empty() {
        "{}"
    } else {
        config
    };
    serde_json::from_str(text).map_err(|e| Error::config(format!("invalid plugin config: {e}")))
}

/// A running sink with the schemas it has been sent.
pub struct SinkInstance<S: Sink> {
    sink: S,
    schemas: Schemas,
}

impl<S: Sink> SinkInstance<S> {
    /// `validate-config`.
    pub fn validate(config: &str) -> Result<(), Error> {
        S::validate(&parse_config::<S::Config>(config)?)
    }

    /// `open`.
    pub fn open(config: &str) -> Result<Self, Error> {
        let config = parse_config::<S::Config>(config)?;
        S::validate(&config)?;
        Ok(Self {
            sink: S::open(config)?,
            schemas: Schemas::new(),
        })
    }

    /// `write`.
    pub fn write(&mut self, batch: Batch) -> Result<(), Error> {
        for schema in batch.schemas {
            self.schemas.insert(schema);
        }
        if let Some(t) = batch.tables.iter().find(|t| self.schemas.of(t).is_none()) {
            return Err(Error::fatal(format!(
                "batch refers to table {} version {} whose schema was never sent",
                t.table_id, t.schema_version
            )));
        }
        self.sink
            .write(BatchView::new(&self.schemas, &batch.tables))
    }

    /// `flush`.
    pub fn flush(&mut self, ts: u64) -> Result<(), Error> {
        self.sink.flush(ts)
    }

    /// `apply-ddl`.
    pub fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        self.sink.apply_ddl(ddl)
    }

    /// `close`.
    pub fn close(&mut self) -> Result<(), Error> {
        self.sink.close()
    }

    /// The plugin value itself (for assertions in native tests).
    pub fn inner(&self) -> &S {
        &self.sink
    }
}

/// A running filter with the schemas it has been sent.
pub struct FilterInstance<F: Filter> {
    filter: F,
    schemas: Schemas,
}

impl<F: Filter> FilterInstance<F> {
    /// `validate-config`.
    pub fn validate(config: &str) -> Result<(), Error> {
        F::validate(&parse_config::<F::Config>(config)?)
    }

    /// `open`.
    pub fn open(config: &str) -> Result<Self, Error> {
        let config = parse_config::<F::Config>(config)?;
        F::validate(&config)?;
        Ok(Self {
            filter: F::open(config)?,
            schemas: Schemas::new(),
        })
    }

    /// `transform`.
    pub fn transform(&mut self, batch: Batch) -> Result<Batch, Error> {
        for schema in batch.schemas {
            self.schemas.insert(schema);
        }
        if let Some(t) = batch.tables.iter().find(|t| self.schemas.of(t).is_none()) {
            return Err(Error::fatal(format!(
                "batch refers to table {} version {} whose schema was never sent",
                t.table_id, t.schema_version
            )));
        }
        let tables = self.filter.transform(&self.schemas, batch.tables)?;
        Ok(Batch {
            schemas: Vec::new(),
            tables,
        })
    }

    /// The plugin value itself (for assertions in native tests).
    pub fn inner(&self) -> &F {
        &self.filter
    }
}
