//! Runs a changefeed's continuous validator (`[validator]`) beside its
//! pipeline: acknowledged batches go to it through a bounded queue that is
//! never waited on, and what it finds is written into the run's task position
//! (where `changefeed query` and the metrics read it) whenever it changes.

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

/// The validator's tasks; dropping it stops them.
pub(crate) struct Running {
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// How the validator of `config` runs; none when `[validator]` is off.
pub(crate) fn settings(config: &ChangefeedConfig) -> Option<ValidatorSettings> {
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

/// Starts the validator: returns the listener for the pipeline and its
/// running tasks.
pub(crate) fn start(
    settings: ValidatorSettings,
    reporter: Reporter,
) -> (Box<dyn AckListener>, Running) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let skipped = Arc::new(AtomicU64::new(0));
    let feed = Feed {
        tx,
        skipped: skipped.clone(),
    };
    let (report_tx, mut report_rx) = watch::channel(ValidatorReport::default());
    let check = tokio::spawn(Validator::new(settings).run(rx, skipped, report_tx));
    let publish = tokio::spawn(async move {
        while report_rx.changed().await.is_ok() {
            let report = report_rx.borrow_and_update().clone();
            if let Err(e) = reporter.report_validator(report).await {
                tracing::debug!(error = %e, "The validator's report was not saved.");
            }
        }
    });
    (
        Box::new(feed),
        Running {
            tasks: [check, publish],
        },
    )
}
