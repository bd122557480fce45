//! What sinks and filters share: one live instance at a time, armed with a CPU
//! deadline and a wall-clock timeout per call, dropped after any failure.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::stderr::TailPipe;
use sluice_core::{Batch, PluginError, TableSchema};
use wasmtime::{Store, Trap};

use crate::bindings::types as wit;
use crate::component::PluginComponent;
use crate::config::PluginSettings;
use crate::convert;
use crate::share::TenantShare;
use crate::state::{PluginState, PluginStats};
use crate::thread::PluginThread;

/// A live instance: its store, its bindings, its stderr, and which schema
/// versions it has been sent.
pub(crate) struct Live<B> {
    pub(crate) store: Store<PluginState>,
    pub(crate) bindings: B,
    stderr: TailPipe,
    pub(crate) sent: HashSet<(u32, u32)>,
}

/// How a guarded call ended, before classification.
pub(crate) type Outcome<T> =
    Result<wasmtime::Result<Result<T, wit::Error>>, tokio::time::error::Elapsed>;

/// At most one live instance of a component, with its settings and the thread
/// its guest code runs on.
pub(crate) struct Slot<B> {
    pub(crate) component: PluginComponent,
    pub(crate) settings: PluginSettings,
    pub(crate) stats: Arc<PluginStats>,
    pub(crate) live: Option<Live<B>>,
    /// Set by the epoch callback each time the guest used up a slice.
    sliced: Arc<AtomicBool>,
    /// The running thread's CPU time when the call in progress was last polled
    /// (see `CpuBudget`).
    cpu_since: Arc<AtomicU64>,
    /// The last call kept computing past a slice: run the next one on the thread
    /// at once.
    on_thread: bool,
    thread: Option<PluginThread>,
    /// The turns its tenant's calls take on plugin threads.
    share: TenantShare,
    /// The pools of the databases granted to the plugin (a sink's).
    pub(crate) sql: crate::sql::SharedPools,
}

impl<B> Slot<B> {
    pub(crate) fn new(component: PluginComponent, settings: PluginSettings) -> Self {
        let share = component.runtime.inner.shares.tenant(settings.tenant());
        Self {
            share,
            component,
            settings,
            stats: Arc::new(PluginStats::default()),
            live: None,
            sliced: Arc::new(AtomicBool::new(false)),
            cpu_since: Arc::new(AtomicU64::new(0)),
            on_thread: false,
            thread: None,
            sql: None,
        }
    }

    /// Runs a call (or an instantiation) to its end. It starts on the caller's
    /// task, which costs nothing extra for the usual short call; once it has
    /// used 5 ms of CPU (seen at an epoch tick) it moves to the slot's own thread
    /// and finishes there, so a guest that computes for long never holds the
    /// caller's threads for more than about two ticks. A call after one that needed the thread
    /// starts there. On the thread, every poll takes a turn of its tenant's
    /// share (`share.rs`). `None` if the thread is gone.
    pub(crate) async fn drive<R: Send + 'static>(
        &mut self,
        call: impl Future<Output = R> + Send + 'static,
    ) -> Option<R> {
        // Each poll notes the thread's CPU time, so that the CPU budget charges
        // only time spent running this call, on whichever thread runs it.
        let since = self.cpu_since.clone();
        let mut call = Box::pin(async move {
            let mut call = std::pin::pin!(call);
            std::future::poll_fn(|cx| {
                since.store(crate::state::thread_cpu_nanos(), Ordering::Relaxed);
                call.as_mut().poll(cx)
            })
            .await
        });
        if !self.on_thread {
            self.sliced.store(false, Ordering::Relaxed);
            let sliced = &self.sliced;
            let inline = std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
                std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
                // The guest yielded at the end of a slice: move it.
                std::task::Poll::Pending if sliced.swap(false, Ordering::Relaxed) => {
                    std::task::Poll::Ready(None)
                }
                std::task::Poll::Pending => std::task::Poll::Pending,
            })
            .await;
            if let Some(output) = inline {
                return Some(output);
            }
            self.on_thread = true;
        }
        let share = self.share.clone();
        let thread = self.thread().ok()?;
        thread
            .run(move || share.run(call, crate::state::thread_cpu_nanos))
            .await
    }

    /// After a call ended: whether the next one starts on the thread (this one
    /// computed for a slice or more).
    pub(crate) fn note_cpu(&mut self, used_nanos: u64) {
        self.on_thread = used_nanos >= crate::state::SLICE_NANOS;
    }

    /// The slot's thread, started on first use.
    pub(crate) fn thread(&mut self) -> Result<&PluginThread, PluginError> {
        if self.thread.is_none() {
            let share = self.share.clone();
            let crowded = Box::new(move || share.crowded());
            let thread = PluginThread::start(&self.settings.name, crowded).map_err(|e| {
                PluginError::Retryable(format!("cannot start a thread for the plugin: {e}"))
            })?;
            self.thread = Some(thread);
        }
        Ok(self.thread.as_ref().expect("just set"))
    }

    /// Instantiates `pre` on the slot's thread under the host-call timeout.
    pub(crate) async fn instantiate_with<F, Fut>(
        &mut self,
        instantiate: F,
    ) -> Result<(), PluginError>
    where
        F: FnOnce(Store<PluginState>) -> Fut + Send + 'static,
        Fut: Future<Output = (Store<PluginState>, wasmtime::Result<B>)> + Send + 'static,
        B: Send + 'static,
    {
        let (mut store, stderr) = self.new_store()?;
        self.arm(&mut store);
        let timeout = self.settings.limits.host_call_timeout;
        let made = self
            .drive(async move { tokio::time::timeout(timeout, instantiate(store)).await })
            .await;
        match made {
            Some(Ok((store, Ok(bindings)))) => {
                self.install(store, bindings, stderr);
                Ok(())
            }
            Some(Ok((store, Err(e)))) => Err(PluginError::Stopped(
                match store.data().quota.exceeded.as_deref() {
                    Some(quota) => format!("instantiation failed: {quota}"),
                    None => format!("instantiation failed: {e:#}"),
                },
            )),
            Some(Err(_)) => Err(PluginError::Stopped(format!(
                "instantiation took longer than {timeout:?}"
            ))),
            None => Err(thread_gone()),
        }
    }

    /// A fresh store for a new instance, with exactly the granted capabilities.
    pub(crate) fn new_store(&self) -> Result<(Store<PluginState>, TailPipe), PluginError> {
        let (state, stderr) =
            PluginState::new(&self.settings, self.stats.clone(), self.sql.clone())
                .map_err(PluginError::Retryable)?;
        let mut store = Store::new(&self.component.runtime.inner.engine, state);
        store.limiter(|s| &mut s.quota);
        // Slices: every tick of guest code is counted against the call's CPU
        // budget and yields to the executor; past the budget the call traps.
        let sliced = self.sliced.clone();
        store.epoch_deadline_callback(move |mut ctx| {
            if ctx.data_mut().cpu.tick()? {
                sliced.store(true, Ordering::Relaxed);
            }
            Ok(wasmtime::UpdateDeadline::Yield(1))
        });
        Ok((store, stderr))
    }

    /// Gives the next call (or instantiation) on `store` a fresh CPU budget of
    /// `call-timeout-ms`, in ticks, with the first slice ending at the next tick.
    pub(crate) fn arm(&self, store: &mut Store<PluginState>) {
        store.data_mut().cpu = crate::state::CpuBudget {
            used_ticks: 0,
            used_nanos: 0,
            budget_nanos: self
                .settings
                .limits
                .call_timeout
                .as_nanos()
                .min(u64::MAX as u128) as u64,
            since: self.cpu_since.clone(),
        };
        store.set_epoch_deadline(1);
    }

    pub(crate) fn install(&mut self, store: Store<PluginState>, bindings: B, stderr: TailPipe) {
        self.stats.instantiations.fetch_add(1, Ordering::Relaxed);
        self.stats
            .peak_memory_bytes
            .fetch_max(store.data().quota.used, Ordering::Relaxed);
        self.live = Some(Live {
            store,
            bindings,
            stderr,
            sent: HashSet::new(),
        });
    }

    /// Refuse a batch over the plugin's bound before the plugin sees it (lowering
    /// a batch allocates it inside the guest).
    pub(crate) fn check_bound(&self, batch: &Batch) -> Result<(), PluginError> {
        let bytes = batch.wire_bytes() as u64;
        let bound = self.settings.limits.batch_bytes();
        if bytes > bound {
            return Err(PluginError::Refused(format!(
                "batch of {bytes} bytes is over this plugin's bound of {bound} bytes (a quarter of its memory quota); split it"
            )));
        }
        Ok(())
    }

    /// The batch as the live instance gets it: the schemas its tables use that the
    /// instance has not been sent yet, and the tables, moved out of `batch` (put
    /// them back with [`restore`]). Returns the keys of the schemas included, to
    /// pass to [`Slot::mark_sent`] once the call succeeded.
    pub(crate) fn wire_batch(
        &self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> (Vec<(u32, u32)>, wit::Batch) {
        let sent = self.live.as_ref().map(|l| &l.sent);
        let new: Vec<&Arc<TableSchema>> = schemas
            .iter()
            .filter(|s| sent.is_none_or(|sent| !sent.contains(&(s.table_id, s.version))))
            .filter(|s| {
                batch
                    .tables
                    .iter()
                    .any(|t| (t.table_id, t.schema_version) == (s.table_id, s.version))
            })
            .collect();
        let keys = new.iter().map(|s| (s.table_id, s.version)).collect();
        let wire = wit::Batch {
            schemas: new.iter().map(|s| convert::schema(s)).collect(),
            tables: std::mem::take(&mut batch.tables)
                .into_iter()
                .map(convert::table_to_wit)
                .collect(),
        };
        (keys, wire)
    }

    /// Remember that the live instance has these schemas.
    pub(crate) fn mark_sent(&mut self, keys: Vec<(u32, u32)>) {
        if let Some(live) = &mut self.live {
            live.sent.extend(keys);
        }
    }

    /// Linear memory of the live instance, in bytes.
    pub(crate) fn memory_bytes(&self) -> Option<u64> {
        self.live.as_ref().map(|l| l.store.data().quota.used)
    }

    /// Turn a call's outcome into a result; any failure drops the instance.
    /// After a successful call, the instance's linear memory and the host objects
    /// it holds are counted against its memory quota together.
    pub(crate) fn settle<T>(&mut self, outcome: Outcome<T>) -> Result<T, PluginError> {
        if let Some(live) = &mut self.live {
            let refused = std::mem::take(&mut live.store.data_mut().quota.refused);
            self.stats
                .memory_refusals
                .fetch_add(refused, Ordering::Relaxed);
        }
        match outcome {
            Ok(Ok(Ok(value))) => {
                if let Some(live) = &mut self.live {
                    let state = live.store.data_mut();
                    // A refused growth the guest got over is no stop reason.
                    state.quota.exceeded = None;
                    let (linear, host) = (state.quota.used, state.host_bytes());
                    self.stats
                        .peak_memory_bytes
                        .fetch_max(linear + host, Ordering::Relaxed);
                    let limit = self.settings.limits.memory_bytes;
                    if linear + host > limit {
                        let reason = format!(
                            "memory quota exceeded: {linear} bytes of linear memory and {host} bytes held in host objects (HTTP fields, streams, files), its quota is {limit} bytes"
                        );
                        self.stop(&reason);
                        return Err(PluginError::Stopped(reason));
                    }
                }
                Ok(value)
            }
            Ok(Ok(Err(err))) => {
                // The plugin reported an error: its buffered state is suspect, and the
                // host will replay from the checkpoint, so start over with a new instance.
                self.live = None;
                Err(convert::plugin_error(err))
            }
            Ok(Err(trap)) => {
                let reason = self.stop_reason(&trap);
                self.stop(&reason);
                Err(PluginError::Stopped(reason))
            }
            Err(_elapsed) => {
                let reason = format!(
                    "the call did not return within {:?} (blocked in a host call)",
                    self.settings.limits.host_call_timeout
                );
                self.stop(&reason);
                Err(PluginError::Stopped(reason))
            }
        }
    }

    fn stop(&mut self, reason: &str) {
        tracing::warn!(plugin = %self.settings.name, reason, "Plugin instance stopped; the next call gets a fresh instance.");
        self.stats.record_stop(reason);
        self.live = None;
    }

    fn stop_reason(&self, err: &wasmtime::Error) -> String {
        let live = self.live.as_ref();
        if let Some(msg) = live.and_then(|l| l.store.data().quota.exceeded.clone()) {
            // The guest could not go on without the memory it was refused.
            return match err.downcast_ref::<Trap>() {
                Some(trap) => format!("{msg}; the instance then trapped: {trap}"),
                None => format!("{msg}; the instance then failed: {err}"),
            };
        }
        if let Some(wasmtime::component::ResourceTableError::Full) =
            err.downcast_ref::<wasmtime::component::ResourceTableError>()
        {
            return format!(
                "exceeded its limit of {} host resources (open files, sockets, streams, HTTP fields) per instance",
                self.settings.limits.max_resources
            );
        }
        if let Some(Trap::Interrupt) = err.downcast_ref::<Trap>() {
            return format!(
                "exceeded its CPU time limit of {:?} per call",
                self.settings.limits.call_timeout
            );
        }
        let stderr = live
            .map(|l| String::from_utf8_lossy(&l.stderr.contents()).into_owned())
            .unwrap_or_default();
        if let Some(pos) = stderr.rfind("panicked at") {
            let text: String = stderr[pos..].lines().take(2).collect::<Vec<_>>().join(": ");
            return format!("plugin panicked: {}", text.trim());
        }
        match err.downcast_ref::<Trap>() {
            Some(trap) => format!("plugin trapped: {trap}"),
            None => format!("plugin call failed: {err}"),
        }
    }
}

/// Move a wire batch's tables back into `batch`.
pub(crate) fn restore(batch: &mut Batch, wire: wit::Batch) {
    batch.tables = wire
        .tables
        .into_iter()
        .map(convert::table_from_wit)
        .collect();
}

/// Run a call future under the host-call timeout.
pub(crate) async fn guard<T>(
    timeout: Duration,
    fut: impl Future<Output = wasmtime::Result<Result<T, wit::Error>>>,
) -> Outcome<T> {
    tokio::time::timeout(timeout, fut).await
}

/// The plugin's thread ended (only a host bug can do that).
pub(crate) fn thread_gone() -> PluginError {
    PluginError::Stopped("the plugin's thread ended unexpectedly".into())
}

/// Run a guarded call on the slot's live instance, on the slot's thread.
/// `$arg` is moved to the thread and handed back with the result, as
/// `(result, Option<$arg>)` (`None` only if the thread is gone); `$live` and
/// `$arg` name the instance and the argument inside `$call`.
macro_rules! guarded_call {
    ($slot:expr, $arg:expr, |$live:ident, $name:ident| $call:expr) => {{
        let slot = &mut $slot;
        let timeout = slot.settings.limits.host_call_timeout;
        let started = std::time::Instant::now();
        let mut live = slot.live.take().expect("an instance is live");
        slot.arm(&mut live.store);
        let arg = $arg;
        let ran = slot
            .drive(async move {
                let $name = arg;
                let outcome = {
                    let $live = &mut live;
                    $crate::instance::guard(timeout, $call).await
                };
                (live, outcome, $name)
            })
            .await;
        slot.stats.call_latency.record(started.elapsed());
        match ran {
            Some((live, outcome, arg)) => {
                slot.note_cpu(live.store.data().cpu.used_nanos);
                slot.live = Some(live);
                (slot.settle(outcome), Some(arg))
            }
            None => (Err($crate::instance::thread_gone()), None),
        }
    }};
}
pub(crate) use guarded_call;
