//! Hot swaps through a real `sluice server` (release build) at a steady input
//! rate: the pause of each swap and the throughput while swapping, against
//! steady state, in one run.
//!
//! A datagen changefeed generates `SWAP_BENCH_RATE` rows/s (default 50,000)
//! into sink-blackhole (uploaded as 0.1.0 and 0.2.0, precompiled at upload).
//! After a warm-up, the rows written over `SWAP_BENCH_STEADY_S` seconds
//! (default 10) give the steady rate; then `SWAP_BENCH_SWAPS` swaps (default
//! 100) go back and forth, each through `sluice cli changefeed swap` and
//! waited for until its record says `done` (probation 0 ms and one flush). The
//! pause of a swap is what the capture measured and recorded: from the moment
//! feeding stopped (the barrier) until the new version was open; delivery
//! resumes with the next batch. At the end the changefeed runs to its last
//! row, and every row must have been written exactly once (rows written =
//! rows generated: a clean swap replays nothing).
//!
//! Run with `cargo xtask bench-swap`; `SLUICE_BIN` is the `sluice` binary.

use sluice_tests::bench::{env_or, percentile};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

struct Server {
    bin: String,
    grpc: String,
    http: String,
    child: std::process::Child,
    /// The server's admin token (from its data dir).
    token: String,
}

impl Server {
    fn cli(&self, args: &[&str]) -> Json {
        let out = Command::new(&self.bin)
            .args(["cli", "--server", &self.grpc, "--output", "json"])
            .args(args)
            .env("SLUICE_TOKEN", &self.token)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sluice cli {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The changefeed as the HTTP API shows it (cheaper than a CLI process,
    /// so polling disturbs the measured throughput less).
    fn changefeed(&self, name: &str) -> Json {
        let host = self.http.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(host).unwrap();
        write!(
            s,
            "GET /api/v1/changefeeds/default/{name} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.token
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    fn rows_written(&self, name: &str) -> u64 {
        self.changefeed(name)["status"]["rows-written"]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let bin = std::env::var("SLUICE_BIN").expect("SLUICE_BIN: run `cargo xtask bench-swap`");
    let rate = env_or("SWAP_BENCH_RATE", 50_000);
    let steady_s = env_or("SWAP_BENCH_STEADY_S", 10);
    let swaps = env_or("SWAP_BENCH_SWAPS", 100);
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(&bin)
        .args(["server", "--data-dir"])
        .arg(dir.path().join("server"))
        .args(["--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .env("SLUICE_LOG", "warn")
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert!(line.starts_with("sluice server ready"), "{line}");
    let server = Server {
        bin: bin.clone(),
        grpc: format!("http://{}", words[4]),
        http: format!("http://{}", words[6]),
        child,
        token: std::fs::read_to_string(dir.path().join("server/admin-token"))
            .unwrap()
            .trim()
            .to_string(),
    };
    let wasm = sluice_tests::plugin_path("sink-blackhole");
    for version in ["0.1.0", "0.2.0"] {
        server.cli(&[
            "plugin",
            "upload",
            wasm.to_str().unwrap(),
            "--id",
            &format!("sink-blackhole@{version}"),
            "--kind",
            "sink",
        ]);
    }
    // Enough rows for the warm-up, the steady window and the swaps at ~0.5 s
    // each, with room to spare.
    let total = rate * (5 + steady_s + swaps / 2 + 30);
    let file = dir.path().join("feed.toml");
    std::fs::write(
        &file,
        format!(
            "[source]\ntype = \"datagen\"\ntotal-rows = {total}\nrate = {rate}\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n\n[pipeline]\nflush-interval-ms = 50\n"
        ),
    )
    .unwrap();
    server.cli(&[
        "changefeed",
        "create",
        "-c",
        "bench",
        "--config",
        file.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_secs(3));

    let (r0, t0) = (server.rows_written("bench"), Instant::now());
    std::thread::sleep(Duration::from_secs(steady_s));
    let steady = (server.rows_written("bench") - r0) as f64 / t0.elapsed().as_secs_f64();

    let (r1, t1) = (server.rows_written("bench"), Instant::now());
    let mut pauses = Vec::new();
    for seq in 1..=swaps {
        let to = if seq % 2 == 1 {
            "sink-blackhole@0.2.0"
        } else {
            "sink-blackhole@0.1.0"
        };
        server.cli(&[
            "changefeed",
            "swap",
            "-c",
            "bench",
            "--sink",
            to,
            "--probation-ms",
            "0",
            "--probation-flushes",
            "1",
        ]);
        let asked = Instant::now();
        let record = loop {
            let cf = server.changefeed("bench");
            let record = cf["swaps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["seq"] == seq)
                .cloned();
            if let Some(r) = record.filter(|r| r["state"] == "done") {
                break r;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(30),
                "swap {seq} did not finish: {cf}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        pauses.push(record["pause-us"].as_f64().unwrap() / 1000.0);
    }
    let swapping_s = t1.elapsed().as_secs_f64();
    let swapping = (server.rows_written("bench") - r1) as f64 / swapping_s;

    let finished = Instant::now();
    loop {
        let cf = server.changefeed("bench");
        if cf["state"] == "finished" {
            let written = cf["status"]["rows-written"].as_u64().unwrap();
            assert_eq!(written, total, "every row written exactly once");
            break;
        }
        assert!(
            finished.elapsed() < Duration::from_secs(600),
            "not finished: {cf}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    pauses.sort_by(f64::total_cmp);
    println!("swap benchmark: datagen at {rate} rows/s -> sink-blackhole (release, whole server)");
    println!(
        "{:<44} {:>12}",
        "steady state rows/s",
        format!("{steady:.0}")
    );
    println!(
        "{:<44} {:>12}",
        format!("rows/s during {swaps} back-to-back swaps"),
        format!("{swapping:.0}")
    );
    println!(
        "{:<44} {:>12}",
        "during swaps / steady",
        format!("{:.3}", swapping / steady)
    );
    println!(
        "{:<44} {:>12}",
        "seconds per swap (ask to done)",
        format!("{:.3}", swapping_s / swaps as f64)
    );
    println!(
        "{:<44} {:>12}",
        "pause p50 / p99 / max (ms)",
        format!(
            "{:.2} / {:.2} / {:.2}",
            percentile(&pauses, 0.5),
            percentile(&pauses, 0.99),
            pauses.last().unwrap()
        )
    );
    println!("{:<44} {:>12}", "rows written (= generated)", total);
}
