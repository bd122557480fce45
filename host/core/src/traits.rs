//! The host-side roles. Implementations live in other crates (`WasmSink` in
//! `sluice-runtime`, `DatagenSource` in `sluice-source`, ...).

use std::future::Future;
use std::sync::Arc;

use crate::batch::{Batch, TableSchema};
use crate::error::PluginError;
use crate::event::{Checkpoint, DdlEvent, Transaction, TransactionRun};
use crate::ts::{CommitTs, ResolvedTs};

/// A source cannot resume from a saved position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot resume from the saved source position: {0}")]
pub struct ResumeError(pub String);

/// What a source reports while it reads, shared with whoever watches it (the
/// pipeline publishes it with its progress).
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Upstream events read (binlog events, for a binlog source).
    pub events: std::sync::atomic::AtomicU64,
    /// Upstream time of the last event read, in ms since the Unix epoch (0:
    /// none yet); how far the reader is behind is now minus this.
    pub upstream_millis: std::sync::atomic::AtomicU64,
    /// Statements the source did not recognise and so did not replicate.
    pub skipped_statements: std::sync::atomic::AtomicU64,
    /// Where the last of them was and how it began.
    pub last_skipped: std::sync::Mutex<String>,
}

impl SourceStats {
    /// Records where the last statement the source left out was.
    pub fn set_last_skipped(&self, what: String) {
        if let Ok(mut last) = self.last_skipped.lock() {
            *last = what;
        }
    }

    /// Where the last statement the source left out was (empty: none).
    pub fn last_skipped(&self) -> String {
        self.last_skipped
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }
}

/// What a source yields.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    /// One whole upstream transaction.
    Transaction(Transaction),
    /// A schema change.
    Ddl(DdlEvent),
    /// No event with a commit ts <= this will follow.
    Resolved(ResolvedTs),
    /// The source has nothing more (a bounded workload, or the target ts reached).
    End,
}

/// An upstream reader.
pub trait Source: Send {
    /// The error a source fails with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The next event, in commit-ts order.
    fn next_event(&mut self) -> impl Future<Output = Result<SourceEvent, Self::Error>> + Send;

    /// Up to `max_transactions` transactions (and about `max_bytes` wire bytes)
    /// written straight into one run, when the source has them at hand: the
    /// next events of the stream, in commit-ts order, exactly as `next_event`
    /// would have yielded them one by one. `Ok(None)` means "ask `next_event`"
    /// (the default, for sources that do not write runs); a source returns it
    /// whenever its next event is not a transaction it can write into a run.
    fn next_run(
        &mut self,
        max_transactions: usize,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Option<TransactionRun>, Self::Error>> + Send {
        let _ = (max_transactions, max_bytes);
        async { Ok(None) }
    }

    /// Resume after `from`: events with commit ts <= `from.ts` are not produced
    /// again. With a position, the source continues from it (it was saved with
    /// that checkpoint ts); without one, it finds its place by commit ts. A
    /// position the source cannot read (an unknown version, another workload)
    /// is an error that says so; it is never guessed at.
    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError>;

    /// The source's own counters, if it keeps any.
    fn stats(&self) -> Option<Arc<SourceStats>> {
        None
    }
}

/// A destination for row changes. `flush(ts)` returning `Ok` is the only
/// acknowledgement: the checkpoint may pass `ts` only after it.
pub trait Sink: Send {
    /// A name for logs and errors.
    fn name(&self) -> &str;
    /// Start (or restart) the sink.
    fn open(&mut self) -> impl Future<Output = Result<(), PluginError>> + Send;
    /// Deliver a batch; `schemas` are the schemas its table batches refer to.
    /// The batch is lent, not consumed, so the caller can retry with it.
    fn write(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> impl Future<Output = Result<(), PluginError>> + Send;
    /// Make everything written with commit ts <= `ts` durable.
    fn flush(&mut self, ts: CommitTs) -> impl Future<Output = Result<(), PluginError>> + Send;
    /// Apply a schema change after everything before it was flushed.
    fn apply_ddl(&mut self, ddl: &DdlEvent)
    -> impl Future<Output = Result<(), PluginError>> + Send;
    /// Release resources.
    fn close(&mut self) -> impl Future<Output = Result<(), PluginError>> + Send;
    /// The changefeed's checkpoint `ts` is saved durably: nothing at or below it
    /// is delivered again, even after a restart. Called with the checkpoint a
    /// run starts from, then after each save. Default: nothing.
    fn checkpoint_saved(&mut self, ts: crate::CheckpointTs) {
        let _ = ts;
    }
    /// Nothing has gone through for a while and everything written is
    /// flushed: give back what an idle sink holds (a plugin instance); the
    /// next call starts over as after `open`. Default: nothing.
    fn release_idle(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A batch transform between source and sink.
pub trait Filter: Send {
    /// A name for logs and errors.
    fn name(&self) -> &str;
    /// Start (or restart) the filter.
    fn open(&mut self) -> impl Future<Output = Result<(), PluginError>> + Send;
    /// Transform a batch in place (rows may be dropped or rewritten).
    fn transform(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> impl Future<Output = Result<(), PluginError>> + Send;
    /// Nothing has gone through for a while: give back what an idle filter
    /// holds (a plugin instance). Default: nothing.
    fn release_idle(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
