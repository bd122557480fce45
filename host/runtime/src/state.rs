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
/// Most distinct names of plugin counters (and, apart, of gauges) kept per plugin.
const MAX_METRIC_NAMES: usize = 256;

fn metric_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_METRIC_NAME
}

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
    /// Instances released after the changefeed was idle.
    pub idle_releases: AtomicU64,
    /// Instances stopped by a trap, quota or timeout.
    pub stops: AtomicU64,
    /// Largest linear memory sum seen in one instance, in bytes.
    pub peak_memory_bytes: AtomicU64,
    /// Linear memory growths refused at the quota (`memory.grow` gave the
    /// guest -1). A guest with a garbage collector collects and goes on; one
    /// that cannot allocate traps, and that stop is counted in `stops`.
    pub memory_refusals: AtomicU64,
    /// `host.log` lines dropped by the rate and volume limit.
    pub log_dropped: AtomicU64,
    /// The changefeed's checkpoint as last saved (`host.saved-checkpoint`).
    pub saved_checkpoint: AtomicU64,
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

    /// Adds `value` to the plugin counter `name` (what `host.counter-add` does).
    /// Refused, and `false` returned, for an empty name, a name over 128 bytes, or
    /// a 257th distinct name: a plugin cannot grow host memory or emit an empty
    /// label. Counters saturate rather than overflow.
    pub fn add_counter(&self, name: &str, value: u64) -> bool {
        if !metric_name_ok(name) {
            return false;
        }
        let Ok(mut c) = self.counters.lock() else {
            return false;
        };
        if c.len() >= MAX_METRIC_NAMES && !c.contains_key(name) {
            return false;
        }
        let v = c.entry(name.to_string()).or_default();
        *v = v.saturating_add(value);
        true
    }

    /// Sets the plugin gauge `name` to `value` (what `host.gauge-set` does).
    /// Refused, and `false` returned, for NaN and infinities (Prometheus
    /// consumers cannot aggregate them) and for the names [`Self::add_counter`]
    /// refuses; the gauge keeps its previous value.
    pub fn set_gauge(&self, name: &str, value: f64) -> bool {
        if !metric_name_ok(name) || !value.is_finite() {
            return false;
        }
        let Ok(mut g) = self.gauges.lock() else {
            return false;
        };
        if g.len() >= MAX_METRIC_NAMES && !g.contains_key(name) {
            return false;
        }
        g.insert(name.to_string(), value);
        true
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
    /// Why the last growth was refused: the stop reason if the call traps.
    pub(crate) exceeded: Option<String>,
    /// Growths refused since the last call settled.
    pub(crate) refused: u64,
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
            // Refused, not trapped: `memory.grow` returns -1, as a memory at
            // its maximum does. A guest that can free memory (a JavaScript
            // engine runs its garbage collector) goes on; one that cannot
            // traps, and the stop is reported with this reason (made once per
            // call: a guest may ask again and again).
            if self.exceeded.is_none() {
                self.exceeded = Some(format!(
                    "memory quota exceeded: the instance asked for {} bytes of linear memory in all, its quota is {} bytes",
                    self.used + grow,
                    self.limit
                ));
            }
            self.refused += 1;
            return Ok(false);
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

/// Log lines one instance may write per second through `host.log`.
pub const LOG_LINES_PER_SECOND: u32 = 100;
/// Log bytes one instance may write per second (each line counted at most
/// [`sluice_core::MAX_MESSAGE_BYTES`]).
pub const LOG_BYTES_PER_SECOND: usize = 64 << 10;

/// The `host.log` allowance of one instance, renewed every second.
#[derive(Debug)]
pub(crate) struct LogBudget {
    window: std::time::Instant,
    lines: u32,
    bytes: usize,
    dropped: u64,
}

impl LogBudget {
    fn new() -> Self {
        Self {
            window: std::time::Instant::now(),
            lines: 0,
            bytes: 0,
            dropped: 0,
        }
    }

    /// Starts a new one-second window if the last one is over; returns how many
    /// lines the last one dropped, if any.
    fn new_window(&mut self, now: std::time::Instant) -> Option<u64> {
        if now.duration_since(self.window) < std::time::Duration::from_secs(1) {
            return None;
        }
        self.window = now;
        self.lines = 0;
        self.bytes = 0;
        Some(std::mem::take(&mut self.dropped)).filter(|&n| n > 0)
    }

    /// Whether a line of `len` bytes may be written now.
    fn take(&mut self, len: usize) -> bool {
        let len = len.min(sluice_core::MAX_MESSAGE_BYTES);
        if self.lines >= LOG_LINES_PER_SECOND || self.bytes + len > LOG_BYTES_PER_SECOND {
            self.dropped += 1;
            return false;
        }
        self.lines += 1;
        self.bytes += len;
        true
    }
}

/// Largest set of HTTP header fields a plugin may build in one `fields` object.
pub(crate) const MAX_HTTP_FIELDS_BYTES: usize = 32 << 10;
/// What a host object other than header fields is counted as, in bytes, against
/// the memory quota (an estimate of its host-side size).
pub(crate) const HOST_OBJECT_BYTES: u64 = 512;

/// The CPU time one call may spend, measured as the CPU time of the thread that
/// runs it while it is being polled.
///
/// The store's epoch deadline is one tick ahead, so the deadline callback runs
/// about once per tick while guest code runs (the epoch is only checked in guest
/// code). Each run adds the thread's CPU time since the call was last polled (or
/// since the last run) and yields, so that a call can be timed out, cancelled or
/// moved while it computes. Waiting (a host call blocked on I/O or a sleep, or the
/// thread not being scheduled on a busy machine) uses no CPU time and is bounded by
/// `host-call-timeout-ms` instead.
#[derive(Debug, Default, Clone)]
pub(crate) struct CpuBudget {
    /// Slices (deadline callbacks) so far.
    pub(crate) used_ticks: u64,
    pub(crate) used_nanos: u64,
    pub(crate) budget_nanos: u64,
    /// The running thread's CPU time when the call was last polled or charged.
    pub(crate) since: Arc<AtomicU64>,
}

/// CPU time after which a call counts as computing for long: it moves to the
/// plugin's own thread (one epoch tick's worth).
pub(crate) const SLICE_NANOS: u64 = 5_000_000;

/// The calling thread's CPU time, in nanoseconds.
pub(crate) fn thread_cpu_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

impl CpuBudget {
    /// One more slice of guest code: charges the thread's CPU time since the
    /// last poll or charge, then `Ok(computing)` to go on (after a yield), where
    /// `computing` says the call has used at least [`SLICE_NANOS`] of CPU (so it
    /// belongs on the plugin's own thread), or a `Trap::Interrupt` once the budget
    /// is spent.
    pub(crate) fn tick(&mut self) -> wasmtime::Result<bool> {
        self.used_ticks += 1;
        let now = thread_cpu_nanos();
        let since = self.since.swap(now, Ordering::Relaxed);
        self.used_nanos = self.used_nanos.saturating_add(now.saturating_sub(since));
        if self.used_nanos >= self.budget_nanos {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        Ok(self.used_nanos >= SLICE_NANOS)
    }
}

/// Outgoing HTTP only to allow-listed hosts (wasi-http does not pass through the
/// socket check, so the policy sits here).
pub(crate) struct HttpPolicy {
    allow: Arc<Vec<String>>,
    /// Never reached, whatever `allow` says (checked against what the host
    /// resolves to when the request is sent, not only when it was granted).
    reserved: Arc<Vec<SocketAddr>>,
    /// Requests are refused once it closes.
    fence: sluice_core::WriteFence,
}

/// How long a request's host may take to resolve for the reserved check.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `uri`'s host resolves, now, to one of `reserved`.
async fn resolves_to_reserved(uri: &http::Uri, reserved: &[SocketAddr]) -> bool {
    let Some(host) = uri.host() else { return true };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let ips: Vec<std::net::IpAddr> = match host.parse() {
        Ok(ip) => vec![ip],
        Err(_) => {
            match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await
            {
                Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                // Unresolvable now: the send cannot connect either.
                _ => Vec::new(),
            }
        }
    };
    ips.iter()
        .any(|ip| reserved.iter().any(|r| crate::reaches(*ip, Some(port), *r)))
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
        if let Err(closed) = self.fence.check() {
            tracing::warn!(uri = %request.uri(), "Plugin HTTP request denied: {closed}");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        if !self.allows(request.uri()) {
            tracing::warn!(uri = %request.uri(), "Plugin HTTP request denied: host not on the allowlist.");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        let reserved = self.reserved.clone();
        Box::new(async move {
            use http_body_util::BodyExt;
            if !reserved.is_empty() && resolves_to_reserved(request.uri(), &reserved).await {
                tracing::warn!(uri = %request.uri(), "Plugin HTTP request denied: the host resolves to one of the server's own listeners.");
                return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
            }
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
    /// Guest CPU time of the call in progress, in epoch ticks.
    pub(crate) cpu: CpuBudget,
    log_budget: LogBudget,
    name: Arc<str>,
    changefeed: Arc<str>,
    stats: Arc<PluginStats>,
    refused_metric_logged: bool,
    /// The plugin's granted databases (a sink's), shared by its instances.
    sql: crate::sql::SharedPools,
}

impl PluginState {
    /// State for a new instance with exactly the granted capabilities. Returns the
    /// pipe that collects the plugin's stderr (panic messages end up there).
    pub(crate) fn new(
        settings: &PluginSettings,
        stats: Arc<PluginStats>,
        sql: crate::sql::SharedPools,
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
            let fence = caps.fence.clone();
            wasi.allow_tcp(true)
                .allow_udp(false)
                .socket_addr_check(move |addr, use_| {
                    let ok = fence.check().is_ok()
                        && match use_ {
                            SocketAddrUse::TcpConnect => allow.contains(&addr),
                            // `connect` first binds implicitly to the wildcard address.
                            SocketAddrUse::TcpBind => {
                                addr.ip().is_unspecified() && addr.port() == 0
                            }
                            _ => false,
                        };
                    Box::pin(async move { ok })
                });
        } else {
            wasi.allow_tcp(false).allow_udp(false);
        }
        wasi.allow_ip_name_lookup(false);
        // Every host object the plugin creates (files, sockets, streams, HTTP
        // fields, requests, bodies) is an entry of this table: bounded per
        // instance; one more fails the plugin's own call.
        let mut table = ResourceTable::new();
        table.set_max_capacity(settings.limits.max_resources);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_HTTP_FIELDS_BYTES);
        Ok((
            Self {
                wasi: wasi.build(),
                http,
                table,
                hooks: HttpPolicy {
                    allow: Arc::new(caps.http_allow.clone()),
                    reserved: Arc::new(caps.reserved.clone()),
                    fence: caps.fence.clone(),
                },
                quota: MemoryQuota {
                    limit: settings.limits.memory_bytes,
                    used: 0,
                    exceeded: None,
                    refused: 0,
                },
                cpu: CpuBudget::default(),
                log_budget: LogBudget::new(),
                name: settings.name.as_str().into(),
                changefeed: settings.changefeed.as_str().into(),
                stats,
                refused_metric_logged: false,
                sql,
            },
            stderr,
        ))
    }
}

impl PluginState {
    /// Host memory held by the plugin's host objects, in bytes: HTTP header
    /// fields by their size, every other object (file, socket, stream, request,
    /// body) at [`HOST_OBJECT_BYTES`]. Counted against the memory quota with the
    /// linear memories.
    pub(crate) fn host_bytes(&mut self) -> u64 {
        self.table
            .iter_mut()
            .map(
                |entry| match entry.downcast_ref::<wasmtime_wasi_http::FieldMap>() {
                    Some(fields) => fields
                        .iter()
                        .map(|(name, value)| (name.as_str().len() + value.len() + 64) as u64)
                        .sum::<u64>()
                        .max(HOST_OBJECT_BYTES),
                    None => HOST_OBJECT_BYTES,
                },
            )
            .sum()
    }

    /// Says once per instance that a plugin metric was refused (a plugin may call
    /// the import on every batch; the log must not grow with it).
    fn refused_metric(&mut self, name: &str, kind: &str) {
        if std::mem::replace(&mut self.refused_metric_logged, true) {
            return;
        }
        let name: String = name.chars().take(MAX_METRIC_NAME).collect();
        tracing::warn!(
            plugin = &*self.name,
            metric = %name,
            kind,
            "Plugin metric refused: names must be 1 to 128 bytes (at most 256 of them) and gauges finite; later refusals of this instance are not logged."
        );
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

impl crate::bindings::sql::Host for PluginState {
    async fn execute(
        &mut self,
        database: String,
        groups: Vec<Vec<crate::bindings::sql::Statement>>,
    ) -> Result<Vec<u64>, crate::bindings::sql::SqlError> {
        match self.sql.clone() {
            Some(pools) => pools.execute(&database, groups).await,
            None => Err(no_grants()),
        }
    }

    async fn query(
        &mut self,
        database: String,
        statement: crate::bindings::sql::Statement,
        max_rows: u32,
    ) -> Result<Vec<Vec<crate::bindings::sql::Value>>, crate::bindings::sql::SqlError> {
        match self.sql.clone() {
            Some(pools) => pools.query(&database, statement, max_rows).await,
            None => Err(no_grants()),
        }
    }
}

fn no_grants() -> crate::bindings::sql::SqlError {
    crate::bindings::sql::SqlError {
        kind: crate::bindings::sql::ErrorKind::Denied,
        code: 0,
        sqlstate: String::new(),
        message: "no database is granted to this plugin (capabilities.sql)".into(),
    }
}

impl host::Host for PluginState {
    fn log(&mut self, level: host::Level, message: String) {
        let now = std::time::Instant::now();
        if let Some(dropped) = self.log_budget.new_window(now) {
            tracing::warn!(
                plugin = &*self.name,
                dropped,
                "Plugin log lines dropped: over {LOG_LINES_PER_SECOND} lines or {LOG_BYTES_PER_SECOND} bytes in a second."
            );
        }
        if !self.log_budget.take(message.len()) {
            self.stats.log_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let plugin = &*self.name;
        let message = sluice_core::bounded_text(&message, sluice_core::MAX_MESSAGE_BYTES);
        match level {
            host::Level::Trace => tracing::trace!(plugin, "{message}"),
            host::Level::Debug => tracing::debug!(plugin, "{message}"),
            host::Level::Info => tracing::info!(plugin, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, "{message}"),
            host::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn counter_add(&mut self, name: String, value: u64) {
        // Metric names bounded: at most 256 distinct names of 1 to 128 bytes per
        // plugin, so a plugin cannot grow host memory.
        if !self.stats.add_counter(&name, value) {
            self.refused_metric(&name, "counter");
        }
    }

    fn gauge_set(&mut self, name: String, value: f64) {
        if !self.stats.set_gauge(&name, value) {
            self.refused_metric(&name, "gauge");
        }
    }

    fn now_millis(&mut self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn changefeed(&mut self) -> String {
        self.changefeed.to_string()
    }

    fn saved_checkpoint(&mut self) -> u64 {
        self.stats.saved_checkpoint.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_to_a_host_that_resolves_to_a_reserved_listener_is_caught_when_sent() {
        let reserved: Vec<SocketAddr> = vec![
            "0.0.0.0:8300".parse().unwrap(),
            "127.0.0.1:8301".parse().unwrap(),
        ];
        let hit = |uri: &str| {
            let uri: http::Uri = uri.parse().unwrap();
            let reserved = reserved.clone();
            async move { resolves_to_reserved(&uri, &reserved).await }
        };
        // A name resolved at send time, an address, IPv6 loopback.
        assert!(hit("http://localhost:8301/hook").await);
        assert!(hit("http://127.0.0.1:8300/").await);
        assert!(hit("http://[::1]:8300/").await);
        // Another port, another machine.
        assert!(!hit("http://localhost:9000/").await);
        assert!(!hit("https://localhost/").await);
        assert!(!hit("http://10.255.255.1:8300/").await);
    }

    #[test]
    fn gauges_refuse_nan_infinities_and_empty_names() {
        let stats = PluginStats::default();
        assert!(stats.set_gauge("depth", 2.5));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(!stats.set_gauge("depth", bad), "{bad}");
            assert!(!stats.set_gauge("other", bad), "{bad}");
        }
        assert!(!stats.set_gauge("", 1.0));
        assert!(!stats.set_gauge(&"x".repeat(MAX_METRIC_NAME + 1), 1.0));
        assert!(stats.set_gauge(&"x".repeat(MAX_METRIC_NAME), -1.0));
        // The refused values left the earlier one in place and added no name.
        let gauges = stats.gauges();
        assert_eq!(gauges.len(), 2, "{gauges:?}");
        assert_eq!(gauges["depth"], 2.5);
    }

    #[test]
    fn counters_refuse_empty_names_and_saturate() {
        let stats = PluginStats::default();
        assert!(!stats.add_counter("", 1));
        assert!(stats.add_counter("rows", u64::MAX - 1));
        assert!(stats.add_counter("rows", 5));
        assert_eq!(
            stats.counters().into_iter().collect::<Vec<_>>(),
            [("rows".to_string(), u64::MAX)]
        );
    }

    #[test]
    fn at_most_256_names_of_each_kind_are_kept() {
        let stats = PluginStats::default();
        for i in 0..MAX_METRIC_NAMES {
            assert!(stats.add_counter(&format!("c{i}"), 1));
            assert!(stats.set_gauge(&format!("g{i}"), 1.0));
        }
        assert!(!stats.add_counter("one-more", 1));
        assert!(!stats.set_gauge("one-more", 1.0));
        // Known names still update.
        assert!(stats.add_counter("c0", 1));
        assert!(stats.set_gauge("g0", 3.0));
        assert_eq!(stats.counters().len(), MAX_METRIC_NAMES);
        assert_eq!(stats.counters()["c0"], 2);
        assert_eq!(stats.gauges()["g0"], 3.0);
    }
}
