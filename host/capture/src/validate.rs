//! Runs a changefeed's continuous validator (`[validator]`) beside its
//! pipeline: acknowledged batches go to it through a bounded queue that is
//! never waited on. In `sluice server` what it finds is written into the
//! run's task position (where `changefeed query` and the metrics read it)
//! whenever it changes; `sluice run` prints it with its summary.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_config::{ChangefeedConfig, ValidatorMode};
use sluice_core::{Batch, TableSchema, ValidatorReport};
use sluice_diff::validator::{Acked, Validator, ValidatorSettings};
use sluice_processor::AckListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::progress::Reporter;

/// Acknowledged batches the validator may be behind by before new ones are
/// skipped (and counted).
const QUEUE: usize = 64;

/// Hands acknowledged batches to the validator without waiting.
struct Feed {
    tx: mpsc::Sender<Acked>,
    skipped: Arc<AtomicU64>,
}

impl AckListener for Feed {
    fn acked(&mut self, schemas: &[Arc<TableSchema>], batch: Batch) {
        let rows = batch.row_count() as u64;
        if self.tx.try_send((schemas.to_vec(), batch)).is_err() {
            self.skipped.fetch_add(rows, Ordering::Relaxed);
        }
    }
}

/// A running validator; dropping it stops it.
pub struct Running {
    check: JoinHandle<()>,
    /// Its report, updated after each round of checks.
    pub reports: watch::Receiver<ValidatorReport>,
}

impl Running {
    /// Waits until the validator ends (after its listener is dropped and
    /// nothing is pending) or `limit` passes; its last report.
    pub async fn finish(mut self, limit: Duration) -> ValidatorReport {
        let _ = tokio::time::timeout(limit, &mut self.check).await;
        self.reports.borrow().clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.check.abort();
    }
}

/// How the validator of `config` runs; none when `[validator]` is off.
pub fn settings<P>(config: &ChangefeedConfig<P>) -> Option<ValidatorSettings> {
    let v = &config.validator;
    if v.mode == ValidatorMode::None {
        return None;
    }
    let sink = &config.sink.config;
    Some(ValidatorSettings {
        full: v.mode == ValidatorMode::Full,
        cache: v.event_cache_count,
        retries: v.retry_count,
        interval: Duration::from_millis(v.interval_ms),
        dsn: v.database(&config.sink)?.to_string(),
        target_schema: sink
            .get("target-schema")
            .and_then(|s| s.as_str())
            .map(String::from),
        route: sink
            .get("route")
            .and_then(|r| r.as_object())
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default(),
    })
}

/// Starts the validator: returns the listener for the pipeline and the
/// running validator.
pub fn start(settings: ValidatorSettings) -> (Box<dyn AckListener>, Running) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let skipped = Arc::new(AtomicU64::new(0));
    let feed = Feed {
        tx,
        skipped: skipped.clone(),
    };
    let (report_tx, reports) = watch::channel(ValidatorReport::default());
    let check = tokio::spawn(Validator::new(settings).run(rx, skipped, report_tx));
    (Box::new(feed), Running { check, reports })
}

/// The task writing a validator's reports; dropping it stops it.
pub(crate) struct Publishing(JoinHandle<()>);

impl Drop for Publishing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes each report of `running` into the run's task position (where
/// `changefeed query` and the metrics read it) until it ends.
pub(crate) fn publish(running: &Running, reporter: Reporter) -> Publishing {
    let mut reports = running.reports.clone();
    Publishing(tokio::spawn(async move {
        while reports.changed().await.is_ok() {
            let report = reports.borrow_and_update().clone();
            if let Err(e) = reporter.report_validator(report).await {
                tracing::debug!(error = %e, "The validator's report was not saved.");
            }
        }
    }))
}
