//! Per-instance store state: WASI context, HTTP policy, memory quota, host imports.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::stderr::TailPipe;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::bindings::host;
use crate::config::PluginSettings;

/// Longest plugin metric name kept (longer names are ignored).
const MAX_METRIC_NAME: usize = 128;

/// Upper bounds (seconds) of the call-latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];

/// A fixed-bucket histogram of plugin call latency (lock-free), in the shape
/// Prometheus histograms use: cumulative counts per upper bound, a count and a sum.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// Record one call.
    pub fn record(&self, took: std::time::Duration) {
        let secs = took.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            took.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`] (calls slower than the
    /// last bound are only in [`LatencyHistogram::count`]).
    pub fn cumulative(&self) -> [u64; LATENCY_BUCKETS.len()] {
        let mut out = [0; LATENCY_BUCKETS.len()];
        let mut total = 0;
        for (o, b) in out.iter_mut().zip(&self.buckets) {
            total += b.load(Ordering::Relaxed);
            *o = total;
        }
        out
    }

    /// Calls recorded.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Total time of all calls, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9
    }
}

/// Counters of one plugin (over all its instances), shared with the host.
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Latency of every guarded call (write, flush, transform, ...).
    pub call_latency: LatencyHistogram,
    /// Instances created.
    pub instantiations: AtomicU64,
    /// Instances stopped by a trap, quota or timeout.
    pub stops: AtomicU64,
    /// Largest linear memory sum seen in one instance, in bytes.
    pub peak_memory_bytes: AtomicU64,
    counters: Mutex<BTreeMap<String, u64>>,
    gauges: Mutex<BTreeMap<String, f64>>,
    last_stop: Mutex<Option<String>>,
}

impl PluginStats {
    /// Plugin-reported counters (`host.counter-add`).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.counters.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Plugin-reported gauges (`host.gauge-set`).
    pub fn gauges(&self) -> BTreeMap<String, f64> {
        self.gauges.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Why the last instance was stopped, if one was.
    pub fn last_stop(&self) -> Option<String> {
        self.last_stop.lock().ok().and_then(|s| s.clone())
    }

    pub(crate) fn record_stop(&self, reason: &str) {
        self.stops.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut s) = self.last_stop.lock() {
            *s = Some(reason.to_string());
        }
    }
}

/// Sums every linear memory of one instance against its quota.
pub(crate) struct MemoryQuota {
    limit: u64,
    pub(crate) used: u64,
    pub(crate) exceeded: Option<String>,
}

impl ResourceLimiter for MemoryQuota {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow = desired.saturating_sub(current) as u64;
        if self.used + grow > self.limit {
            let msg = format!(
                "memory quota exceeded: the instance asked for {} bytes of linear memory in all, its quota is {} bytes",
                self.used + grow,
                self.limit
            );
            self.exceeded = Some(msg.clone());
            return Err(wasmtime::Error::msg(msg));
        }
        self.used += grow;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// Outgoing HTTP only to allow-listed hosts (wasi-http does not pass through the
/// socket check, so the policy sits here).
pub(crate) struct HttpPolicy {
    allow: Arc<Vec<String>>,
}

impl HttpPolicy {
    fn allows(&self, uri: &http::Uri) -> bool {
        let Some(host) = uri.host() else { return false };
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        let with_port = format!("{host}:{port}");
        self.allow.iter().any(|a| *a == host || *a == with_port)
    }
}

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                )>,
            > + Send,
    > {
        drop(fut);
        if !self.allows(request.uri()) {
            tracing::warn!(uri = %request.uri(), "Plugin HTTP request denied: host not on the allowlist.");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                res.map(BodyExt::boxed_unsync),
                Box::new(io)
                    as Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
            ))
        })
    }
}

/// The `T` of every plugin `Store<T>`.
pub(crate) struct PluginState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: HttpPolicy,
    pub(crate) quota: MemoryQuota,
    name: Arc<str>,
    stats: Arc<PluginStats>,
}

impl PluginState {
    /// State for a new instance with exactly the granted capabilities. Returns the
    /// pipe that collects the plugin's stderr (panic messages end up there).
    pub(crate) fn new(
        settings: &PluginSettings,
        stats: Arc<PluginStats>,
    ) -> Result<(Self, TailPipe), String> {
        let caps = &settings.capabilities;
        let stderr = TailPipe::new(16 * 1024);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        if let Some(dir) = &caps.data_dir {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!("cannot create the plugin directory {}: {e}", dir.display())
            })?;
            wasi.preopened_dir(dir, "/data", FsPerms::ReadWrite)
                .map_err(|e| {
                    format!("cannot open the plugin directory {}: {e:#}", dir.display())
                })?;
        }
        if !caps.tcp_allow.is_empty() {
            let allow: Arc<HashSet<SocketAddr>> =
                Arc::new(caps.tcp_allow.iter().copied().collect());
            wasi.allow_tcp(true)
                .allow_udp(false)
                .socket_addr_check(move |addr, use_| {
                    let ok = match use_ {
                        SocketAddrUse::TcpConnect => allow.contains(&addr),
                        // `connect` first binds implicitly to the wildcard address.
                        SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                        _ => false,
                    };
                    Box::pin(async move { ok })
                });
        } else {
            wasi.allow_tcp(false).allow_udp(false);
        }
        wasi.allow_ip_name_lookup(false);
        Ok((
            Self {
                wasi: wasi.build(),
                http: WasiHttpCtx::new(),
                table: ResourceTable::new(),
                hooks: HttpPolicy {
                    allow: Arc::new(caps.http_allow.clone()),
                },
                quota: MemoryQuota {
                    limit: settings.limits.memory_bytes,
                    used: 0,
                    exceeded: None,
                },
                name: settings.name.as_str().into(),
                stats,
            },
            stderr,
        ))
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl host::Host for PluginState {
    fn log(&mut self, level: host::Level, message: String) {
        let plugin = &*self.name;
        let message: String = message.chars().take(4096).collect();
        match level {
            host::Level::Trace => tracing::trace!(plugin, "{message}"),
            host::Level::Debug => tracing::debug!(plugin, "{message}"),
            host::Level::Info => tracing::info!(plugin, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, "{message}"),
            host::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn counter_add(&mut self, name: String, value: u64) {
        // At most 256 distinct names of at most 128 bytes per plugin, so a plugin
        // cannot grow host memory; counters saturate rather than overflow.
        if name.len() > MAX_METRIC_NAME {
            return;
        }
        if let Ok(mut c) = self.stats.counters.lock()
            && (c.len() < 256 || c.contains_key(&name))
        {
            let v = c.entry(name).or_default();
            *v = v.saturating_add(value);
        }
    }

    fn gauge_set(&mut self, name: String, value: f64) {
        if name.len() > MAX_METRIC_NAME {
            return;
        }
        if let Ok(mut g) = self.stats.gauges.lock()
            && (g.len() < 256 || g.contains_key(&name))
        {
            g.insert(name, value);
        }
    }

    fn now_millis(&mut self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}
