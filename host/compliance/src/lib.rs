//! The plugin compliance harness as a library: the behaviour every sink and
//! every filter must show (`docs/plugin-contract.md`), checked against a built
//! component through the real runtime, without a server. `sluice plugin test`
//! runs it; a plugin's own tests may call it too.
//!
//! Sinks: invalid options are a typed `config` error; an instance that failed
//! to open can be closed and a new one works; generated rows of every column
//! type are accepted in batches and flushed; a flush is safe to repeat; a DDL
//! event is applied between flushes; after a restart the same rows, flagged
//! replay, are accepted by a new instance. Filters: invalid options are a typed
//! `config` error; the same input gives the same output; the replay flag
//! survives the transform.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{
    Batch, BatchBuilder, CommitTs, DdlEvent, FLAG_REPLAY, Filter, PluginError, Sink, TableSchema,
    Transaction,
};
use sluice_runtime::{PluginComponent, PluginSettings, WasmFilter, WasmSink};
use sluice_source::{DatagenConfig, DatagenSource};

/// What to run the checks with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows generated (every table of the data generator: inserts, updates,
    /// deletes, every column type).
    pub rows: u64,
    /// Rows per batch (whole transactions, so a batch may hold a few more).
    pub batch_rows: u64,
    /// The generator's seed.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            rows: 10_000,
            batch_rows: 1_000,
            seed: 7,
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked, as a sentence.
    pub name: &'static str,
    /// `Ok(detail)` when it held, `Err(why)` when it did not.
    pub outcome: Result<String, String>,
}

/// Every check's outcome, and what the run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// In the order run; a failed check may skip those that depend on it.
    pub checks: Vec<Check>,
    /// Rows written (sinks) or transformed (filters), first pass.
    pub rows: u64,
    /// Wall time of the first pass over the rows (writes and flushes, or
    /// transforms).
    pub elapsed: Duration,
    /// The largest linear memory an instance reached, when known.
    pub peak_memory_bytes: Option<u64>,
}

impl Report {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.outcome.is_ok())
    }

    /// Rows per second of the first pass.
    pub fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn record(&mut self, name: &'static str, outcome: Result<String, String>) -> bool {
        let ok = outcome.is_ok();
        self.checks.push(Check { name, outcome });
        ok
    }
}

/// A batch with its schemas and the commit ts it ends at.
type Sample = (Vec<Arc<TableSchema>>, Batch, CommitTs);

/// The generated rows as batches of about `batch_rows` rows.
fn batches(options: &Options) -> Result<Vec<Sample>, String> {
    let mut g = DatagenSource::new(DatagenConfig {
        seed: options.seed,
        total_rows: options.rows,
        rate: 0,
        ..Default::default()
    })
    .map_err(|e| format!("the row generator refused its settings: {e}"))?;
    let txns: Vec<Transaction> = std::iter::from_fn(|| g.next_transaction()).collect();
    let mut out = Vec::new();
    let mut builder = BatchBuilder::new();
    let mut rows = 0u64;
    let mut last = CommitTs::new(0);
    for t in &txns {
        builder.push_transaction(t, 0);
        rows += t.row_count() as u64;
        last = t.commit_ts;
        if rows >= options.batch_rows.max(1) {
            let (schemas, batch) = std::mem::take(&mut builder).finish();
            out.push((schemas, batch, last));
            rows = 0;
        }
    }
    if rows > 0 {
        let (schemas, batch) = builder.finish();
        out.push((schemas, batch, last));
    }
    Ok(out)
}

/// `config` with an option no plugin has.
fn with_unknown_option(config: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(if config.trim().is_empty() {
        "{}"
    } else {
        config
    }) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("sluice-compliance-no-such-option".into(), 1.into());
            serde_json::Value::Object(map).to_string()
        }
        // Not an object: an array is no plugin's options either.
        _ => "[1, 2, 3]".to_string(),
    }
}

fn expect_config_error(result: Result<(), PluginError>) -> Result<String, String> {
    match result {
        Err(PluginError::Config(m)) => Ok(format!("refused: {m}")),
        Err(other) => Err(format!(
            "an unknown option must be a `config` error (the changefeed is rejected at once), got {other}"
        )),
        Ok(()) => Err(
            "an unknown option was accepted; refuse options you do not know (serde: deny_unknown_fields) \
             so a misspelt key is not silently ignored"
                .to_string(),
        ),
    }
}

/// A DDL event the checks deliver between flushes: a new table, so that no
/// table a sink holds changes shape.
fn ddl_event(commit_ts: CommitTs) -> DdlEvent {
    DdlEvent {
        commit_ts,
        txn_id: u64::MAX - 1,
        kind: "create table".into(),
        schema_name: "shop".into(),
        table_name: "sluice_compliance".into(),
        tables: vec![("shop".into(), "sluice_compliance".into())],
        default_schema: "shop".into(),
        session: Vec::new(),
        query: "CREATE TABLE shop.sluice_compliance (id BIGINT PRIMARY KEY)".into(),
    }
}

/// Run the sink checks. `settings` are the sink's (its configuration and
/// capabilities); each instance is made from them.
pub async fn check_sink(
    component: &PluginComponent,
    settings: &PluginSettings,
    options: &Options,
) -> Report {
    let mut report = Report::default();
    let new = || WasmSink::new(component.clone(), settings.clone()).map_err(|e| e.to_string());

    let mut bad = settings.clone();
    bad.config_json = with_unknown_option(&settings.config_json);
    let outcome = match WasmSink::new(component.clone(), bad.clone()) {
        Ok(mut s) => expect_config_error(s.validate_config().await),
        Err(e) => Err(e.to_string()),
    };
    report.record("an unknown option is a config error", outcome);

    let outcome = async {
        let mut failing = WasmSink::new(component.clone(), bad).map_err(|e| e.to_string())?;
        if failing.open().await.is_ok() {
            return Err("open accepted an unknown option".to_string());
        }
        failing
            .close()
            .await
            .map_err(|e| format!("close after a failed open: {e}"))?;
        let mut good = new()?;
        good.validate_config()
            .await
            .map_err(|e| format!("the given options: {e}"))?;
        good.open()
            .await
            .map_err(|e| format!("open with the given options: {e}"))?;
        good.close().await.map_err(|e| format!("close: {e}"))?;
        Ok("a failed open closes, and a new instance opens".to_string())
    }
    .await;
    if !report.record("an instance that failed is closed and replaced", outcome) {
        return report;
    }

    let batches = match batches(options) {
        Ok(b) => b,
        Err(e) => {
            report.record("generated rows", Err(e));
            return report;
        }
    };
    let rows: u64 = batches.iter().map(|(_, b, _)| b.row_count() as u64).sum();
    let last_ts = batches.last().map_or(CommitTs::new(1), |b| b.2);
    let mut sink = match new() {
        Ok(s) => s,
        Err(e) => {
            report.record("writes and flushes generated rows", Err(e));
            return report;
        }
    };
    let started = Instant::now();
    let outcome = async {
        sink.open().await.map_err(|e| format!("open: {e}"))?;
        for (schemas, batch, ts) in &batches {
            sink.write(schemas, &mut batch.clone())
                .await
                .map_err(|e| format!("write: {e}"))?;
            sink.flush(*ts).await.map_err(|e| format!("flush: {e}"))?;
        }
        Ok(format!("{rows} rows in {} batches", batches.len()))
    }
    .await;
    report.elapsed = started.elapsed();
    if outcome.is_ok() {
        report.rows = rows;
    }
    report.peak_memory_bytes = sink.instance_memory_bytes();
    if !report.record(
        "writes and flushes generated rows of every column type",
        outcome,
    ) {
        return report;
    }

    let outcome = sink
        .flush(last_ts)
        .await
        .map(|()| "accepted".to_string())
        .map_err(|e| format!("a repeated flush of the same ts failed: {e}"));
    report.record("a flush is safe to repeat", outcome);

    let ddl_ts = CommitTs::new(last_ts.get() + 1);
    let outcome = sink
        .apply_ddl(&ddl_event(ddl_ts))
        .await
        .map(|()| "CREATE TABLE applied".to_string())
        .map_err(|e| format!("apply-ddl: {e}"));
    report.record("a DDL event is applied between flushes", outcome);
    let outcome = sink
        .close()
        .await
        .map(|()| "closed".to_string())
        .map_err(|e| format!("close: {e}"));
    report.record("close", outcome);

    let outcome = async {
        let mut again = new()?;
        again.open().await.map_err(|e| format!("open: {e}"))?;
        for (schemas, batch, ts) in &batches {
            let mut replay = batch.clone();
            replay.mark_replay();
            again
                .write(schemas, &mut replay)
                .await
                .map_err(|e| format!("write of replayed rows: {e}"))?;
            again
                .flush(*ts)
                .await
                .map_err(|e| format!("flush of replayed rows: {e}"))?;
        }
        again.close().await.map_err(|e| format!("close: {e}"))?;
        Ok(format!("{rows} rows again, flagged replay"))
    }
    .await;
    report.record(
        "after a restart the same rows, flagged replay, are accepted",
        outcome,
    );
    if let Some(m) = report.peak_memory_bytes {
        report.peak_memory_bytes = Some(m.max(sink.instance_memory_bytes().unwrap_or(0)));
    }
    report
}

/// Run the filter checks.
pub async fn check_filter(
    component: &PluginComponent,
    settings: &PluginSettings,
    options: &Options,
) -> Report {
    let mut report = Report::default();
    let mut bad = settings.clone();
    bad.config_json = with_unknown_option(&settings.config_json);
    let outcome = match WasmFilter::new(component.clone(), bad) {
        Ok(mut f) => expect_config_error(f.validate_config().await),
        Err(e) => Err(e.to_string()),
    };
    report.record("an unknown option is a config error", outcome);

    let batches = match batches(options) {
        Ok(b) => b,
        Err(e) => {
            report.record("generated rows", Err(e));
            return report;
        }
    };
    let mut filter = match WasmFilter::new(component.clone(), settings.clone()) {
        Ok(f) => f,
        Err(e) => {
            report.record("transforms generated rows", Err(e.to_string()));
            return report;
        }
    };
    let started = Instant::now();
    let mut first = Vec::new();
    let outcome = async {
        filter
            .validate_config()
            .await
            .map_err(|e| format!("the given options: {e}"))?;
        filter.open().await.map_err(|e| format!("open: {e}"))?;
        let mut out_rows = 0;
        for (schemas, batch, _) in &batches {
            let mut b = batch.clone();
            filter
                .transform(schemas, &mut b)
                .await
                .map_err(|e| format!("transform: {e}"))?;
            out_rows += b.row_count();
            first.push(b);
        }
        Ok(format!("{out_rows} rows came out"))
    }
    .await;
    report.elapsed = started.elapsed();
    if outcome.is_ok() {
        report.rows = batches.iter().map(|(_, b, _)| b.row_count() as u64).sum();
    }
    if !report.record("transforms generated rows of every column type", outcome) {
        return report;
    }

    let outcome = async {
        for ((schemas, batch, _), before) in batches.iter().zip(&first) {
            let mut b = batch.clone();
            filter
                .transform(schemas, &mut b)
                .await
                .map_err(|e| format!("transform: {e}"))?;
            if b.tables != before.tables {
                return Err("the same batch gave other output the second time".to_string());
            }
        }
        Ok("same output".to_string())
    }
    .await;
    report.record("the same input gives the same output", outcome);

    let outcome = async {
        for ((schemas, batch, _), before) in batches.iter().zip(&first) {
            let mut b = batch.clone();
            b.mark_replay();
            filter
                .transform(schemas, &mut b)
                .await
                .map_err(|e| format!("transform: {e}"))?;
            if b.row_count() != before.row_count() {
                return Err("rows flagged replay came out in other numbers".to_string());
            }
            if let Some(t) = b
                .tables
                .iter()
                .find(|t| t.flags.iter().any(|f| f & FLAG_REPLAY == 0))
            {
                return Err(format!(
                    "a row of table {} lost its replay flag",
                    t.table_id
                ));
            }
        }
        Ok("kept".to_string())
    }
    .await;
    report.record("the replay flag survives the transform", outcome);
    report
}
