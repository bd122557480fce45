//! MariaDB → `sluice server` (binlog source) → sink-file (canal-json), end to
//! end: a checker rebuilds each table's final state from the sink's output and
//! compares every column of every row with the upstream table, after the
//! Sluice server was SIGKILLed and the upstream restarted mid-stream. Also: a
//! misconfigured upstream is refused at create time with the setting to change,
//! and the password never shows in status or errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;
use sluice_tests::mariadb::PrivateMariaDb;

mod common;
use common::lines_in;
use common::server::Server;

const SCHEMA: &str = "CREATE DATABASE shop;
CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, email VARCHAR(128), vip TINYINT UNSIGNED);
CREATE TABLE shop.orders (
  id BIGINT UNSIGNED PRIMARY KEY, customer INT, amount DECIMAL(12,2), note TEXT,
  placed DATETIME(3), day DATE, status ENUM('new','paid','shipped'), tags SET('gift','rush'),
  blob_col VARBINARY(16), weight DOUBLE, doc JSON
);";

/// The end-to-end tests here each run two or three MariaDB servers, Sluice
/// and a workload: run together on a 2-core machine they starve each other
/// (a downstream that stops answering, a changefeed backing off past the
/// wait), so they take turns.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn feed(dir: &Path, url: &str) -> PathBuf {
    common::write_file(
        dir,
        "mysql",
        &format!(
            r#"
[source]
type = "mysql"
url = "{url}"
heartbeat-ms = 200

[sink]
plugin = "sink-file@0.1.0"
[sink.config]
format = "canal-json"
enable-sluice-extension = true
dir = "changes"
[sink.capabilities]
data-dir = true

[pipeline]
flush-interval-ms = 100
"#
        ),
    )
}

/// A deterministic workload: `n` transactions of inserts, updates and deletes
/// over both tables, as one SQL script.
fn workload(seed: &mut u64, first_id: u64, n: u64) -> String {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    };
    let mut sql = String::new();
    for i in first_id..first_id + n {
        let c = (next() % 50) as i64;
        let multi = next() % 3 == 0;
        if multi {
            sql.push_str("BEGIN;");
        }
        sql.push_str(&format!(
            "INSERT INTO shop.customers VALUES ({c}, 'name {c} ü', {email}, {vip}) ON DUPLICATE KEY UPDATE name = CONCAT(name, '+'), vip = {vip};",
            email = if c % 7 == 0 { "NULL".to_string() } else { format!("'c{c}@example.com'") },
            vip = next() % 256,
        ));
        sql.push_str(&format!(
            "INSERT INTO shop.orders VALUES ({i}, {c}, {amount}.{cents:02}, 'note\\t{i}', '2026-11-{d:02} 10:{m:02}:00.{ms:03}', '2026-12-{d:02}', '{status}', '{tags}', 0x{hex:08X}00, {w}.5, '{{\"i\": {i}}}');",
            amount = next() % 100_000,
            cents = next() % 100,
            d = 1 + next() % 28,
            m = next() % 60,
            ms = next() % 1000,
            status = ["new", "paid", "shipped"][(next() % 3) as usize],
            tags = ["", "gift", "gift,rush"][(next() % 3) as usize],
            hex = next() as u32,
            w = next() % 1000,
        ));
        if i > first_id + 3 && next() % 3 == 0 {
            let victim = first_id + next() % (i - first_id);
            sql.push_str(&format!("UPDATE shop.orders SET status = 'shipped', amount = amount + 1 WHERE id = {victim};"));
        }
        if i > first_id + 3 && next() % 5 == 0 {
            let victim = first_id + next() % (i - first_id);
            sql.push_str(&format!("DELETE FROM shop.orders WHERE id = {victim};"));
        }
        if multi {
            sql.push_str("COMMIT;");
        }
    }
    sql
}

/// The upstream table as text rows keyed by primary key: each column as
/// canal-json shows it (blobs as hex).
fn upstream(
    db: &PrivateMariaDb,
    table: &str,
    columns: &[(String, bool)],
) -> BTreeMap<String, Vec<String>> {
    table_rows(db, table, columns).unwrap_or_else(|e| panic!("reading shop.{table}: {e}"))
}

/// The downstream's tables as [`upstream`] reads them, or `None` while the
/// server does not answer (a downstream busy applying a large backlog on a
/// loaded machine can leave a connection waiting past the client's retries;
/// the caller's wait bounds how long that may last).
fn downstream(
    db: &PrivateMariaDb,
    tables: &[&str],
    cols: &[Vec<(String, bool)>],
) -> Option<Vec<BTreeMap<String, Vec<String>>>> {
    let mut out = Vec::new();
    for (t, c) in tables.iter().zip(cols) {
        match table_rows(db, t, c) {
            Ok(rows) => out.push(rows),
            Err(e) => {
                let log = db.error_log();
                let tail: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.starts_with("Optimizer switch"))
                    .rev()
                    .take(80)
                    .collect();
                eprintln!(
                    "the downstream did not answer (tried again): {e}\nits error log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
                return None;
            }
        }
    }
    Some(out)
}

fn table_rows(
    db: &PrivateMariaDb,
    table: &str,
    columns: &[(String, bool)],
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let exprs: Vec<String> = columns
        .iter()
        .map(|(c, blob)| {
            if *blob {
                format!("HEX({c})")
            } else {
                c.clone()
            }
        })
        .collect();
    let text = db.try_exec(&format!(
        "SELECT {} FROM shop.{table} ORDER BY 1",
        exprs.join(", ")
    ))?;
    Ok(text
        .lines()
        .map(|l| {
            let v: Vec<String> = l.split('\t').map(unescape).collect();
            (v[0].clone(), v)
        })
        .collect())
}

/// Undoes the mariadb client's batch escapes.
fn unescape(s: &str) -> String {
    s.replace("\\t", "\t")
        .replace("\\n", "\n")
        .replace("\\\\", "\\")
}

/// The final state of `table` rebuilt from the canal-json lines, in order.
fn rebuilt(
    lines: &[Json],
    table: &str,
    columns: &[(String, bool)],
) -> BTreeMap<String, Vec<String>> {
    let mut state = BTreeMap::new();
    for l in lines.iter().filter(|l| l["table"] == table) {
        let data = &l["data"][0];
        let row: Vec<String> = columns
            .iter()
            .map(|(c, blob)| match &data[c] {
                Json::Null => "NULL".to_string(),
                Json::String(s) if *blob => {
                    s.chars().map(|ch| format!("{:02X}", ch as u32)).collect()
                }
                Json::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        match l["type"].as_str().unwrap() {
            "INSERT" | "UPDATE" => {
                state.insert(row[0].clone(), row);
            }
            "DELETE" => {
                state.remove(&row[0]);
            }
            other => panic!("type {other}"),
        }
    }
    state
}

/// Per table: rows missing downstream, rows extra there and rows that
/// differ, with a few keys of each.
fn difference(
    tables: &[&str],
    want: &[BTreeMap<String, Vec<String>>],
    got: Option<&[BTreeMap<String, Vec<String>>]>,
) -> String {
    let Some(got) = got else {
        return "the downstream did not answer".into();
    };
    let mut out = String::new();
    for ((table, want), got) in tables.iter().zip(want).zip(got) {
        let missing: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
        let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
        let changed: Vec<&String> = want
            .iter()
            .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
            .map(|(k, _)| k)
            .collect();
        out.push_str(&format!(
            "\n  {table}: {} rows up, {} down; missing {} {:?}; extra {} {:?}; changed {} {:?}",
            want.len(),
            got.len(),
            missing.len(),
            &missing[..missing.len().min(3)],
            extra.len(),
            &extra[..extra.len().min(3)],
            changed.len(),
            &changed[..changed.len().min(3)],
        ));
    }
    out
}

fn columns(db: &PrivateMariaDb, table: &str) -> Vec<(String, bool)> {
    db.exec(&format!(
        "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'shop' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION"
    ))
    .lines()
    .map(|l| {
        let (name, ty) = l.split_once('\t').unwrap();
        (name.to_string(), ty.contains("binary") || ty.contains("blob"))
    })
    .collect()
}

#[test]
fn mariadb_to_sink_file_matches_upstream_after_kills_and_restarts() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut db = PrivateMariaDb::start();
    db.exec(SCHEMA);
    db.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Hidden-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
    let data = dir.path().join("server");
    let server = Server::start(&data, &[]);
    server.upload("sink-file", "sink");
    let file = feed(dir.path(), &db.url("repl", "Hidden-Pw1"));
    server.create("orders", &file);
    let q = server.state("orders");
    let out_dir = PathBuf::from(q["status"]["sink-data-dir"].as_str().unwrap()).join("changes");
    // The stored source starts at the position `now` stood for, and shows no password.
    let shown = q.to_string();
    assert!(!shown.contains("Hidden-Pw1"), "{shown}");

    let mut seed = 7;
    db.exec(&workload(&mut seed, 1, 300));
    // Sluice dies mid-stream.
    std::thread::sleep(Duration::from_millis(300));
    let log = server.kill();
    assert!(!log.contains("Hidden-Pw1"));
    db.exec(&workload(&mut seed, 301, 300));
    let server = Server::start(&data, &[]);
    db.exec(&workload(&mut seed, 601, 200));
    // The upstream restarts mid-stream; the reader reconnects.
    db.restart();
    db.exec(&workload(&mut seed, 801, 200));
    let tables = ["customers", "orders"];
    let cols: Vec<Vec<(String, bool)>> = tables.iter().map(|t| columns(&db, t)).collect();
    let want: Vec<_> = tables
        .iter()
        .zip(&cols)
        .map(|(t, c)| upstream(&db, t, c))
        .collect();
    assert!(want[1].len() > 600, "{} orders", want[1].len());
    let mut last = Vec::new();
    server.wait_for(
        "the sink output to match the upstream",
        Duration::from_secs(120),
        || {
            let lines = lines_in(&out_dir);
            last = tables
                .iter()
                .zip(&cols)
                .map(|(t, c)| rebuilt(&lines, t, c))
                .collect();
            last == want
        },
    );
    // Exact, column by column (checked above as a whole): report a count.
    let lines = lines_in(&out_dir);
    let replayed = lines
        .iter()
        .filter(|l| l["_sluice"]["replay"] == true)
        .count();
    eprintln!(
        "{} lines, {replayed} flagged replay, {} customers, {} orders",
        lines.len(),
        want[0].len(),
        want[1].len()
    );
    let q = server.state("orders");
    assert_eq!(q["state"], "normal", "{q}");
    // The query shows how far upstream the reader is next to the checkpoint.
    let mut seen = Json::Null;
    let shown = |seen: &mut Json| {
        *seen = server.state("orders");
        let s = &seen["status"];
        s["source-time"].is_string() && s["source-events"].as_u64().is_some_and(|n| n > 100)
    };
    for _ in 0..300 {
        if shown(&mut seen) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(shown(&mut seen), "{seen}");
    // The binlog reader's metrics: events read, its lag, the cache fill.
    server.wait_for("the source's metrics", Duration::from_secs(30), || {
        let (code, body) = server.http_get("/metrics");
        let metric = |name: &str| {
            body.lines()
                .find(|l| l.starts_with(name) && l.contains("changefeed=\"orders\""))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        code == 200
            && metric("sluice_source_events_total").is_some_and(|v| v > 1000.0)
            && metric("sluice_source_lag_seconds").is_some_and(|v| (0.0..3600.0).contains(&v))
            && metric("sluice_event_cache_bytes").is_some()
    });
    let log = server.stop();
    assert!(!log.contains("Hidden-Pw1"));
}

#[test]
fn a_misconfigured_upstream_is_refused_at_create_with_the_setting_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let db = PrivateMariaDb::start_with(&["--binlog-row-metadata=MINIMAL"]);
    let server = Server::start(&dir.path().join("server"), &[]);
    server.upload("sink-file", "sink");
    db.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'pw-kept-out'; GRANT ALL ON *.* TO 'repl'@'%'");
    let file = feed(dir.path(), &db.url("repl", "pw-kept-out"));
    let err = server.error(&[
        "changefeed",
        "create",
        "-c",
        "bad",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert!(err.contains("binlog_row_metadata=FULL"), "{err}");
    assert!(!err.contains("pw-kept-out"), "{err}");
    let list = server.json(&["changefeed", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
}

#[test]
fn extreme_and_mutated_source_settings_are_refused_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), &[]);
    server.upload("sink-file", "sink");
    let long_url = format!("mysql://u:p@{}:3306", "h".repeat(3000));
    let cases: Vec<(String, &str)> = vec![
        ("heartbeat-ms = 0".into(), "heartbeat-ms"),
        ("heartbeat-ms = 9223372036854775807".into(), "heartbeat-ms"),
        ("heartbeat-ms = -1".into(), "heartbeat-ms"),
        ("connect-timeout-ms = 0".into(), "connect-timeout-ms"),
        (
            "connect-timeout-ms = 9223372036854775807".into(),
            "connect-timeout-ms",
        ),
        ("txn-part-bytes = 0".into(), "txn-part-bytes"),
        ("txn-part-bytes = \"9999GiB\"".into(), "txn-part-bytes"),
        ("server-id = 4294967296".into(), "server-id"),
        ("server-id = -1".into(), "server-id"),
        ("start-position = \"file:x:0\"".into(), "start-position"),
        (
            "start-position = \"file:x.1:4294967296\"".into(),
            "start-position",
        ),
        (
            "start-position = \"gtid:99999999999-1-1\"".into(),
            "start-position",
        ),
        (
            "start-position = \"time:9999-01-01 00:00:00\"".into(),
            "start-position",
        ),
        ("start-position = \"\"".into(), "start-position"),
        ("start-position = \"now\\u0000\"".into(), "start-position"),
        ("stop-at-end = \"yes\"".into(), "stop-at-end"),
        (
            "use-gtid = false\nstart-position = \"gtid:0-1-1\"".into(),
            "use-gtid",
        ),
        ("unknown-key = 1".into(), "unknown-key"),
    ];
    for (i, (extra, key)) in cases.iter().enumerate() {
        let text = format!(
            "[source]\ntype = \"mysql\"\nurl = \"mysql://u:pw-never-shown@127.0.0.1:1\"\n{extra}\n\n[sink]\nplugin = \"sink-file@0.1.0\"\n"
        );
        let file = common::write_file(dir.path(), &format!("bad{i}"), &text);
        let err = server.error(&[
            "changefeed",
            "create",
            "-c",
            &format!("bad{i}"),
            "--config",
            file.to_str().unwrap(),
        ]);
        assert!(err.contains(key), "{extra}: {err}");
        assert!(!err.contains("pw-never-shown"), "{extra}: {err}");
    }
    for url in [
        long_url.as_str(),
        "mysql://",
        "http://u:pw-never-shown@h:1",
        "mysql://u:pw-never-shown@",
    ] {
        let text = format!(
            "[source]\ntype = \"mysql\"\nurl = \"{url}\"\n\n[sink]\nplugin = \"sink-file@0.1.0\"\n"
        );
        let file = common::write_file(dir.path(), "badurl", &text);
        let err = server.error(&[
            "changefeed",
            "create",
            "-c",
            "badurl",
            "--config",
            file.to_str().unwrap(),
        ]);
        assert!(err.contains("source.url"), "{err}");
        assert!(!err.contains("pw-never-shown"), "{err}");
    }
    // Nothing was created, and the server still answers.
    let list = server.json(&["changefeed", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
    // An unreachable upstream is refused as unavailable, not stored.
    let text = "[source]\ntype = \"mysql\"\nurl = \"mysql://u:pw-never-shown@127.0.0.1:1\"\nconnect-timeout-ms = 500\n\n[sink]\nplugin = \"sink-file@0.1.0\"\n";
    let file = common::write_file(dir.path(), "down", text);
    let err = server.error(&[
        "changefeed",
        "create",
        "-c",
        "down",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert!(
        err.contains("upstream connection failed") && !err.contains("pw-never-shown"),
        "{err}"
    );
    assert_eq!(
        server
            .json(&["changefeed", "list"])
            .as_array()
            .map(Vec::len),
        Some(0)
    );
}

/// MariaDB → binlog source → sink-mysql → a second MariaDB (as the users
/// `repl` and `writer` the test servers are made with).
fn replicate(
    dir: &Path,
    name: &str,
    up: &PrivateMariaDb,
    down: &PrivateMariaDb,
    database: &str,
) -> PathBuf {
    let (source, target) = (
        up.url("repl", "Hidden-Pw1"),
        down.url("writer", "Writer-Pw2"),
    );
    common::write_file(
        dir,
        name,
        &format!(
            r#"
[source]
type = "mysql"
url = "{source}"
heartbeat-ms = 200

[sink]
plugin = "sink-mysql@0.1.0"
[sink.config]
database = "{database}"
worker-count = 4
max-txn-row = 64
[sink.capabilities.sql]
target = "{target}"

[pipeline]
flush-interval-ms = 100
"#
        ),
    )
}

/// An upstream MariaDB (user `repl` may read its binlog) and a downstream
/// one (user `writer` may write `shop` and `sluice`), with the same schema.
fn two_mariadbs() -> (PrivateMariaDb, PrivateMariaDb) {
    let up = PrivateMariaDb::start();
    up.exec(SCHEMA);
    up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Hidden-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
    (up, a_downstream())
}

/// A MariaDB with the schema (empty) that user `writer` may write (`shop`
/// and `sluice`).
fn a_downstream() -> PrivateMariaDb {
    let down = PrivateMariaDb::start();
    down.exec(SCHEMA);
    down.exec(
        "CREATE USER 'writer'@'%' IDENTIFIED BY 'Writer-Pw2'; GRANT ALL ON shop.* TO 'writer'@'%'; GRANT ALL ON sluice.* TO 'writer'@'%'",
    );
    down
}

/// An upstream and a downstream MariaDB with the same schema, and a server
/// running changefeed `replica` from one to the other through sink-mysql.
fn two_mariadbs_and_a_replica() -> (tempfile::TempDir, PrivateMariaDb, PrivateMariaDb, Server) {
    let dir = tempfile::tempdir().unwrap();
    let (up, down) = two_mariadbs();
    let server = Server::start(&dir.path().join("server"), &[]);
    server.upload("sink-mysql", "sink");
    let file = replicate(dir.path(), "replica", &up, &down, "target");
    server.create("replica", &file);
    (dir, up, down, server)
}

#[test]
fn mariadb_to_mariadb_through_sink_mysql_matches_row_for_row_after_kills() {
    let _one = one_at_a_time();
    let (dir, up, down, server) = two_mariadbs_and_a_replica();
    let data = dir.path().join("server");
    // A database the changefeed does not grant: a clear error, nothing written.
    let ungranted = replicate(dir.path(), "ungranted", &up, &down, "elsewhere");
    server.create("ungranted", &ungranted);

    let mut seed = 11;
    up.exec(&workload(&mut seed, 1, 300));
    std::thread::sleep(Duration::from_millis(300));
    let log = server.kill();
    assert!(!log.contains("Writer-Pw2"));
    up.exec(&workload(&mut seed, 301, 300));
    let server = Server::start(&data, &[]);
    up.exec(&workload(&mut seed, 601, 200));
    std::thread::sleep(Duration::from_millis(500));
    let log = server.kill();
    assert!(!log.contains("Writer-Pw2"));
    let server = Server::start(&data, &[]);
    up.exec(&workload(&mut seed, 801, 200));

    let tables = ["customers", "orders"];
    let cols: Vec<Vec<(String, bool)>> = tables.iter().map(|t| columns(&up, t)).collect();
    let want: Vec<_> = tables
        .iter()
        .zip(&cols)
        .map(|(t, c)| upstream(&up, t, c))
        .collect();
    assert!(want[1].len() > 600, "{} orders", want[1].len());
    let mut got = Vec::new();
    server.wait_for(
        "the downstream to match the upstream",
        Duration::from_secs(120),
        || {
            match downstream(&down, &tables, &cols) {
                Some(rows) => got = rows,
                None => return false,
            }
            got == want
        },
    );
    let q = server.state("ungranted");
    let shown = q.to_string();
    assert!(shown.contains("not granted"), "{shown}");
    for name in ["replica", "ungranted"] {
        let shown = server.state(name).to_string();
        assert!(!shown.contains("Writer-Pw2"), "{shown}");
    }
    let log = server.stop();
    assert!(!log.contains("Writer-Pw2"));
}

/// Three servers on a private etcd replicate a MariaDB through sink-mysql
/// with `shop.orders` run on another capture than the one reading the
/// binlog. A DDL about both captures' tables (a drop of both, then both
/// created again and written) is applied once, after both captures wrote
/// what came before it (applied twice, or early, the second drop fails or
/// drops rows written after the tables came back). Then rounds, under
/// writes, that SIGKILL or SIGSTOP (a partition longer than the lease) the
/// reading capture, the receiving one or the third, the owner among them:
/// after each the cluster converges on the live captures, the table is
/// moved off the reader again when it came back there, and at the end the
/// downstream equals the upstream (`sluice diff`), and no side of any epoch
/// ran in two processes. `SLUICE_SPLIT_CHAOS_ROUNDS` (default 20) and
/// `SLUICE_CHAOS_SEED`.
#[test]
fn tables_split_across_captures_replicate_row_for_row_through_kills_and_stops_and_a_ddl_across_them_applies_once()
 {
    let _one = one_at_a_time();
    const LEASE_S: u64 = 3;
    let (rounds, mut random) = common::chaos_rounds("split chaos", "SLUICE_SPLIT_CHAOS_ROUNDS", 20);
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().join("shared-plugins").display());
    // The changefeed writes a redo log, in a store every server shares: one
    // log, whichever capture reads, split or whole; a receiver's sink gets
    // only what that log has.
    let redo_root = dir.path().join("shared-redo");
    let redo_store = format!("file://{}", redo_root.display());
    let lease = LEASE_S.to_string();
    let args = [
        "--etcd",
        etcd.endpoint.as_str(),
        "--plugin-store",
        store.as_str(),
        "--redo-storage",
        redo_store.as_str(),
        "--lease-ttl-s",
        lease.as_str(),
    ];
    let (up, down) = two_mariadbs();
    let data: Vec<PathBuf> = ["a", "b", "c"].iter().map(|n| dir.path().join(n)).collect();
    let first = Server::start(&data[0], &args);
    let token_of = first.token_file.clone();
    let standby = |i: usize, live: &Server| {
        let mut s = Server::start_standby(&data[i], &args, live);
        s.token_file = token_of.clone();
        s
    };
    // `SLUICE_TEST_LOG_DIR`: every server's log is kept there as it grows
    // (to read after a failure).
    let keep_dir = std::env::var("SLUICE_TEST_LOG_DIR").ok().map(PathBuf::from);
    let mut started = 0;
    let mut keep = |server: &Server| {
        let Some(dir) = &keep_dir else { return };
        std::fs::create_dir_all(dir).unwrap();
        let stderr = server.stderr.clone();
        let path = dir.join(format!("server-{started}.log"));
        started += 1;
        std::thread::spawn(move || {
            loop {
                let log = stderr.lock().unwrap().clone();
                if std::fs::write(&path, log).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
    };
    keep(&first);
    if let Some(dir) = &keep_dir {
        std::fs::write(dir.join("etcd"), &etcd.endpoint).unwrap();
    }
    let mut servers: Vec<Option<Server>> = vec![Some(first), None, None];
    for i in 1..3 {
        servers[i] = Some(standby(i, servers[0].as_ref().unwrap()));
        keep(servers[i].as_ref().unwrap());
    }
    // Each server keeps its capture id in its data dir, across restarts.
    let ids: Vec<String> = data
        .iter()
        .map(|d| {
            std::fs::read_to_string(d.join("capture-id"))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    let index_of = |capture: &str| ids.iter().position(|c| c == capture).unwrap();
    {
        let a = servers[0].as_ref().unwrap();
        a.upload("sink-mysql", "sink");
        let file = replicate(dir.path(), "replica", &up, &down, "target");
        let logged = format!(
            "{}\n[consistent]\nlevel = \"eventual\"\nflush-interval = 100\n\
             # The log alone rebuilds a fresh downstream.\nretention = \"all\"\n",
            std::fs::read_to_string(&file).unwrap()
        );
        std::fs::write(&file, logged).unwrap();
        a.create("replica", &file);
    }
    let mut wseed = 5;
    up.exec(&workload(&mut wseed, 1, 100));
    let json_of = |server: &Server, args: &[&str]| -> Option<Json> {
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let (ok, out, _) = server.cli(&all);
        ok.then(|| serde_json::from_str(&out).ok()).flatten()
    };
    let query = |server: &Server| json_of(server, &["changefeed", "query", "-c", "replica"]);
    // The reading capture and the one running shop.orders (the reader
    // when the run is whole).
    let sides = |server: &Server| -> Option<(String, String)> {
        let q = query(server)?;
        let mut reader = None;
        let mut orders = None;
        for p in q["processors"].as_array()? {
            let capture = p["capture"].as_str()?.to_string();
            if p["reads"] == true {
                reader = Some(capture);
            } else if p["tables"].as_array()?.iter().any(|t| t == "shop.orders") {
                orders = Some(capture);
            }
        }
        let reader = reader?;
        Some((reader.clone(), orders.unwrap_or(reader)))
    };
    // Runs shop.orders on another capture than the reader (when it runs
    // on the reader now), and waits until it does.
    let split = |server: &Server, to_pick: u64| -> (String, String) {
        let mut asked = false;
        let mut now = None;
        server.wait_for("a split run", Duration::from_secs(60), || {
            let Some((reader, orders)) = sides(server) else {
                return false;
            };
            if reader != orders {
                now = Some((reader, orders));
                return true;
            }
            if !asked {
                let others: Vec<&String> = ids.iter().filter(|c| **c != reader).collect();
                let to = others[(to_pick as usize) % others.len()];
                let (ok, _, err) = server.cli(&[
                    "changefeed",
                    "move-table",
                    "-c",
                    "replica",
                    "--table",
                    "shop.orders",
                    "--capture",
                    to,
                ]);
                // Refused while the run is between two placements: asked again.
                asked = ok;
                if !ok {
                    eprintln!("move-table: {err}");
                }
            }
            false
        });
        now.unwrap()
    };
    let checkpoint = |server: &Server| -> Option<(u64, String)> {
        let q = query(server)?;
        Some((
            q["checkpoint-ts"].as_u64()?,
            q["status"]["capture"].as_str().unwrap_or("").to_string(),
        ))
    };
    // `server` lists `live` captures with one owner, and the changefeed runs
    // on a listed one with its checkpoint past `before`.
    let converged = |server: &Server, live: usize, before: u64| -> bool {
        let Some(captures) = json_of(server, &["capture", "list"]) else {
            return false;
        };
        let list = captures.as_array().unwrap();
        let listed: Vec<&str> = list.iter().map(|c| c["id"].as_str().unwrap()).collect();
        list.len() == live
            && list.iter().filter(|c| c["owner"] == true).count() == 1
            && checkpoint(server)
                .is_some_and(|(ts, capture)| ts > before && listed.contains(&capture.as_str()))
    };
    // What the sink recorded as applied, newest first (said when a wait
    // is about to give up).
    let progress = || {
        down.exec(
            "SELECT first_txn, first_seq, first_ts, last_ts, HEX(txns) FROM sluice.apply_progress \
             ORDER BY last_ts DESC LIMIT 40",
        )
    };
    let wait_converged = |server: &Server, live: usize, before: u64, what: &str| {
        let started = std::time::Instant::now();
        let mut said = false;
        server.wait_for(
            &format!("{what}: the cluster to converge on {live} captures"),
            Duration::from_secs(60),
            || {
                let done = converged(server, live, before);
                if !done && !said && started.elapsed() > Duration::from_secs(55) {
                    said = true;
                    // The downstream's open transactions: one a frozen
                    // capture left open would hold its successor's rows.
                    let open = down.exec(
                        "SELECT trx_mysql_thread_id, trx_state, trx_started, trx_rows_locked, \
                         trx_query FROM information_schema.INNODB_TRX",
                    );
                    eprintln!(
                        "{what}: not converged after 55 s: {:?}\ncaptures: {:?}\n\
                         open downstream transactions:\n{open}\napplied:\n{}",
                        query(server),
                        json_of(server, &["capture", "list"]),
                        progress()
                    );
                }
                done
            },
        );
    };
    let a = servers[0].as_ref().unwrap();
    wait_converged(a, 3, 0, "start");

    // A DDL across the split.
    let (reader, orders) = split(a, random());
    eprintln!("split chaos: read on {reader}, shop.orders on {orders}");
    up.exec(&workload(&mut wseed, 101, 200));
    // DROP TABLE statements the downstream ran.
    let drops = || -> u64 {
        let out = down.exec("SHOW GLOBAL STATUS LIKE 'Com_drop_table'");
        out.split_whitespace().last().unwrap().parse().unwrap()
    };
    let drops_before = drops();
    // Both tables dropped in one statement, created again and written.
    up.exec("DROP TABLE shop.customers, shop.orders");
    up.exec(SCHEMA.trim_start_matches("CREATE DATABASE shop;"));
    up.exec(&workload(&mut wseed, 301, 200));
    let tables = ["customers", "orders"];
    let cols: Vec<Vec<(String, bool)>> = tables.iter().map(|t| columns(&up, t)).collect();
    let matches = |server: &Server, what: &str| {
        let want: Vec<_> = tables
            .iter()
            .zip(&cols)
            .map(|(t, c)| upstream(&up, t, c))
            .collect();
        assert!(!want[0].is_empty() && !want[1].is_empty());
        let started = std::time::Instant::now();
        let mut said = false;
        server.wait_for(what, Duration::from_secs(180), || {
            let got = downstream(&down, &tables, &cols);
            let equal = got.as_ref() == Some(&want);
            // Before the wait gives up: what differs, and where the
            // changefeed stands.
            if !equal && !said && started.elapsed() > Duration::from_secs(170) {
                said = true;
                eprintln!(
                    "still different after 170 s: {}\nchangefeed: {:?}\napplied:\n{}",
                    difference(&tables, &want, got.as_deref()),
                    query(server),
                    progress()
                );
            }
            equal
        });
    };
    matches(a, "the downstream to match the upstream after the DDL");
    assert_eq!(drops() - drops_before, 1, "the drop ran once downstream");

    let mut logs: Vec<String> = Vec::new();
    let mut next_id = 501;
    for round in 0..rounds {
        let any = servers.iter().flatten().next().unwrap();
        let (reader, orders) = split(any, random());
        let third = ids.iter().find(|c| **c != reader && **c != orders).unwrap();
        up.exec(&workload(&mut wseed, next_id, 20));
        next_id += 20;
        let (role, capture) =
            [("reader", &reader), ("receiver", &orders), ("third", third)][(random() % 3) as usize];
        let victim = index_of(capture);
        let sigstop = random() % 2 == 0;
        let witness = (victim + 1) % 3;
        let before = loop {
            if let Some((ts, _)) = checkpoint(servers[witness].as_ref().unwrap()) {
                break ts;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let server = servers[victim].take().unwrap();
        let what = format!(
            "round {round}: {} the {role} ({capture})",
            if sigstop { "SIGSTOP" } else { "SIGKILL" }
        );
        eprintln!("split chaos: {what}");
        let w = servers[witness].as_ref().unwrap();
        if sigstop {
            server.freeze();
            // Written while it is stopped; the others take its work.
            up.exec(&workload(&mut wseed, next_id, 20));
            next_id += 20;
            wait_converged(w, 2, before, &what);
            logs.push(server.resume_until_exit(Duration::from_secs(4 * LEASE_S + 10), &what));
        } else {
            logs.push(server.kill());
            up.exec(&workload(&mut wseed, next_id, 20));
            next_id += 20;
            wait_converged(w, 2, before, &what);
        }
        servers[victim] = Some(standby(victim, w));
        keep(servers[victim].as_ref().unwrap());
        wait_converged(servers[witness].as_ref().unwrap(), 3, before, &what);
    }
    let any = servers.iter().flatten().next().unwrap();
    let last_commit_ms = now_ms();
    matches(any, "the downstream to match the upstream after the rounds");
    // No sink passed the one log's resolved ts, whichever capture ran it;
    // the log gets past the last commit (a run that started from an earlier
    // checkpoint logs again what it reads again).
    let redo_log = format!("{redo_store}/default/replica");
    let (done, _) = checkpoint(any).expect("a checkpoint");
    let logged = redo_resolved(&redo_log).expect("the redo log has a meta");
    assert!(
        logged.get() >= done,
        "the redo log is resolved to {logged}, the changefeed's checkpoint is {done}"
    );
    any.wait_for(
        "the redo log past the last commit",
        Duration::from_secs(120),
        || redo_resolved(&redo_log).is_some_and(|r| r.physical_millis() > last_commit_ms + 1_000),
    );
    // `sluice diff` agrees.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["diff", "--quiet", "--source"])
        .arg(up.root_url())
        .arg("--target")
        .arg(down.root_url())
        .args([
            "--chunk-rows",
            "64",
            "--table",
            "shop.customers",
            "--table",
            "shop.orders",
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("shop.orders"), "{report}");
    let q = any.state("replica");
    assert!(
        matches!(q["state"].as_str(), Some("normal" | "warning")),
        "{q}"
    );
    for server in servers.into_iter().flatten() {
        logs.push(server.stop());
    }
    for log in &logs {
        assert!(!log.contains("Writer-Pw2"));
    }
    // No side of an epoch started in two processes, and no epoch ran both
    // whole and split.
    let mut ran = std::collections::HashMap::<(String, String), usize>::new();
    let mut kinds = std::collections::HashMap::<String, Vec<String>>::new();
    for (process, log) in logs.iter().enumerate() {
        for line in log.lines().filter(|l| l.contains("Processor starting.")) {
            let span = line.split("changefeed{").nth(1).unwrap();
            let span = span.split('}').next().unwrap().to_string();
            let field = |name: &str| {
                line.split(&format!(" {name}="))
                    .nth(1)
                    .unwrap_or_else(|| panic!("{name} in {line}"))
                    .split(' ')
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            };
            let capture = field("capture");
            if let Some(other) = ran.insert((span.clone(), capture.clone()), process) {
                assert_eq!(
                    other, process,
                    "{span} on {capture} started in two processes"
                );
            }
            kinds.entry(span).or_default().push(field("side"));
        }
    }
    let mut split_epochs = 0;
    for (span, mut sides) in kinds {
        sides.sort();
        sides.dedup();
        assert!(
            sides.len() == 1 || !sides.contains(&"whole".to_string()),
            "{span}: sides {sides:?}"
        );
        split_epochs += usize::from(sides == ["reads", "receives"]);
    }
    assert!(split_epochs > 0, "no split run started");
    // `sluice diff` finds the two sides equal.
    let (equal, said) = common::sluice_diff(
        &up.root_url(),
        &down.root_url(),
        &["shop.customers", "shop.orders"],
    );
    assert!(equal, "{said}");
    // The site is lost: the one redo log, written by the reader of every
    // epoch (split runs too: a reader logs the shipped tables), rebuilds a
    // fresh downstream to the upstream's state.
    let fresh = a_downstream();
    let recover = replicate(dir.path(), "recover", &up, &fresh, "target");
    let plugins = sluice_tests::workspace_root().join("target/plugins");
    let (ok, out, err) = redo_cmd(&[
        "apply",
        "--storage",
        &redo_log,
        "--sink-config",
        recover.to_str().unwrap(),
        "--sink",
        "sink-mysql",
        "--plugin-dir",
        plugins.to_str().unwrap(),
        "--from-start",
        "--quiet",
    ]);
    assert!(ok, "{out}{err}");
    let (equal, said) = common::sluice_diff(
        &up.root_url(),
        &fresh.root_url(),
        &["shop.customers", "shop.orders"],
    );
    assert!(equal, "the downstream rebuilt from the redo log: {said}");
}

#[test]
fn sink_mysql_applies_key_changes_unique_swaps_ddl_and_a_large_transaction() {
    let _one = one_at_a_time();
    let (dir, up, down, server) = two_mariadbs_and_a_replica();
    let data = dir.path().join("server");
    let mut seed = 3;
    up.exec(&workload(&mut seed, 1, 100));
    // DDL in between: a new table with a unique column, then a new column.
    up.exec(
        "CREATE TABLE shop.tokens (id INT PRIMARY KEY, token VARCHAR(32) NOT NULL UNIQUE, n INT)",
    );
    up.exec("INSERT INTO shop.tokens VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)");
    // Two rows swap a unique value inside one transaction (through a
    // temporary value, as the upstream itself must).
    up.exec("BEGIN; UPDATE shop.tokens SET token = 'tmp' WHERE id = 1; UPDATE shop.tokens SET token = 'a' WHERE id = 2; UPDATE shop.tokens SET token = 'b' WHERE id = 1; COMMIT;");
    // Key-changing updates.
    up.exec("UPDATE shop.tokens SET id = 30 WHERE id = 3");
    up.exec("UPDATE shop.customers SET id = id + 1000 WHERE id < 10");
    up.exec("ALTER TABLE shop.tokens ADD COLUMN extra VARCHAR(16) NULL DEFAULT 'x'");
    up.exec("INSERT INTO shop.tokens (id, token, n, extra) VALUES (4, 'd', 4, 'new column')");
    // A large transaction: 100,000 rows in one commit.
    up.exec(
        "BEGIN; INSERT INTO shop.tokens (id, token, n) SELECT 1000 + seq, CONCAT('t', seq), seq FROM shop.seq_1_to_100000; COMMIT;",
    );
    // Sluice dies while applying it and starts again: the replay is
    // written idempotently.
    std::thread::sleep(Duration::from_millis(800));
    let log = server.kill();
    assert!(!log.contains("Writer-Pw2"));
    let server = Server::start(&data, &[]);
    up.exec(&workload(&mut seed, 101, 100));

    let tables = ["customers", "orders", "tokens"];
    let cols: Vec<Vec<(String, bool)>> = tables.iter().map(|t| columns(&up, t)).collect();
    let want: Vec<_> = tables
        .iter()
        .zip(&cols)
        .map(|(t, c)| upstream(&up, t, c))
        .collect();
    assert_eq!(want[2].len(), 100_004);
    let waiting = std::time::Instant::now();
    let mut said = false;
    server.wait_for(
        "the downstream to match the upstream",
        Duration::from_secs(180),
        || {
            // Rows first: once they match, the server has answered and the
            // column check after them reads the same schema.
            let got = downstream(&down, &tables, &cols);
            let equal = got.as_ref().is_some_and(|got| *got == want)
                && columns(&down, "tokens") == cols[2];
            // Before the wait gives up: what differs, and where the
            // changefeed stands.
            if !equal && !said && waiting.elapsed() > Duration::from_secs(170) {
                said = true;
                eprintln!(
                    "still different after 170 s: {}\ndownstream columns of tokens: {:?}\nchangefeed: {}",
                    difference(&tables, &want, got.as_deref()),
                    columns(&down, "tokens"),
                    server.state("replica")
                );
            }
            equal
        },
    );
    let q = server.state("replica");
    assert!(
        matches!(q["state"].as_str(), Some("normal" | "warning")),
        "{q}"
    );
    server.stop();

    // `sluice diff` finds the two sides equal...
    let diff = |extra: &[&str]| {
        let mut args = vec![
            "diff".to_string(),
            "--source".into(),
            up.root_url(),
            "--target".into(),
            down.root_url(),
            "--chunk-rows".into(),
            "1000".into(),
        ];
        for t in ["shop.customers", "shop.orders", "shop.tokens"] {
            args.extend(["--table".to_string(), t.to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&args)
            .output()
            .unwrap()
    };
    let out = diff(&[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches(": equal").count(), 3, "{text}");
    // ...and names what differs once the target is changed behind its back.
    down.exec("UPDATE shop.tokens SET n = -1 WHERE id = 50500; DELETE FROM shop.tokens WHERE id = 1234; INSERT INTO shop.tokens (id, token, n) VALUES (999999, 'extra', 0)");
    let out = diff(&[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("shop.tokens: 3 rows differ"), "{text}");
    assert!(
        text.contains("id=50500: n: source 49500, target -1"),
        "{text}"
    );
    assert!(text.contains("id=1234: missing in the target"), "{text}");
    assert!(text.contains("id=999999: only in the target"), "{text}");
    assert!(text.contains("shop.orders: equal"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 of 3 tables differ"), "{err}");
    // A table the target holds under another name is named on both sides.
    down.exec(
        "CREATE DATABASE copy; CREATE TABLE copy.orders_v2 LIKE shop.orders; \
         INSERT INTO copy.orders_v2 SELECT * FROM shop.orders",
    );
    let renamed = |table: &str| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["diff", "--quiet", "--source"])
            .arg(up.root_url())
            .arg("--target")
            .arg(down.root_url())
            .args(["--table", table])
            .output()
            .unwrap()
    };
    let out = renamed("shop.orders=copy.orders_v2");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("shop.orders=copy.orders_v2: equal"), "{text}");
    down.exec("DELETE FROM copy.orders_v2 ORDER BY id LIMIT 1");
    let out = renamed("shop.orders=copy.orders_v2");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("shop.orders=copy.orders_v2: 1 row differs (1 of 1 chunks)"),
        "{text}"
    );
    let out = renamed("shop.orders=copy");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`copy` is not schema.table"), "{err}");
}

/// `sluice run` to the end of the binlog with `[validator] mode = "full"`:
/// (exit success, stdout, stderr).
fn run_validated(
    dir: &Path,
    name: &str,
    up: &PrivateMariaDb,
    down: &str,
    schema: &str,
) -> (bool, String, String) {
    let start = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
    up.exec(&format!(
        "CREATE DATABASE {schema}; CREATE TABLE {schema}.items (id INT PRIMARY KEY, n INT, note VARCHAR(16));"
    ));
    let mut sql = String::new();
    for id in 1..=50 {
        sql.push_str(&format!(
            "INSERT INTO {schema}.items VALUES ({id}, {id}, 'row {id}');"
        ));
    }
    sql.push_str(&format!(
        "UPDATE {schema}.items SET note = 'changed' WHERE id <= 10; DELETE FROM {schema}.items WHERE id > 45;"
    ));
    up.exec(&sql);
    let plugins = sluice_tests::workspace_root().join("target/plugins");
    let file = common::write_file(
        dir,
        name,
        &format!(
            r#"plugin-dir = "{plugins}"
data-dir = "{state}"

[changefeed]
id = "{name}"

[source]
type = "mysql"
url = "{url}"
start-position = "gtid:{start}"
stop-at-end = true
heartbeat-ms = 100

[sink]
plugin = "sink-mysql"
[sink.config]
database = "target"
[sink.capabilities.sql]
target = "{down}"

[validator]
mode = "full"
retry-count = 2
interval-ms = 200
"#,
            plugins = plugins.display(),
            state = dir.join(format!("state-{name}")).display(),
            url = up.url("repl", "Hidden-Pw1"),
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--quiet", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The numbers of `sluice run`'s validator line: matched, mismatched,
/// skipped, still pending, failed reads.
fn validator_counts(out: &str) -> Vec<u64> {
    let line = out
        .lines()
        .find(|l| l.starts_with("validator (full): "))
        .unwrap_or_else(|| panic!("no validator line: {out}"));
    line.split([' ', '(', ')', ':', ','])
        .filter_map(|w| w.parse().ok())
        .collect()
}

#[test]
fn sluice_run_validates_the_rows_it_applied_and_fails_on_rows_that_differ() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let up = PrivateMariaDb::start();
    up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Hidden-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
    let down = PrivateMariaDb::start();
    down.exec(
        "CREATE USER 'writer'@'%' IDENTIFIED BY 'Writer-Pw2'; GRANT ALL ON *.* TO 'writer'@'%'",
    );
    // A clean copy: every row checked and matched, exit 0.
    let (ok, out, err) = run_validated(
        dir.path(),
        "clean",
        &up,
        &down.url("writer", "Writer-Pw2"),
        "clean",
    );
    assert!(ok, "{out}{err}");
    let counts = validator_counts(&out);
    assert!(counts[0] >= 45, "{out}");
    assert_eq!(counts[1..], [0, 0, 0, 0], "{out}");
    // A downstream trigger alters rows 11 to 45 (rows 1 to 10 end with the
    // note it leaves alone): the run names them and fails.
    down.exec(
        "CREATE DATABASE tricked; CREATE TABLE tricked.items (id INT PRIMARY KEY, n INT, note VARCHAR(16)); \
         CREATE TRIGGER tricked.bump BEFORE INSERT ON tricked.items FOR EACH ROW SET NEW.n = IF(NEW.note = 'changed', NEW.n, NEW.n + 1000)",
    );
    let (ok, out, err) = run_validated(
        dir.path(),
        "tricked",
        &up,
        &down.url("writer", "Writer-Pw2"),
        "tricked",
    );
    assert!(!ok, "{out}{err}");
    let counts = validator_counts(&out);
    assert_eq!(counts[1..], [35, 0, 0, 0], "{out}");
    assert!(counts[0] >= 10, "{out}");
    let named: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  tricked.items id="))
        .collect();
    assert_eq!(named.len(), 20, "{out}");
    for line in named {
        let id: u64 = line
            .trim()
            .strip_prefix("tricked.items id=")
            .and_then(|rest| rest.split(':').next())
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!((11..=45).contains(&id), "{line}");
        assert_eq!(
            line.trim(),
            format!(
                "tricked.items id={id}: n: upstream {id}, downstream {}",
                id + 1000
            )
        );
    }
    assert!(err.contains("35 row(s) that differ downstream"), "{err}");
    assert!(!out.contains("Writer-Pw2") && !err.contains("Writer-Pw2"));
}

/// A `sluice run` changefeed from `up` into `target` through sink-mysql, with
/// its redo log in `redo` (flushed every 200 ms).
fn dr_feed(
    dir: &Path,
    name: &str,
    up: &PrivateMariaDb,
    start: &str,
    target: &str,
    redo: &Path,
) -> PathBuf {
    let plugins = sluice_tests::workspace_root().join("target/plugins");
    common::write_file(
        dir,
        name,
        &format!(
            r#"plugin-dir = "{plugins}"
data-dir = "{state}"

[changefeed]
id = "dr"

[source]
type = "mysql"
url = "{url}"
start-position = "gtid:{start}"
heartbeat-ms = 100

[sink]
plugin = "sink-mysql"
[sink.config]
database = "target"
worker-count = 4
max-txn-row = 64
[sink.capabilities.sql]
target = "{target}"

[pipeline]
flush-interval-ms = 100
event-cache-bytes = "512MiB"

[consistent]
level = "eventual"
storage = "file://{redo}"
flush-interval = 200
# The log alone rebuilds a fresh downstream.
retention = "all"
compression = "zstd"
"#,
            plugins = plugins.display(),
            state = dir.join(format!("state-{name}")).display(),
            url = up.url("repl", "Hidden-Pw1"),
            redo = redo.display(),
        ),
    )
}

/// `sluice redo <args>`: (success, stdout, stderr).
fn redo_cmd(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("redo")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The redo log's resolved ts as `sluice redo meta` prints it.
fn redo_resolved(storage: &str) -> Option<sluice_core::CommitTs> {
    let (ok, out, _) = redo_cmd(&["meta", "--storage", storage]);
    if !ok {
        return None;
    }
    let line = out.lines().find(|l| l.starts_with("resolved-ts"))?;
    let ts = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(sluice_core::CommitTs::new(ts))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The whole site is lost — Sluice (SIGKILL) and a downstream that had
/// fallen behind (frozen, then killed) — and only the redo log is left:
/// `sluice redo apply` brings a fresh MariaDB to the upstream's state row for
/// row, DDL and a large transaction included; a log whose newest file was
/// torn mid-record is refused with the file and offset named.
#[test]
fn after_the_site_is_lost_redo_apply_gives_a_fresh_mariadb_the_upstream_state_row_for_row() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let up = PrivateMariaDb::start();
    up.exec(SCHEMA);
    up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Hidden-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
    let start = up.exec("SELECT @@gtid_binlog_pos").trim().to_string();
    let mut down = a_downstream();
    let redo = dir.path().join("redo");
    let live = dr_feed(
        dir.path(),
        "live",
        &up,
        &start,
        &down.url("writer", "Writer-Pw2"),
        &redo,
    );
    let mut sluice = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--quiet", "--config"])
        .arg(&live)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();

    let mut seed = 29;
    up.exec(&workload(&mut seed, 1, 200));
    std::thread::sleep(Duration::from_millis(1_000));
    // The downstream hangs: the sink falls behind while the log runs on.
    down.freeze();
    up.exec(
        "CREATE TABLE shop.tokens (id INT PRIMARY KEY, token VARCHAR(32) NOT NULL UNIQUE, n INT)",
    );
    up.exec(&workload(&mut seed, 201, 150));
    up.exec("ALTER TABLE shop.tokens ADD COLUMN extra VARCHAR(16) NULL DEFAULT 'x'");
    up.exec(
        "BEGIN; INSERT INTO shop.tokens (id, token, n) SELECT seq, CONCAT('t', seq), seq FROM shop.seq_1_to_1000000; COMMIT;",
    );
    up.exec("UPDATE shop.tokens SET id = id + 2000000, extra = 'moved' WHERE id <= 100");
    up.exec("DELETE FROM shop.tokens WHERE id BETWEEN 200 AND 299");
    up.exec(&workload(&mut seed, 351, 150));
    let last_commit_ms = now_ms();

    // The log has it all once its resolved ts passes the last commit.
    let storage = format!("file://{}/dr", redo.display());
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let resolved = redo_resolved(&storage);
        if resolved.is_some_and(|r| r.physical_millis() > last_commit_ms + 1_000) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the redo log's resolved ts stayed at {resolved:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The site is lost.
    sluice.kill().unwrap();
    sluice.wait().unwrap();
    down.unfreeze();
    down.kill();
    drop(down);

    let tables = ["customers", "orders", "tokens"];
    let cols: Vec<Vec<(String, bool)>> = tables.iter().map(|t| columns(&up, t)).collect();
    let want: Vec<_> = tables
        .iter()
        .zip(&cols)
        .map(|(t, c)| upstream(&up, t, c))
        .collect();
    assert_eq!(want[2].len(), 999_900);

    // A fresh downstream with the tables as they were at the start.
    let fresh = a_downstream();
    let recover = dr_feed(
        dir.path(),
        "recover",
        &up,
        &start,
        &fresh.url("writer", "Writer-Pw2"),
        &redo,
    );
    let plugins = sluice_tests::workspace_root().join("target/plugins");
    let plugins = plugins.to_str().unwrap();
    let apply = |storage: &str| {
        redo_cmd(&[
            "apply",
            "--storage",
            storage,
            "--sink-config",
            recover.to_str().unwrap(),
            "--plugin-dir",
            plugins,
            "--from-start",
            "--quiet",
        ])
    };
    let (ok, out, err) = apply(&storage);
    assert!(ok, "{out}{err}");
    assert!(!out.contains("Writer-Pw2") && !err.contains("Writer-Pw2"));
    let got = downstream(&fresh, &tables, &cols).expect("the fresh downstream answers");
    for ((t, w), g) in tables.iter().zip(&want).zip(&got) {
        assert_eq!(w.len(), g.len(), "shop.{t}: rows");
        let differing = w.iter().filter(|(k, v)| g.get(*k) != Some(v)).count();
        assert_eq!(differing, 0, "shop.{t}: rows that differ");
    }
    assert_eq!(
        columns(&fresh, "tokens"),
        cols[2],
        "the DDL was applied in its place"
    );

    // Applied again (an interrupted apply run again): the same state.
    let (ok, out, err) = apply(&storage);
    assert!(ok, "{out}{err}");
    assert_eq!(
        downstream(&fresh, &tables, &cols).expect("it answers"),
        want
    );

    // The newest rows file torn mid-record: refused, naming it and where.
    let log_dir = redo.join("dr");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("rows-")
        })
        .collect();
    files.sort();
    let newest = files.last().unwrap();
    let len = std::fs::metadata(newest).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .unwrap();
    f.set_len(len - 7).unwrap();
    drop(f);
    let (ok, out, err) = apply(&storage);
    assert!(!ok, "a torn file the replay needs is refused: {out}{err}");
    let name = newest.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name), "{err}");
    assert!(err.contains("offset"), "{err}");
}
