//! A processor: one changefeed's pipeline running under one epoch on this capture.
//! The capture's agent starts it from the checkpoint the owner assigned and stops
//! it; the processor claims the task position (fencing older runs), loads the
//! plugins from the registry and runs the pipeline until the source ends, it is
//! stopped, or it fails. It reports how it ended in the task position, where the
//! owner reads it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_core::{CheckpointTs, CommitTs};
use sluice_owner::{ChangefeedId, ChangefeedInfo, PluginRole};
use sluice_processor::{
    FilterSwapRequest, PipelineError, Probation, Progress, ProgressStoreError, ShadowCandidate,
    ShadowCommand, ShadowLimits, ShadowSnapshot, ShadowStatus, SwapRequest, Verdict,
};
use sluice_protocol::{
    Epoch, ErrorKind, LatencyReport, Outcome, ShadowDifference, ShadowReport, Shipment, SwapReport,
    SwapState, TaskState,
};
use sluice_runtime::{LatencyHistogram, PluginKind, PluginStats, WasmFilter, WasmSink};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::Ctx;
use crate::builder::open_redo;
use crate::builder::{Changefeed, ChangefeedBuilder};
use crate::progress::{Claim, MetaProgressStore, Reporter};
use crate::settings::plugin_data_dir;
use crate::shipped;
use sluice_protocol::Counters;
use sluice_registry::RegistryError;

/// What can be seen of a running processor.
#[derive(Default)]
pub struct Live {
    /// The pipeline's progress, once it runs.
    pub progress: Mutex<Option<watch::Receiver<Progress>>>,
    /// Writes the run's end into its task position, once claimed.
    reporter: Mutex<Option<Reporter>>,
    /// How busy the run is, measured between two reads of it.
    rates: Mutex<Rates>,
}

/// The counts a [`Live::load`] measured from last (at first, none when the
/// run was made), and what it measured.
struct Rates {
    at: Sample,
    last: Option<sluice_protocol::Load>,
}

impl Default for Rates {
    fn default() -> Self {
        Self {
            at: (Instant::now(), 0, Arc::default()),
            last: None,
        }
    }
}

/// When, rows written then, and rows read per table then.
type Sample = (Instant, u64, Arc<Vec<(String, u64)>>);

/// The shortest time a load is measured over (a shorter one repeats the last).
const LOAD_OVER: Duration = Duration::from_millis(500);

/// Counters of a changefeed's plugins: (role, plugin, stats), the role being
/// `filter-0`, ... or `sink` and the plugin `name@version`. The owner keeps them
/// across processors and hands them to each new one, so that they never go
/// backwards when a processor restarts.
pub type PluginCounters = Vec<(String, String, Arc<PluginStats>)>;

/// Every plugin of `info` as (role, plugin), in pipeline order.
pub fn plugin_roles(info: &ChangefeedInfo) -> Vec<(String, String)> {
    info.config
        .filters
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("filter-{i}"), f.plugin.to_string()))
        .chain([("sink".to_string(), info.config.sink.plugin.to_string())])
        .collect()
}

/// The counters of `role` in `plugins`; fresh ones if it has none.
fn stats_of(plugins: &PluginCounters, role: &str) -> Arc<PluginStats> {
    plugins
        .iter()
        .find(|(r, _, _)| r == role)
        .map(|(_, _, s)| s.clone())
        .unwrap_or_default()
}

impl Live {
    /// How busy the run has been since the last call (rows per second to the
    /// sink, and read per table, the busiest [`sluice_protocol::MAX_LOAD_TABLES`]);
    /// none before it runs.
    pub fn load(&self) -> Option<sluice_protocol::Load> {
        let p = self.progress()?;
        let now = Instant::now();
        let mut rates = self.rates.lock().expect("not poisoned");
        let (then, written, tables) = rates.at.clone();
        let secs = now.duration_since(then);
        if secs < LOAD_OVER {
            return rates.last.clone();
        }
        let secs = secs.as_secs_f64();
        let per_s = |n: u64| (n as f64 / secs).round() as u64;
        let before: std::collections::HashMap<&str, u64> =
            tables.iter().map(|(t, n)| (t.as_str(), *n)).collect();
        let mut by_table: Vec<(String, u64)> = p
            .table_rows
            .iter()
            .map(|(t, n)| {
                let was = before.get(t.as_str()).copied().unwrap_or(0);
                (t.clone(), per_s(n.saturating_sub(was)))
            })
            .collect();
        by_table.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        by_table.truncate(sluice_protocol::MAX_LOAD_TABLES);
        let load = sluice_protocol::Load {
            rows_per_s: per_s(p.rows_written.saturating_sub(written)),
            tables: by_table,
        };
        rates.at = (now, p.rows_written, p.table_rows.clone());
        rates.last = Some(load.clone());
        Some(load)
    }

    /// The pipeline's latest progress; none before it runs.
    pub fn progress(&self) -> Option<Progress> {
        self.progress
            .lock()
            .ok()
            .and_then(|p| p.as_ref().map(|rx| rx.borrow().clone()))
    }

    /// The run's counters, as its task position reports them.
    pub fn counters(&self) -> Option<Counters> {
        self.progress().map(|p| Counters {
            rows_read: p.rows_read,
            rows_written: p.rows_written,
            bytes_written: p.bytes_written,
            retries: p.retries,
            source_events: p.source_events,
            source_skipped_statements: p.source_skipped_statements,
            source_time_ms: p.source_time_ms,
            event_cache_bytes: p.event_cache_bytes,
            redo: p.redo.as_ref().map(|r| sluice_protocol::RedoReport {
                resolved_ts: r.resolved_ts.get(),
                checkpoint_ts: r.checkpoint_ts.get(),
                bytes_written: r.bytes_written,
                flushes: r.flushes,
                flush_ms: r.flush_time.as_millis() as u64,
                busy_ms: r.busy_time.as_millis() as u64,
                waiting_events: p.redo_waiting,
                failing: u64::from(r.failing.is_some()),
            }),
        })
    }
}

/// A running processor.
pub struct Processor {
    /// The changefeed epoch it runs under.
    pub epoch: Epoch,
    /// What can be seen of it while it runs.
    pub live: Arc<Live>,
    ctx: Arc<Ctx>,
    id: ChangefeedId,
    checkpoint: CheckpointTs,
    /// Set to ask the pipeline to stop.
    stop: watch::Sender<bool>,
    /// The changefeed's info as it changes while the work runs (a swap).
    infos: watch::Sender<Option<ChangefeedInfo>>,
    task: JoinHandle<Outcome>,
}

impl Processor {
    /// Asks the pipeline to write what it read, flush and close, and returns at
    /// once; past the server's stop timeout the task cancels the pipeline (its
    /// unflushed rows are replayed, flagged, by the next run). The owner collects
    /// the outcome once the task ends, so a slow stop never holds it. Idempotent.
    pub fn signal_stop(&mut self) {
        self.stop.send_replace(true);
    }

    /// Whether it was asked to stop.
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// The changefeed's info changed while this runs: a swap recorded in it
    /// is carried out at a barrier (see [`sluice_owner::SwapRecord`]).
    pub fn reconfigure(&self, info: ChangefeedInfo) {
        self.infos.send_replace(Some(info));
    }
}

/// Resolves once `stop` is set (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Processor {
    /// Starts `info`'s pipeline under `epoch`, replicating after `checkpoint`; its
    /// plugins count into `plugins` (see [`PluginCounters`]).
    pub fn start(
        ctx: Arc<Ctx>,
        info: ChangefeedInfo,
        epoch: Epoch,
        checkpoint: CheckpointTs,
        shipment: Option<Shipment>,
        plugins: PluginCounters,
        swap_stats: Arc<SwapStats>,
    ) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let (infos, infos_rx) = watch::channel(None);
        let live = Arc::new(Live::default());
        let id = info.id.clone();
        let span = tracing::info_span!("changefeed", id = %info.id, epoch = epoch.0);
        // Guest code does not run on this task's threads: every plugin call goes
        // to the plugin's own thread (sluice-runtime).
        let task = ctx.work.spawn({
            let live = live.clone();
            let ctx = ctx.clone();
            async move {
                let id = info.id.clone();
                let timeout = ctx.stop_timeout;
                let deadline = {
                    let stop = stop_rx.clone();
                    async move {
                        stopped(stop).await;
                        tokio::time::sleep(timeout).await;
                    }
                };
                let outcome = tokio::select! {
                    outcome = run(&ctx, info, (epoch, shipment.as_ref()), checkpoint, stopped(stop_rx), &live, &plugins, (infos_rx, &swap_stats)) => outcome,
                    // A stop that takes too long cancels the pipeline (and with it
                    // any plugin call in progress, at its next slice).
                    () = deadline => {
                        tracing::warn!(?timeout, "The processor did not stop in time; cancelled it.");
                        Outcome::Stopped
                    }
                };
                match &outcome {
                    Outcome::Failed { kind, message } => {
                        tracing::warn!(kind = kind.as_str(), %message, "Processor failed.")
                    }
                    other => tracing::info!(?other, "Processor ended."),
                }
                // The owner takes the outcome from the task position.
                report_end(&ctx, &id, epoch, checkpoint, &live, &outcome).await;
                outcome
            }
            .instrument(span)
        });
        Self {
            epoch,
            live,
            ctx,
            id,
            checkpoint,
            stop,
            infos,
            task,
        }
    }

    /// Whether its pipeline task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks the pipeline to be cancelled without flushing, and returns at once
    /// (a guest call in progress ends at its own deadline at the latest);
    /// [`Processor::abort`] then waits for it and reports it. Cancelling
    /// every processor first lets them all stop together.
    pub fn cancel(&self) {
        self.task.abort();
    }

    /// Cancels the pipeline without flushing and waits until it is gone (a guest
    /// call in progress ends at its own deadline at the latest), so that no write
    /// of it can land after this returns; then reports it `stopped` when
    /// `report` (unless it ended and reported by itself first).
    pub async fn abort(mut self, report: bool) {
        self.task.abort();
        // It may have ended (and reported) by itself before the abort.
        let ended = (&mut self.task).await.is_ok();
        if report && !ended {
            let outcome = Outcome::Stopped;
            report_end(
                &self.ctx,
                &self.id,
                self.epoch,
                self.checkpoint,
                &self.live,
                &outcome,
            )
            .await;
        }
    }

    /// Waits for the task (which must be finished or stopping); its end is
    /// reported by then.
    pub async fn join(self) -> Outcome {
        joined(self.task.await)
    }
}

fn joined(result: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    match result {
        Ok(outcome) => outcome,
        // Cancelled only on purpose: a stop that took too long.
        Err(e) if e.is_cancelled() => Outcome::Stopped,
        Err(e) => Outcome::Failed {
            kind: ErrorKind::Retryable,
            message: format!("the processor task ended abnormally: {e}"),
        },
    }
}

/// How often the end of a run is tried to be reported before giving up.
const REPORT_ATTEMPTS: u32 = 10;

/// Writes how the run of `id` at `epoch` ended into its task position, through
/// the run's claim; a run that never claimed it claims it now (from
/// `checkpoint`, as it would have). Retries while the store does not answer;
/// a newer run's claim makes the report moot.
pub(crate) async fn report_end(
    ctx: &Ctx,
    id: &ChangefeedId,
    epoch: Epoch,
    checkpoint: CheckpointTs,
    live: &Live,
    outcome: &Outcome,
) {
    if let Err(closed) = ctx.fence.check() {
        // Another capture may run the changefeed by now: it reports.
        tracing::info!(%closed, "Not reporting the end of the run.");
        return;
    }
    let state = TaskState::from(outcome.clone());
    for attempt in 1..=REPORT_ATTEMPTS {
        let reporter = live.reporter.lock().expect("not poisoned").clone();
        let reporter = match reporter {
            Some(r) => r,
            None => {
                let claim = Claim {
                    tenant: id.tenant(),
                    changefeed: id.name(),
                    capture: &ctx.capture_id,
                    changefeed_epoch: epoch.0,
                };
                match MetaProgressStore::claim(
                    ctx.store.clone(),
                    claim,
                    Some(checkpoint),
                    Some(ctx.capture_guard.clone()),
                )
                .await
                {
                    Ok((store, _)) => {
                        let r = store.reporter();
                        *live.reporter.lock().expect("not poisoned") = Some(r.clone());
                        r
                    }
                    Err(e) => {
                        tracing::warn!(attempt, error = %format!("{e:#}"), "Could not claim the task position to report the end of the run.");
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
        };
        match reporter.report(state.clone(), live.counters()).await {
            Ok(()) => return,
            Err(ProgressStoreError::Fenced(why)) => {
                tracing::info!(%why, "Not reporting the end of the run: a newer run took over.");
                return;
            }
            Err(e) => {
                tracing::warn!(attempt, error = %e, "Could not report the end of the run; retrying.");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    }
    tracing::error!(
        "Gave up reporting the end of the run; the owner sees it when the changefeed restarts."
    );
}

fn failed(kind: ErrorKind, message: impl Into<String>) -> Outcome {
    Outcome::Failed {
        kind,
        message: message.into(),
    }
}

fn registry_failure(at: &str, plugin: &str, e: RegistryError) -> Outcome {
    let kind = match e {
        RegistryError::Store(_) | RegistryError::Io { .. } => ErrorKind::Retryable,
        RegistryError::Damaged { .. } => ErrorKind::Fatal,
        _ => ErrorKind::Config,
    };
    failed(
        kind,
        format!("{at}.plugin `{plugin}`: {}", crate::error_chain(&e)),
    )
}

#[allow(
    clippy::too_many_arguments,
    reason = "one call site; each argument is a distinct part of the run"
)]
async fn run(
    ctx: &Ctx,
    info: ChangefeedInfo,
    (epoch, shipment): (Epoch, Option<&Shipment>),
    checkpoint: CheckpointTs,
    shutdown: impl Future<Output = ()>,
    live: &Arc<Live>,
    plugins: &PluginCounters,
    (infos, swap_stats): (watch::Receiver<Option<ChangefeedInfo>>, &SwapStats),
) -> Outcome {
    // A changefeed stored before the server's maximums were lowered runs within them.
    let mut info = info;
    info.config = ctx.limits.clamp(info.config);
    let id = &info.id;
    let tenant = id.tenant();
    // Claim the task position first: it fences older runs, and every end of
    // this run (even a wrong configuration) is reported through it.
    let claim = Claim {
        tenant,
        changefeed: id.name(),
        capture: &ctx.capture_id,
        changefeed_epoch: epoch.0,
    };
    let (store, previous) = match MetaProgressStore::claim(
        ctx.store.clone(),
        claim,
        Some(checkpoint),
        Some(ctx.capture_guard.clone()),
    )
    .await
    {
        Ok(claimed) => claimed,
        Err(e) => return failed(ErrorKind::Retryable, format!("{e:#}")),
    };
    *live.reporter.lock().expect("not poisoned") = Some(store.reporter());
    // A run picked up again under the same epoch starts where it got to.
    let checkpoint = CheckpointTs::new(store.claimed().checkpoint_ts);
    // Counters go out with the checkpoint saves (no write of their own).
    let store = store
        .with_counters({
            let live = live.clone();
            Box::new(move || live.counters())
        })
        .with_load({
            let live = live.clone();
            Box::new(move || live.load())
        });
    let mut filters = Vec::new();
    for (i, plugin) in info.config.filters.iter().enumerate() {
        let role = format!("filter-{i}");
        match build_filter(ctx, id, plugin, &role, stats_of(plugins, &role)).await {
            Ok(f) => filters.push(f),
            Err(o) => return o,
        }
    }
    let sink = match build_sink(
        ctx,
        id,
        &info.config.sink,
        "sink",
        stats_of(plugins, "sink"),
    )
    .await
    {
        Ok(s) => s,
        Err(o) => return o,
    };
    // Which part of a run this is: all of it, or the side that reads the
    // source (and ships other captures their tables), or one that receives.
    let side = crate::Side::of(shipment);
    let mut resume = previous.resume_point(checkpoint);
    if side == crate::Side::Receives {
        // Its source is the reader's shipment: a source position claimed
        // with the checkpoint is the reader's, and saved again with this
        // side's later checkpoints it would send a run that takes the work
        // whole (here, or wherever it finds this record) back to it.
        resume.position = None;
    }
    tracing::info!(
        checkpoint = checkpoint.get(),
        replay_until = previous.fence_ts,
        side = side.as_str(),
        capture = %ctx.capture_id,
        // Whether the source resumes at a position saved with the checkpoint.
        at_position = resume.position.is_some(),
        "Processor starting."
    );
    let reporter = store.reporter();
    // Generated time starts after the changefeed's start ts (fixed at create,
    // so a resume regenerates the same workload).
    // With `[consistent]`: the changefeed's redo log, under this server's
    // redo root (`<tenant>/<changefeed>`). A receiving side writes none: the
    // reader logs every table's events and ships only what its log has.
    let redo = match side {
        crate::Side::Receives => None,
        _ => match open_redo(
            &info.config.consistent,
            &ctx.redo_root.child(id.tenant()),
            (id.name(), epoch.0),
            &ctx.fence,
        )
        .await
        {
            Ok(redo) => redo,
            Err(e) => return failed(ErrorKind::Retryable, format!("{e:#}")),
        },
    };
    let logs = redo.is_some();
    let built = ChangefeedBuilder::new(&info.config, filters, sink)
        .redo(redo)
        .start_ts(info.start_ts)
        .target_ts(info.target_ts)
        .resume(resume, CommitTs::new(previous.fence_ts))
        .progress_store(Box::new(store))
        .build();
    let Changefeed {
        mut pipeline,
        source,
        validator,
    } = match built {
        Ok(built) => built,
        Err(e) => return failed(ErrorKind::Config, format!("source: {e}")),
    };
    // With the tables split across captures: ship the others' tables, or
    // take this capture's from the one that reads.
    let window = info.config.pipeline.event_cache_bytes.0 / 2;
    // A receiver waits for the reader's shipment to open: a stop meanwhile
    // ends the run (its reader may be gone already).
    tokio::pin!(shutdown);
    let input = tokio::select! {
        input = shipped::input(ctx, &info.id, (epoch, shipment), source, window, logs) => input,
        () = &mut shutdown => return Outcome::Stopped,
    };
    let input = match input {
        Ok(input) => input,
        Err(e) => {
            let kind = if e.is_retryable() {
                ErrorKind::Retryable
            } else {
                ErrorKind::Fatal
            };
            return failed(kind, format!("shipment: {e}"));
        }
    };
    let source = input.source;
    if let Some(elsewhere) = input.elsewhere {
        pipeline = pipeline.with_tables_elsewhere(elsewhere);
    }
    let _report_durable = input.reporter.map(|reporter| {
        let task = tokio::spawn(shipped::report_durable(pipeline.progress(), reporter));
        AbortOnDrop(task)
    });
    // The continuous validator, if `[validator]` asks for one, publishes its
    // findings; it ends with this run.
    let _validator = validator.map(|running| {
        let publish = crate::validate::publish(&running, reporter.clone());
        (running, publish)
    });
    // A swap still pending or on probation when the previous run ended: the
    // stored version runs on probation again, with the old one to fall back
    // to.
    let mut trial = None;
    let open = info.open_swap().and_then(|s| {
        let role = s.role()?;
        (info.plugin(role) == Some(&s.to)).then(|| (role, s.clone()))
    });
    if let Some((role, open)) = open {
        let fallback = match role {
            PluginRole::Sink => {
                match build_sink(ctx, id, &open.from, "sink", stats_of(plugins, "sink")).await {
                    Ok(fallback) => {
                        let (p, verdict) = probation(&open.probation);
                        pipeline = pipeline.with_probation(fallback, p);
                        Ok(verdict)
                    }
                    Err(o) => Err(o),
                }
            }
            PluginRole::Filter(i) => {
                let at = format!("filter-{i}");
                match build_filter(ctx, id, &open.from, &at, stats_of(plugins, &at)).await {
                    Ok(fallback) => {
                        let (p, verdict) = probation(&open.probation);
                        pipeline = pipeline.with_filter_probation(i, fallback, p);
                        Ok(verdict)
                    }
                    Err(o) => Err(o),
                }
            }
        };
        match fallback {
            Ok(verdict) => {
                let t = Trial {
                    seq: open.seq,
                    barrier_ts: open.barrier_ts.map(|b| b.get()),
                    pause_ms: open.pause_ms,
                    pause_us: open.pause_us,
                    role,
                    from: open.from.clone(),
                    verdict,
                };
                report_swap(&reporter, t.report(SwapState::Probation, None)).await;
                trial = Some(t);
            }
            Err(o) => {
                // Without a fallback there is nothing to roll back to: the swap
                // ends here, with why.
                let why = reason_of(o);
                tracing::warn!(%why, "The old version of the swap in progress cannot be loaded; the new one runs without a fallback.");
                let report = SwapReport {
                    seq: open.seq,
                    state: SwapState::Done,
                    barrier_ts: open.barrier_ts.map(|b| b.get()),
                    pause_ms: open.pause_ms,
                    pause_us: open.pause_us,
                    reason: Some(format!(
                        "after a restart the old version {} could not be loaded ({why}); the new one runs without a fallback",
                        open.from.plugin
                    )),
                };
                report_swap(&reporter, report).await;
            }
        }
    }
    *live.progress.lock().expect("not poisoned") = Some(pipeline.progress());
    let stop = async {
        shutdown.await;
    };
    let swapper = Swapper {
        ctx,
        id,
        plugins,
        stats: swap_stats,
        reporter,
        swaps: pipeline.swaps(),
        filter_swaps: pipeline.filter_swaps(),
        shadows: pipeline.shadows(),
        sink: info.config.sink.clone(),
        filters: info.config.filters.clone(),
        trial,
        shadow: None,
        dropped: std::collections::HashSet::new(),
    };
    let result = tokio::select! {
        result = pipeline.run(source, stop) => result,
        never = swapper.run(infos, &info) => match never {},
    };
    match result {
        Ok(report) if report.interrupted => Outcome::Stopped,
        Ok(_) => Outcome::Finished,
        Err(PipelineError::Persist(ProgressStoreError::Fenced(_))) => Outcome::Fenced,
        Err(e) if ctx.fence.check().is_err() => {
            // The capture's lease may have ended: its sink was refused, and
            // the run is not a failure of the changefeed's.
            tracing::warn!(error = %crate::error_chain(&e), "The run stopped: this capture is fenced.");
            Outcome::Fenced
        }
        Err(e) => {
            let kind = match &e {
                PipelineError::Sink(p) | PipelineError::Filter { error: p, .. } => {
                    ErrorKind::of_plugin_error(p)
                }
                PipelineError::Source(source)
                    if source
                        .downcast_ref::<shipped::RunSourceError>()
                        .is_some_and(shipped::RunSourceError::is_fatal) =>
                {
                    // The upstream must be fixed (a setting, a purged binlog):
                    // restarting cannot help.
                    ErrorKind::Fatal
                }
                PipelineError::Source(_) | PipelineError::Persist(_) | PipelineError::Redo(_) => {
                    ErrorKind::Retryable
                }
            };
            failed(kind, crate::error_chain(&e))
        }
    }
}

/// Loads and instantiates the sink `table` names (on its own thread, counting
/// into the changefeed's sink counters).
async fn build_sink(
    ctx: &Ctx,
    id: &ChangefeedId,
    table: &sluice_config::PluginConfig,
    role: &str,
    stats: Arc<PluginStats>,
) -> Result<WasmSink, Outcome> {
    let component = match ctx.registry.load(id.tenant(), &table.plugin).await {
        Ok(c) => c,
        Err(e) => return Err(registry_failure("sink", &table.plugin.to_string(), e)),
    };
    if component.kind() != PluginKind::Sink {
        return Err(failed(
            ErrorKind::Config,
            format!("sink.plugin `{}` is not a sink", table.plugin),
        ));
    }
    let dir = data_dir(ctx, id, table, role)?;
    match WasmSink::new(
        component,
        ctx.plugin_settings(table, &id.to_string(), table.plugin.to_string(), dir),
    ) {
        Ok(s) => Ok(s.with_stats(stats)),
        Err(e) => Err(failed(ErrorKind::Config, format!("sink: {e}"))),
    }
}

/// The data dir of the plugin in `role`, created, if `table` grants one.
fn data_dir(
    ctx: &Ctx,
    id: &ChangefeedId,
    table: &sluice_config::PluginConfig,
    role: &str,
) -> Result<Option<PathBuf>, Outcome> {
    if !table.capabilities.data_dir.is_granted() {
        return Ok(None);
    }
    let dir = plugin_data_dir(&ctx.data_dir, id, role);
    std::fs::create_dir_all(&dir).map_err(|e| {
        failed(
            ErrorKind::Retryable,
            format!("cannot create {}: {e}", dir.display()),
        )
    })?;
    Ok(Some(dir))
}

/// Loads and instantiates the filter `table` names, as `role` (`filter-N`,
/// or a shadow's), counting into `stats`.
async fn build_filter(
    ctx: &Ctx,
    id: &ChangefeedId,
    table: &sluice_config::PluginConfig,
    role: &str,
    stats: Arc<PluginStats>,
) -> Result<WasmFilter, Outcome> {
    let at = match role.strip_prefix("filter-") {
        Some(i) => format!("filters[{i}]"),
        None => role.to_string(),
    };
    let component = match ctx.registry.load(id.tenant(), &table.plugin).await {
        Ok(c) => c,
        Err(e) => return Err(registry_failure(&at, &table.plugin.to_string(), e)),
    };
    if component.kind() != PluginKind::Filter {
        return Err(failed(
            ErrorKind::Config,
            format!("{at}.plugin `{}` is not a filter", table.plugin),
        ));
    }
    let dir = data_dir(ctx, id, table, role)?;
    match WasmFilter::new(
        component,
        ctx.plugin_settings(table, &id.to_string(), table.plugin.to_string(), dir),
    ) {
        Ok(f) => Ok(f.with_stats(stats)),
        Err(e) => Err(failed(ErrorKind::Config, format!("{at}: {e}"))),
    }
}

/// Why building a sink failed, for a swap record.
fn reason_of(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed { message, .. } => message,
        other => format!("{other:?}"),
    }
}

/// Counters of a changefeed's swaps, kept across its processors.
#[derive(Debug, Default)]
pub struct SwapStats {
    /// Swaps carried out at a barrier.
    pub swaps: AtomicU64,
    /// Swaps rolled back on probation.
    pub rollbacks: AtomicU64,
    /// Swaps refused (the new version did not load or open).
    pub refused: AtomicU64,
    /// How long delivery paused at each swap's barrier.
    pub pause: LatencyHistogram,
    /// Rows a shadow filter's output was compared on.
    pub shadow_rows_compared: AtomicU64,
    /// Rows where it differed from the live filter's.
    pub shadow_differences: AtomicU64,
    /// Candidate calls that failed.
    pub shadow_errors: AtomicU64,
    /// Shadows dropped (behind past their bound, or failing).
    pub shadow_dropped: AtomicU64,
}

/// How a trial ended, whichever plugin was on it.
enum Judged {
    Passed {
        flushes: u64,
    },
    RolledBack {
        error: sluice_core::PluginError,
        checkpoint: CheckpointTs,
        replayed_batches: usize,
    },
}

impl<S> From<Verdict<S>> for Judged {
    fn from(v: Verdict<S>) -> Self {
        match v {
            Verdict::Passed { flushes } => Judged::Passed { flushes },
            Verdict::RolledBack {
                failed,
                error,
                checkpoint,
                replayed_batches,
            } => {
                drop(failed);
                Judged::RolledBack {
                    error,
                    checkpoint,
                    replayed_batches,
                }
            }
        }
    }
}

/// The verdict of a trial, once the pipeline gives it (none: the pipeline
/// ended first).
type VerdictFuture = std::pin::Pin<Box<dyn Future<Output = Option<Judged>> + Send>>;

/// A swapped-in plugin on trial.
struct Trial {
    seq: u64,
    /// The barrier checkpoint and the pause of the swap, repeated in every
    /// report of it (the owner may see only the last one).
    barrier_ts: Option<u64>,
    pause_ms: Option<u64>,
    pause_us: Option<u64>,
    /// What was swapped.
    role: PluginRole,
    /// The table to fall back to.
    from: sluice_config::PluginConfig,
    verdict: VerdictFuture,
}

impl Trial {
    /// A report of this swap in `state`.
    fn report(&self, state: SwapState, reason: Option<String>) -> SwapReport {
        SwapReport {
            seq: self.seq,
            state,
            barrier_ts: self.barrier_ts,
            pause_ms: self.pause_ms,
            pause_us: self.pause_us,
            reason,
        }
    }
}

fn probation<S: Send + 'static>(
    policy: &sluice_owner::ProbationPolicy,
) -> (Probation<S>, VerdictFuture) {
    let (verdict, judged) = oneshot::channel::<Verdict<S>>();
    (
        Probation {
            duration: std::time::Duration::from_millis(policy.window_ms),
            flushes: policy.flushes,
            max_retries: policy.max_retries,
            verdict,
        },
        Box::pin(async move { judged.await.ok().map(Judged::from) }),
    )
}

/// Writes where a swap stands into the run's task position (a few tries; the
/// owner reads it there).
async fn report_swap(reporter: &Reporter, mut report: SwapReport) {
    report.reason = report.reason.map(|r| sluice_owner::bound_message(&r));
    for attempt in 1..=REPORT_ATTEMPTS {
        match reporter.report_swap(report.clone()).await {
            Ok(()) => return,
            Err(ProgressStoreError::Fenced(_)) => return,
            Err(e) => {
                tracing::warn!(attempt, error = %e, "Could not report the swap; retrying.");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
}

/// Hands `request` to the pipeline and waits for its answer: the barrier
/// and pause of a swap that happened, or why it did not; none when the
/// pipeline ended first.
async fn ask<R, S>(
    to: &tokio::sync::mpsc::Sender<R>,
    request: R,
    answer: oneshot::Receiver<
        Result<sluice_processor::Swapped<S>, sluice_processor::SwapRefused<S>>,
    >,
) -> Option<Result<(CheckpointTs, std::time::Duration), sluice_core::PluginError>> {
    to.send(request).await.ok()?;
    let answer = answer.await.ok()?;
    Some(answer.map(|s| (s.barrier, s.pause)).map_err(|e| e.error))
}

/// A shadow the pipeline runs.
struct RunningShadow {
    seq: u64,
    status: Arc<ShadowStatus>,
    /// The last report written.
    reported: Option<ShadowReport>,
    /// What the metrics have counted of it so far.
    counted: ShadowReport,
}

/// What a shadow did, as its task position reports it.
fn shadow_report(seq: u64, s: &ShadowSnapshot) -> ShadowReport {
    let latency = |l: &sluice_processor::CallLatency| LatencyReport {
        calls: l.calls,
        mean_us: l.mean_us(),
        p50_us: l.quantile_us(0.5),
        p99_us: l.quantile_us(0.99),
        max_us: l.max_us,
    };
    ShadowReport {
        seq,
        batches: s.batches,
        rows_compared: s.rows_compared,
        rows_differing: s.rows_differing,
        differences: s
            .differences
            .iter()
            .map(|d| ShadowDifference {
                table: d.table.clone(),
                key: d.key.clone(),
                column: d.column.clone(),
                live: d.live.clone(),
                candidate: d.candidate.clone(),
            })
            .collect(),
        errors: s.errors,
        last_error: s.last_error.clone(),
        live_latency: latency(&s.live),
        candidate_latency: latency(&s.candidate),
        rows_written: s.rows_written,
        flushes: s.flushes,
        lag_ms: s.lag.as_millis() as u64,
        dropped: s.dropped.clone(),
    }
    .bounded()
}

/// How often a running shadow's counts are written to the task position.
const SHADOW_REPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Carries out the swaps and shadows recorded in the changefeed's info while
/// the pipeline runs, and reports each step.
struct Swapper<'a> {
    ctx: &'a Ctx,
    id: &'a ChangefeedId,
    plugins: &'a PluginCounters,
    stats: &'a SwapStats,
    reporter: Reporter,
    swaps: tokio::sync::mpsc::Sender<SwapRequest<WasmSink>>,
    filter_swaps: tokio::sync::mpsc::Sender<FilterSwapRequest<WasmFilter>>,
    shadows: tokio::sync::mpsc::Sender<ShadowCommand<WasmSink, WasmFilter>>,
    /// The sink table the pipeline runs.
    sink: sluice_config::PluginConfig,
    /// The filter tables it runs.
    filters: Vec<sluice_config::PluginConfig>,
    trial: Option<Trial>,
    shadow: Option<RunningShadow>,
    /// Shadows this run dropped: never started again, even while the
    /// owner's record still says they run.
    dropped: std::collections::HashSet<u64>,
}

impl Swapper<'_> {
    /// Runs until the pipeline ends (the caller stops polling it then).
    async fn run(
        mut self,
        mut infos: watch::Receiver<Option<ChangefeedInfo>>,
        first: &ChangefeedInfo,
    ) -> std::convert::Infallible {
        // A shadow recorded before this run started runs again.
        self.follow_shadow(first).await;
        let mut infos_open = true;
        let mut ticker = tokio::time::interval(SHADOW_REPORT_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                verdict = async {
                    match &mut self.trial {
                        Some(t) => (&mut t.verdict).await,
                        None => std::future::pending().await,
                    }
                } => self.judged(verdict).await,
                changed = infos.changed(), if infos_open => {
                    if changed.is_err() {
                        infos_open = false;
                        continue;
                    }
                    let info = infos.borrow_and_update().clone();
                    if let Some(info) = info {
                        self.follow_shadow(&info).await;
                        self.follow(&info).await;
                    }
                }
                _ = ticker.tick() => self.report_shadow().await,
            }
        }
    }

    /// The table of the plugin in `role` the pipeline runs.
    fn running(&self, role: PluginRole) -> Option<&sluice_config::PluginConfig> {
        match role {
            PluginRole::Sink => Some(&self.sink),
            PluginRole::Filter(i) => self.filters.get(i),
        }
    }

    fn set_running(&mut self, role: PluginRole, table: sluice_config::PluginConfig) {
        match role {
            PluginRole::Sink => self.sink = table,
            PluginRole::Filter(i) => {
                if let Some(at) = self.filters.get_mut(i) {
                    *at = table;
                }
            }
        }
    }

    /// Swap `seq` did not happen: the old version runs on.
    async fn refused(&mut self, seq: u64, reason: String) {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        let report = SwapReport {
            seq,
            state: SwapState::Refused,
            barrier_ts: None,
            pause_ms: None,
            pause_us: None,
            reason: Some(reason),
        };
        report_swap(&self.reporter, report).await;
    }

    async fn judged(&mut self, verdict: Option<Judged>) {
        let trial = self.trial.take().expect("on trial");
        match verdict {
            Some(Judged::Passed { flushes }) => {
                tracing::info!(
                    seq = trial.seq,
                    role = %trial.role,
                    flushes,
                    "The swapped-in plugin passed its probation."
                );
                report_swap(&self.reporter, trial.report(SwapState::Done, None)).await;
            }
            Some(Judged::RolledBack {
                error,
                checkpoint,
                replayed_batches,
            }) => {
                self.stats.rollbacks.fetch_add(1, Ordering::Relaxed);
                let reason = format!(
                    "{error} (rolled back at checkpoint {checkpoint}; {replayed_batches} batches replayed, flagged)"
                );
                let report = trial.report(SwapState::RolledBack, Some(reason));
                self.set_running(trial.role, trial.from);
                report_swap(&self.reporter, report).await;
            }
            // The pipeline ended first: the next run judges it.
            None => {}
        }
    }

    /// Swaps to the version the info names if a pending swap asks for it.
    async fn follow(&mut self, info: &ChangefeedInfo) {
        let Some(open) = info.open_swap() else {
            return;
        };
        let Some(role) = open.role() else {
            return;
        };
        if open.state != SwapState::Pending
            || info.plugin(role) != Some(&open.to)
            || self.running(role) == Some(&open.to)
            || self.trial.is_some()
        {
            return;
        }
        let (seq, to, from) = (open.seq, open.to.clone(), open.from.clone());
        tracing::info!(seq, %role, from = %from.plugin, to = %to.plugin, "Swapping a plugin.");
        let (probation_of, answer) = match role {
            PluginRole::Sink => {
                let stats = stats_of(self.plugins, "sink");
                let sink = match build_sink(self.ctx, self.id, &to, "sink", stats).await {
                    Ok(s) => s,
                    Err(outcome) => return self.refused(seq, reason_of(outcome)).await,
                };
                let (probation, verdict) = probation(&open.probation);
                let (reply, answer) = oneshot::channel();
                let request = SwapRequest {
                    sink,
                    probation: Some(probation),
                    reply,
                };
                (verdict, ask(&self.swaps, request, answer).await)
            }
            PluginRole::Filter(index) => {
                let at = format!("filter-{index}");
                let stats = stats_of(self.plugins, &at);
                let filter = match build_filter(self.ctx, self.id, &to, &at, stats).await {
                    Ok(f) => f,
                    Err(outcome) => return self.refused(seq, reason_of(outcome)).await,
                };
                let (probation, verdict) = probation(&open.probation);
                let (reply, answer) = oneshot::channel();
                let request = FilterSwapRequest {
                    index,
                    filter,
                    probation: Some(probation),
                    reply,
                };
                (verdict, ask(&self.filter_swaps, request, answer).await)
            }
        };
        match answer {
            Some(Ok((barrier, pause))) => {
                self.stats.swaps.fetch_add(1, Ordering::Relaxed);
                self.stats.pause.record(pause);
                self.set_running(role, to);
                let trial = Trial {
                    seq,
                    barrier_ts: Some(barrier.get()),
                    pause_ms: Some(pause.as_millis() as u64),
                    pause_us: Some(pause.as_micros() as u64),
                    role,
                    from,
                    verdict: probation_of,
                };
                let report = trial.report(SwapState::Probation, None);
                self.trial = Some(trial);
                report_swap(&self.reporter, report).await;
            }
            Some(Err(error)) => {
                let reason = format!("{} did not open: {error}", to.plugin);
                self.refused(seq, reason).await;
            }
            // The pipeline ended before it got to the request.
            None => {}
        }
    }

    /// Starts or stops the shadow as the info says.
    async fn follow_shadow(&mut self, info: &ChangefeedInfo) {
        let want = info
            .running_shadow()
            .filter(|s| !self.dropped.contains(&s.seq));
        if want.map(|s| s.seq) == self.shadow.as_ref().map(|s| s.seq) {
            return;
        }
        if self.shadow.take().is_some() {
            // Its last counts stay in the task position.
            let _ = self.shadows.send(ShadowCommand::Stop).await;
        }
        let Some(record) = want else {
            return;
        };
        let (seq, table) = (record.seq, record.candidate.clone());
        let limits = ShadowLimits {
            max_lag: std::time::Duration::from_millis(record.max_lag_ms),
            max_queued_bytes: usize::try_from(record.max_queued_bytes).unwrap_or(usize::MAX),
        };
        let status = Arc::new(ShadowStatus::default());
        let candidate = match record.role() {
            Some(PluginRole::Sink) => {
                build_sink(self.ctx, self.id, &table, "shadow-sink", Arc::default())
                    .await
                    .map(ShadowCandidate::Sink)
            }
            Some(PluginRole::Filter(index)) => build_filter(
                self.ctx,
                self.id,
                &table,
                &format!("shadow-filter-{index}"),
                Arc::default(),
            )
            .await
            .map(|filter| ShadowCandidate::Filter { index, filter }),
            None => Err(failed(
                ErrorKind::Config,
                format!("unknown role `{}`", record.role),
            )),
        };
        self.shadow = Some(RunningShadow {
            seq,
            status: status.clone(),
            reported: None,
            counted: ShadowReport::default(),
        });
        match candidate {
            Ok(candidate) => {
                tracing::info!(seq, role = %record.role, candidate = %table.plugin, "Starting a shadow.");
                let command = ShadowCommand::Start {
                    candidate,
                    limits,
                    status,
                };
                if self.shadows.send(command).await.is_err() {
                    return;
                }
            }
            Err(outcome) => {
                status.drop_with(format!(
                    "the candidate did not load: {}",
                    reason_of(outcome)
                ));
            }
        }
        self.report_shadow().await;
    }

    /// Writes what the shadow did into the task position, if it changed; a
    /// dropped shadow ends here.
    async fn report_shadow(&mut self) {
        let Some(shadow) = &mut self.shadow else {
            return;
        };
        let snapshot = shadow.status.snapshot();
        let report = shadow_report(shadow.seq, &snapshot);
        if shadow.reported.as_ref() == Some(&report) {
            return;
        }
        let before = &shadow.counted;
        let add = |counter: &AtomicU64, now: u64, was: u64| {
            counter.fetch_add(now.saturating_sub(was), Ordering::Relaxed);
        };
        add(
            &self.stats.shadow_rows_compared,
            report.rows_compared,
            before.rows_compared,
        );
        add(
            &self.stats.shadow_differences,
            report.rows_differing,
            before.rows_differing,
        );
        add(&self.stats.shadow_errors, report.errors, before.errors);
        shadow.counted = report.clone();
        let dropped = report.dropped.clone();
        shadow.reported = Some(report.clone());
        let mut written = false;
        for attempt in 1..=REPORT_ATTEMPTS {
            match self.reporter.report_shadow(Some(report.clone())).await {
                Ok(()) | Err(ProgressStoreError::Fenced(_)) => {
                    written = true;
                    break;
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "Could not report the shadow; retrying.");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
        }
        if !written {
            // Try again at the next tick.
            if let Some(s) = &mut self.shadow {
                s.reported = None;
            }
            return;
        }
        if let Some(why) = dropped {
            tracing::warn!(%why, "The shadow was dropped.");
            self.stats.shadow_dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(s) = self.shadow.take() {
                self.dropped.insert(s.seq);
            }
            let _ = self.shadows.send(ShadowCommand::Stop).await;
        }
    }
}

/// Aborts its task when dropped (a helper task that ends with the run).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
