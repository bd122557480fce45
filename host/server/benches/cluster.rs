//! Cluster figures of `sluice server` (release build), printed as a table and
//! written to `target/bench/cluster.json`: owner failover on a private etcd.
//!
//! Two servers share a plugin store; the owner runs an endless datagen ->
//! sink-blackhole changefeed at a fixed rate. Each round SIGKILLs the owner and
//! times, from the kill:
//! - until the standby prints that it is the owner (elected, state rebuilt
//!   from etcd, listeners serving), and
//! - until the changefeed's checkpoint moves again on it;
//!
//! then starts the killed server again as the next standby. The lease is
//! `CLUSTER_BENCH_LEASE_S` (5 s), the rounds `CLUSTER_BENCH_ROUNDS` (10); the
//! issue's target is every changefeed moving again within two leases.
//!
//! Then drain convergence: `CLUSTER_BENCH_FEEDS` (8) more changefeeds, and
//! each round drains the capture that holds the work, timing until nothing is
//! left on it and until every changefeed's checkpoint moved on the other one,
//! and ends the drain; then rebalances (half the changefeeds go back to the
//! emptied capture), timing until the counts are even and until every
//! checkpoint moved again.
//!
//! Then throughput, side by side: endless datagen -> sink-blackhole
//! changefeeds as fast as they go, rows written per second over a window
//! (`CLUSTER_BENCH_WINDOW_S`, 10), in rounds (`CLUSTER_BENCH_TPUT_ROUNDS`,
//! 3) that each start fresh clusters: three changefeeds on one server
//! against the same three spread over three servers, and one changefeed on
//! two servers run whole against the same with `shop.orders` run on the
//! second capture (its rows shipped there over gRPC).
//! `CLUSTER_BENCH_PHASES` picks `failover`, `throughput` (both by default).
//!
//! Run with `cargo xtask bench-cluster` (it builds the plugins first).

use std::path::Path;
use std::time::{Duration, Instant};

use sluice_api::client::{Authorized, Bearer};
use sluice_api::v1 as pb;
use sluice_api::v1::changefeed_service_client::ChangefeedServiceClient;
use sluice_api::v1::cluster_service_client::ClusterServiceClient;
use tonic::transport::Channel;

mod common;
use common::{Server, id, median, upload};

fn start(data: &Path, args: &[&str]) -> Server {
    Server::start(data, args).0
}

fn ready_at(server: &Server) -> Option<Instant> {
    *server.ready.lock().unwrap()
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn connect(url: &str, token: &str) -> Authorized {
    let bearer = Bearer::new(Some(token)).unwrap();
    loop {
        if let Ok(c) = Channel::from_shared(url.to_string())
            .unwrap()
            .connect()
            .await
        {
            return Authorized::new(c, bearer);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn checkpoint(c: &mut ChangefeedServiceClient<Authorized>) -> Option<u64> {
    checkpoint_of(c, "endless").await
}

async fn checkpoint_of(c: &mut ChangefeedServiceClient<Authorized>, name: &str) -> Option<u64> {
    let cf = c.get_changefeed(id(name)).await.ok()?.into_inner();
    Some(cf.checkpoint_ts)
}

fn endless(rate: u64) -> String {
    format!(
        "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = {rate}\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n"
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A fresh cluster of `servers` servers on its own etcd running `feeds`
/// endless datagen -> sink-blackhole changefeeds at full speed (with
/// `split`, `shop.orders` of the first runs on another capture than the one
/// reading it): the rows they wrote per second over `window`.
async fn throughput(servers: usize, feeds: usize, split: bool, window: Duration) -> f64 {
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().join("plugins").display());
    let args = [
        "--etcd",
        &etcd.endpoint,
        "--plugin-store",
        &store,
        "--lease-ttl-s",
        "5",
    ];
    let data: Vec<_> = (0..servers)
        .map(|i| dir.path().join(i.to_string()))
        .collect();
    let nodes: Vec<Server> = data.iter().map(|d| start(d, &args)).collect();
    let token = std::fs::read_to_string(data[0].join("admin-token"))
        .unwrap()
        .trim()
        .to_string();
    let channel = connect(&nodes[0].url, &token).await;
    let mut cluster = ClusterServiceClient::new(channel.clone());
    let mut c = ChangefeedServiceClient::new(channel.clone());
    let captures = |cluster: &mut ClusterServiceClient<Authorized>| {
        let mut cluster = cluster.clone();
        async move {
            cluster
                .list_captures(pb::ListCapturesRequest {})
                .await
                .map(|r| r.into_inner().captures)
                .unwrap_or_default()
        }
    };
    while captures(&mut cluster).await.len() < servers {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    upload(channel, "sink-blackhole", pb::PluginWorld::Sink).await;
    let names: Vec<String> = (0..feeds).map(|i| format!("tput-{i}")).collect();
    for name in &names {
        c.create_changefeed(pb::CreateChangefeedRequest {
            id: Some(id(name)),
            config_toml: endless(0),
            start_ts: 0,
            target_ts: 0,
        })
        .await
        .unwrap();
    }
    // Every changefeed placed (by count: one per capture when they match).
    loop {
        let placed: u32 = captures(&mut cluster)
            .await
            .iter()
            .map(|c| c.changefeeds)
            .sum();
        if placed as usize == feeds {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if split {
        let on = captures(&mut cluster).await;
        let reader = on.iter().find(|c| c.changefeeds > 0).unwrap().id.clone();
        let helper = on.iter().find(|c| c.id != reader).unwrap().id.clone();
        loop {
            let asked = cluster
                .move_table(pb::MoveTableRequest {
                    id: Some(id(&names[0])),
                    table: "shop.orders".into(),
                    capture_id: helper.clone(),
                })
                .await;
            if asked.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        loop {
            let sides = cluster
                .list_processors(pb::ListProcessorsRequest {
                    tenant: "default".into(),
                    changefeed: names[0].clone(),
                })
                .await
                .map(|r| r.into_inner().processors.len())
                .unwrap_or(0);
            if sides == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Rows written so far by the running processors, and their epochs.
    let sample = |c: &mut ChangefeedServiceClient<Authorized>| {
        let mut c = c.clone();
        let names = names.clone();
        async move {
            let mut rows = 0;
            let mut epochs = Vec::new();
            for name in &names {
                let s = c.get_status(id(name)).await.unwrap().into_inner();
                rows += s.rows_written;
                epochs.push(s.epoch);
            }
            (rows, epochs)
        }
    };
    // Warmed up: every changefeed wrote, then two seconds more.
    loop {
        let mut all = true;
        for name in &names {
            let s = c.get_status(id(name)).await.unwrap().into_inner();
            all &= s.rows_written > 0;
        }
        if all {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, epochs) = sample(&mut c).await;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let (after, epochs_after) = sample(&mut c).await;
    let took = started.elapsed();
    assert_eq!(epochs, epochs_after, "a run restarted during the window");
    drop(nodes);
    (after - before) as f64 / took.as_secs_f64()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let phases =
        std::env::var("CLUSTER_BENCH_PHASES").unwrap_or_else(|_| "failover,throughput".into());
    if phases.split(',').any(|p| p == "failover") {
        failover().await;
    }
    if phases.split(',').any(|p| p == "throughput") {
        throughput_figures().await;
    }
}

async fn throughput_figures() {
    let rounds = env_or("CLUSTER_BENCH_TPUT_ROUNDS", 3);
    let window = Duration::from_secs(env_or("CLUSTER_BENCH_WINDOW_S", 10));
    let configs: [(&str, usize, usize, bool); 4] = [
        ("3 changefeeds, 1 server", 1, 3, false),
        ("3 changefeeds, 3 servers", 3, 3, false),
        ("1 changefeed, 2 servers, run whole", 2, 1, false),
        ("1 changefeed, 2 servers, shop.orders shipped", 2, 1, true),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        for (i, (what, servers, feeds, split)) in configs.iter().enumerate() {
            let rate = throughput(*servers, *feeds, *split, window).await;
            eprintln!("throughput {round}: {what}: {rate:.0} rows/s");
            rates[i].push(rate);
        }
    }
    let medians: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
    println!("\nThroughput, datagen -> sink-blackhole at full speed, median of {rounds} rounds\n");
    println!("| configuration | rows/s | ratio |");
    println!("|---|---|---|");
    for (i, (what, ..)) in configs.iter().enumerate() {
        let base = medians[i - i % 2];
        println!("| {what} | {:.0} | {:.2}× |", medians[i], medians[i] / base);
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&out).unwrap();
    let json = serde_json::json!({
        "rounds": rounds,
        "window-s": window.as_secs(),
        "one-server-rows-per-s": medians[0],
        "three-servers-rows-per-s": medians[1],
        "whole-rows-per-s": medians[2],
        "shipped-rows-per-s": medians[3],
    });
    std::fs::write(
        out.join("cluster-throughput.json"),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
}

async fn failover() {
    let lease_s = env_or("CLUSTER_BENCH_LEASE_S", 5);
    let rounds = env_or("CLUSTER_BENCH_ROUNDS", 10) as usize;
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().join("plugins").display());
    let lease = lease_s.to_string();
    let args = [
        "--etcd",
        &etcd.endpoint,
        "--plugin-store",
        &store,
        "--lease-ttl-s",
        &lease,
    ];
    let data = [dir.path().join("a"), dir.path().join("b")];
    let mut nodes = [start(&data[0], &args), start(&data[1], &args)];
    let mut owner = 0;
    let token = std::fs::read_to_string(data[0].join("admin-token"))
        .unwrap()
        .trim()
        .to_string();
    let channel = connect(&nodes[0].url, &token).await;
    upload(channel.clone(), "sink-blackhole", pb::PluginWorld::Sink).await;
    ChangefeedServiceClient::new(channel)
        .create_changefeed(pb::CreateChangefeedRequest {
            id: Some(id("endless")),
            config_toml: endless(5_000),
            start_ts: 0,
            target_ts: 0,
        })
        .await
        .unwrap();

    let (mut elected, mut moving) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // The checkpoint moves on the owner before it is killed.
        let mut c = ChangefeedServiceClient::new(connect(&nodes[owner].url, &token).await);
        let first = loop {
            if let Some(cp) = checkpoint(&mut c).await.filter(|&cp| cp > 0) {
                break cp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        while checkpoint(&mut c).await.unwrap_or(0) <= first {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let standby = 1 - owner;
        let killed = Instant::now();
        let _ = nodes[owner].child.kill();
        let _ = nodes[owner].child.wait();
        let before = checkpoint(&mut c).await;
        drop(c);
        let ready = loop {
            if let Some(at) = ready_at(&nodes[standby]) {
                break at;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(10 * lease_s),
                "no new owner"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let mut c = ChangefeedServiceClient::new(connect(&nodes[standby].url, &token).await);
        let at_takeover = checkpoint(&mut c)
            .await
            .unwrap_or(0)
            .max(before.unwrap_or(0));
        loop {
            if checkpoint(&mut c).await.unwrap_or(0) > at_takeover {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(10 * lease_s),
                "the checkpoint does not move on the new owner"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let moved = killed.elapsed();
        let took = ready.duration_since(killed);
        eprintln!(
            "round {round}: new owner after {:.2} s, checkpoint moving after {:.2} s",
            took.as_secs_f64(),
            moved.as_secs_f64()
        );
        elected.push(took.as_secs_f64());
        moving.push(moved.as_secs_f64());
        // The killed server comes back as the next standby.
        nodes[owner] = start(&data[owner], &args);
        owner = standby;
    }
    // Drain convergence, through the owner.
    let feeds = env_or("CLUSTER_BENCH_FEEDS", 8);
    let channel = connect(&nodes[owner].url, &token).await;
    let mut c = ChangefeedServiceClient::new(channel.clone());
    let mut cluster = ClusterServiceClient::new(channel);
    let mut names = vec!["endless".to_string()];
    for i in 0..feeds {
        let name = format!("drain-{i}");
        c.create_changefeed(pb::CreateChangefeedRequest {
            id: Some(id(&name)),
            config_toml: endless(1_000),
            start_ts: 0,
            target_ts: 0,
        })
        .await
        .unwrap();
        names.push(name);
    }
    let (mut emptied, mut resumed) = (Vec::new(), Vec::new());
    let (mut balanced, mut rebalanced_moving) = (Vec::new(), Vec::new());
    for round in 0..rounds.min(5) {
        // Every checkpoint moves; then the capture with the most work goes.
        let mut before = Vec::new();
        for name in &names {
            loop {
                let cp = checkpoint_of(&mut c, name).await.unwrap_or(0);
                if cp > 0 {
                    before.push(cp);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let captures = cluster
            .list_captures(pb::ListCapturesRequest {})
            .await
            .unwrap()
            .into_inner()
            .captures;
        let busiest = captures.iter().max_by_key(|c| c.changefeeds).unwrap();
        let (capture, on_it) = (busiest.id.clone(), busiest.changefeeds);
        let drain = |cancel| pb::DrainCaptureRequest {
            capture_id: capture.clone(),
            cancel,
        };
        let started = Instant::now();
        while cluster
            .drain_capture(drain(false))
            .await
            .unwrap()
            .into_inner()
            .remaining
            > 0
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let empty = started.elapsed();
        let mut at_drain = Vec::new();
        for name in &names {
            at_drain.push(checkpoint_of(&mut c, name).await.unwrap_or(0));
        }
        for (name, cp) in names.iter().zip(&at_drain) {
            while checkpoint_of(&mut c, name).await.unwrap_or(0) <= *cp {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let moving_again = started.elapsed();
        eprintln!(
            "drain {round}: {on_it} changefeeds off {capture} after {:.2} s, all moving after {:.2} s",
            empty.as_secs_f64(),
            moving_again.as_secs_f64()
        );
        emptied.push(empty.as_secs_f64());
        resumed.push(moving_again.as_secs_f64());
        cluster.drain_capture(drain(true)).await.unwrap();
        // Rebalance: the drained capture is empty; half the work goes back.
        let mut at_rebalance = Vec::new();
        for name in &names {
            at_rebalance.push(checkpoint_of(&mut c, name).await.unwrap_or(0));
        }
        let started = Instant::now();
        let moves = cluster
            .rebalance_changefeeds(pb::RebalanceChangefeedsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .moves
            .len();
        loop {
            let counts: Vec<u32> = cluster
                .list_captures(pb::ListCapturesRequest {})
                .await
                .unwrap()
                .into_inner()
                .captures
                .iter()
                .map(|c| c.changefeeds)
                .collect();
            let (lo, hi) = (counts.iter().min(), counts.iter().max());
            if hi.zip(lo).is_some_and(|(h, l)| h - l <= 1)
                && counts.iter().sum::<u32>() as usize == names.len()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let even = started.elapsed();
        for (name, cp) in names.iter().zip(&at_rebalance) {
            while checkpoint_of(&mut c, name).await.unwrap_or(0) <= *cp {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let all_moving = started.elapsed();
        eprintln!(
            "rebalance {round}: {moves} moves, even after {:.2} s, all moving after {:.2} s",
            even.as_secs_f64(),
            all_moving.as_secs_f64()
        );
        balanced.push(even.as_secs_f64());
        rebalanced_moving.push(all_moving.as_secs_f64());
    }
    elected.sort_by(f64::total_cmp);
    moving.sort_by(f64::total_cmp);
    emptied.sort_by(f64::total_cmp);
    resumed.sort_by(f64::total_cmp);
    balanced.sort_by(f64::total_cmp);
    rebalanced_moving.sort_by(f64::total_cmp);
    let row = |what: &str, v: &[f64]| {
        println!(
            "| {what} | {:.2} s | {:.2} s | {:.2}× | {:.2}× |",
            percentile(v, 0.5),
            percentile(v, 0.99),
            percentile(v, 0.5) / lease_s as f64,
            percentile(v, 0.99) / lease_s as f64
        );
    };
    println!("\nOwner failover, {rounds} SIGKILLs of the owner, lease {lease_s} s\n");
    println!("| from the kill until | p50 | p99 | p50 / lease | p99 / lease |");
    println!("|---|---|---|---|---|");
    row("the standby is the owner", &elected);
    row("the checkpoint moves again", &moving);
    println!(
        "\nDrain of the busiest capture, {} rounds, {} changefeeds in the cluster\n",
        emptied.len(),
        feeds + 1
    );
    println!("| from the drain until | p50 | max |");
    println!("|---|---|---|");
    for (what, v) in [
        ("nothing is left on the capture", &emptied),
        ("every checkpoint moved on the other", &resumed),
        (
            "(rebalance, after the drain ended) the counts are even",
            &balanced,
        ),
        ("(rebalance) every checkpoint moved", &rebalanced_moving),
    ] {
        println!(
            "| {what} | {:.2} s | {:.2} s |",
            percentile(v, 0.5),
            v[v.len() - 1]
        );
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&out).unwrap();
    let json = serde_json::json!({
        "lease-s": lease_s,
        "rounds": rounds,
        "elected-s": {"p50": percentile(&elected, 0.5), "p99": percentile(&elected, 0.99)},
        "moving-s": {"p50": percentile(&moving, 0.5), "p99": percentile(&moving, 0.99)},
        "drain-emptied-s": {"p50": percentile(&emptied, 0.5), "max": emptied[emptied.len() - 1]},
        "drain-moving-s": {"p50": percentile(&resumed, 0.5), "max": resumed[resumed.len() - 1]},
        "rebalance-even-s": {"p50": percentile(&balanced, 0.5), "max": balanced[balanced.len() - 1]},
        "rebalance-moving-s": {"p50": percentile(&rebalanced_moving, 0.5), "max": rebalanced_moving[rebalanced_moving.len() - 1]},
    });
    std::fs::write(
        out.join("cluster.json"),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
}
