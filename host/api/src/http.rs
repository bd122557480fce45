//! The HTTP listener: `/metrics` (Prometheus text), `/healthz`, and JSON status
//! under `/api/v1/`. Every endpoint reads the owner's snapshot: none waits for
//! the owner.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use serde_json::{Value, json};
use sluice_capture::{LocalRun, PluginCounters, SwapStats};
use sluice_core::CommitTs;
use sluice_owner::{ChangefeedId, Clock, FeedState, FeedView, SystemClock};
use sluice_runtime::LatencyHistogram;

use crate::auth::{auth_error_response, require_token};
use crate::error::http_status;
use crate::grpc;
use crate::node::Node;
use sluice_auth::{Access, Caller, TenantQuota, TenantUsage};
use sluice_runtime::ShareUsage;

type State = Arc<Node>;

/// The content type of a `/metrics` answer (Prometheus text).
pub const METRICS_CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// The HTTP endpoints, answering from `node`. Every `/api/v1` route needs a
/// token; `/metrics` and `/healthz` too unless `node.open_metrics`.
pub fn router(state: Arc<Node>) -> axum::Router {
    let authenticated = || axum::middleware::from_fn_with_state(state.auth.clone(), require_token);
    let api = axum::Router::new()
        .route("/api/v1/status", get(status))
        .route("/api/v1/captures", get(captures))
        .route("/api/v1/changefeeds", get(changefeeds))
        .route("/api/v1/changefeeds/{tenant}/{name}", get(changefeed))
        .route_layer(authenticated());
    let mut ops = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz));
    if !state.open_metrics {
        ops = ops.route_layer(authenticated());
    }
    api.merge(ops).with_state(state)
}

/// The caller of an authenticated route.
type Authed = axum::Extension<Caller>;

/// Which changefeeds `caller` may see through a listing naming `tenant`
/// (every tenant's for an admin naming none).
fn scope(caller: &Caller, tenant: &str) -> Result<String, sluice_auth::AuthError> {
    caller.scope(tenant).map(Option::unwrap_or_default)
}

type S = axum::extract::State<State>;

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({ "error": message.into() }))).into_response()
}

async fn healthz(axum::extract::State(s): S) -> Response {
    let (healthy, detail) = s.health().await;
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        format!("{}: {detail}\n", if healthy { "ok" } else { "unhealthy" }),
    )
        .into_response()
}

async fn status(axum::extract::State(s): S, axum::Extension(caller): Authed) -> Response {
    let (healthy, detail) = s.health().await;
    let tenant = match scope(&caller, "") {
        Ok(t) => t,
        Err(e) => return auth_error_response(&e),
    };
    let feeds = s.owner.snapshot().list(&tenant);
    let mut by_state = serde_json::Map::new();
    for v in &feeds {
        let n = by_state
            .entry(v.changefeed.state().as_str())
            .or_insert(json!(0));
        *n = json!(n.as_u64().unwrap_or(0) + 1);
    }
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "capture": s.capture_id,
        "address": s.addr.to_string(),
        "healthy": healthy,
        "detail": detail,
        "started-at-ms": s.started_at_ms,
        "uptime-s": s.started.elapsed().as_secs(),
        "changefeeds": feeds.len(),
        "by-state": by_state,
        "tokio-tasks": tokio::runtime::Handle::current().metrics().num_alive_tasks(),
        "plugin-threads": sluice_runtime::live_plugin_threads(),
        "rss-bytes": rss_bytes(),
    }))
    .into_response()
}

/// The process's resident memory, from `/proc/self/statm` (0 where there is none).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

async fn captures(axum::extract::State(s): S, axum::Extension(caller): Authed) -> Response {
    let tenant = match caller.scope("") {
        Ok(tenant) => tenant,
        Err(e) => return auth_error_response(&e),
    };
    match grpc::captures(&s, tenant.as_deref()).await {
        Ok(list) => Json(
            list.iter()
                .map(crate::json::capture_json)
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.message()),
    }
}

#[derive(serde::Deserialize)]
struct ListQuery {
    #[serde(default)]
    tenant: String,
}

/// A changefeed with its status, as JSON: the shape of `sluice cli changefeed
/// query --output json`, without the file.
pub fn view_json(node: &Node, v: &FeedView) -> Value {
    let mut out = crate::json::changefeed_json(&grpc::changefeed_pb(v));
    let dir = node.sink_data_dir(v);
    out["status"] = crate::json::status_json(&grpc::status_pb(v, dir.as_deref()));
    out
}

async fn changefeeds(
    axum::extract::State(s): S,
    axum::Extension(caller): Authed,
    Query(q): Query<ListQuery>,
) -> Response {
    let tenant = match scope(&caller, &q.tenant) {
        Ok(t) => t,
        Err(e) => return auth_error_response(&e),
    };
    let feeds = s.owner.snapshot().list(&tenant);
    Json(feeds.iter().map(|v| view_json(&s, v)).collect::<Vec<_>>()).into_response()
}

async fn changefeed(
    axum::extract::State(s): S,
    axum::Extension(caller): Authed,
    Path((tenant, name)): Path<(String, String)>,
) -> Response {
    if let Err(e) = caller.check(&tenant, Access::Read) {
        return auth_error_response(&e);
    }
    let id = match ChangefeedId::new(tenant, name) {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    match s.owner.snapshot().get(&id) {
        Ok(v) => Json(view_json(&s, &v)).into_response(),
        Err(e) => error(http_status(&e), e.to_string()),
    }
}

// ------------------------------------------------------------------ metrics

/// Label pairs; one with an empty value is left out (Prometheus reads an empty
/// label as an absent one, so this changes no series, only what is written).
fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).to_string());
            l.set_value((*v).to_string());
            l
        })
        .collect()
}

struct Families(Vec<MetricFamily>);

impl Families {
    fn push(&mut self, name: &str, help: &str, kind: MetricType, metric: Metric) {
        if let Some(f) = self.0.iter_mut().find(|f| f.name() == name) {
            f.mut_metric().push(metric);
            return;
        }
        let mut f = MetricFamily::default();
        f.set_name(name.to_string());
        f.set_help(help.to_string());
        f.set_field_type(kind);
        f.set_metric(vec![metric]);
        self.0.push(f);
    }

    fn gauge(&mut self, name: &str, help: &str, l: &[(&str, &str)], value: f64) {
        let mut g = Gauge::default();
        g.set_value(value);
        let mut m = Metric::from_label(labels(l));
        m.set_gauge(g);
        self.push(name, help, MetricType::GAUGE, m);
    }

    fn counter(&mut self, name: &str, help: &str, l: &[(&str, &str)], value: f64) {
        let mut c = Counter::default();
        c.set_value(value);
        let mut m = Metric::from_label(labels(l));
        m.set_counter(c);
        self.push(name, help, MetricType::COUNTER, m);
    }
}

/// A latency histogram as a Prometheus one (seconds, cumulative buckets).
fn histogram(h: &LatencyHistogram) -> Histogram {
    let mut out = Histogram::default();
    out.set_sample_count(h.count());
    out.set_sample_sum(h.sum_seconds());
    out.set_bucket(
        sluice_runtime::LATENCY_BUCKETS
            .iter()
            .zip(h.cumulative())
            .map(|(bound, count)| {
                let mut b = Bucket::default();
                b.set_upper_bound(*bound);
                b.set_cumulative_count(count);
                b
            })
            .collect(),
    );
    out
}

/// One tenant's records for `/metrics`: its quota, what it holds, and what
/// its plugins used of this server's plugin threads (if they ran here).
pub type TenantSeries = (String, TenantQuota, TenantUsage, Option<ShareUsage>);

/// Each tenant's use and quotas (`sluice_tenant_*`), from its records.
pub fn render_tenant_metrics(tenants: &[TenantSeries]) -> String {
    let mut f = Families(Vec::new());
    for (tenant, quota, usage, cpu) in tenants {
        let l = [("tenant", tenant.as_str())];
        if let Some(cpu) = cpu {
            f.counter(
                "sluice_tenant_plugin_cpu_seconds_total",
                "Guest CPU time of the tenant's plugin calls on this server's plugin threads (past a call's first slice).",
                &l,
                cpu.cpu_nanos as f64 / 1e9,
            );
            f.counter(
                "sluice_tenant_plugin_turn_waits_total",
                "Polls of the tenant's plugin calls that waited for a turn (other tenants first by weight, or its concurrency limit).",
                &l,
                cpu.waits as f64,
            );
            f.counter(
                "sluice_tenant_plugin_throttled_total",
                "Polls of the tenant's plugin calls that waited for its CPU cap to refill.",
                &l,
                cpu.throttled as f64,
            );
        }
        f.gauge(
            "sluice_tenant_changefeeds",
            "Changefeeds of the tenant that are not removed.",
            &l,
            usage.changefeeds as f64,
        );
        f.gauge(
            "sluice_tenant_plugin_versions",
            "Plugin versions the tenant uploaded.",
            &l,
            usage.plugin_versions as f64,
        );
        f.gauge(
            "sluice_tenant_plugin_bytes",
            "Bytes of the plugins the tenant uploaded.",
            &l,
            usage.plugin_bytes as f64,
        );
        f.gauge(
            "sluice_tenant_plugin_memory_bytes",
            "Summed limits.memory of the plugins of the tenant's changefeeds (sinks, filters, shadow candidates).",
            &l,
            usage.plugin_memory as f64,
        );
        f.gauge(
            "sluice_tenant_buffer_bytes",
            "Summed host-side buffer bounds of the tenant's changefeeds (event caches, shadow queues).",
            &l,
            usage.buffer_bytes as f64,
        );
        f.gauge(
            "sluice_tenant_sql_connections",
            "Summed connections the tenant's plugins may open to granted databases.",
            &l,
            usage.sql_connections as f64,
        );
        for (name, max) in [
            ("changefeeds", quota.max_changefeeds),
            ("plugin-versions", quota.max_plugin_versions),
            ("plugin-bytes", quota.max_plugin_bytes),
            ("plugin-memory", quota.max_plugin_memory),
            ("buffer-bytes", quota.max_buffer_bytes),
            ("sql-connections", quota.max_sql_connections),
            ("cpu-weight", quota.cpu_weight),
            ("cpu-millicores", quota.max_cpu_millicores),
            ("plugin-concurrency", quota.max_plugin_concurrency),
        ] {
            if let Some(max) = max {
                f.gauge(
                    "sluice_tenant_quota",
                    "A quota of the tenant, in the unit of the gauge it bounds (absent: no limit).",
                    &[("tenant", tenant.as_str()), ("quota", name)],
                    max as f64,
                );
            }
        }
    }
    let mut out = String::new();
    if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&f.0, &mut out) {
        tracing::error!(error = %e, "Tenant metrics could not be encoded.");
    }
    out
}

/// Every metric, computed at scrape time from the owner's snapshot and the
/// counters of each changefeed's plugins.
pub fn render_metrics(
    feeds: &[(FeedView, PluginCounters, Arc<SwapStats>)],
    healthy: bool,
) -> String {
    let mut f = Families(Vec::new());
    let now = SystemClock.now_ms();
    f.gauge(
        "sluice_up",
        "1 while the server can reach its meta store.",
        &[],
        if healthy { 1.0 } else { 0.0 },
    );
    for (v, plugins, swaps) in feeds {
        let info = &v.changefeed.info;
        let (tenant, name) = (info.id.tenant(), info.id.name());
        let l = [("tenant", tenant), ("changefeed", name)];
        let checkpoint = v.changefeed.checkpoint().get();
        let resolved = v.resolved_ts.get();
        let lag = |ts: u64| {
            if ts == 0 {
                0.0
            } else {
                now.saturating_sub(CommitTs::new(ts).physical_millis()) as f64 / 1000.0
            }
        };
        // A TSO does not fit a float exactly; its physical part does, in the
        // base unit (seconds since the Unix epoch, with the milliseconds).
        let seconds = |ts: u64| CommitTs::new(ts).physical_millis() as f64 / 1000.0;
        f.gauge(
            "sluice_changefeed_checkpoint_timestamp_seconds",
            "Physical time of the checkpoint ts (seconds since the Unix epoch): every change committed up to it is downstream.",
            &l,
            seconds(checkpoint),
        );
        f.gauge(
            "sluice_changefeed_resolved_timestamp_seconds",
            "Physical time of the resolved ts (seconds since the Unix epoch): the source delivered every change up to it.",
            &l,
            seconds(resolved),
        );
        f.gauge(
            "sluice_changefeed_checkpoint_lag_seconds",
            "Wall-clock time since the checkpoint's commit ts.",
            &l,
            lag(checkpoint),
        );
        f.gauge(
            "sluice_changefeed_resolved_lag_seconds",
            "Wall-clock time since the resolved ts.",
            &l,
            lag(resolved),
        );
        f.gauge(
            "sluice_changefeed_epoch",
            "Epoch of the changefeed's latest (re)start.",
            &l,
            info.epoch.0 as f64,
        );
        for state in FeedState::ALL {
            f.gauge(
                "sluice_changefeed_state",
                "1 for the changefeed's current state, 0 for the others.",
                &[
                    ("tenant", tenant),
                    ("changefeed", name),
                    ("state", state.as_str()),
                ],
                if state == info.state { 1.0 } else { 0.0 },
            );
        }
        let c = v.counters();
        f.counter(
            "sluice_changefeed_rows_read_total",
            "Row changes read from the source.",
            &l,
            c.rows_read as f64,
        );
        f.counter(
            "sluice_changefeed_rows_written_total",
            "Row changes handed to the sink (after filters).",
            &l,
            c.rows_written as f64,
        );
        f.counter(
            "sluice_changefeed_bytes_written_total",
            "Bytes of row data handed to the sink.",
            &l,
            c.bytes_written as f64,
        );
        f.counter(
            "sluice_changefeed_retries_total",
            "Plugin calls that failed and were retried.",
            &l,
            c.retries as f64,
        );
        f.counter(
            "sluice_source_events_total",
            "Upstream events the source read (binlog events for a binlog source).",
            &l,
            c.source_events as f64,
        );
        f.counter(
            "sluice_source_skipped_statements_total",
            "Upstream statements the source did not recognise and did not replicate (each is logged with its binlog position).",
            &l,
            c.source_skipped_statements as f64,
        );
        let (source_time, cache) = v
            .progress
            .as_ref()
            .map_or((0, 0), |p| (p.source_time_ms, p.event_cache_bytes));
        f.gauge(
            "sluice_source_lag_seconds",
            "Wall-clock time since the upstream time of the source's last event (0 until it read one).",
            &l,
            if source_time == 0 {
                0.0
            } else {
                now.saturating_sub(source_time) as f64 / 1000.0
            },
        );
        f.gauge(
            "sluice_event_cache_bytes",
            "Bytes of row data waiting between the source and the dispatchers.",
            &l,
            cache as f64,
        );
        f.counter(
            "sluice_changefeed_errors_total",
            "Errors the changefeed recorded since it was created (the newest are in the status).",
            &l,
            info.error_count as f64,
        );
        if let Some(r) = v.progress.as_ref().and_then(|p| p.redo) {
            f.gauge(
                "sluice_redo_resolved_ts",
                "The redo log's resolved ts: every event at or below it is durable in the log.",
                &l,
                r.resolved_ts as f64,
            );
            f.gauge(
                "sluice_redo_lag_seconds",
                "Wall-clock time since the redo log's resolved ts (what a disaster now would lose: the RPO).",
                &l,
                crate::grpc::lag_ms(r.resolved_ts, now) as f64 / 1000.0,
            );
            f.gauge(
                "sluice_redo_checkpoint_ts",
                "The redo log's checkpoint ts (what the sink has).",
                &l,
                r.checkpoint_ts as f64,
            );
            f.counter(
                "sluice_redo_write_bytes_total",
                "Bytes written to the redo log by the running processor.",
                &l,
                r.bytes_written as f64,
            );
            f.counter(
                "sluice_redo_flushes_total",
                "Flushes of the redo log by the running processor.",
                &l,
                r.flushes as f64,
            );
            f.counter(
                "sluice_redo_flush_seconds_total",
                "Time the redo log's flushes took (write and fsync, or upload).",
                &l,
                r.flush_ms as f64 / 1000.0,
            );
            f.counter(
                "sluice_redo_writer_busy_seconds_total",
                "Time the redo writer was busy (encoding, or a flush being written; they overlap and count once): its rate is the writer's busy ratio.",
                &l,
                r.busy_ms as f64 / 1000.0,
            );
            f.gauge(
                "sluice_redo_fence_waiting_events",
                "Events held at the redo fence until the log has them durably.",
                &l,
                r.waiting_events as f64,
            );
            f.gauge(
                "sluice_redo_write_failing",
                "1 while the latest write to the redo log failed (it is tried again).",
                &l,
                r.failing as f64,
            );
        }
        if let Some(r) = v.progress.as_ref().and_then(|p| p.validator.as_ref()) {
            for (result, count) in [
                ("matched", r.matched),
                ("mismatched", r.mismatched),
                ("skipped", r.skipped),
            ] {
                f.counter(
                    "sluice_changefeed_validator_rows_total",
                    "Rows the continuous validator read back downstream, by result (counted since the processor started): matched, mismatched (still different after every retry), skipped (its cache or queue was full).",
                    &[("tenant", tenant), ("changefeed", name), ("result", result)],
                    count as f64,
                );
            }
            f.gauge(
                "sluice_changefeed_validator_pending_rows",
                "Rows the continuous validator has yet to check or re-check.",
                &l,
                r.pending as f64,
            );
        }
        for (outcome, count) in [
            ("swapped", &swaps.swaps),
            ("rolled-back", &swaps.rollbacks),
            ("refused", &swaps.refused),
        ] {
            f.counter(
                "sluice_changefeed_swaps_total",
                "Sink and filter swaps this server carried out (swapped at a barrier), rolled back on probation, or refused at the barrier.",
                &[("tenant", tenant), ("changefeed", name), ("outcome", outcome)],
                count.load(Ordering::Relaxed) as f64,
            );
        }
        for (name_, help, count) in [
            (
                "sluice_changefeed_shadow_rows_compared_total",
                "Rows whose output a shadow filter candidate and the live filter were compared on.",
                &swaps.shadow_rows_compared,
            ),
            (
                "sluice_changefeed_shadow_differences_total",
                "Rows where a shadow filter candidate's output differed from the live filter's.",
                &swaps.shadow_differences,
            ),
            (
                "sluice_changefeed_shadow_errors_total",
                "Calls of a shadow candidate that failed.",
                &swaps.shadow_errors,
            ),
            (
                "sluice_changefeed_shadow_dropped_total",
                "Shadow candidates dropped (behind past their bound, or failing).",
                &swaps.shadow_dropped,
            ),
        ] {
            f.counter(name_, help, &l, count.load(Ordering::Relaxed) as f64);
        }
        let mut m = Metric::from_label(labels(&l));
        m.set_histogram(histogram(&swaps.pause));
        f.push(
            "sluice_changefeed_swap_pause_seconds",
            "How long delivery paused at each swap's barrier.",
            MetricType::HISTOGRAM,
            m,
        );
        plugin_series(&mut f, (tenant, name), plugins);
    }
    encode(&f)
}

/// The series of a changefeed's plugins: `(tenant, changefeed)` and their
/// counters.
fn plugin_series(f: &mut Families, (tenant, name): (&str, &str), plugins: &PluginCounters) {
    for (role, plugin, stats) in plugins {
        let pl = [
            ("tenant", tenant),
            ("changefeed", name),
            ("role", role.as_str()),
            ("plugin", plugin.as_str()),
        ];
        f.gauge(
            "sluice_plugin_memory_peak_bytes",
            "Largest linear memory of one instance of the plugin.",
            &pl,
            stats.peak_memory_bytes.load(Ordering::Relaxed) as f64,
        );
        f.counter(
            "sluice_plugin_memory_refusals_total",
            "Linear memory growths refused at the plugin's memory quota.",
            &pl,
            stats.memory_refusals.load(Ordering::Relaxed) as f64,
        );
        f.counter(
            "sluice_plugin_traps_total",
            "Instances stopped by a trap, quota or timeout.",
            &pl,
            stats.stops.load(Ordering::Relaxed) as f64,
        );
        f.counter(
            "sluice_plugin_log_dropped_total",
            "host.log lines dropped by the per-instance rate and volume limit.",
            &pl,
            stats.log_dropped.load(Ordering::Relaxed) as f64,
        );
        f.counter(
            "sluice_plugin_instantiations_total",
            "Instances created.",
            &pl,
            stats.instantiations.load(Ordering::Relaxed) as f64,
        );
        f.counter(
            "sluice_plugin_idle_releases_total",
            "Instances released after the changefeed was idle (pipeline.release-idle-ms); the next rows start a new one.",
            &pl,
            stats.idle_releases.load(Ordering::Relaxed) as f64,
        );
        // What the plugin reports itself (`host.counter-add`, `host.gauge-set`):
        // two families whose names do not collide (a counter `x_total` is the
        // family `x`). The host import refuses empty names and non-finite
        // gauges, so none is stored.
        fn named<'a>(pl: &[(&'a str, &'a str)], metric: &'a str) -> Vec<(&'a str, &'a str)> {
            let mut l = pl.to_vec();
            l.push(("name", metric));
            l
        }
        for (metric, value) in stats.counters() {
            f.counter(
                "sluice_plugin_counter_total",
                "Counters the plugin reports (host.counter-add), by name.",
                &named(&pl, &metric),
                value as f64,
            );
        }
        for (metric, value) in stats.gauges() {
            f.gauge(
                "sluice_plugin_gauge",
                "Gauges the plugin reports (host.gauge-set), by name.",
                &named(&pl, &metric),
                value,
            );
        }
        let mut m = Metric::from_label(labels(&pl));
        m.set_histogram(histogram(&stats.call_latency));
        f.push(
            "sluice_plugin_call_duration_seconds",
            "Latency of plugin calls (write, flush, transform, ...).",
            MetricType::HISTOGRAM,
            m,
        );
    }
}

/// This capture's own series: `sluice_capture_info`, and per changefeed
/// running here its run's progress (`sluice_capture_run_*`, labelled with
/// the `side` of the run: `whole`, `reads` or `receives`); with `plugins`,
/// the plugin series of those runs as well (a standby's `/metrics`: the
/// owner's has every changefeed's).
pub fn render_capture_metrics(
    capture: &str,
    owner: bool,
    runs: &[LocalRun],
    plugins: bool,
) -> String {
    let mut f = Families(Vec::new());
    let seconds = |ts: u64| CommitTs::new(ts).physical_millis() as f64 / 1000.0;
    f.gauge(
        "sluice_capture_info",
        "1, labelled with this capture's id and whether it is the owner.",
        &[
            ("capture", capture),
            ("owner", if owner { "true" } else { "false" }),
        ],
        1.0,
    );
    f.gauge(
        "sluice_capture_runs",
        "Changefeed runs (whole, or one side of a split run) on this capture.",
        &[("capture", capture)],
        runs.len() as f64,
    );
    for run in runs {
        let (tenant, name) = (run.id.tenant(), run.id.name());
        let l = [
            ("tenant", tenant),
            ("changefeed", name),
            ("capture", capture),
            ("side", run.side.as_str()),
        ];
        f.gauge(
            "sluice_capture_run_epoch",
            "Changefeed epoch of the run on this capture.",
            &l,
            run.epoch.0 as f64,
        );
        if let Some(p) = run.live.progress() {
            f.gauge(
                "sluice_capture_run_checkpoint_timestamp_seconds",
                "Physical time of the run's checkpoint on this capture (seconds since the Unix epoch).",
                &l,
                seconds(p.checkpoint_ts.get()),
            );
            f.gauge(
                "sluice_capture_run_resolved_timestamp_seconds",
                "Physical time of the run's resolved ts on this capture (seconds since the Unix epoch).",
                &l,
                seconds(p.resolved_ts.get()),
            );
            f.counter(
                "sluice_capture_run_rows_read_total",
                "Row changes the run on this capture read (from the source, or shipped to it).",
                &l,
                p.rows_read as f64,
            );
            f.counter(
                "sluice_capture_run_rows_written_total",
                "Row changes the run on this capture handed to its sink.",
                &l,
                p.rows_written as f64,
            );
            f.gauge(
                "sluice_capture_run_event_cache_bytes",
                "Bytes of events the run on this capture holds.",
                &l,
                p.event_cache_bytes as f64,
            );
        }
        if plugins {
            plugin_series(&mut f, (tenant, name), &run.plugins);
        }
    }
    encode(&f)
}

/// The text form of `f`.
fn encode(f: &Families) -> String {
    let mut out = String::new();
    let encoder = prometheus::TextEncoder::new();
    if let Err(e) = encoder.encode_utf8(&f.0, &mut out) {
        tracing::error!(error = %e, "Metrics could not be encoded.");
    }
    out
}

async fn metrics(axum::extract::State(s): S, caller: Option<Authed>) -> Response {
    let (healthy, _) = s.health().await;
    // A tenant's token sees its own tenant's series; no token (when
    // `/metrics` is open) or an admin's, every tenant's.
    let tenant = match caller {
        Some(axum::Extension(c)) => match scope(&c, "") {
            Ok(t) => t,
            Err(e) => return auth_error_response(&e),
        },
        None => String::new(),
    };
    let mut tenants = Vec::new();
    let shares = s.registry.runtime().shares().usage();
    if let Ok(records) = s.tenancy.list_tenants().await {
        for record in records {
            if !tenant.is_empty() && record.name != tenant {
                continue;
            }
            if let Ok(usage) = s.tenant_usage(&record.name).await {
                let cpu = shares.iter().find(|u| u.tenant == record.name).cloned();
                tenants.push((record.name, record.quota, usage, cpu));
            }
        }
    }
    let feeds: Vec<_> = s
        .owner
        .snapshot()
        .list(&tenant)
        .into_iter()
        .map(|v| {
            let plugins = s.capture.plugin_counters(v.changefeed.id());
            let swaps = s.capture.swap_stats(v.changefeed.id());
            (v, plugins, swaps)
        })
        .collect();
    let runs = s.capture.runs(&tenant);
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        render_metrics(&feeds, healthy)
            + &render_tenant_metrics(&tenants)
            + &render_capture_metrics(&s.capture_id, true, &runs, false),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use sluice_owner::{Changefeed, ChangefeedInfo, Epoch, ErrorKind, ErrorRecord, PluginRef};
    use sluice_runtime::PluginStats;

    use super::*;
    use sluice_owner::Totals;

    /// `shop/orders` with its checkpoint at 1700000000.250 s, resolved at
    /// 1700000001.500 s, `errors` errors recorded, and a sink that reported a
    /// counter and a gauge.
    fn view(errors: u64) -> (FeedView, PluginCounters, Arc<SwapStats>) {
        let id = ChangefeedId::new("shop", "orders").unwrap();
        let info = ChangefeedInfo::new(
            id,
            sluice_config::ChangefeedConfig {
                source: sluice_config::SourceConfig::Datagen(Default::default()),
                filter: Default::default(),
                filters: Vec::new(),
                sink: PluginRef::new("sink-file@0.1.0".parse().unwrap()),
                pipeline: Default::default(),
                validator: Default::default(),
                consistent: Default::default(),
            },
            CommitTs::compose(1_700_000_000_250, 7),
        );
        let mut changefeed = Changefeed::create(info, 0).unwrap();
        for i in 0..errors {
            changefeed.info.record_error(ErrorRecord {
                at_ms: i,
                epoch: Epoch(1),
                kind: ErrorKind::Retryable,
                message: format!("e{i}"),
            });
        }
        let stats = Arc::new(PluginStats::default());
        assert!(stats.add_counter("rows", 12));
        assert!(stats.set_gauge("depth", 2.5));
        let view = FeedView {
            changefeed,
            resolved_ts: CommitTs::compose(1_700_000_001_500, 0),
            progress: None,
            totals: Totals::default(),
            last_advance_ms: 0,
            shadow: None,
        };
        let swaps = Arc::new(SwapStats::default());
        swaps.swaps.fetch_add(2, Ordering::Relaxed);
        swaps.pause.record(std::time::Duration::from_millis(3));
        (
            view,
            vec![("sink".into(), "sink-file@0.1.0".into(), stats)],
            swaps,
        )
    }

    /// The value of the one sample whose line starts with `series`.
    fn value(text: &str, series: &str) -> f64 {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .collect();
        assert_eq!(lines.len(), 1, "one {series} in:\n{text}");
        lines[0][series.len()..].trim().parse().unwrap()
    }

    #[test]
    fn timestamps_are_seconds_since_the_epoch() {
        let text = render_metrics(&[view(0)], true);
        let l = r#"{tenant="shop",changefeed="orders"}"#;
        assert_eq!(
            value(
                &text,
                &format!("sluice_changefeed_checkpoint_timestamp_seconds{l}")
            ),
            1_700_000_000.25
        );
        assert_eq!(
            value(
                &text,
                &format!("sluice_changefeed_resolved_timestamp_seconds{l}")
            ),
            1_700_000_001.5
        );
        assert!(!text.contains("_ms"), "no milliseconds:\n{text}");
        // Lags are seconds too: the ts is years in the past.
        let lag = value(
            &text,
            &format!("sluice_changefeed_checkpoint_lag_seconds{l}"),
        );
        assert!(lag > 3600.0 && lag < 1e10, "{lag}");
    }

    #[test]
    fn errors_total_counts_every_error_not_the_kept_records() {
        let text = render_metrics(&[view(sluice_owner::MAX_RECORDS as u64 + 4)], true);
        assert_eq!(
            value(
                &text,
                r#"sluice_changefeed_errors_total{tenant="shop",changefeed="orders"}"#
            ),
            9.0
        );
    }

    #[test]
    fn plugin_counters_and_gauges_are_separate_families() {
        let text = render_metrics(&[view(0)], true);
        let pl = r#"tenant="shop",changefeed="orders",role="sink",plugin="sink-file@0.1.0""#;
        assert_eq!(
            value(
                &text,
                &format!("sluice_plugin_counter_total{{{pl},name=\"rows\"}}")
            ),
            12.0
        );
        assert_eq!(
            value(
                &text,
                &format!("sluice_plugin_gauge{{{pl},name=\"depth\"}}")
            ),
            2.5
        );
        // `_total` on counters only; no two families share a name (a counter
        // `x_total` is the family `x`), and no two write the same series.
        let mut families = std::collections::BTreeSet::new();
        let mut series = std::collections::BTreeSet::new();
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = line.split_once(' ').unwrap();
            assert_eq!(name.ends_with("_total"), kind == "counter", "{line}");
            let family = name.strip_suffix("_total").unwrap_or(name);
            assert!(families.insert(family.to_string()), "two families {family}");
            let written = match kind {
                "histogram" => ["_bucket", "_sum", "_count"]
                    .map(|s| format!("{name}{s}"))
                    .to_vec(),
                _ => vec![name.to_string()],
            };
            for s in written {
                assert!(series.insert(s.clone()), "two families write {s}");
            }
        }
        assert!(families.len() > 10, "{families:?}");
    }

    #[test]
    fn no_label_is_written_with_an_empty_value() {
        let pairs = labels(&[("tenant", "shop"), ("name", ""), ("role", "sink")]);
        let names: Vec<&str> = pairs.iter().map(|l| l.name()).collect();
        assert_eq!(names, ["tenant", "role"]);
        let text = render_metrics(&[view(1)], false);
        assert!(!text.contains("=\"\""), "{text}");
        assert!(text.contains("sluice_up 0"), "{text}");
    }
}
