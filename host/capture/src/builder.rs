//! One changefeed put together from its parts. `sluice run` and a capture's
//! processor both build their pipeline here; each loads the plugins its own
//! way (files, or the registry) and says where the run resumes.

use std::sync::Arc;

use sluice_config::ChangefeedConfig;
use sluice_core::{
    Checkpoint, CommitTs, ResolvedTs, ResumeError, Source, SourceEvent, TransactionRun,
};
use sluice_processor::{Pipeline, PipelineConfig, ProgressStore, RedoConfig, RedoLog};
use sluice_redo::{LogWriter, Storage, StorageUri};
use sluice_runtime::{WasmFilter, WasmSink};
use sluice_source::{AnySource, SourceError};

use crate::validate;

/// The parts of a changefeed, before its pipeline is built.
pub struct ChangefeedBuilder<'a, P> {
    config: &'a ChangefeedConfig<P>,
    filters: Vec<WasmFilter>,
    sink: WasmSink,
    start: Checkpoint,
    start_ts: CommitTs,
    target: Option<CommitTs>,
    replay_until: CommitTs,
    store: Option<Box<dyn ProgressStore>>,
    redo: Option<LogWriter>,
}

/// Opens changefeed `id`'s redo log in `root` (a folder named after the
/// changefeed under it) for `[consistent]`; `None` when the changefeed has no
/// redo log. Its files are named with `run` (the changefeed's epoch in a
/// cluster, 0 for `sluice run`; see [`LogWriter::in_run`]).
pub async fn open_redo(
    consistent: &sluice_config::ConsistentConfig,
    root: &StorageUri,
    (id, run): (&str, u64),
    fence: &sluice_core::WriteFence,
) -> anyhow::Result<Option<LogWriter>> {
    if !consistent.enabled() {
        return Ok(None);
    }
    // The id is a validated changefeed name (letters, digits, single
    // hyphens): it names one folder under the root, never a path.
    sluice_config::validate_name(sluice_config::NameKind::Changefeed, id)
        .map_err(|e| anyhow::anyhow!("changefeed id {id:?}: {e}"))?;
    let storage = Storage::open(root, id)
        .await
        .map_err(|e| anyhow::anyhow!("opening the redo log in {root}: {e}"))?
        .fenced(fence.clone());
    let writer = LogWriter::open(storage)
        .await
        .map_err(|e| anyhow::anyhow!("opening the redo log in {root}: {e}"))?
        .in_run(run)
        .with_compression(consistent.compression);
    Ok(Some(writer))
}

/// A changefeed ready to run: `pipeline.run(source, shutdown)`.
pub struct Changefeed {
    /// The pipeline, with its plugins and progress store.
    pub pipeline: Pipeline<WasmSink, WasmFilter>,
    /// The source, ending at the target ts if there is one.
    pub source: UpTo<AnySource>,
    /// The continuous validator, when `[validator]` asks for one: it is told
    /// of every acknowledged batch.
    pub validator: Option<validate::Running>,
}

impl<'a, P> ChangefeedBuilder<'a, P> {
    /// `config` with its plugins loaded (filters in chain order); it starts
    /// from the beginning unless [`Self::resume`] says otherwise.
    pub fn new(config: &'a ChangefeedConfig<P>, filters: Vec<WasmFilter>, sink: WasmSink) -> Self {
        Self {
            config,
            filters,
            sink,
            start: Checkpoint::default(),
            start_ts: CommitTs::ZERO,
            target: None,
            replay_until: CommitTs::ZERO,
            store: None,
            redo: None,
        }
    }

    /// Write every event to `log` before the sink sees it (`[consistent]`).
    pub fn redo(mut self, log: Option<LogWriter>) -> Self {
        self.redo = log;
        self
    }

    /// Resume from `start` (its ts, and the source position saved with it);
    /// rows up to `fence` (the fence saved by the previous run) may be
    /// downstream already and are flagged replay.
    pub fn resume(mut self, start: Checkpoint, fence: CommitTs) -> Self {
        self.start = start;
        self.replay_until = fence;
        self
    }

    /// The changefeed's start ts (fixed at create): a source without a saved
    /// position begins after it.
    pub fn start_ts(mut self, ts: CommitTs) -> Self {
        self.start_ts = ts;
        self
    }

    /// Stop at `target`: nothing above it is replicated.
    pub fn target_ts(mut self, target: Option<CommitTs>) -> Self {
        self.target = target;
        self
    }

    /// Save the fence and the checkpoint in `store`.
    pub fn progress_store(mut self, store: Box<dyn ProgressStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The pipeline and the source. Batches fit every plugin's bound, with
    /// half of it in reserve for filters that grow values (hashing turns a
    /// short value into 64 hex characters).
    pub fn build(self) -> Result<Changefeed, SourceError> {
        let source = sluice_source::build(&self.config.source, &self.config.filter, self.start_ts)?;
        let mut config = PipelineConfig::from(&self.config.pipeline);
        let plugin_bound = self
            .filters
            .iter()
            .map(WasmFilter::max_batch_bytes)
            .chain([self.sink.max_batch_bytes()])
            .min()
            .unwrap_or(u64::MAX);
        config.max_batch_bytes = config.max_batch_bytes.min((plugin_bound / 2) as usize);
        config.replay_until = self.replay_until;
        // With redo, the event cache's bound is shared: the redo writer's
        // share for copies not durable yet, the rest for events waiting to
        // reach the sink.
        let redo = self.redo.map(|writer| {
            let mut redo = RedoConfig::from(&self.config.consistent);
            let total = config.event_cache_bytes;
            redo.memory_bytes = total / 100 * usize::from(self.config.consistent.memory_percent);
            config.event_cache_bytes = total - redo.memory_bytes;
            RedoLog::new(writer, redo)
        });
        let mut pipeline = Pipeline::new(config, self.filters, self.sink, self.start);
        if let Some(redo) = redo {
            pipeline = pipeline.with_redo(redo);
        }
        if let Some(store) = self.store {
            pipeline = pipeline.with_progress_store(store);
        }
        let validator = validate::settings(self.config).map(|settings| {
            let (listener, running) = validate::start(settings);
            pipeline.set_ack_listener(listener);
            running
        });
        Ok(Changefeed {
            pipeline,
            source: UpTo {
                inner: source,
                target: self.target,
                reached: false,
            },
            validator,
        })
    }
}

/// A source that ends at the target ts: nothing above it is replicated, and the
/// target itself is resolved first, so that the checkpoint reaches it.
pub struct UpTo<S> {
    inner: S,
    target: Option<CommitTs>,
    reached: bool,
}

impl<S: Source> Source for UpTo<S> {
    type Error = S::Error;

    async fn next_event(&mut self) -> Result<SourceEvent, S::Error> {
        if self.reached {
            return Ok(SourceEvent::End);
        }
        let event = self.inner.next_event().await?;
        let Some(target) = self.target else {
            return Ok(event);
        };
        let past = match &event {
            SourceEvent::Transaction(t) => t.commit_ts > target,
            SourceEvent::Ddl(d) => d.commit_ts > target,
            SourceEvent::Resolved(r) => r.get() >= target.get(),
            SourceEvent::End => false,
        };
        if past {
            // Everything up to the target has been produced.
            self.reached = true;
            return Ok(SourceEvent::Resolved(ResolvedTs::from(target)));
        }
        Ok(event)
    }

    /// Runs pass through when there is no target; with one, transactions come
    /// one by one, so that the first past the target is seen and not produced.
    async fn next_run(
        &mut self,
        max_transactions: usize,
        max_bytes: usize,
    ) -> Result<Option<TransactionRun>, S::Error> {
        if self.reached || self.target.is_some() {
            return Ok(None);
        }
        self.inner.next_run(max_transactions, max_bytes).await
    }

    fn stats(&self) -> Option<Arc<sluice_core::SourceStats>> {
        self.inner.stats()
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.inner.resume(from)
    }
}
