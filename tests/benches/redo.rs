//! Consistent replication's cost and speed, side by side in one run:
//!
//! 1. The whole path a user runs (`sluice run`, datagen → sink-blackhole) with
//!    `[consistent] level = "eventual"` against the same run without, rows/s
//!    and their ratio (medians of alternated runs).
//!    The same for MariaDB → sink-mysql → MariaDB (two private servers; the
//!    binlog of `REDO_BENCH_SQL_ROWS` inserts, default 200,000, in
//!    transactions of 100; 0 skips it): the downstream emptied before each
//!    run, its row count checked after.
//! 2. `sluice redo apply --from-start` of the log the last run wrote into
//!    sink-blackhole: rows/s.
//! 3. The redo writer's MB/s (encode, write, fdatasync, rename, directory
//!    fsync) next to this disk's own sequential write with fdatasync of the
//!    same file sizes, in this process (the faster of a write through the
//!    page cache and one past it, `O_DIRECT`): `REDO_BENCH_WRITER_PAIRS` pairs
//!    (default 7) of runs side by side, the median of their ratios.
//! 4. The redo resolved ts's lag behind the wall clock (the RPO: what a
//!    disaster now would lose) under a steady load, sampled every 10 ms, at
//!    the default flush interval (2 s) and at 200 ms: p50 and p95. The source
//!    stamps each transaction with the wall clock, so the lag is real time.
//!
//! The writer of (3) runs in this process with the allocator the `sluice`
//! binary has (jemalloc): where a buffer lands decides whether a file is
//! written from it or copied first (see `sluice_redo`'s `DirectWrites`), and
//! the allocator's page reuse is part of the writer's cost.
//!
//! Run with `cargo xtask bench-redo` (it builds the release binary and the
//! plugins first). `SLUICE_BIN` is the `sluice` binary; `REDO_BENCH_ROWS` the
//! rows of (1), one count or several separated by commas (default
//! 1,000,000 and 5,000,000), `REDO_BENCH_DATAGEN_RUNS` the timed on/off
//! rounds of (1) (default 9), `REDO_BENCH_RUNS` those of the others
//! (default 3), `REDO_BENCH_MIB` the MiB of (3) (default 512),
//! `REDO_BENCH_RATE` the rows/s of (4) (default 20,000) and
//! `REDO_BENCH_SECS` its seconds per setting (default 10).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_core::{
    Batch, Checkpoint, CheckpointTs, Column, ColumnType, CommitTs, DdlEvent, Op, PluginError,
    ResumeError, Sink, Source, SourceEvent, TableSchema, Transaction, Value,
};
use sluice_processor::{Pipeline, PipelineConfig, RedoConfig, RedoLog};
use sluice_redo::{LogWriter, Storage, StorageUri};
use sluice_tests::bench::{env_or, median, percentile};

/// As in the `sluice` binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let bin =
        PathBuf::from(std::env::var("SLUICE_BIN").expect("SLUICE_BIN names the sluice binary"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let work = root.join("target/bench-redo");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let sizes: Vec<u64> = match std::env::var("REDO_BENCH_ROWS") {
        Ok(v) => v
            .split(',')
            .map(|n| n.trim().parse().expect("REDO_BENCH_ROWS: row counts"))
            .collect(),
        Err(_) => vec![1_000_000, 5_000_000],
    };
    let runs = (env_or("REDO_BENCH_RUNS", 3) as usize).max(1);
    // A datagen run takes a second or two and moves by ±15% on a shared
    // machine: more of them, each on/off pair back to back.
    let datagen_runs = (env_or("REDO_BENCH_DATAGEN_RUNS", 9) as usize).max(1);

    // 1. sluice run, redo off and on, at each size: a short run is mostly
    // warm-up (the first flush's wait, first touches of the memory the log
    // holds), a longer one shows the rate the path keeps.
    let plugins = root.join("target/plugins");
    let mut rows = 0;
    for &size in &sizes {
        rows = size;
        let off = run_file(&work, &plugins, rows, false);
        let on = run_file(&work, &plugins, rows, true);
        let (mut t_off, mut t_on) = (Vec::new(), Vec::new());
        // The first round warms the precompiled plugin cache in the data dir
        // (kept, as a user's repeated runs keep it); not counted. Only the
        // saved positions and the log go, so that every run starts from the
        // beginning.
        for round in 0..=datagen_runs {
            for (file, times) in [(&off, &mut t_off), (&on, &mut t_on)] {
                let _ = std::fs::remove_file(work.join("state/meta.redb"));
                let _ = std::fs::remove_dir_all(work.join("redo"));
                let secs = sluice(&bin, &["run", "--quiet", "--config"], file);
                if round > 0 {
                    times.push(secs);
                }
            }
        }
        print_on_off("sluice run datagen -> sink-blackhole", rows, &t_off, &t_on);
    }

    // 1b. MariaDB -> sink-mysql -> MariaDB, redo off and on.
    if env_or("REDO_BENCH_SQL_ROWS", 200_000) > 0 {
        mariadb_on_off(&bin, &work, &plugins, runs);
    }

    // 2. redo apply of the last run's log.
    let sink_file = work.join("apply-sink.toml");
    std::fs::write(&sink_file, "[sink]\nplugin = \"sink-blackhole\"\n").unwrap();
    let storage = format!("file://{}/redo/bench-redo", work.display());
    let mut t_apply = Vec::new();
    for _ in 0..runs {
        let secs = sluice(
            &bin,
            &[
                "redo",
                "apply",
                "--quiet",
                "--from-start",
                "--storage",
                &storage,
                "--plugin-dir",
                plugins.to_str().unwrap(),
                "--sink-config",
            ],
            &sink_file,
        );
        t_apply.push(secs);
    }
    let m_apply = median(t_apply);
    println!(
        "{:<44} {:>10.3} {:>12.0}",
        "sluice redo apply --from-start -> blackhole",
        m_apply,
        rows as f64 / m_apply
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // 3. writer MB/s next to the disk.
    // This disk's speed swings by 4x from one second to the next (seen:
    // 360 to 1650 MB/s in back-to-back runs), so each writer run is paired
    // with a disk run right next to it (in turn first and second) and the
    // figure is the median of the pairs' ratios.
    let mib = env_or("REDO_BENCH_MIB", 512) as usize;
    let pairs = env_or("REDO_BENCH_WRITER_PAIRS", 7) as usize;
    // The disk's figure is the faster of its two ways of writing (through
    // the page cache, and past it as the writer writes large files), each
    // measured beside the writer run.
    let (mut w_mbs, mut d_mbs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cached_mbs, mut direct_mbs) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let writer = || runtime.block_on(writer_mbs(&work.join("writer"), mib));
        let mut disk = || {
            let cached = disk_mbs(&work.join("disk"), mib, false).expect("a buffered write");
            let direct = disk_mbs(&work.join("disk"), mib, true);
            cached_mbs.push(cached);
            direct_mbs.extend(direct);
            cached.max(direct.unwrap_or(0.0))
        };
        let (w, d) = if pair % 2 == 0 {
            let w = writer();
            (w, disk())
        } else {
            let d = disk();
            (writer(), d)
        };
        w_mbs.push(w);
        d_mbs.push(d);
        ratios.push(w / d);
    }
    let (w, d, ratio) = (median(w_mbs), median(d_mbs), median(ratios));
    println!(
        "{:<44} {:>10} {:>12}",
        "64 MiB files, fdatasync each", "", "MB/s"
    );
    println!(
        "{:<44} {:>10} {:>12.0}",
        "  redo writer (encode + write + sync)", "", w
    );
    println!(
        "{:<44} {:>10} {:>12.0}",
        "  this disk through the page cache",
        "",
        median(cached_mbs)
    );
    if !direct_mbs.is_empty() {
        println!(
            "{:<44} {:>10} {:>12.0}",
            "  this disk past the page cache (O_DIRECT)",
            "",
            median(direct_mbs)
        );
    }
    println!(
        "{:<44} {:>10} {:>12.0}",
        "  this disk (the faster of the two)", "", d
    );
    println!(
        "{:<44} {:>10.2}x",
        format!("  writer / disk (median of {pairs} pairs)"),
        ratio
    );

    // 4. RPO under load.
    let rate = env_or("REDO_BENCH_RATE", 20_000);
    let secs = env_or("REDO_BENCH_SECS", 10);
    println!(
        "{:<44} {:>10} {:>12}",
        format!("redo resolved-ts lag at {rate} rows/s"),
        "p50 ms",
        "p95 ms"
    );
    for flush_ms in [2_000u64, 200] {
        let lags = runtime.block_on(rpo(
            &work.join(format!("rpo-{flush_ms}")),
            rate,
            secs,
            flush_ms,
        ));
        println!(
            "{:<44} {:>10.0} {:>12.0}",
            format!("  flush-interval {flush_ms} ms ({} samples)", lags.len()),
            percentile(&lags, 0.50),
            percentile(&lags, 0.95)
        );
    }
}

/// A `sluice run` file: datagen → sink-blackhole, with or without redo.
fn run_file(work: &Path, plugins: &Path, rows: u64, redo: bool) -> PathBuf {
    let mut text = format!(
        r#"plugin-dir = "{plugins}"
data-dir = "{state}"

[changefeed]
id = "bench-redo"

[source]
type = "datagen"
seed = 42
total-rows = {rows}
rate = 0

[sink]
plugin = "sink-blackhole"
"#,
        plugins = plugins.display(),
        state = work.join("state").display(),
    );
    if redo {
        text.push_str(&format!(
            "\n[consistent]\nlevel = \"eventual\"\nstorage = \"file://{}/redo\"\n",
            work.display()
        ));
    }
    let path = work.join(if redo {
        "redo-on.toml"
    } else {
        "redo-off.toml"
    });
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `bin args file`: seconds; panics with its stderr if it fails.
fn sluice(bin: &Path, args: &[&str], file: &Path) -> f64 {
    let started = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .arg(file)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("sluice runs");
    let secs = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{} {args:?} {} failed: {}",
        bin.display(),
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    secs
}

fn schema() -> Arc<TableSchema> {
    let column = |name: &str, ty: ColumnType, key: bool| Column {
        name: name.into(),
        ty,
        sql_type: format!("{ty:?}"),
        nullable: !key,
        key,
    };
    Arc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "bench".into(),
        table_name: "orders".into(),
        columns: vec![
            column("id", ColumnType::Int, true),
            column("customer", ColumnType::Text, false),
            column("amount", ColumnType::Float, false),
            column("note", ColumnType::Text, false),
        ],
    })
}

/// A transaction at `ts` of `rows` inserts of about 100 bytes each.
fn txn(schema: &Arc<TableSchema>, ts: CommitTs, first_id: i64, rows: usize) -> Transaction {
    let mut t = Transaction::new(ts);
    for i in 0..rows {
        let id = first_id + i as i64;
        t.table(schema).push_values(
            Op::Insert,
            None,
            Some(&[
                Value::Int(id),
                Value::Bytes(format!("customer-{:08}", id % 100_000).into_bytes()),
                Value::Float(id as f64 * 0.25),
                Value::Bytes(
                    format!("order {id} note: a line of text of sixty bytes or so..").into_bytes(),
                ),
            ]),
        );
    }
    t
}

/// MB/s of the redo writer writing `mib` MiB in files of 64 MiB.
async fn writer_mbs(dir: &Path, mib: usize) -> f64 {
    let _ = std::fs::remove_dir_all(dir);
    let storage = Storage::open(&StorageUri::Local(dir.to_path_buf()), "cf")
        .await
        .unwrap();
    let mut w = LogWriter::open(storage).await.unwrap();
    let schema = schema();
    let target = mib << 20;
    let file = 64 << 20;
    let mut written = 0u64;
    // The rows are made once, outside the timing (the writer's cost is
    // measured, not the bench's): each append is the same 100 rows at a new
    // commit ts.
    let mut t = txn(&schema, CommitTs::new(1_000), 0, 100);
    let mut ts = 1_000u64;
    // As the changefeed's writer task does: a sealed flush is written on a
    // task of its own while the next rows are appended, one in flight.
    let write = |mut sealed: sluice_redo::Sealed| {
        tokio::spawn(async move {
            let flushed = sealed.write().await.unwrap();
            (sealed, flushed.bytes)
        })
    };
    let mut in_flight: Option<tokio::task::JoinHandle<(sluice_redo::Sealed, u64)>> = None;
    let started = Instant::now();
    while (written as usize) < target {
        t.commit_ts = CommitTs::new(ts);
        w.append_transaction(&t).unwrap();
        ts += 1;
        if w.pending_bytes() >= file {
            if let Some(task) = in_flight.take() {
                let (sealed, bytes) = task.await.unwrap();
                w.sealed(sealed);
                written += bytes;
            }
            in_flight = Some(write(w.seal(0)));
        }
    }
    if let Some(task) = in_flight.take() {
        let (sealed, bytes) = task.await.unwrap();
        w.sealed(sealed);
        written += bytes;
    }
    written += w.flush(0).await.unwrap().bytes;
    let secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(dir);
    written as f64 / 1e6 / secs
}

/// MB/s of this disk: `mib` MiB in 64 MiB files, each written, fdatasynced,
/// renamed into place and its directory synced (what the writer does); with
/// `direct`, written past the page cache (`O_DIRECT`, as the writer writes
/// large files on Linux). `None` where the file system refuses that.
fn disk_mbs(dir: &Path, mib: usize, direct: bool) -> Option<f64> {
    use std::io::Write;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let len = 64usize << 20;
    // From memory as the writer's own buffers are: an anonymous mapping
    // (page-aligned) on huge pages where the system has them (a write past
    // the page cache pins every page of its buffer: fewer, larger pages
    // write faster).
    let mut buffer = memmap2::MmapMut::map_anon(len).unwrap();
    #[cfg(target_os = "linux")]
    let _ = buffer.advise(memmap2::Advice::HugePage);
    for (i, b) in buffer.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    let chunk = &buffer[..];
    let files = mib.div_ceil(64);
    let started = Instant::now();
    for i in 0..files {
        let tmp = dir.join(format!("{i}.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(target_os = "linux")]
        if direct {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_DIRECT);
        }
        #[cfg(not(target_os = "linux"))]
        if direct {
            return None;
        }
        let mut f = match options.open(&tmp) {
            Ok(f) => f,
            Err(e) if direct && refused(&e) => return None,
            Err(e) => panic!("{}: {e}", tmp.display()),
        };
        f.write_all(chunk).unwrap();
        f.sync_data().unwrap();
        drop(f);
        std::fs::rename(&tmp, dir.join(format!("{i}.log"))).unwrap();
        std::fs::File::open(dir).unwrap().sync_all().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(dir);
    Some((files * len) as f64 / 1e6 / secs)
}

/// The file system does not take writes past the page cache.
fn refused(e: &std::io::Error) -> bool {
    #[cfg(target_os = "linux")]
    return e.raw_os_error() == Some(libc::EINVAL);
    #[cfg(not(target_os = "linux"))]
    return false;
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Transactions of 10 rows at `rate` rows/s for `secs`, each stamped with
/// the wall clock (its commit ts), then the end.
struct WallClockSource {
    schema: Arc<TableSchema>,
    rate: u64,
    started: Option<Instant>,
    until: Duration,
    sent: u64,
    last_ms: u64,
    logical: u64,
}

impl Source for WallClockSource {
    type Error = std::io::Error;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        let started = *self.started.get_or_insert_with(Instant::now);
        if started.elapsed() >= self.until {
            return Ok(SourceEvent::End);
        }
        // The next transaction is due when the rate allows it.
        let due = started + Duration::from_secs_f64((self.sent as f64) / self.rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let ms = now_ms();
        self.logical = if ms == self.last_ms {
            self.logical + 1
        } else {
            0
        };
        self.last_ms = ms;
        let ts = CommitTs::compose(ms, self.logical);
        let t = txn(&self.schema, ts, self.sent as i64, 10);
        self.sent += 10;
        Ok(SourceEvent::Transaction(t))
    }

    fn resume(&mut self, _from: &Checkpoint) -> Result<(), ResumeError> {
        Ok(())
    }
}

/// A sink that takes everything at once.
struct Blackhole;

impl Sink for Blackhole {
    fn name(&self) -> &str {
        "blackhole"
    }
    async fn open(&mut self) -> Result<(), PluginError> {
        Ok(())
    }
    async fn write(&mut self, _: &[Arc<TableSchema>], _: &mut Batch) -> Result<(), PluginError> {
        Ok(())
    }
    async fn flush(&mut self, _: CommitTs) -> Result<(), PluginError> {
        Ok(())
    }
    async fn apply_ddl(&mut self, _: &DdlEvent) -> Result<(), PluginError> {
        Ok(())
    }
    async fn close(&mut self) -> Result<(), PluginError> {
        Ok(())
    }
}

/// No filter (the pipeline's filter type).
struct NoFilter;

impl sluice_core::Filter for NoFilter {
    fn name(&self) -> &str {
        "none"
    }
    async fn open(&mut self) -> Result<(), PluginError> {
        Ok(())
    }
    async fn transform(
        &mut self,
        _: &[Arc<TableSchema>],
        _: &mut Batch,
    ) -> Result<(), PluginError> {
        Ok(())
    }
}

/// Samples of (now − redo resolved ts) in ms, every 10 ms, while a
/// wall-clock source runs at `rate` rows/s for `secs` with redo flushed every
/// `flush_ms` (the first flush interval is not counted: nothing is durable
/// yet by design).
async fn rpo(dir: &Path, rate: u64, secs: u64, flush_ms: u64) -> Vec<f64> {
    let _ = std::fs::remove_dir_all(dir);
    let storage = Storage::open(&StorageUri::Local(dir.to_path_buf()), "cf")
        .await
        .unwrap();
    let defaults = sluice_config::ConsistentConfig::default();
    let mut config = RedoConfig::from(&defaults);
    config.flush_interval = Duration::from_millis(flush_ms);
    let log = RedoLog::new(LogWriter::open(storage).await.unwrap(), config);
    let mut pipeline = Pipeline::new(
        PipelineConfig::default(),
        Vec::<NoFilter>::new(),
        Blackhole,
        CheckpointTs::ZERO,
    )
    .with_redo(log);
    let progress = pipeline.progress();
    let source = WallClockSource {
        schema: schema(),
        rate,
        started: None,
        until: Duration::from_secs(secs),
        sent: 0,
        last_ms: 0,
        logical: 0,
    };
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(false);
    let sampler = async move {
        let mut lags = Vec::new();
        let started = Instant::now();
        let skip = Duration::from_millis(flush_ms + 500);
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = done_rx.changed() => break,
            }
            let resolved = progress.borrow().redo.as_ref().map(|r| r.resolved_ts);
            if let Some(r) = resolved
                && started.elapsed() > skip
                && r > CommitTs::ZERO
            {
                lags.push(now_ms().saturating_sub(r.physical_millis()) as f64);
            }
        }
        lags
    };
    let run = async {
        let report = pipeline.run(source, std::future::pending()).await;
        let _ = done_tx.send(true);
        report.expect("the pipeline runs")
    };
    let (report, mut lags) = tokio::join!(run, sampler);
    assert!(report.progress.rows_read > 0);
    assert_eq!(
        report.progress.rows_written, report.progress.rows_read,
        "every row reached the sink"
    );
    let _ = std::fs::remove_dir_all(dir);
    lags.sort_by(f64::total_cmp);
    lags
}

/// `sluice run` from a private MariaDB's binlog through sink-mysql into a
/// second MariaDB, with redo and without, alternated: the downstream emptied
/// before each run; medians and their ratio. `REDO_BENCH_SQL_ROWS` rows
/// (default 200,000) in transactions of 100 inserts.
fn mariadb_on_off(bin: &Path, work: &Path, plugins: &Path, runs: usize) {
    use sluice_tests::mariadb::PrivateMariaDb;
    let rows = env_or("REDO_BENCH_SQL_ROWS", 200_000);
    eprintln!("starting two private MariaDB servers and writing {rows} rows upstream ...");
    let up = PrivateMariaDb::start();
    let down = PrivateMariaDb::start_with(&["--server-id=3", "--skip-log-bin"]);
    let start = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
    let mut script = String::from(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, \
         customer VARCHAR(32) NOT NULL, amount DOUBLE NOT NULL, note VARCHAR(100) NOT NULL);\n",
    );
    for first in (0..rows).step_by(100) {
        script.push_str("BEGIN; INSERT INTO shop.orders VALUES ");
        for id in first..(first + 100).min(rows) {
            if id > first {
                script.push(',');
            }
            script.push_str(&format!(
                "({id},'customer-{:08}',{},'order {id} note: a line of text of sixty bytes or so..')",
                id % 100_000,
                id as f64 * 0.25
            ));
        }
        script.push_str("; COMMIT;\n");
    }
    up.exec(&script);
    // A changefeed id per run: sink-mysql keeps what it applied downstream.
    let file = |redo: bool, round: usize| {
        let mut text = format!(
            r#"plugin-dir = "{plugins}"
data-dir = "{state}"

[changefeed]
id = "bench-redo-sql-{round}-{redo}"

[source]
type = "mysql"
url = "{up}"
start-position = "gtid:{start}"
stop-at-end = true

[sink]
plugin = "sink-mysql"
[sink.config]
database = "target"
worker-count = 4
[sink.capabilities.sql]
target = "{down}"
[sink.limits]
sql-connections = 4
"#,
            plugins = plugins.display(),
            state = work.join("state-sql").display(),
            up = up.root_url(),
            down = down.root_url(),
        );
        if redo {
            text.push_str(&format!(
                "\n[consistent]\nlevel = \"eventual\"\nstorage = \"file://{}/redo-sql\"\n",
                work.display()
            ));
        }
        let path = work.join(if redo { "sql-on.toml" } else { "sql-off.toml" });
        std::fs::write(&path, text).unwrap();
        path
    };
    let (mut t_off, mut t_on) = (Vec::new(), Vec::new());
    for round in 0..=runs {
        let (off, on) = (file(false, round), file(true, round));
        for (file, times) in [(&off, &mut t_off), (&on, &mut t_on)] {
            let _ = std::fs::remove_dir_all(work.join("state-sql"));
            let _ = std::fs::remove_dir_all(work.join("redo-sql"));
            down.exec("DROP DATABASE IF EXISTS shop");
            let secs = sluice(bin, &["run", "--quiet", "--config"], file);
            let count = down.exec("SELECT COUNT(*) FROM shop.orders");
            assert_eq!(count.trim(), rows.to_string(), "every row downstream");
            if round > 0 {
                times.push(secs);
            }
        }
    }
    print_on_off(
        "sluice run MariaDB -> sink-mysql -> MariaDB",
        rows,
        &t_off,
        &t_on,
    );
}

/// Medians of `off` and `on` (in seconds, the same rounds), and the median
/// of each round's ratio: a round's two runs are back to back, so the ratio
/// of a round moves less with the machine's load than either run.
fn print_on_off(title: &str, rows: u64, off: &[f64], on: &[f64]) {
    let (m_off, m_on) = (median(off.to_vec()), median(on.to_vec()));
    let paired = median(off.iter().zip(on).map(|(f, n)| f / n).collect());
    println!("{:<44} {:>10} {:>12}", title, "median s", "rows/s");
    for (what, m) in [
        ("  redo off", m_off),
        ("  redo on (file://, flush-interval 2 s)", m_on),
    ] {
        println!("{:<44} {:>10.3} {:>12.0}", what, m, rows as f64 / m);
    }
    println!(
        "{:<44} {:>10.2}x {:>11.2}x",
        format!("  on / off (rows/s; medians, rounds of {})", off.len()),
        m_off / m_on,
        paired
    );
}
