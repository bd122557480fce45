//! Helpers shared by the end-to-end tests of the `sluice` binary.
#![allow(dead_code)]

pub mod server;

use std::path::Path;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use sluice_core::Op;
use sluice_source::{DatagenConfig, DatagenSource};
use sluice_tests::text_of;

/// Writes `text` to `<dir>/<name>.toml` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Every canal-json line in the files of `dir`, in file order.
pub fn lines_in(dir: &Path) -> Vec<Json> {
    let mut out = Vec::new();
    for_each_line(dir, |l| out.push(l));
    out
}

/// Each canal-json line in the files of `dir`, in file order, one at a time
/// (a run of a million rows is never held whole).
pub fn for_each_line(dir: &Path, mut f: impl FnMut(Json)) {
    use std::io::BufRead;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let reader = std::io::BufReader::new(std::fs::File::open(&file).unwrap());
        for line in reader.lines() {
            f(serde_json::from_str(&line.unwrap()).unwrap());
        }
    }
}

pub fn hash(salt: &str, value: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(value.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Expected output lines (type, commit ts, data) per row, as sink-file writes them
/// after filter-mask, for the quickstart workload with `total` rows.
pub fn expected_rows(total: u64) -> Vec<Json> {
    let mut rows = Vec::new();
    for_each_expected_row(total, |row| rows.push(row));
    rows
}

/// [`expected_rows`] one at a time.
pub fn for_each_expected_row(total: u64, mut f: impl FnMut(Json)) {
    let mut g = DatagenSource::new(DatagenConfig {
        seed: 42,
        total_rows: total,
        rate: 0,
        ..Default::default()
    })
    .unwrap();
    while let Some(txn) = g.next_transaction() {
        for (table, row) in txn.rows() {
            let image = row.image();
            let mut data = serde_json::Map::new();
            for (col, v) in table.columns.iter().zip(&image) {
                let masked =
                    table.table_name == "users" && (col.name == "email" || col.name == "name");
                let text =
                    text_of(v, col.ty).map(|t| if masked { hash("quickstart", &t) } else { t });
                data.insert(col.name.clone(), text.map_or(Json::Null, Json::String));
            }
            let kind = match row.op {
                Op::Insert => "INSERT",
                Op::Update => "UPDATE",
                Op::Delete => "DELETE",
            };
            f(serde_json::json!({
                "table": table.table_name,
                "type": kind,
                "commitTs": txn.commit_ts.get(),
                "data": data,
            }));
        }
    }
}

/// A 128-bit fingerprint of `text` (sets of a million rows keep these, not
/// the rows).
pub fn fingerprint(text: &str) -> u128 {
    let digest = Sha256::digest(text.as_bytes());
    u128::from_le_bytes(digest[..16].try_into().expect("16 bytes"))
}

/// `sluice diff --quiet` of `tables` between `source` and `target`: (equal,
/// what it printed).
pub fn sluice_diff(source: &str, target: &str, tables: &[&str]) -> (bool, String) {
    let out = sluice_diff_run(source, target, tables, 20_000);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs `sluice diff --quiet` of `tables` (`db.table`) between `source` and
/// `target` in chunks of `chunk_rows`.
pub fn sluice_diff_run(
    source: &str,
    target: &str,
    tables: &[&str],
    chunk_rows: usize,
) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .args(["diff", "--quiet", "--source", source, "--target", target])
        .args(["--chunk-rows", &chunk_rows.to_string()]);
    for t in tables {
        command.args(["--table", t]);
    }
    command.output().expect("sluice diff runs")
}

/// A changefeed's config from MySQL/MariaDB `source` through SQL sink
/// `plugin` to the granted `target` (database `target` in the sink's
/// config): `sink_extra` goes in `[sink.config]`, `rest` (its own sections)
/// after the sink's.
pub fn sql_changefeed(
    plugin: &str,
    source: &str,
    target: &str,
    sink_extra: &str,
    rest: &str,
) -> String {
    format!(
        r#"
[source]
type = "mysql"
url = "{source}"
heartbeat-ms = 200

[sink]
plugin = "{plugin}@0.1.0"
[sink.config]
database = "target"
worker-count = 4
{sink_extra}
[sink.capabilities.sql]
target = "{target}"
[sink.limits]
sql-connections = 4
host-call-timeout-ms = 120000

{rest}
"#
    )
}

/// A chaos test's rounds (`rounds_var`, else `default`) and its source of
/// random picks: xorshift64 from `SLUICE_CHAOS_SEED`, else from the clock;
/// the seed is printed, so that a failed run can be replayed.
pub fn chaos_rounds(what: &str, rounds_var: &str, default: usize) -> (usize, impl FnMut() -> u64) {
    let rounds: usize = std::env::var(rounds_var)
        .ok()
        .map_or(default, |r| r.parse().expect("a number of rounds"));
    let mut seed: u64 = std::env::var("SLUICE_CHAOS_SEED").ok().map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos() as u64
                | 1
        },
        |s| s.parse().expect("a seed"),
    );
    eprintln!("{what}: {rounds} rounds, SLUICE_CHAOS_SEED={seed}");
    let random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (rounds, random)
}

/// Serves `app` on a private port from a thread of its own (a receiver for
/// sinks that speak HTTP); returns its address.
pub fn serve_http(app: axum::Router) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}
