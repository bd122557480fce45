//! Where guest code runs once it computes for long: one OS thread per plugin
//! slot, with a current-thread tokio runtime of its own for the async WASI and
//! HTTP host calls.
//!
//! A call starts on the caller's task (a short call costs nothing extra); once
//! it has used 5 ms of CPU (seen at an epoch tick) it moves here
//! (`Slot::drive`). So a guest that computes for long never holds the threads of
//! the caller's runtime (which serve the API, the owner, meta-store leases and
//! sources), and the operating system's scheduler shares the cores between
//! plugins by time: a spinning plugin gets a thread's share, not a whole executor.
//! Guest code yields every epoch tick, so that a call can be timed out or
//! cancelled while it spins.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};

type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Plugin threads alive in this process.
static LIVE_THREADS: AtomicUsize = AtomicUsize::new(0);

/// How many plugin threads are alive in this process (each live sink or filter
/// that has made a call has one).
pub fn live_plugin_threads() -> usize {
    LIVE_THREADS.load(Ordering::Relaxed)
}

/// How much lower than the host's threads plugin threads run (a nice value):
/// only guest code that computes past one slice runs on them, and the host's own
/// work (pipelines, the API, short plugin calls) goes first. Plugins share among
/// themselves evenly.
const PLUGIN_NICE: i32 = 10;

/// CPU time after which one call on a plugin thread counts as running away
/// while the host is crowded (its pipelines leave guest code less than half a
/// core, `CpuShares::crowded`): the thread drops to [`DEMOTED_NICE`] for the
/// rest of that call. A sink's call on a batch takes milliseconds; one that
/// has computed for a tenth of a second with the pipelines waiting for cores
/// is a spinner or close to one, and takes only what nothing else wants (all
/// of an idle core, so an honest slow call still ends). Measured in CPU, not
/// wall time: a spinner held to a few percent of a core still reaches it
/// within a few seconds. A node busy with other processes, not its own
/// pipelines, lowers nothing.
pub(crate) const DEMOTE_AFTER_NANOS: u64 = 100_000_000;

/// Whether a call past [`DEMOTE_AFTER_NANOS`] is lowered now.
pub(crate) type DemoteWhen = Box<dyn Fn() -> bool + Send + Sync>;

/// The priority of a call that has computed past [`DEMOTE_AFTER_NANOS`].
/// After the call the thread goes back to [`PLUGIN_NICE`] where the process
/// may raise a priority (root, `CAP_SYS_NICE` or `RLIMIT_NICE`); elsewhere it
/// stays lowered until the slot's thread ends (its instance released or
/// restarted). The thread is never replaced meanwhile: the instance's sockets,
/// timers and HTTP tasks live on its runtime.
pub(crate) const DEMOTED_NICE: i32 = 19;

/// How much lower than the host's threads compiles run: a tenant uploading
/// plugins in a loop takes what the others leave, not a share of their cores
/// (a compile on a busy node takes longer; an idle node compiles at full speed).
pub(crate) const COMPILE_NICE: i32 = 19;

/// Lowers the calling thread's scheduling priority to `nice`: on Linux,
/// `setpriority` on the calling "process" sets the calling thread's nice
/// value. Failing to is harmless: the thread keeps the host's priority.
pub(crate) fn lower_priority(nice: i32) {
    if let Err(e) = set_priority(nice) {
        tracing::debug!(error = %e, nice, "Could not lower a thread's priority.");
    }
}

/// Raises the calling thread's priority back to `nice`; false where the
/// process may not (an unprivileged one can only lower it).
fn raise_priority(nice: i32) -> bool {
    set_priority(nice).is_ok()
}

/// Sets the calling thread's nice value (Linux; elsewhere nothing).
fn set_priority(nice: i32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    return rustix::process::setpriority_process(None, nice).map_err(Into::into);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nice;
        Ok(())
    }
}

/// Runs `work` on a thread of its own at compile priority ([`COMPILE_NICE`]);
/// its result, or `None` if it panicked.
pub(crate) async fn at_compile_priority<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<Option<T>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("sluice-compile".into())
        .spawn(move || {
            lower_priority(COMPILE_NICE);
            let _ = tx.send(work());
        })?;
    Ok(rx.await.ok())
}

/// The thread of one plugin slot. Dropping it ends the thread once its current
/// call (if any) has returned or been cancelled.
pub(crate) struct PluginThread {
    jobs: mpsc::UnboundedSender<Job>,
    /// The thread runs at [`DEMOTED_NICE`] (a call ran away, and it could
    /// not be raised again since).
    demoted: Arc<AtomicBool>,
    /// The demotion bound ([`DEMOTE_AFTER_NANOS`]; shorter in tests).
    demote_after_nanos: u64,
    demote_when: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl PluginThread {
    /// A thread whose calls drop to [`DEMOTED_NICE`] once one has computed
    /// for [`DEMOTE_AFTER_NANOS`] of CPU at a time `demote_when` says yes.
    pub(crate) fn start(name: &str, demote_when: DemoteWhen) -> std::io::Result<Self> {
        Self::start_demoting_after(name, DEMOTE_AFTER_NANOS, demote_when)
    }

    /// [`PluginThread::start`] with another bound than
    /// [`DEMOTE_AFTER_NANOS`].
    pub(crate) fn start_demoting_after(
        name: &str,
        demote_after_nanos: u64,
        demote_when: DemoteWhen,
    ) -> std::io::Result<Self> {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        let demoted = Arc::new(AtomicBool::new(false));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // Linux keeps 15 bytes of a thread name.
        let short: String = name.chars().take(13).collect();
        LIVE_THREADS.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name(format!("p:{short}"))
            .spawn(move || {
                lower_priority(PLUGIN_NICE);
                runtime.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        job().await;
                    }
                });
                drop(runtime);
                LIVE_THREADS.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            LIVE_THREADS.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        Ok(Self {
            jobs,
            demoted,
            demote_after_nanos,
            demote_when: Arc::from(demote_when),
        })
    }

    /// Whether the thread runs at [`DEMOTED_NICE`] now.
    #[cfg(test)]
    fn demoted(&self) -> bool {
        self.demoted.load(Ordering::Acquire)
    }

    /// Runs the future `make` builds on this thread and returns its output, or
    /// `None` if the thread is gone. If the returned future is dropped (the caller
    /// was cancelled), the call on the plugin thread is dropped too, at its next
    /// yield.
    pub(crate) async fn run<F, Fut, R>(&self, make: F) -> Option<R>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let (demoted, demote_after) = (self.demoted.clone(), self.demote_after_nanos);
        let demote_when = self.demote_when.clone();
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let mut tx = tx;
                let start = crate::state::thread_cpu_nanos();
                let mut call = std::pin::pin!(make());
                // Every poll that leaves the call pending (guest code yields
                // each epoch tick) while the host is crowded looks at the CPU
                // the call has used so far (a clock read only then).
                let call = std::future::poll_fn(|cx| {
                    let polled = call.as_mut().poll(cx);
                    if polled.is_pending()
                        && !demoted.load(Ordering::Relaxed)
                        && demote_when()
                        && crate::state::thread_cpu_nanos().saturating_sub(start) >= demote_after
                    {
                        lower_priority(DEMOTED_NICE);
                        demoted.store(true, Ordering::Release);
                    }
                    polled
                });
                tokio::pin!(call);
                let output = tokio::select! {
                    output = &mut call => Some(output),
                    _ = tx.closed() => None,
                };
                // The demotion lasts the call, where the priority can be
                // raised again.
                if demoted.load(Ordering::Relaxed) && raise_priority(PLUGIN_NICE) {
                    demoted.store(false, Ordering::Release);
                }
                if let Some(output) = output {
                    let _ = tx.send(output);
                }
            })
        });
        self.jobs.send(job).ok()?;
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value.
    fn nice() -> i32 {
        rustix::process::getpriority_process(None).expect("getpriority")
    }

    /// Whether this process may raise a thread's priority again (tried on
    /// a thread of its own).
    fn may_raise() -> bool {
        std::thread::spawn(|| {
            lower_priority(DEMOTED_NICE);
            raise_priority(PLUGIN_NICE)
        })
        .join()
        .unwrap()
    }

    #[tokio::test]
    async fn a_call_that_runs_away_while_crowded_is_lowered_for_that_call() {
        let bound = 30_000_000; // 30 ms of CPU
        let crowded = Arc::new(AtomicBool::new(false));
        let when: DemoteWhen = {
            let c = crowded.clone();
            Box::new(move || c.load(Ordering::Relaxed))
        };
        let thread = PluginThread::start_demoting_after("runaway", bound, when).unwrap();
        let start = nice().max(PLUGIN_NICE);

        // A call that computes for three times the bound, yielding as guest
        // code does at every epoch tick; its nice value at the end.
        let long_call = move || async move {
            let until = crate::state::thread_cpu_nanos() + 3 * bound;
            let mut x = 0u64;
            while crate::state::thread_cpu_nanos() < until {
                for i in 0..10_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                tokio::task::yield_now().await;
            }
            std::hint::black_box(x);
            nice()
        };

        // Short calls keep the thread's priority, and so does a long one
        // while the host is not crowded.
        for _ in 0..3 {
            assert_eq!(thread.run(|| async { nice() }).await, Some(start));
        }
        assert_eq!(thread.run(long_call).await, Some(start));
        assert!(!thread.demoted());

        // Crowded: a short call is not lowered, the long call is while it
        // runs. After it, the same thread (its runtime holds the instance's
        // sockets and timers) is back at the plugin priority where the
        // process may raise it, and stays lowered where it may not.
        crowded.store(true, Ordering::Relaxed);
        assert_eq!(thread.run(|| async { nice() }).await, Some(start));
        assert_eq!(thread.run(long_call).await, Some(DEMOTED_NICE));
        let after = thread.run(|| async { nice() }).await;
        if may_raise() && start == PLUGIN_NICE {
            assert_eq!(after, Some(PLUGIN_NICE));
            assert!(!thread.demoted());
        } else {
            assert_eq!(after, Some(DEMOTED_NICE));
            assert!(thread.demoted());
        }
    }
}
