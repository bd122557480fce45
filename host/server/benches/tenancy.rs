//! Multi-tenant hosting of `sluice server` (release build), printed as tables and
//! written to `target/bench/tenancy.json`.
//!
//! 1. **Noisy neighbours.** Ten quiet tenants each run datagen -> sink-blackhole
//!    as fast as it goes. Rounds alternate two configurations, measured side by
//!    side: the quiet tenants alone, and next to four noisy ones: a sink that
//!    spins (two changefeeds), one that allocates to its memory quota and traps,
//!    one that floods its log, and a tenant uploading large plugins (each
//!    different, so each is precompiled) in a loop. Figures: the quiet
//!    tenants' summed rows/s and the p99 of `GetStatus` (one quiet tenant's
//!    token) over each window; medians over the rounds, and the median of
//!    each round's own ratio (its two windows back to back); the server's CPU by
//!    thread name in the last round of each. `SLUICE_BENCH_NOISY` (a
//!    comma-separated subset of spin, oom, flood, upload) picks the
//!    neighbours, `SLUICE_BENCH_ROUNDS` (5) and `SLUICE_BENCH_WINDOW_S` (8)
//!    the rounds.
//! 2. **Density.** `SLUICE_BENCH_TENANTS` (100) tenants × `SLUICE_BENCH_FEEDS`
//!    (10) changefeeds of datagen -> sink-blackhole that write a few rows and go
//!    quiet (their instances released after two idle seconds): the server's
//!    RSS, open files, threads and CPU while they idle, the time a restarted
//!    server takes until every processor runs again, and the latency of
//!    listing every changefeed.
//!
//! Run with `cargo xtask bench-tenancy` (it builds the plugins first).

use std::time::{Duration, Instant};

use sluice_api::client::{Authorized, Bearer};
use sluice_api::v1 as pb;
use sluice_api::v1::changefeed_service_client::ChangefeedServiceClient;
use sluice_api::v1::cluster_service_client::ClusterServiceClient;
use sluice_api::v1::plugin_service_client::PluginServiceClient;
use sluice_api::v1::tenant_service_client::TenantServiceClient;
use tonic::transport::Channel;

mod common;
use common::{Server, connect, median, plugin_bytes};

/// Rounds of the noisy-neighbour phase (`SLUICE_BENCH_ROUNDS`, 5).
fn rounds() -> usize {
    env_usize("SLUICE_BENCH_ROUNDS", 5).max(1)
}

/// Each measuring window (`SLUICE_BENCH_WINDOW_S`, 8 s): the rows a changefeed
/// wrote are reported about once a second.
fn window() -> Duration {
    Duration::from_secs(env_usize("SLUICE_BENCH_WINDOW_S", 8).max(1) as u64)
}
const QUIET: usize = 10;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn feed_ref(tenant: &str, name: &str) -> pb::ChangefeedRef {
    pb::ChangefeedRef {
        tenant: tenant.into(),
        name: name.into(),
    }
}

fn datagen(rate: u64, sink: &str, sink_extra: &str) -> String {
    format!(
        "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = {rate}\n\n[sink]\nplugin = \"{sink}\"\n{sink_extra}\n[pipeline]\nflush-interval-ms = 200\nevent-cache-bytes = \"8MiB\"\n"
    )
}

async fn upload(channel: Authorized, tenant: &str, name: &str, version: &str, bytes: Vec<u8>) {
    common::upload_bytes(channel, tenant, name, version, pb::PluginWorld::Sink, bytes).await;
}

/// `bytes` with a custom section appended that holds `n`: another component
/// with the same code, so the server precompiles it again.
fn variant(bytes: &[u8], n: u64) -> Vec<u8> {
    let name = b"sluice-bench";
    let payload = n.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut out = bytes.to_vec();
    out.push(0); // custom section
    out.push(size as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

async fn create(channel: Authorized, tenant: &str, name: &str, text: String) {
    ChangefeedServiceClient::new(channel)
        .create_changefeed(pb::CreateChangefeedRequest {
            id: Some(feed_ref(tenant, name)),
            config_toml: text,
            start_ts: 0,
            target_ts: 0,
        })
        .await
        .unwrap_or_else(|e| panic!("create {tenant}/{name}: {e}"));
}

async fn remove(channel: Authorized, tenant: &str, name: &str) {
    ChangefeedServiceClient::new(channel)
        .remove_changefeed(feed_ref(tenant, name))
        .await
        .unwrap_or_else(|e| panic!("remove {tenant}/{name}: {e}"));
}

async fn make_tenant(channel: Authorized, name: &str) {
    TenantServiceClient::new(channel)
        .create_tenant(pb::TenantRef { name: name.into() })
        .await
        .unwrap_or_else(|e| panic!("tenant {name}: {e}"));
}

/// A channel that acts with a tenant-admin token of `tenant`.
async fn as_tenant(admin: Authorized, url: &str, tenant: &str) -> Authorized {
    let made = TenantServiceClient::new(admin)
        .create_token(pb::CreateTokenRequest {
            tenant: tenant.into(),
            role: "tenant-admin".into(),
            expires_at_ms: 0,
            description: "bench".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let channel = Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    Authorized::new(channel, Bearer::new(Some(&made.token)).unwrap())
}

/// The rows `tenant`'s changefeeds have written, and when that was read.
async fn rows_written(c: &mut ChangefeedServiceClient<Authorized>, tenant: &str) -> (f64, Instant) {
    let list = c
        .list_changefeeds(pb::ListChangefeedsRequest {
            tenant: tenant.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut rows = 0.0;
    for f in list.changefeeds {
        let id = f.id.unwrap();
        if let Ok(s) = c.get_status(id).await {
            rows += s.into_inner().rows_written as f64;
        }
    }
    (rows, Instant::now())
}

fn quiet_name(i: usize) -> String {
    format!("quiet{i:02}")
}

/// The quiet tenants' summed rows/s over a window, and the p99 of `GetStatus`
/// meanwhile (ms).
async fn measure(admin: Authorized, probe: Authorized, pid: u32) -> (f64, f64, Threads) {
    let mut c = ChangefeedServiceClient::new(admin);
    let threads_before = thread_ticks(pid);
    let mut before = Vec::new();
    for i in 0..QUIET {
        before.push(rows_written(&mut c, &quiet_name(i)).await);
    }
    let started = Instant::now();
    let mut p = ChangefeedServiceClient::new(probe);
    let mut latencies = Vec::new();
    while started.elapsed() < window() {
        let t = Instant::now();
        p.get_status(feed_ref("", "feed")).await.unwrap();
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Each tenant's rate over the time between its own two readings (a slow
    // reading must not count rows written meanwhile as the window's).
    let mut rate = 0.0;
    for (i, (rows, at)) in before.into_iter().enumerate() {
        let (after, then) = rows_written(&mut c, &quiet_name(i)).await;
        rate += (after - rows) / then.duration_since(at).as_secs_f64();
    }
    latencies.sort_by(f64::total_cmp);
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    let mut threads = thread_ticks(pid);
    for (name, ticks) in threads.iter_mut() {
        *ticks -= threads_before.get(name).copied().unwrap_or(0).min(*ticks);
    }
    (rate, p99, threads)
}

/// CPU ticks (1/100 s) of a process's threads, summed by thread name (digits
/// at the end dropped: `sluice-work-3` counts as `sluice-work-`).
type Threads = std::collections::BTreeMap<String, u64>;

fn thread_ticks(pid: u32) -> Threads {
    let mut out = Threads::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].trim_end_matches(|c: char| c.is_ascii_digit());
        *out.entry(name.to_string()).or_default() += stat_ticks(&stat);
    }
    out
}

/// The threads that used the most CPU, as "name cores" (cores: CPU seconds per
/// second of `window`).
fn top_threads(threads: &Threads, window: Duration) -> String {
    let mut v: Vec<(&String, &u64)> = threads.iter().filter(|(_, t)| **t > 0).collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .take(8)
        .map(|(n, t)| format!("{n} {:.2}", **t as f64 / 100.0 / window.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn noisy_neighbours(data: &std::path::Path) -> serde_json::Value {
    let (server, _) = Server::start(
        data,
        &[
            "--max-call-timeout-ms",
            "600000",
            "--max-host-call-timeout-ms",
            "600000",
            "--stop-timeout-ms",
            "500",
        ],
    );
    let admin = connect(&server).await;
    let pid = server.child.id();
    let blackhole = plugin_bytes("sink-blackhole");
    let misbehave = plugin_bytes("misbehave");
    for i in 0..QUIET {
        let t = quiet_name(i);
        make_tenant(admin.clone(), &t).await;
        upload(
            admin.clone(),
            &t,
            "sink-blackhole",
            "0.1.0",
            blackhole.clone(),
        )
        .await;
        create(
            admin.clone(),
            &t,
            "feed",
            datagen(0, "sink-blackhole@0.1.0", ""),
        )
        .await;
    }
    let probe = as_tenant(admin.clone(), &server.url, &quiet_name(0)).await;
    for t in ["spin", "oom", "flood", "uploader"] {
        make_tenant(admin.clone(), t).await;
    }
    for t in ["spin", "oom", "flood"] {
        upload(admin.clone(), t, "misbehave", "0.1.0", misbehave.clone()).await;
    }
    let noisy: [(&str, &str, String); 4] = [
        (
            "spin",
            "a",
            datagen(
                0,
                "misbehave@0.1.0",
                "config = { mode = \"loop\" }\n[sink.limits]\ncall-timeout-ms = 600000\nhost-call-timeout-ms = 600000",
            ),
        ),
        (
            "spin",
            "b",
            datagen(
                0,
                "misbehave@0.1.0",
                "config = { mode = \"loop\" }\n[sink.limits]\ncall-timeout-ms = 600000\nhost-call-timeout-ms = 600000",
            ),
        ),
        (
            "oom",
            "a",
            datagen(
                0,
                "misbehave@0.1.0",
                "config = { mode = \"oom\" }\n[sink.limits]\nmemory = \"64MiB\"",
            ),
        ),
        (
            "flood",
            "a",
            datagen(0, "misbehave@0.1.0", "config = { mode = \"log-flood\" }"),
        ),
    ];
    // `SLUICE_BENCH_NOISY` picks which neighbours run (a comma-separated
    // subset of spin, oom, flood, upload; all by default): one at a time shows
    // what each costs.
    let picked =
        std::env::var("SLUICE_BENCH_NOISY").unwrap_or_else(|_| "spin,oom,flood,upload".into());
    let picked: Vec<&str> = picked.split(',').map(str::trim).collect();
    for kind in &picked {
        assert!(
            ["spin", "oom", "flood", "upload"].contains(kind),
            "SLUICE_BENCH_NOISY: `{kind}` is none of spin, oom, flood, upload"
        );
    }
    let noisy: Vec<_> = noisy
        .into_iter()
        .filter(|(t, _, _)| picked.contains(t))
        .collect();
    let uploading = picked.contains(&"upload");
    let big = plugin_bytes("sink-mysql");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut alone = (Vec::new(), Vec::new());
    let mut with = (Vec::new(), Vec::new());
    let mut uploads_total = 0u64;
    let (mut threads_alone, mut threads_with) = (Threads::new(), Threads::new());
    for round in 0..rounds() {
        let mut order = [false, true];
        if round % 2 == 1 {
            order.reverse();
        }
        for noisy_on in order {
            if !noisy_on {
                let (rate, p99, threads) = measure(admin.clone(), probe.clone(), pid).await;
                alone.0.push(rate);
                alone.1.push(p99);
                threads_alone = threads;
                continue;
            }
            for (t, name, text) in &noisy {
                create(admin.clone(), t, name, text.clone()).await;
            }
            // The uploader: large plugins, each new, in a loop; old ones deleted.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!uploading));
            let uploader = {
                let (admin, big, stop) = (admin.clone(), big.clone(), stop.clone());
                let base = uploads_total;
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let version = format!("{}.0.0", base + n);
                        upload(
                            admin.clone(),
                            "uploader",
                            "big",
                            &version,
                            variant(&big, base + n),
                        )
                        .await;
                        let _ = PluginServiceClient::new(admin.clone())
                            .delete_plugin(pb::PluginRef {
                                tenant: "uploader".into(),
                                name: "big".into(),
                                version,
                            })
                            .await;
                        n += 1;
                    }
                    n
                })
            };
            tokio::time::sleep(Duration::from_millis(800)).await;
            let (rate, p99, threads) = measure(admin.clone(), probe.clone(), pid).await;
            with.0.push(rate);
            with.1.push(p99);
            threads_with = threads;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            uploads_total += uploader.await.unwrap();
            for (t, name, _) in &noisy {
                remove(admin.clone(), t, name).await;
            }
        }
    }
    let (ra, rw) = (median(alone.0.clone()), median(with.0.clone()));
    let (pa, pw) = (median(alone.1.clone()), median(with.1.clone()));
    println!(
        "noisy neighbours: {QUIET} quiet tenants (datagen -> sink-blackhole), {} rounds of {:?}; neighbours: {}",
        rounds(),
        window(),
        picked.join(", ")
    );
    println!("{:>22} {:>14} {:>14}", "", "quiet rows/s", "API p99 ms");
    println!("{:>22} {ra:>14.0} {pa:>14.1}", "alone");
    println!("{:>22} {rw:>14.0} {pw:>14.1}", "with noisy neighbours");
    // Each round's ratio, its two windows measured back to back: the median
    // of those is steadier than the ratio of the medians on a noisy machine.
    let paired = median(alone.0.iter().zip(&with.0).map(|(a, w)| w / a).collect());
    println!("{:>22} {:>14.2} {:>14.2}", "ratio", rw / ra, pw / pa);
    println!("{:>22} {paired:>14.2}", "median of round ratios");
    println!("large plugins uploaded and precompiled meanwhile: {uploads_total}");
    println!(
        "where the CPU went in the last round (cores by thread), alone: {}",
        top_threads(&threads_alone, window())
    );
    println!(
        "  with noisy neighbours: {}",
        top_threads(&threads_with, window())
    );
    server.kill();
    serde_json::json!({
        "quiet_tenants": QUIET,
        "rows_per_second": { "alone": ra, "noisy": rw, "ratio": rw / ra,
            "median_round_ratio": paired,
            "rounds_alone": alone.0, "rounds_noisy": with.0 },
        "api_p99_ms": { "alone": pa, "noisy": pw, "ratio": pw / pa,
            "rounds_alone": alone.1, "rounds_noisy": with.1 },
        "uploads": uploads_total,
        "neighbours": picked,
    })
}

/// Resident memory (bytes), open files, threads, and user+system CPU ticks of
/// process `pid`.
fn proc_figures(pid: u32) -> (u64, usize, usize, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let rss = field("VmRSS:") * 1024;
    let threads = field("Threads:") as usize;
    let files = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    (rss, files, threads, stat_ticks(&stat))
}

/// User + system CPU ticks in a `/proc/.../stat` line.
fn stat_ticks(stat: &str) -> u64 {
    let after_comm = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat: 12 and 13 after `) `.
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// Waits until every changefeed of every tenant has written its rows; the
/// time it took.
async fn until_all_wrote(admin: Authorized, tenants: usize, feeds: usize) -> Duration {
    let started = Instant::now();
    let mut c = ChangefeedServiceClient::new(admin);
    let mut pending: Vec<(String, String)> = (0..tenants)
        .flat_map(|t| (0..feeds).map(move |f| (format!("t{t:03}"), format!("f{f:02}"))))
        .collect();
    while !pending.is_empty() {
        let mut left = Vec::new();
        for (t, f) in pending {
            let wrote = c
                .get_status(feed_ref(&t, &f))
                .await
                .is_ok_and(|s| s.into_inner().rows_written >= ROWS_PER_FEED);
            if !wrote {
                left.push((t, f));
            }
        }
        pending = left;
        if !pending.is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(900),
                "{} changefeeds have not written their rows after 15 minutes",
                pending.len()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    started.elapsed()
}

/// Waits until `total` processors run; the time it took.
async fn until_processors(admin: Authorized, total: usize) -> Duration {
    let started = Instant::now();
    let mut c = ClusterServiceClient::new(admin);
    loop {
        let running = c
            .list_processors(pb::ListProcessorsRequest::default())
            .await
            .map_or(0, |r| r.into_inner().processors.len());
        if running >= total {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "{running} of {total} processors after 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Rows each density changefeed writes before it goes quiet.
const ROWS_PER_FEED: u64 = 20;

async fn density(data: &std::path::Path) -> serde_json::Value {
    let tenants = env_usize("SLUICE_BENCH_TENANTS", 100);
    let feeds = env_usize("SLUICE_BENCH_FEEDS", 10);
    let total = tenants * feeds;
    let args = [
        "--max-plugin-instances",
        "1024",
        "--max-tenant-plugin-instances",
        "64",
    ];
    // Each changefeed writes its rows, then its source goes quiet (open, with
    // nothing more): after two idle seconds its sink instance is released.
    let config = format!(
        "[source]\ntype = \"datagen\"\ntotal-rows = {ROWS_PER_FEED}\nkeep-open = true\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n\n[pipeline]\nflush-interval-ms = 500\nevent-cache-bytes = \"1MiB\"\nrelease-idle-ms = 2000\n"
    );
    let (server, _) = Server::start(data, &args);
    let pid = server.child.id();
    let admin = connect(&server).await;
    let blackhole = plugin_bytes("sink-blackhole");
    let made = Instant::now();
    for t in 0..tenants {
        let tenant = format!("t{t:03}");
        make_tenant(admin.clone(), &tenant).await;
        upload(
            admin.clone(),
            &tenant,
            "sink-blackhole",
            "0.1.0",
            blackhole.clone(),
        )
        .await;
        for f in 0..feeds {
            create(admin.clone(), &tenant, &format!("f{f:02}"), config.clone()).await;
        }
        if (t + 1) % 10 == 0 {
            eprintln!(
                "density: {} of {total} changefeeds created",
                (t + 1) * feeds
            );
        }
    }
    let create_s = made.elapsed().as_secs_f64();
    let wrote = until_all_wrote(admin.clone(), tenants, feeds).await;
    // Idle: every instance released.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, _, _, t0) = proc_figures(pid);
    let idle = Duration::from_secs(10);
    tokio::time::sleep(idle).await;
    let (rss, files, threads, t1) = proc_figures(pid);
    let peak = proc_peak_rss(pid);
    let cpu_cores = (t1 - t0) as f64 / 100.0 / idle.as_secs_f64();
    let (code, metrics) = http_metrics(&server);
    let released = metric_sum(&metrics, "sluice_plugin_idle_releases_total");
    let instantiated = metric_sum(&metrics, "sluice_plugin_instantiations_total");
    assert_eq!(code, 200);
    // Listing every changefeed (all tenants, as the admin).
    let mut c = ChangefeedServiceClient::new(admin.clone());
    let mut list_ms = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let n = c
            .list_changefeeds(pb::ListChangefeedsRequest {
                tenant: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .changefeeds
            .len();
        list_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(n, total, "every changefeed listed");
    }
    let list_median = median(list_ms.clone());
    server.kill();
    // A restart: the API answers, then every processor runs again.
    let (server, started) = Server::start(data, &args);
    let admin = connect(&server).await;
    let ready = started.elapsed();
    let all_again = until_processors(admin, total).await + ready;
    server.kill();
    println!(
        "density: {tenants} tenants x {feeds} changefeeds = {total} (datagen, {ROWS_PER_FEED} rows then quiet -> sink-blackhole, release-idle-ms = 2000)"
    );
    println!(
        "  created in {create_s:.1} s; every row written {:.1} s later",
        wrote.as_secs_f64()
    );
    println!(
        "  idle: RSS {:.0} MiB (peak {:.0} MiB), {files} open files, {threads} threads, {cpu_cores:.3} cores of CPU",
        rss as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64
    );
    println!("  instances: {instantiated:.0} made, {released:.0} released while idle");
    println!("  changefeed list (all {total}): median {list_median:.1} ms");
    println!(
        "  restart: API up in {:.2} s, every processor running in {:.1} s",
        ready.as_secs_f64(),
        all_again.as_secs_f64()
    );
    serde_json::json!({
        "tenants": tenants, "changefeeds": total,
        "create_seconds": create_s,
        "rss_bytes": rss, "peak_rss_bytes": peak, "open_files": files, "threads": threads,
        "idle_cpu_cores": cpu_cores,
        "instantiations": instantiated, "idle_releases": released,
        "list_ms_median": list_median, "list_ms": list_ms,
        "restart_api_seconds": ready.as_secs_f64(),
        "restart_all_running_seconds": all_again.as_secs_f64(),
    })
}

/// Peak resident memory of process `pid`, bytes.
fn proc_peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// `GET /metrics` of `server` with its admin token.
fn http_metrics(server: &Server) -> (u16, String) {
    let token = std::fs::read_to_string(&server.token_file).unwrap();
    let out = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-H"])
        .arg(format!("authorization: Bearer {}", token.trim()))
        .arg(format!("{}/metrics", server.http))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The sum of every series of `name`.
fn metric_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; the first other argument picks a phase.
    let only = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let mut out = serde_json::Map::new();
    if only.is_empty() || only == "noisy" {
        out.insert(
            "noisy".into(),
            noisy_neighbours(&dir.path().join("noisy")).await,
        );
    }
    if only.is_empty() || only == "density" {
        out.insert("density".into(), density(&dir.path().join("density")).await);
    }
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(
        target.join("tenancy.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(out)).unwrap(),
    )
    .unwrap();
}
