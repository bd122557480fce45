//! Neighbour isolation of `sluice server` (release build), printed as a table and
//! written to `target/bench/isolation.json`: the throughput of a healthy
//! changefeed (datagen -> sink-blackhole, as fast as it goes) alone and next to 1,
//! 2 and 4 spinning sinks (guest code in an endless loop, at a 10-minute CPU
//! deadline), measured side by side in one run: rounds alternate the
//! configurations, and each figure is the median over the rounds.
//!
//! Run with `cargo xtask bench-isolation` (it builds the plugins first).

use std::time::{Duration, Instant};

use sluice_api::client::Authorized;
use sluice_api::v1 as pb;
use sluice_api::v1::changefeed_service_client::ChangefeedServiceClient;

mod common;
use common::{Server, connect, id, median, upload};

const ROUNDS: usize = 5;
const WINDOW: Duration = Duration::from_secs(4);
const SPINNERS: [usize; 4] = [0, 1, 2, 4];

fn healthy() -> String {
    "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = 0\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n\n[pipeline]\nflush-interval-ms = 200\n".into()
}

fn spinner() -> String {
    "[source]\ntype = \"datagen\"\ntotal-rows = 0\n\n[sink]\nplugin = \"misbehave@0.1.0\"\nconfig = { mode = \"loop\" }\n[sink.limits]\ncall-timeout-ms = 600000\nhost-call-timeout-ms = 600000\n".into()
}

async fn create(c: &mut ChangefeedServiceClient<Authorized>, name: &str, text: String) {
    c.create_changefeed(pb::CreateChangefeedRequest {
        id: Some(id(name)),
        config_toml: text,
        start_ts: 0,
        target_ts: 0,
    })
    .await
    .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

/// Rows the healthy changefeed writes per second over `WINDOW`.
async fn rate(c: &mut ChangefeedServiceClient<Authorized>) -> f64 {
    let rows = |s: pb::ChangefeedStatus| s.rows_written as f64;
    let before = rows(c.get_status(id("healthy")).await.unwrap().into_inner());
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let after = rows(c.get_status(id("healthy")).await.unwrap().into_inner());
    (after - before) / started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = Server::start(
        &dir.path().join("server"),
        &[
            "--max-call-timeout-ms",
            "600000",
            "--max-host-call-timeout-ms",
            "600000",
            "--stop-timeout-ms",
            "500",
        ],
    );
    let channel = connect(&server).await;
    upload(channel.clone(), "sink-blackhole", pb::PluginWorld::Sink).await;
    upload(channel.clone(), "misbehave", pb::PluginWorld::Sink).await;
    let mut c = ChangefeedServiceClient::new(channel);
    create(&mut c, "healthy", healthy()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); SPINNERS.len()];
    for round in 0..ROUNDS {
        // Alternate the order so that drift on a shared machine is spread evenly.
        let mut order: Vec<usize> = (0..SPINNERS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let k = SPINNERS[i];
            for s in 0..k {
                create(&mut c, &format!("spin{s}"), spinner()).await;
            }
            // Let the spinners get into their endless calls.
            tokio::time::sleep(Duration::from_millis(800)).await;
            rates[i].push(rate(&mut c).await);
            for s in 0..k {
                c.remove_changefeed(id(&format!("spin{s}"))).await.unwrap();
            }
        }
    }
    let medians: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
    let alone = medians[0];
    println!(
        "healthy changefeed (datagen -> sink-blackhole) next to spinning sinks, {cores} cores, {ROUNDS} rounds of {WINDOW:?}"
    );
    println!(
        "{:>10} {:>14} {:>10} {:>11}",
        "spinners", "rows/s", "vs alone", "fair share"
    );
    let mut rows = Vec::new();
    for (k, m) in SPINNERS.iter().zip(&medians) {
        // Cores shared evenly by the healthy changefeed and k spinners, capped at
        // what it takes alone.
        let fair = (cores as f64 / (k + 1) as f64).min(1.0);
        println!("{k:>10} {m:>14.0} {:>10.2} {fair:>11.2}", m / alone);
        rows.push(serde_json::json!({
            "spinners": k,
            "rows_per_second_median": m,
            "ratio_to_alone": m / alone,
            "fair_share": fair,
            "rounds": rates[SPINNERS.iter().position(|x| x == k).unwrap()],
        }));
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("isolation.json"),
        serde_json::to_string_pretty(&serde_json::json!({ "cores": cores, "rows": rows })).unwrap(),
    )
    .unwrap();
    server.kill();
}
