//! How busy the processors keep the cores, passed on to the plugin turns.
//!
//! Guest code that computes past its first slice runs on plugin threads at a
//! lower priority, in turns (`sluice_runtime::CpuShares`). The operating
//! system's priority alone still gives every such thread a share of a core
//! against the pipelines, so a tenant running several spinning sinks took a
//! share per sink from everyone's pipelines. Here the turns follow what the
//! processors' runtime leaves: as many as the cores it does not keep busy,
//! and one (shared between tenants by virtual time) when it keeps them all
//! busy. An idle node gives plugins every core.

use std::time::{Duration, Instant};

use sluice_runtime::CpuShares;
use tokio::runtime::RuntimeMetrics;

/// How often the turns follow the processors' load.
const EVERY: Duration = Duration::from_millis(200);

/// The busy time of one runtime's workers, read as cores used between readings.
pub(super) struct WorkLoad {
    metrics: RuntimeMetrics,
    busy: Duration,
    at: Instant,
}

impl WorkLoad {
    pub(super) fn new(runtime: &tokio::runtime::Handle) -> Self {
        let metrics = runtime.metrics();
        let busy = total_busy(&metrics);
        Self {
            metrics,
            busy,
            at: Instant::now(),
        }
    }

    /// The cores the runtime's workers were busy on since the last reading
    /// (its busy time over the wall time between).
    fn busy_cores(&mut self) -> f64 {
        let (busy, at) = (total_busy(&self.metrics), Instant::now());
        let wall = at.saturating_duration_since(self.at).as_secs_f64();
        let used = busy.saturating_sub(self.busy).as_secs_f64();
        (self.busy, self.at) = (busy, at);
        if wall > 0.0 { used / wall } else { 0.0 }
    }

    /// Tells `shares` the processors' load every [`EVERY`] until `stop`.
    pub(super) async fn follow(
        mut self,
        shares: CpuShares,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(EVERY) => {}
                _ = stop.changed() => break,
            }
            shares.leave_to_host(self.busy_cores());
        }
        // Stopping: the processors are going; plugins may finish at full speed.
        shares.leave_to_host(0.0);
    }
}

fn total_busy(metrics: &RuntimeMetrics) -> Duration {
    (0..metrics.num_workers())
        .map(|w| metrics.worker_total_busy_duration(w))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_kept_busy_reads_as_its_cores_and_an_idle_one_as_none() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut load = WorkLoad::new(runtime.handle());
        std::thread::sleep(Duration::from_millis(300));
        let idle = load.busy_cores();
        assert!(idle < 0.2, "idle: {idle}");
        // Two tasks that compute for 400 ms each, yielding now and then.
        let spin = || async {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(400) {
                std::hint::black_box((0..10_000u64).sum::<u64>());
                tokio::task::yield_now().await;
            }
        };
        let (a, b) = (runtime.spawn(spin()), runtime.spawn(spin()));
        runtime.block_on(async {
            a.await.unwrap();
            b.await.unwrap();
        });
        let busy = load.busy_cores();
        assert!(busy > 1.0, "two workers busy for most of the time: {busy}");
    }
}
