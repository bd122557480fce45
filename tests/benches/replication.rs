//! MariaDB → MariaDB replication speed, Sluice (binlog source → sink-mysql)
//! next to MariaDB's own replication, on private servers in one run.
//!
//! For each sysbench workload (`oltp_insert`, `oltp_write_only`; Debian's
//! sysbench): the workload runs on the upstream with both appliers stopped,
//! so both then apply the same binlog range from the same start:
//! - native: a MariaDB replica (GTID, `slave_parallel_threads = 4`,
//!   optimistic parallel mode) is started and timed until its
//!   `gtid_slave_pos` reaches the upstream's;
//! - Sluice: `sluice run` (release build) reads the same range and stops at
//!   its end, applying it with sink-mysql (`worker-count = 4`) to a third
//!   server; the whole process is timed.
//!
//! Both downstreams are then checked equal to the upstream with `sluice
//! diff`. Last, a live phase: both appliers run while sysbench writes at a
//! fixed rate and a heartbeat row is updated upstream every 10 ms; each
//! downstream is polled every 10 ms for how old its heartbeat is (the lag;
//! p50 and p99 of the samples).
//!
//! Run with `cargo xtask bench-replication`. Environment: `SLUICE_BIN` (the
//! release `sluice`), `REPL_BENCH_SECONDS` (sysbench run time per workload,
//! default 20), `REPL_BENCH_RUNS` (runs per workload, default 3; medians),
//! `REPL_BENCH_WORKLOADS` (sysbench workloads, comma-separated; default
//! `oltp_insert,oltp_write_only`), `REPL_BENCH_TABLE_SIZE` (rows per
//! sysbench table at prepare, default 50,000; 4 tables), `REPL_BENCH_RATE` (transactions/s in the live phase,
//! default 500).

use sluice_tests::bench::{env_or, median, percentile};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use sluice_tests::mariadb::PrivateMariaDb;

/// Runs sysbench `workload` `phase` against `db`'s database `schema`.
fn sysbench(
    db: &PrivateMariaDb,
    schema: &str,
    workload: &str,
    phase: &str,
    extra: &[String],
) -> String {
    let out = Command::new("sysbench")
        .arg(workload)
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            "--mysql-user=root",
            "--tables=4",
            "--threads=4",
        ])
        .arg(format!("--mysql-port={}", db.port))
        .arg(format!("--mysql-db={schema}"))
        .arg(format!(
            "--table-size={}",
            env_or("REPL_BENCH_TABLE_SIZE", 50_000)
        ))
        .args(extra)
        .arg(phase)
        .output()
        .expect("sysbench runs (apt-get install sysbench; cargo xtask bench-replication does)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sysbench {workload} {phase} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A `sluice run` file: the upstream from `start` (a GTID position) into
/// sink-mysql on `target`; stops at the binlog's end unless `live`.
fn run_file(dir: &Path, name: &str, up: &str, start: &str, target: &str, live: bool) -> PathBuf {
    let plugins = sluice_tests::workspace_root().join("target/plugins");
    // One data dir for every run: each has its own changefeed id (its own
    // positions), and the precompiled plugin is compiled once, as for a
    // user who runs `sluice run` again.
    let state = dir.join("state");
    let text = format!(
        r#"plugin-dir = "{plugins}"
data-dir = "{state}"

[changefeed]
id = "{id}"

[source]
type = "mysql"
url = "{up}"
start-position = "gtid:{start}"
stop-at-end = {stop}
heartbeat-ms = 100

[sink]
plugin = "sink-mysql"
[sink.config]
database = "target"
worker-count = 4
max-txn-row = 256
[sink.capabilities.sql]
target = "{target}"
[sink.limits]
sql-connections = 4
host-call-timeout-ms = 120000

[pipeline]
flush-interval-ms = 50
"#,
        plugins = plugins.display(),
        state = state.display(),
        stop = !live,
        id = name.replace('_', "-"),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// `sluice run` to the end of the binlog: (seconds, rows read).
fn sluice_apply(bin: &Path, file: &Path) -> (f64, u64) {
    let started = Instant::now();
    let out = Command::new(bin)
        .args(["run", "--quiet", "--config"])
        .arg(file)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("sluice runs");
    let secs = started.elapsed().as_secs_f64();
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sluice run failed: {summary}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = summary
        .split(" rows in ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary: {summary}"));
    (secs, rows)
}

/// Starts the native replica from `start` and waits until it applied up to
/// `end`: seconds.
fn native_apply(replica: &PrivateMariaDb, end: &str) -> f64 {
    let started = Instant::now();
    replica.exec("START SLAVE");
    loop {
        let pos = replica.exec("SELECT @@gtid_slave_pos");
        if pos.trim() == end {
            break;
        }
        let status = replica.exec("SHOW SLAVE STATUS\\G");
        assert!(
            !status.contains("Last_SQL_Error: ") || status.contains("Last_SQL_Error: \n"),
            "the native replica failed: {status}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "the native replica did not catch up: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = started.elapsed().as_secs_f64();
    replica.exec("STOP SLAVE");
    secs
}

fn diff(bin: &Path, source: &str, target: &str, schema: &str) {
    let mut cmd = Command::new(bin);
    cmd.args(["diff", "--quiet", "--source", source, "--target", target]);
    for t in 1..=4 {
        cmd.args(["--table", &format!("{schema}.sbtest{t}")]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{target} differs from the upstream: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Updates the heartbeat upstream every 10 ms and samples each
/// downstream's heartbeat age every 10 ms until `until`: lags in ms.
async fn heartbeat_lags(up: &str, downs: &[String], until: Instant) -> Vec<Vec<f64>> {
    let mut writer = mysql_async::Conn::from_url(up).await.unwrap();
    let mut readers = Vec::new();
    for d in downs {
        readers.push(mysql_async::Conn::from_url(d.as_str()).await.unwrap());
    }
    let mut lags = vec![Vec::new(); downs.len()];
    // A downstream's samples count from when it first shows a heartbeat
    // written in this phase (before, it shows the one written at set-up).
    let mut seen = vec![false; downs.len()];
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while Instant::now() < until {
        tick.tick().await;
        writer
            .query_drop("UPDATE bench_hb.hb SET at = NOW(6) WHERE id = 1")
            .await
            .unwrap();
        let since_start = started.elapsed().as_micros() as i64;
        for ((reader, lags), seen) in readers.iter_mut().zip(&mut lags).zip(&mut seen) {
            let age: Option<i64> = reader
                .query_first(
                    "SELECT TIMESTAMPDIFF(MICROSECOND, at, NOW(6)) FROM bench_hb.hb WHERE id = 1",
                )
                .await
                .unwrap();
            if let Some(us) = age {
                *seen |= us <= since_start;
                if *seen {
                    lags.push(us as f64 / 1000.0);
                }
            }
        }
    }
    lags
}

fn main() {
    let seconds = env_or("REPL_BENCH_SECONDS", 20);
    let runs = env_or("REPL_BENCH_RUNS", 3) as usize;
    let rate = env_or("REPL_BENCH_RATE", 500);
    let root = sluice_tests::workspace_root();
    let bin = std::env::var_os("SLUICE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/sluice"));
    let dir = tempfile::tempdir().unwrap();

    eprintln!(
        "starting three private MariaDB servers (upstream, native replica, Sluice's target) ..."
    );
    let up = PrivateMariaDb::start();
    up.exec(
        "CREATE USER 'repl'@'%' IDENTIFIED BY 'Repl-Pw1'; \
         GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'",
    );
    // Neither downstream writes a binlog of its own (the replica's default).
    let native = PrivateMariaDb::start_with(&[
        "--server-id=2",
        "--skip-log-bin",
        "--skip-slave-start",
        "--slave-parallel-threads=4",
        "--slave-parallel-mode=optimistic",
    ]);
    let ours = PrivateMariaDb::start_with(&["--server-id=3", "--skip-log-bin"]);
    let start = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
    native.exec(&format!(
        "SET GLOBAL gtid_slave_pos = '{start}'; \
         CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, MASTER_USER = 'repl', \
         MASTER_PASSWORD = 'Repl-Pw1', MASTER_USE_GTID = slave_pos",
        up.port
    ));
    let up_url = up.url("repl", "Repl-Pw1");

    let mut table = Vec::new();
    let workloads =
        std::env::var("REPL_BENCH_WORKLOADS").unwrap_or("oltp_insert,oltp_write_only".into());
    for workload in workloads
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        let (mut native_s, mut sluice_s, mut rows_n) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let schema = format!("{workload}_{run}");
            let start = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
            up.exec(&format!("CREATE DATABASE {schema}"));
            eprintln!(
                "{workload} run {}: sysbench prepare and {seconds} s of run on the upstream ...",
                run + 1
            );
            sysbench(&up, &schema, workload, "prepare", &[]);
            let report = sysbench(
                &up,
                &schema,
                workload,
                "run",
                &[format!("--time={seconds}"), "--events=0".into()],
            );
            let end = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
            let writes = report
                .lines()
                .find_map(|l| l.trim().strip_prefix("write:"))
                .map(str::trim)
                .unwrap_or("?")
                .to_string();
            eprintln!("  sysbench wrote {writes} statements; binlog {start} -> {end}");

            let n = native_apply(&native, &end);
            let file = run_file(
                dir.path(),
                &schema,
                &up_url,
                &start,
                &ours.root_url(),
                false,
            );
            let (s, rows) = sluice_apply(&bin, &file);
            eprintln!(
                "  native {n:.2} s, sluice {s:.2} s for {rows} rows ({:.0} vs {:.0} rows/s)",
                rows as f64 / n,
                rows as f64 / s
            );
            diff(&bin, &up.root_url(), &native.root_url(), &schema);
            diff(&bin, &up.root_url(), &ours.root_url(), &schema);
            native_s.push(n);
            sluice_s.push(s);
            rows_n.push(rows as f64);
        }
        let rows = median(rows_n);
        let (n, s) = (median(native_s), median(sluice_s));
        table.push((workload, rows, n, s));
    }

    // Live: both appliers follow while sysbench writes at a fixed rate.
    eprintln!(
        "live phase: sysbench oltp_write_only at {rate} tps for {seconds} s with both appliers running ..."
    );
    let live_start = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
    up.exec(
        "CREATE DATABASE bench_hb; CREATE TABLE bench_hb.hb (id INT PRIMARY KEY, at DATETIME(6)); \
         INSERT INTO bench_hb.hb VALUES (1, NOW(6)); CREATE DATABASE live",
    );
    sysbench(&up, "live", "oltp_write_only", "prepare", &[]);
    native.exec("START SLAVE");
    let file = run_file(
        dir.path(),
        "live",
        &up_url,
        &live_start,
        &ours.root_url(),
        true,
    );
    let mut sluice: Child = Command::new(&bin)
        .args(["run", "--quiet", "--config"])
        .arg(&file)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Both have the prepared tables before the load starts.
    let want = up.exec("SELECT COUNT(*) FROM live.sbtest4");
    let caught_up = Instant::now();
    for db in [&native, &ours] {
        while db.try_exec("SELECT COUNT(*) FROM live.sbtest4").ok() != Some(want.clone()) {
            assert!(
                caught_up.elapsed() < Duration::from_secs(600),
                "a downstream did not take the prepared tables"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let until = Instant::now() + Duration::from_secs(seconds);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let downs = vec![native.root_url(), ours.root_url()];
    let load = std::thread::scope(|scope| {
        let load = scope.spawn(|| {
            sysbench(
                &up,
                "live",
                "oltp_write_only",
                "run",
                &[
                    format!("--time={seconds}"),
                    "--events=0".into(),
                    format!("--rate={rate}"),
                ],
            )
        });
        let lags = rt.block_on(heartbeat_lags(&up.root_url(), &downs, until));
        (load.join().unwrap(), lags)
    });
    let _ = sluice.kill();
    let _ = sluice.wait();
    native.exec("STOP SLAVE");
    let (_, lags) = load;

    println!(
        "{:<18} {:>10} {:>10} {:>12} {:>10} {:>12} {:>14}",
        "workload", "rows", "native s", "native r/s", "sluice s", "sluice r/s", "sluice/native"
    );
    for (workload, rows, n, s) in &table {
        println!(
            "{:<18} {:>10.0} {:>10.2} {:>12.0} {:>10.2} {:>12.0} {:>14.2}",
            workload,
            rows,
            n,
            rows / n,
            s,
            rows / s,
            n / s
        );
    }
    for (name, mut l) in ["native replica", "sluice sink-mysql"]
        .into_iter()
        .zip(lags)
    {
        l.sort_by(f64::total_cmp);
        println!(
            "live lag at {rate} tps ({name}): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} samples)",
            percentile(&l, 0.5),
            percentile(&l, 0.99),
            l.last().copied().unwrap_or(f64::NAN),
            l.len()
        );
    }
}
