//! The binlog source's speed on a private MariaDB server, side by side in one
//! run: the raw decode rate (the source alone, in this process) and the whole
//! path a user runs (`sluice run`: binlog → pipeline → sink-blackhole), plus the
//! memory high-water mark of `sluice run` during one 1M-row transaction.
//!
//! Run with `cargo xtask bench-binlog` (it builds the release binary and the
//! plugins first). `SLUICE_BIN` is the `sluice` binary, `BINLOG_BENCH_ROWS` the
//! rows of the write workload (default 1,000,000, in transactions of 100 rows),
//! `BINLOG_BENCH_RUNS` the timed runs of each (default 3; medians are shown).

use sluice_tests::bench::{env_or, median};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use sluice_config::{MysqlConfig, StartPosition};
use sluice_core::{Checkpoint, Source, SourceEvent};
use sluice_source::mysql::MysqlSource;
use sluice_tests::mariadb::PrivateMariaDb;

/// Reads the binlog from `start` to its end with the source alone: rows read.
async fn decode(url: &str, start: &StartPosition) -> u64 {
    let mut cfg = MysqlConfig::new(url);
    cfg.start_position = start.clone();
    cfg.stop_at_end = true;
    let mut src = MysqlSource::new(cfg);
    src.resume(&Checkpoint::default()).unwrap();
    let mut rows = 0u64;
    loop {
        match src.next_event().await.unwrap() {
            SourceEvent::Transaction(t) => rows += t.row_count() as u64,
            SourceEvent::End => return rows,
            _ => {}
        }
    }
}

/// A `sluice run` file reading `url` from `start` to the end into sink-blackhole.
fn run_file(
    dir: &std::path::Path,
    url: &str,
    start: &StartPosition,
    plugins: &std::path::Path,
) -> PathBuf {
    let text = format!(
        r#"plugin-dir = "{plugins}"
data-dir = "{state}"

[changefeed]
id = "bench-binlog"

[source]
type = "mysql"
url = "{url}"
start-position = "{start}"
stop-at-end = true

[sink]
plugin = "sink-blackhole"
"#,
        plugins = plugins.display(),
        state = dir.join("state").display(),
    );
    let path = dir.join("bench-binlog.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `sluice run` under `/usr/bin/time`: (seconds, peak RSS in KiB); checks
/// that it read `rows` rows.
fn sluice_run(bin: &std::path::Path, file: &std::path::Path, rows: u64) -> (f64, u64) {
    let started = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "maxrss=%M"])
        .arg(bin)
        .args(["run", "--quiet", "--config"])
        .arg(file)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("/usr/bin/time runs sluice");
    let secs = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice run failed: {err}");
    let summary = String::from_utf8_lossy(&out.stdout);
    let read: u64 = summary
        .split(" rows in ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary: {summary}"));
    assert_eq!(read, rows, "sluice run read every row: {summary}");
    let rss = err
        .lines()
        .find_map(|l| l.strip_prefix("maxrss="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (secs, rss)
}

fn main() {
    let rows = env_or("BINLOG_BENCH_ROWS", 1_000_000);
    let runs = env_or("BINLOG_BENCH_RUNS", 3) as usize;
    let root = sluice_tests::workspace_root();
    let bin = std::env::var_os("SLUICE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/sluice"));
    let plugins = root.join("target/plugins");
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    eprintln!("starting a private MariaDB and writing {rows} rows in transactions of 100 ...");
    let db = PrivateMariaDb::start();
    db.exec(
        "CREATE DATABASE bench; CREATE TABLE bench.sbtest (id INT PRIMARY KEY, k INT NOT NULL, \
         c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY (k))",
    );
    let start = StartPosition::Gtid(db.exec("SELECT @@gtid_binlog_pos").trim().to_string());
    let mut script = String::from("USE bench;");
    for first in (1..=rows).step_by(100) {
        let last = (first + 99).min(rows);
        script.push_str(&format!(
            "INSERT INTO sbtest SELECT seq, seq % 1000, CONCAT('c-', seq, REPEAT('x', 100)), REPEAT('p', 60) FROM seq_{first}_to_{last};"
        ));
    }
    let loaded = Instant::now();
    db.exec(&script);
    eprintln!("written in {:.1} s", loaded.elapsed().as_secs_f64());

    let url = db.root_url();
    let file = run_file(dir.path(), &url, &start, &plugins);
    let (mut decode_s, mut run_s, mut rss) = (Vec::new(), Vec::new(), Vec::new());
    // A warm-up round (not counted) fills the precompiled plugin cache.
    for round in 0..=runs {
        let t = Instant::now();
        let n = rt.block_on(decode(&url, &start));
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(n, rows, "the source read every row");
        let _ = std::fs::remove_file(dir.path().join("state/meta.redb"));
        let (secs_run, kib) = sluice_run(&bin, &file, rows);
        if round > 0 {
            decode_s.push(secs);
            run_s.push(secs_run);
            rss.push(kib);
        }
    }
    let (d, r) = (median(decode_s), median(run_s));
    println!(
        "{:<44} {:>10} {:>12}",
        "binlog benchmark", "median s", "rows/s"
    );
    println!(
        "{:<44} {:>10.3} {:>12.0}",
        format!("raw decode ({rows} rows, source only)"),
        d,
        rows as f64 / d
    );
    println!(
        "{:<44} {:>10.3} {:>12.0}",
        "sluice run -> sink-blackhole (whole process)",
        r,
        rows as f64 / r
    );
    println!("whole path / raw decode: {:.2}", d / r);
    println!(
        "sluice run peak RSS: {} MiB",
        rss.iter().max().unwrap() / 1024
    );

    // One transaction of 1M rows: streamed in parts, never held whole.
    eprintln!("writing one transaction of 1000000 rows ...");
    db.exec("CREATE TABLE bench.big (id INT PRIMARY KEY, c CHAR(120) NOT NULL)");
    let start = StartPosition::Gtid(db.exec("SELECT @@gtid_binlog_pos").trim().to_string());
    db.exec("USE bench; INSERT INTO big SELECT seq, CONCAT('c-', seq, REPEAT('x', 100)) FROM seq_1_to_1000000");
    let file = run_file(dir.path(), &url, &start, &plugins);
    let _ = std::fs::remove_file(dir.path().join("state/meta.redb"));
    let (secs, kib) = sluice_run(&bin, &file, 1_000_000);
    println!(
        "1M-row transaction: {secs:.2} s, {:.0} rows/s, peak RSS {} MiB (event-cache-bytes default 64 MiB)",
        1e6 / secs,
        kib / 1024
    );
}
