//! Control-plane figures of `sluice server` (release build), printed as a table
//! and written to `target/bench/control_plane.json`:
//!
//! - create and status latency over 1,000 gRPC calls each (p50, p99);
//! - the throughput cost of saving positions: datagen -> sink-blackhole, 300,000
//!   rows, default saving vs saving only at the start and end, runs alternated;
//! - recovery after SIGKILL: from starting the server again until the checkpoint
//!   of a running changefeed moves.
//!
//! Run with `cargo xtask bench-server` (it builds the plugins first).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sluice_api::client::Authorized;
use sluice_api::v1 as pb;
use sluice_api::v1::changefeed_service_client::ChangefeedServiceClient;

mod common;
use common::{Server, connect, id, median, upload};

const CALLS: usize = 1_000;
const ROWS: u64 = 300_000;
const ROUNDS: usize = 5;

fn feed(total: u64, rate: u64, pipeline: &str) -> String {
    format!(
        "[source]\ntype = \"datagen\"\ntotal-rows = {total}\nrate = {rate}\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n\n[pipeline]\n{pipeline}\n"
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn wait_state(c: &mut ChangefeedServiceClient<Authorized>, name: &str, state: pb::FeedState) {
    loop {
        let cf = c.get_changefeed(id(name)).await.unwrap().into_inner();
        if cf.state == state as i32 {
            return;
        }
        assert!(
            cf.state != pb::FeedState::Failed as i32,
            "{name} failed: {}",
            cf.failure
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let (server, _) = Server::start(&data, &[]);
    let channel = connect(&server).await;
    upload(channel.clone(), "sink-blackhole", pb::PluginWorld::Sink).await;
    let mut c = ChangefeedServiceClient::new(channel.clone());

    // Create latency: each create parses, checks the plugin's options (one
    // instantiation), persists and starts a processor.
    let mut creates = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let name = format!("bench-{i}");
        let t = Instant::now();
        c.create_changefeed(pb::CreateChangefeedRequest {
            id: Some(id(&name)),
            config_toml: feed(1, 0, ""),
            start_ts: 0,
            target_ts: 0,
        })
        .await
        .unwrap();
        creates.push(t.elapsed());
        c.remove_changefeed(id(&name)).await.unwrap();
    }
    creates.sort();

    // Status latency against a running changefeed.
    c.create_changefeed(pb::CreateChangefeedRequest {
        id: Some(id("live")),
        config_toml: feed(0, 20_000, ""),
        start_ts: 0,
        target_ts: 0,
    })
    .await
    .unwrap();
    let mut statuses = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        c.get_status(id("live")).await.unwrap();
        statuses.push(t.elapsed());
    }
    statuses.sort();
    c.remove_changefeed(id("live")).await.unwrap();

    // Cost of saving positions: the same workload, default saving vs (almost) none.
    let modes = [
        ("default (checkpoint 500 ms, fence 2 s)", ""),
        (
            "only at start and end",
            "checkpoint-interval-ms = 3600000\nfence-ahead-ms = 3600000",
        ),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for round in 0..ROUNDS {
        for (m, (_, pipeline)) in modes.iter().enumerate() {
            let name = format!("tput-{round}-{m}");
            let t = Instant::now();
            c.create_changefeed(pb::CreateChangefeedRequest {
                id: Some(id(&name)),
                config_toml: feed(ROWS, 0, pipeline),
                start_ts: 0,
                target_ts: 0,
            })
            .await
            .unwrap();
            wait_state(&mut c, &name, pb::FeedState::Finished).await;
            rates[m].push(ROWS as f64 / t.elapsed().as_secs_f64());
            c.remove_changefeed(id(&name)).await.unwrap();
        }
    }

    // Recovery after SIGKILL: two changefeeds, flushing every 1 s (the default)
    // and every 200 ms; the first flush after the restart moves the checkpoint.
    let recovering = [("recover", ""), ("recover-fast", "flush-interval-ms = 200")];
    for (name, pipeline) in recovering {
        c.create_changefeed(pb::CreateChangefeedRequest {
            id: Some(id(name)),
            config_toml: feed(0, 20_000, pipeline),
            start_ts: 0,
            target_ts: 0,
        })
        .await
        .unwrap();
    }
    drop(c);
    drop(channel);
    let mut server = server;
    let mut ready = Vec::new();
    let mut moved: Vec<Vec<Duration>> = vec![Vec::new(); recovering.len()];
    for _ in 0..ROUNDS {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        server.kill();
        let (s, started) = Server::start(&data, &[]);
        server = s;
        ready.push(started.elapsed());
        let mut c = ChangefeedServiceClient::new(connect(&server).await);
        let mut at_load = Vec::new();
        for (name, _) in recovering {
            let status = c.get_status(id(name)).await.unwrap().into_inner();
            at_load.push(status.checkpoint_ts);
        }
        let mut done = vec![false; recovering.len()];
        while done.iter().any(|d| !d) {
            for (i, (name, _)) in recovering.iter().enumerate() {
                if done[i] {
                    continue;
                }
                let cp = c
                    .get_status(id(name))
                    .await
                    .unwrap()
                    .into_inner()
                    .checkpoint_ts;
                if cp > at_load[i] {
                    done[i] = true;
                    moved[i].push(started.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    server.kill();
    ready.sort();
    for m in &mut moved {
        m.sort();
    }

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("control plane ({CALLS} calls each; {ROUNDS} rounds of {ROWS} rows; medians)");
    println!(
        "create  p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&creates, 0.5)),
        ms(percentile(&creates, 0.99))
    );
    println!(
        "status  p50 {:.3} ms  p99 {:.3} ms",
        ms(percentile(&statuses, 0.5)),
        ms(percentile(&statuses, 0.99))
    );
    let medians: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
    for ((label, _), (m, r)) in modes.iter().zip(medians.iter().zip(&rates)) {
        println!(
            "saving {label:<40} {:>10.0} rows/s  (runs {:?})",
            m,
            r.iter().map(|x| x.round()).collect::<Vec<_>>()
        );
    }
    println!(
        "saving cost: default / none = {:.3}",
        medians[0] / medians[1]
    );
    println!(
        "recovery after SIGKILL: ready {:.0} ms; checkpoint moving again: flush 1 s {:.0} ms (max {:.0}), flush 200 ms {:.0} ms (max {:.0}) (medians)",
        ms(ready[ready.len() / 2]),
        ms(moved[0][moved[0].len() / 2]),
        ms(*moved[0].last().unwrap()),
        ms(moved[1][moved[1].len() / 2]),
        ms(*moved[1].last().unwrap())
    );
    let json = serde_json::json!({
        "create_ms": {"p50": ms(percentile(&creates, 0.5)), "p99": ms(percentile(&creates, 0.99))},
        "status_ms": {"p50": ms(percentile(&statuses, 0.5)), "p99": ms(percentile(&statuses, 0.99))},
        "rows_per_s": {"default": rates[0], "none": rates[1]},
        "saving_ratio": medians[0] / medians[1],
        "recovery_ms": {
            "ready": ready.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "checkpoint_moves_flush_1s": moved[0].iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "checkpoint_moves_flush_200ms": moved[1].iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        },
    });
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(out.join("control_plane.json"), json.to_string());
}
