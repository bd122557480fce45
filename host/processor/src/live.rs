//! The live sink and the live filters, each with what may wrap it: a
//! candidate running in shadow beside it (the `shadow` module) and a trial
//! after a swap, with the version it replaced to roll back to (the
//! `probation` module). The writer calls them as it would call the plugin;
//! the wrappers see every call and do their part.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::{
    Batch, CheckpointTs, CommitTs, DdlEvent, Filter, PluginError, Sink, TableSchema,
};

use crate::config::Retry;
use crate::error::PipelineError;
use crate::probation::{RolledBack, Trial};
use crate::shadow::{FilterShadow, ShadowLimits, ShadowStatus, SinkShadow};
use crate::swap::Probation;

/// The sink the rows go to.
pub(crate) struct LiveSink<K> {
    sink: K,
    shadow: Option<SinkShadow>,
    trial: Option<Trial<K>>,
}

impl<K: Sink + 'static> LiveSink<K> {
    pub(crate) fn new(sink: K) -> Self {
        Self {
            sink,
            shadow: None,
            trial: None,
        }
    }

    pub(crate) fn get(&self) -> &K {
        &self.sink
    }

    pub(crate) fn name(&self) -> &str {
        self.sink.name()
    }

    pub(crate) async fn open(&mut self) -> Result<(), PluginError> {
        self.sink.open().await
    }

    /// Writes `batch`; a candidate in shadow gets a copy first (it never holds
    /// the live sink back).
    pub(crate) async fn write(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        if let Some(shadow) = &mut self.shadow
            && shadow.write(schemas, batch).is_err()
        {
            self.shadow = None;
        }
        let started = Instant::now();
        let result = self.sink.write(schemas, batch).await;
        if let Some(shadow) = &self.shadow {
            shadow.live_took(started.elapsed());
        }
        result
    }

    /// Writes `batch` again after a failure (the shadow had it already).
    pub(crate) async fn rewrite(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        self.sink.write(schemas, batch).await
    }

    pub(crate) async fn flush(&mut self, ts: CommitTs) -> Result<(), PluginError> {
        self.sink.flush(ts).await
    }

    /// The flush up to `ts` was acknowledged: a candidate in shadow flushes
    /// too, and a trial counts it.
    pub(crate) fn flushed(&mut self, ts: CommitTs) {
        if let Some(shadow) = &mut self.shadow
            && shadow.flush(ts).is_err()
        {
            self.shadow = None;
        }
        if let Some(trial) = &mut self.trial {
            trial.flushed();
        }
    }

    pub(crate) async fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), PluginError> {
        self.sink.apply_ddl(ddl).await
    }

    pub(crate) fn checkpoint_saved(&mut self, ts: CheckpointTs) {
        self.sink.checkpoint_saved(ts);
    }

    /// Closes the sink (a candidate in shadow gets what was queued for it and
    /// stops first).
    pub(crate) async fn close(&mut self) -> Result<(), PluginError> {
        self.stop_shadow();
        self.sink.close().await
    }

    /// Gives back the idle sink's instance, unless a candidate runs in
    /// shadow beside it or it is on trial (both watch it run).
    pub(crate) async fn release_idle(&mut self) {
        if self.shadow.is_none() && self.trial.is_none() {
            self.sink.release_idle().await;
        }
    }

    /// Puts `sink` in the live one's place (the shadow, if any, stays);
    /// returns the one it replaced.
    pub(crate) fn replace(&mut self, sink: K) -> K {
        std::mem::replace(&mut self.sink, sink)
    }

    /// The live sink failed with `error`: `Ok(error)` to retry it as any
    /// failure is retried; or, when it was on trial and the trial does not
    /// tolerate this, the version it replaced is live again and the failed
    /// one comes back with the verdict to tell.
    pub(crate) fn failed(&mut self, error: PluginError) -> Result<PluginError, (K, RolledBack<K>)> {
        let Some(trial) = &mut self.trial else {
            return Ok(error);
        };
        if trial.tolerates(&error) {
            return Ok(error);
        }
        let (fallback, rolled) = self.trial.take().expect("checked").fail(error);
        Err((self.replace(fallback), rolled))
    }

    pub(crate) fn on_trial(&self) -> bool {
        self.trial.is_some()
    }

    /// The live sink is on trial, with `fallback` to roll back to.
    pub(crate) fn start_trial(&mut self, fallback: K, probation: Probation<K>) {
        self.trial = Some(Trial::new(fallback, probation));
    }

    /// Ends a trial whose time and flushes have both passed.
    pub(crate) fn judge(&mut self) {
        if let Some(trial) = self.trial.take() {
            match trial.judge() {
                Ok(flushes) => {
                    tracing::info!(
                        sink = self.sink.name(),
                        flushes,
                        "The sink passed its probation."
                    )
                }
                Err(trial) => self.trial = Some(trial),
            }
        }
    }

    pub(crate) fn start_shadow(
        &mut self,
        sink: K,
        limits: ShadowLimits,
        status: Arc<ShadowStatus>,
    ) {
        tracing::info!(candidate = sink.name(), "Shadow sink started.");
        self.shadow = Some(SinkShadow::start(sink, limits, status));
    }

    pub(crate) fn stop_shadow(&mut self) {
        if let Some(shadow) = self.shadow.take() {
            shadow.stop();
        }
    }
}

/// One filter of the chain.
pub(crate) struct LiveFilter<F> {
    filter: F,
    shadow: Option<FilterShadow>,
    trial: Option<Trial<F>>,
}

impl<F: Filter + 'static> LiveFilter<F> {
    pub(crate) fn new(filter: F) -> Self {
        Self {
            filter,
            shadow: None,
            trial: None,
        }
    }

    pub(crate) fn get(&self) -> &F {
        &self.filter
    }

    pub(crate) async fn open(&mut self) -> Result<(), PipelineError> {
        let filter = &mut self.filter;
        filter.open().await.map_err(|error| PipelineError::Filter {
            name: filter.name().to_string(),
            error,
        })
    }

    /// Runs the filter on `batch`, retrying retryable failures (counted in
    /// `retries`); with a candidate in shadow, the candidate transforms a
    /// copy at the same time and the outputs are compared; on trial, a
    /// failure the trial does not tolerate puts the version it replaced back
    /// (at `checkpoint`), which transforms the batch.
    pub(crate) async fn transform(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
        retry: Retry,
        retries: &mut u64,
        checkpoint: CheckpointTs,
    ) -> Result<(), PipelineError> {
        let mut attempt = 0;
        // The input, kept for a candidate in shadow, or for the old version
        // if this one is on trial and fails.
        let shadowed = self.shadow.is_some();
        let mut input = (self.trial.is_some() || shadowed).then(|| batch.clone());
        let rows_in = batch.row_count();
        loop {
            let started = Instant::now();
            let error = match self.filter.transform(schemas, batch).await {
                Ok(()) => {
                    let live_took = started.elapsed();
                    if let (Some(input), Some(shadow)) =
                        (input.take().filter(|_| shadowed), &mut self.shadow)
                        && shadow.compare(schemas, input, batch, live_took).is_err()
                    {
                        self.shadow = None;
                    }
                    return Ok(());
                }
                Err(error) => error,
            };
            if let Some(input) = &input {
                // A failed call leaves the input as it was; if it did not,
                // the copy goes back.
                if batch.row_count() != rows_in {
                    *batch = input.clone();
                }
            } else if batch.row_count() != rows_in {
                // The input did not come back (the plugin's thread ended):
                // fail, so that the run starts again from the checkpoint
                // instead of going on without these rows.
                return Err(self.error(error));
            }
            if let Some(trial) = &mut self.trial
                && !trial.tolerates(&error)
            {
                let (fallback, rolled) = self.trial.take().expect("checked").fail(error);
                let failed = std::mem::replace(&mut self.filter, fallback);
                tracing::warn!(failed = failed.name(), filter = self.filter.name(), error = %rolled.error(), %checkpoint, "The filter on probation failed; rolling back to the one it replaced.");
                self.open().await?;
                rolled.tell(failed, checkpoint, 0);
                attempt = 0;
                continue;
            }
            if !error.is_retryable() || attempt >= retry.max_retries {
                return Err(self.error(error));
            }
            attempt += 1;
            *retries += 1;
            let wait = retry.backoff(attempt);
            tracing::warn!(filter = self.filter.name(), %error, attempt, ?wait, "Filter failed; retrying.");
            tokio::time::sleep(wait).await;
        }
    }

    fn error(&self, error: PluginError) -> PipelineError {
        PipelineError::Filter {
            name: self.filter.name().to_string(),
            error,
        }
    }

    /// A flush was acknowledged: a trial counts it.
    pub(crate) fn flushed(&mut self) {
        if let Some(trial) = &mut self.trial {
            trial.flushed();
        }
    }

    /// Gives back the idle filter's instance, unless a candidate runs in
    /// shadow beside it or it is on trial.
    pub(crate) async fn release_idle(&mut self) {
        if self.shadow.is_none() && self.trial.is_none() {
            self.filter.release_idle().await;
        }
    }

    /// Puts `filter` in the live one's place; returns the one it replaced.
    pub(crate) fn replace(&mut self, filter: F) -> F {
        std::mem::replace(&mut self.filter, filter)
    }

    pub(crate) fn on_trial(&self) -> bool {
        self.trial.is_some()
    }

    /// The live filter is on trial, with `fallback` to roll back to.
    pub(crate) fn start_trial(&mut self, fallback: F, probation: Probation<F>) {
        self.trial = Some(Trial::new(fallback, probation));
    }

    /// Ends a trial whose time and flushes have both passed.
    pub(crate) fn judge(&mut self) {
        if let Some(trial) = self.trial.take() {
            match trial.judge() {
                Ok(flushes) => tracing::info!(
                    filter = self.filter.name(),
                    flushes,
                    "The filter passed its probation."
                ),
                Err(trial) => self.trial = Some(trial),
            }
        }
    }

    pub(crate) fn start_shadow(
        &mut self,
        index: usize,
        filter: F,
        limits: ShadowLimits,
        status: Arc<ShadowStatus>,
    ) {
        tracing::info!(candidate = filter.name(), index, "Shadow filter started.");
        self.shadow = Some(FilterShadow::start(filter, limits, status));
    }

    pub(crate) fn stop_shadow(&mut self) {
        if let Some(shadow) = self.shadow.take() {
            shadow.stop();
        }
    }
}
