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
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// How much lower than the host's threads compiles run: a tenant uploading
/// plugins in a loop takes what the others leave, not a share of their cores
/// (a compile on a busy node takes longer; an idle node compiles at full speed).
pub(crate) const COMPILE_NICE: i32 = 19;

/// Lowers the calling thread's scheduling priority to `nice`: on Linux,
/// `setpriority` on the calling "process" sets the calling thread's nice
/// value. Failing to is harmless: the thread keeps the host's priority.
pub(crate) fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(None, nice) {
        tracing::debug!(error = %e, nice, "Could not lower a thread's priority.");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
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
}

impl PluginThread {
    pub(crate) fn start(name: &str) -> std::io::Result<Self> {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
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
        Ok(Self { jobs })
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
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let mut tx = tx;
                let call = make();
                tokio::pin!(call);
                let output = tokio::select! {
                    output = &mut call => Some(output),
                    _ = tx.closed() => None,
                };
                if let Some(output) = output {
                    let _ = tx.send(output);
                }
            })
        });
        self.jobs.send(job).ok()?;
        rx.await.ok()
    }
}
