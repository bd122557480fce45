//! Hot swaps through a real server: a running changefeed's sink replaced by
//! another version at a barrier, back and forth under load; versions that
//! fail on probation rolled back; bad swaps refused with nothing stopped; a
//! server killed during swaps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value as Json;

mod common;
use common::server::Server;
use common::{expected_rows, fingerprint, for_each_expected_row, for_each_line, lines_in};

/// datagen (quickstart seed) -> filter-mask -> sink-file@0.1.0, `total` rows at
/// `rate` rows/s, flushing every 50 ms.
fn feed_file(dir: &Path, name: &str, total: u64, rate: u64) -> PathBuf {
    let text = format!(
        r#"
[source]
type = "datagen"
seed = 42
total-rows = {total}
rate = {rate}

[[filters]]
plugin = "filter-mask@0.1.0"
[filters.config]
columns = ["email", "shop.users.name"]
mode = "hash"
salt = "quickstart"

[sink]
plugin = "sink-file@0.1.0"
[sink.config]
format = "canal-json"
enable-sluice-extension = true
dir = "changes"
max-file-bytes = 4194304
[sink.capabilities]
data-dir = true

[pipeline]
flush-interval-ms = 50
"#
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The tests of this file run one at a time: each drives a server at a
/// steady rate and times swaps against it, which two cores shared by several
/// such tests cannot keep up with.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A server with sink-file and filter-mask as 0.1.0 and 0.2.0, and misbehave.
fn server(data: &Path) -> Server {
    let server = Server::start(data, &[]);
    server.upload("sink-file", "sink");
    server.json(&[
        "plugin",
        "upload",
        sluice_tests::plugin_path("sink-file").to_str().unwrap(),
        "--id",
        "sink-file@0.2.0",
        "--kind",
        "sink",
    ]);
    server.upload("filter-mask", "filter");
    // The same component under a second version.
    server.json(&[
        "plugin",
        "upload",
        sluice_tests::plugin_path("filter-mask").to_str().unwrap(),
        "--id",
        "filter-mask@0.2.0",
        "--kind",
        "filter",
    ]);
    server.upload("misbehave", "sink");
    server
}

fn out_dir(server: &Server, name: &str) -> PathBuf {
    let q = server.state(name);
    PathBuf::from(q["status"]["sink-data-dir"].as_str().unwrap()).join("changes")
}

fn swaps(server: &Server, name: &str) -> Vec<Json> {
    server.state(name)["swaps"].as_array().unwrap().clone()
}

/// Swaps `name`'s sink to `plugin` (with `extra` CLI arguments); the JSON of
/// the changefeed as recorded.
fn swap(server: &Server, name: &str, plugin: &str, extra: &[&str]) -> Json {
    let mut args = vec!["changefeed", "swap", "-c", name, "--sink", plugin];
    args.extend_from_slice(extra);
    server.json(&args)
}

/// Waits until swap `seq` of `name` has left pending and probation; its record.
fn settled_swap(server: &Server, name: &str, seq: u64) -> Json {
    let mut last = Json::Null;
    server.wait_for(
        &format!("swap {seq} to settle"),
        Duration::from_secs(60),
        || {
            last = swaps(server, name)
                .into_iter()
                .find(|s| s["seq"] == seq)
                .unwrap_or(Json::Null);
            !matches!(last["state"].as_str(), Some("pending" | "probation") | None)
        },
    );
    last
}

/// Every generated row is in `lines` at least once; a row seen again is
/// flagged replay; no line is foreign; per table, rows go forward except where
/// a replay starts again. Returns (lines, rows flagged replay). Lines and
/// expected rows are read one at a time and kept as fingerprints, so a run of
/// 1.6 M rows is checked in tens of MB, not GB.
fn check_output(name: &str, out: &Path, total: u64) -> (usize, usize) {
    let mut expected = std::collections::HashSet::<u128>::new();
    for_each_expected_row(total, |e| {
        expected.insert(fingerprint(&e.to_string()));
    });
    let mut seen = std::collections::HashMap::<u128, u32>::new();
    let mut last_ts = std::collections::HashMap::<String, u64>::new();
    let (mut lines, mut replayed) = (0, 0);
    for_each_line(out, |l| {
        lines += 1;
        let key = serde_json::json!({
            "table": l["table"], "type": l["type"],
            "commitTs": l["_sluice"]["commitTs"], "data": l["data"][0],
        })
        .to_string();
        let print = fingerprint(&key);
        assert!(expected.contains(&print), "{name}: a foreign line: {key}");
        let n = seen.entry(print).or_default();
        *n += 1;
        let ts = l["_sluice"]["commitTs"].as_u64().unwrap();
        let table = l["table"].as_str().unwrap().to_string();
        let before = last_ts.insert(table, ts).unwrap_or(0);
        if *n > 1 || ts < before {
            assert_eq!(
                l["_sluice"]["replay"], true,
                "{name}: a repeated or out-of-order line is not flagged replay: {key}"
            );
        }
        if l["_sluice"]["replay"] == true {
            replayed += 1;
        }
    });
    assert_eq!(
        seen.len(),
        expected.len(),
        "{name}: {} generated rows were lost",
        expected.len() - seen.len()
    );
    (lines, replayed)
}

#[test]
fn swaps_back_and_forth_under_load_lose_reorder_and_duplicate_nothing() {
    let _one = one_at_a_time();
    // 20,000 rows/s for 80 s: time for 100 swaps (about 0.4 s each here).
    const TOTAL: u64 = 1_600_000;
    const SWAPS: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("server"));
    let file = feed_file(dir.path(), "busy", TOTAL, 20_000);
    server.create("busy", &file);
    let out = out_dir(&server, "busy");
    let started = std::time::Instant::now();
    let mut done = 0;
    for seq in 1..=SWAPS {
        if server.state("busy")["state"] == "finished" {
            break;
        }
        let to = if seq % 2 == 1 {
            "sink-file@0.2.0"
        } else {
            "sink-file@0.1.0"
        };
        let recorded = swap(
            &server,
            "busy",
            to,
            &["--probation-ms", "0", "--probation-flushes", "1"],
        );
        assert_eq!(recorded["sink"], to);
        let record = settled_swap(&server, "busy", seq);
        assert_eq!(record["state"], "done", "{record}");
        assert!(record["barrier-ts"].as_u64().unwrap() > 0, "{record}");
        done += 1;
    }
    eprintln!("{done} swaps in {:?}", started.elapsed());
    assert_eq!(done, SWAPS, "the changefeed ended after {done} swaps");
    server.wait_for("the changefeed to finish", Duration::from_secs(120), || {
        server.state("busy")["state"] == "finished"
    });
    let q = server.state("busy");
    let history = q["swaps"].as_array().unwrap();
    assert_eq!(history.len(), 20, "the newest 20 are kept: {q}");
    assert_eq!(history.last().unwrap()["seq"], done);
    let (_, metrics) = server.http_get("/metrics");
    let swapped = metrics
        .lines()
        .find(|l| {
            l.starts_with("sluice_changefeed_swaps_total")
                && l.contains("changefeed=\"busy\"")
                && l.contains("outcome=\"swapped\"")
        })
        .unwrap_or_else(|| panic!("no swap counter: {metrics}"));
    assert!(swapped.ends_with(&format!(" {done}")), "{swapped}");
    assert!(metrics.contains("sluice_changefeed_swap_pause_seconds_count"));
    server.stop();
    let (lines, replayed) = check_output("busy", &out, TOTAL);
    // After clean swaps nothing is delivered twice.
    assert_eq!(replayed, 0, "{lines} lines");
    assert_eq!(lines, TOTAL as usize);
}

#[test]
fn a_version_that_fails_on_probation_is_rolled_back_with_the_reason() {
    let _one = one_at_a_time();
    const TOTAL: u64 = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("server"));
    for (name, mode, why) in [
        ("trap", "panic", "deliberate panic"),
        ("oom", "oom", "memory"),
        ("spin", "loop", "stopped"),
        ("hugeerr", "huge-error", "EEEE"),
        ("flushfatal", "flush-fatal", "refused the flush"),
    ] {
        // 6 s of rows: the swap (asked as soon as rows flow) has time to
        // happen and fail even on a busy machine.
        let file = feed_file(dir.path(), name, TOTAL, 10_000);
        server.create(name, &file);
        let out = out_dir(&server, name);
        server.wait_for("rows to flow", Duration::from_secs(30), || {
            server.state(name)["checkpoint-ts"].as_u64().unwrap_or(0) > 0
        });
        let table = dir.path().join(format!("{name}-sink.toml"));
        std::fs::write(
            &table,
            format!(
                "[sink]\nplugin = \"misbehave@0.1.0\"\n[sink.config]\nmode = \"{mode}\"\n[sink.limits]\nmemory = \"32MiB\"\ncall-timeout-ms = 500\n"
            ),
        )
        .unwrap();
        let before = server.state(name)["checkpoint-ts"].as_u64().unwrap();
        swap(
            &server,
            name,
            "misbehave@0.1.0",
            &["--sink-config", table.to_str().unwrap()],
        );
        let record = settled_swap(&server, name, 1);
        assert_eq!(record["state"], "rolled-back", "{name}: {record}");
        let reason = record["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{name}: {reason}");
        // A plugin's error is bounded in the record, however long it was.
        assert!(reason.len() < 8 << 10, "{name}: {} bytes", reason.len());
        let q = server.state(name);
        assert_eq!(q["sink"], "sink-file@0.1.0", "{name}: {q}");
        let warned = q["status"]["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("rolled-back"));
        assert!(warned, "{name}: {q}");
        server.wait_for("the changefeed to finish", Duration::from_secs(120), || {
            server.state(name)["state"] == "finished"
        });
        let after = server.state(name)["checkpoint-ts"].as_u64().unwrap();
        assert!(after >= before, "{name}: the checkpoint went back");
        check_output(name, &out, TOTAL);
    }
    server.stop();
}

#[test]
fn bad_swaps_are_refused_and_nothing_stops() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("server"));
    let file = feed_file(dir.path(), "steady", 10_000_000, 5_000);
    server.create("steady", &file);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let reject = write(
        "reject.toml",
        "[sink]\nplugin = \"misbehave@0.1.0\"\n[sink.config]\nmode = \"reject-config\"\n",
    );
    let wider = write(
        "wider.toml",
        "[sink]\nplugin = \"sink-file@0.2.0\"\n[sink.config]\nformat = \"canal-json\"\n[sink.capabilities]\ndata-dir = true\ntcp = [\"10.1.2.3:9092\"]\n",
    );
    let garbage = write("garbage.toml", "[sink\nplugin = ");
    let other = write(
        "other.toml",
        "[sink]\nplugin = \"sink-file@0.1.0\"\n[sink.config]\nformat = \"canal-json\"\n",
    );
    let huge = write(
        "huge.toml",
        "[sink]\nplugin = \"sink-file@0.2.0\"\n[sink.config]\nformat = \"canal-json\"\n[sink.capabilities]\ndata-dir = true\n[sink.limits]\nmemory = \"1024GiB\"\ncall-timeout-ms = 9223372036854775807\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--sink", "../../etc@1"], "plugin"),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--sink-config",
                garbage.to_str().unwrap(),
            ],
            "sink_toml",
        ),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--sink-config",
                other.to_str().unwrap(),
            ],
            "name one",
        ),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--sink-config",
                huge.to_str().unwrap(),
            ],
            "sink.limits",
        ),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--probation-flushes",
                "18446744073709551615",
            ],
            "probation flushes",
        ),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--probation-retries",
                "4294967295",
            ],
            "probation retries",
        ),
        (vec!["--sink", "filter-mask@0.1.0"], "filter"),
        (vec!["--sink", "sink-file@9.9.9"], "upload it first"),
        (
            vec![
                "--sink",
                "misbehave@0.1.0",
                "--sink-config",
                reject.to_str().unwrap(),
            ],
            "this config is refused",
        ),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--sink-config",
                wider.to_str().unwrap(),
            ],
            "capabilities.tcp",
        ),
        (
            vec![
                "--sink",
                "sink-file@0.2.0",
                "--probation-ms",
                "999999999999",
            ],
            "probation window",
        ),
        (vec!["--sink", "sink-file@0.1.0"], "nothing to swap"),
    ];
    let before = server.state("steady")["checkpoint-ts"].as_u64().unwrap();
    for (args, why) in cases {
        let mut all = vec!["changefeed", "swap", "-c", "steady"];
        all.extend_from_slice(&args);
        let err = server.error(&all);
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let q = server.state("steady");
    assert_eq!(q["state"], "normal", "{q}");
    assert_eq!(q["sink"], "sink-file@0.1.0");
    assert!(q["swaps"].as_array().unwrap().is_empty(), "{q}");
    server.wait_for("the checkpoint to move on", Duration::from_secs(30), || {
        server.state("steady")["checkpoint-ts"].as_u64().unwrap() > before
    });
    server.stop();
}

#[test]
fn a_server_killed_during_swaps_runs_exactly_one_version_and_loses_no_row() {
    let _one = one_at_a_time();
    const TOTAL: u64 = 120_000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let server = server(&data);
    let file = feed_file(dir.path(), "crashy", TOTAL, 10_000);
    server.create("crashy", &file);
    let out = out_dir(&server, "crashy");
    let mut server = Some(server);
    let mut seed: u64 = 0x05ee_d5a9;
    let mut seq = 0;
    for round in 0..10 {
        let s = server.take().unwrap();
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let q = s.state("crashy");
        if q["state"] == "finished" {
            server = Some(s);
            break;
        }
        let open = q["swaps"]
            .as_array()
            .unwrap()
            .last()
            .is_some_and(|r| matches!(r["state"].as_str(), Some("pending" | "probation")));
        if !open {
            // Odd rounds swap the filter, even ones the sink.
            let (role, running) = if round % 2 == 1 {
                ("--filter", &q["filters"][0])
            } else {
                ("--sink", &q["sink"])
            };
            let plugin = running.as_str().unwrap();
            let to = match plugin.rsplit_once('@') {
                Some((name, "0.1.0")) => format!("{name}@0.2.0"),
                Some((name, _)) => format!("{name}@0.1.0"),
                None => panic!("{plugin}"),
            };
            let mut args = vec!["changefeed", "swap", "-c", "crashy"];
            if role == "--filter" {
                args.extend(["--filter", "0", "--plugin", &to]);
            } else {
                args.extend(["--sink", &to]);
            }
            args.extend(["--probation-ms", "300", "--probation-flushes", "2"]);
            s.json(&args);
            seq += 1;
        }
        // Kill at a seeded moment: before, at or after the barrier, or on probation.
        std::thread::sleep(Duration::from_millis((seed >> 33) % 600));
        s.kill();
        let s = Server::start(&data, &[]);
        let q = s.state("crashy");
        let history = q["swaps"].as_array().unwrap();
        let last = history.last().unwrap();
        // The store names one version in each role, and the history agrees.
        let runs = match last["role"].as_str().unwrap() {
            "sink" => q["sink"].as_str().unwrap(),
            "filter-0" => q["filters"][0].as_str().unwrap(),
            other => panic!("round {round}: role {other}: {q}"),
        };
        match last["state"].as_str().unwrap() {
            "pending" | "probation" | "done" => assert_eq!(runs, last["to"], "round {round}: {q}"),
            "rolled-back" | "refused" => assert_eq!(runs, last["from"], "round {round}: {q}"),
            other => panic!("round {round}: {other}: {q}"),
        }
        server = Some(s);
    }
    let s = server.take().unwrap();
    s.wait_for("the changefeed to finish", Duration::from_secs(180), || {
        s.state("crashy")["state"] == "finished"
    });
    let q = s.state("crashy");
    assert!(seq > 0);
    for r in q["swaps"].as_array().unwrap() {
        assert!(
            matches!(r["state"].as_str(), Some("done" | "rolled-back")),
            "every swap ended: {q}"
        );
    }
    s.stop();
    check_output("crashy", &out, TOTAL);
}

/// Writes `text` to `dir/name` and returns its path as a string.
fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_filter_swaps_and_a_candidate_in_shadow_shows_where_it_differs() {
    let _one = one_at_a_time();
    const TOTAL: u64 = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let server = server(&data);
    let file = feed_file(dir.path(), "masked", TOTAL, 6_000);
    server.create("masked", &file);
    // A candidate that leaves `shop.users.name` unmasked.
    let candidate = write_file(
        dir.path(),
        "candidate.toml",
        r#"
[filter]
plugin = "filter-mask@0.2.0"
[filter.config]
columns = ["email"]
mode = "hash"
salt = "quickstart"
"#,
    );
    let started = server.json(&[
        "changefeed",
        "shadow",
        "start",
        "-c",
        "masked",
        "--filter",
        "filter-mask",
        "--plugin",
        "filter-mask@0.2.0",
        "--config",
        &candidate,
    ]);
    assert_eq!(started["shadow"]["state"], "running", "{started}");
    assert_eq!(started["shadow"]["role"], "filter-0");
    assert_eq!(started["shadow"]["candidate"], "filter-mask@0.2.0");
    // One shadow at a time; a swap waits for it to be stopped or promoted.
    let err = server.error(&[
        "changefeed",
        "shadow",
        "start",
        "-c",
        "masked",
        "--sink",
        "sink-file@0.2.0",
    ]);
    assert!(err.contains("runs shadow 1"), "{err}");
    let err = server.error(&[
        "changefeed",
        "swap",
        "-c",
        "masked",
        "--sink",
        "sink-file@0.2.0",
    ]);
    assert!(err.contains("stop it or promote it"), "{err}");
    // A bad position and an unknown name are refused with what there is.
    let err = server.error(&[
        "changefeed",
        "swap",
        "-c",
        "masked",
        "--filter",
        "3",
        "--plugin",
        "filter-mask@0.2.0",
    ]);
    assert!(err.contains("no filter at position 3"), "{err}");
    let mut status = Json::Null;
    server.wait_for("differences", Duration::from_secs(60), || {
        status = server.json(&["changefeed", "shadow", "status", "-c", "masked"]);
        status["rows-differing"].as_u64().unwrap_or(0) > 0
    });
    let differences = status["differences"].as_array().unwrap();
    assert!(!differences.is_empty(), "{status}");
    for d in differences {
        assert_eq!(d["table"], "shop.users", "{status}");
        assert_eq!(d["column"], "name", "{status}");
        assert!(d["key"].as_str().unwrap().starts_with("id="), "{status}");
        // The live value is the hash, the candidate's the name itself.
        assert_eq!(d["live"].as_str().unwrap().len(), 64, "{status}");
        assert_ne!(d["live"], d["candidate"], "{status}");
    }
    assert!(status["rows-compared"].as_u64().unwrap() > status["rows-differing"].as_u64().unwrap());
    assert_eq!(status["errors"], 0, "{status}");
    assert!(
        status["live-latency"]["calls"].as_u64().unwrap() > 0,
        "{status}"
    );
    assert!(
        status["candidate-latency"]["calls"].as_u64().unwrap() > 0,
        "{status}"
    );
    // The shadow is part of the changefeed's description: it runs again
    // after a restart.
    server.kill();
    let server = Server::start(&data, &[]);
    assert_eq!(server.state("masked")["shadow"]["state"], "running");
    server.wait_for(
        "differences after the restart",
        Duration::from_secs(60),
        || {
            let status = server.json(&["changefeed", "shadow", "status", "-c", "masked"]);
            status["rows-differing"].as_u64().unwrap_or(0) > 0
        },
    );
    let stopped = server.json(&["changefeed", "shadow", "stop", "-c", "masked"]);
    assert_eq!(stopped["shadow"]["state"], "stopped", "{stopped}");
    // The filter itself swaps at a barrier, named by its position.
    let recorded = server.json(&[
        "changefeed",
        "swap",
        "-c",
        "masked",
        "--filter",
        "0",
        "--plugin",
        "filter-mask@0.2.0",
        "--probation-ms",
        "0",
        "--probation-flushes",
        "1",
    ]);
    assert_eq!(recorded["filters"][0], "filter-mask@0.2.0", "{recorded}");
    let record = settled_swap(&server, "masked", 1);
    assert_eq!(record["state"], "done", "{record}");
    assert_eq!(record["role"], "filter-0", "{record}");
    assert!(record["barrier-ts"].as_u64().unwrap() > 0, "{record}");
    server.wait_for("the changefeed to finish", Duration::from_secs(120), || {
        server.state("masked")["state"] == "finished"
    });
    let (_, metrics) = server.http_get("/metrics");
    let differing = metrics
        .lines()
        .find(|l| {
            l.starts_with("sluice_changefeed_shadow_differences_total")
                && l.contains("changefeed=\"masked\"")
        })
        .unwrap_or_else(|| panic!("no shadow counter: {metrics}"));
    assert!(!differing.ends_with(" 0"), "{differing}");
    let out = out_dir(&server, "masked");
    server.stop();
    // The live output is exactly what the live filter makes of every row,
    // once: the candidate never reached the sink.
    // (Rows above the checkpoint at the kill come again, flagged.)
    let (lines, _) = check_output("masked", &out, TOTAL);
    assert!(lines >= TOTAL as usize);
}

#[test]
fn a_sink_in_shadow_writes_its_own_target_and_one_that_falls_behind_is_dropped() {
    let _one = one_at_a_time();
    const TOTAL: u64 = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("server"));
    server.create("staged", &feed_file(dir.path(), "staged", TOTAL, 5_000));
    server.create("slow", &feed_file(dir.path(), "slow", TOTAL, 5_000));
    let staging = write_file(
        dir.path(),
        "staging.toml",
        r#"
[sink]
plugin = "sink-file@0.2.0"
[sink.config]
format = "canal-json"
enable-sluice-extension = true
dir = "staging"
max-file-bytes = 4194304
[sink.capabilities]
data-dir = true
"#,
    );
    let started = server.json(&[
        "changefeed",
        "shadow",
        "start",
        "-c",
        "staged",
        "--sink",
        "sink-file@0.2.0",
        "--config",
        &staging,
    ]);
    assert_eq!(started["shadow"]["role"], "sink", "{started}");
    let slow = write_file(
        dir.path(),
        "slow.toml",
        r#"
[sink]
plugin = "misbehave@0.1.0"
[sink.config]
mode = "sleep"
target = "300"
"#,
    );
    server.json(&[
        "changefeed",
        "shadow",
        "start",
        "-c",
        "slow",
        "--sink",
        "misbehave@0.1.0",
        "--config",
        &slow,
        "--max-lag-ms",
        "500",
    ]);
    server.wait_for(
        "the slow candidate to be dropped",
        Duration::from_secs(60),
        || server.state("slow")["shadow"]["state"] == "dropped",
    );
    let q = server.state("slow");
    assert!(
        q["shadow"]["reason"].as_str().unwrap().contains("behind"),
        "{q}"
    );
    for name in ["staged", "slow"] {
        server.wait_for("the changefeed to finish", Duration::from_secs(120), || {
            server.state(name)["state"] == "finished"
        });
    }
    let status = server.json(&["changefeed", "shadow", "status", "-c", "staged"]);
    assert_eq!(status["dropped"], "", "{status}");
    assert!(status["rows-written"].as_u64().unwrap() > 0, "{status}");
    assert!(status["flushes"].as_u64().unwrap() > 0, "{status}");
    let (live_out, slow_out) = (out_dir(&server, "staged"), out_dir(&server, "slow"));
    server.stop();
    // The live sinks have every row once, whatever their candidates did.
    for (name, out) in [("staged", &live_out), ("slow", &slow_out)] {
        let (lines, replayed) = check_output(name, out, TOTAL);
        assert_eq!((lines, replayed), (TOTAL as usize, 0), "{name}");
    }
    // The staging target has, per table, every row from the first it got on.
    let staged = lines_in(
        &live_out
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("shadow-sink/staging"),
    );
    assert!(!staged.is_empty());
    let key = |l: &Json| {
        serde_json::json!({"table": l["table"], "type": l["type"],
            "commitTs": l["_sluice"]["commitTs"], "data": l["data"][0]})
        .to_string()
    };
    let got: std::collections::HashSet<String> = staged.iter().map(key).collect();
    assert_eq!(got.len(), staged.len(), "no row twice in staging");
    let expected = expected_rows(TOTAL);
    for table in ["users", "orders", "items"] {
        let rows: Vec<String> = expected
            .iter()
            .filter(|e| e["table"] == table)
            .map(|e| e.to_string())
            .collect();
        let Some(first) = rows.iter().position(|r| got.contains(r)) else {
            continue;
        };
        let missing = rows[first..].iter().filter(|r| !got.contains(*r)).count();
        assert_eq!(missing, 0, "{table}: staging missed rows after its first");
    }
}

#[test]
fn a_swap_racing_with_pause_update_and_remove_has_one_clear_outcome() {
    let _one = one_at_a_time();
    const TOTAL: u64 = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("server"));
    for race in ["pause", "update", "remove"] {
        let file = feed_file(dir.path(), race, TOTAL, 10_000);
        server.create(race, &file);
        server.wait_for("rows to flow", Duration::from_secs(30), || {
            server.state(race)["checkpoint-ts"].as_u64().unwrap_or(0) > 0
        });
        let recorded = swap(
            &server,
            race,
            "sink-file@0.2.0",
            &["--probation-ms", "1000"],
        );
        assert_eq!(recorded["sink"], "sink-file@0.2.0");
        // At once, while the swap is pending or on probation.
        server.json(&["changefeed", "pause", "-c", race]);
        let q = server.state(race);
        assert_eq!(q["state"], "stopped", "{q}");
        let open = &q["swaps"][0];
        match race {
            "pause" => {
                // A pause keeps the swap; the stored sink is the new version.
                assert!(
                    matches!(
                        open["state"].as_str(),
                        Some("pending" | "probation" | "done")
                    ),
                    "{q}"
                );
                assert_eq!(q["sink"], "sink-file@0.2.0");
                server.json(&["changefeed", "resume", "-c", race]);
                let record = settled_swap(&server, race, 1);
                assert_eq!(record["state"], "done", "{record}");
            }
            "update" => {
                server.json(&[
                    "changefeed",
                    "update",
                    "-c",
                    race,
                    "--config",
                    file.to_str().unwrap(),
                ]);
                let q = server.state(race);
                assert_eq!(q["sink"], "sink-file@0.1.0", "{q}");
                let s = &q["swaps"][0];
                if s["state"] != "done" {
                    assert_eq!(s["state"], "superseded", "{q}");
                    assert!(s["reason"].as_str().unwrap().contains("updated"), "{q}");
                }
                server.json(&["changefeed", "resume", "-c", race]);
            }
            _ => {
                server.json(&["changefeed", "remove", "-c", race]);
                let err = server.error(&["changefeed", "query", "-c", race]);
                assert!(err.contains("no changefeed"), "{err}");
                // A new incarnation starts from its own file, no swap open.
                server.create(race, &file);
                let q = server.state(race);
                assert_eq!(q["sink"], "sink-file@0.1.0", "{q}");
                assert!(
                    q["swaps"].as_array().is_none_or(|a| a
                        .iter()
                        .all(|s| s["state"] != "pending" && s["state"] != "probation")),
                    "{q}"
                );
            }
        }
    }
    for race in ["pause", "update", "remove"] {
        server.wait_for("the changefeed to finish", Duration::from_secs(120), || {
            server.state(race)["state"] == "finished"
        });
        let q = server.state(race);
        assert!(
            q["sink"]
                .as_str()
                .is_some_and(|s| s.starts_with("sink-file@")),
            "{q}"
        );
    }
    let outs: Vec<(&str, PathBuf)> = ["pause", "update"]
        .into_iter()
        .map(|r| (r, out_dir(&server, r)))
        .collect();
    server.stop();
    // Nothing lost; what came twice (across the pause) is flagged.
    for (race, out) in outs {
        let (lines, _) = check_output(race, &out, TOTAL);
        assert!(lines >= TOTAL as usize, "{race}");
    }
}

#[test]
fn a_rollout_swaps_every_running_changefeed_a_batch_at_a_time_and_stops_at_the_first_failure() {
    let _one = one_at_a_time();
    const TOTAL: u64 = 2_000_000;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("server"));
    for name in ["a", "b", "c", "d"] {
        server.create(name, &feed_file(dir.path(), name, TOTAL, 1_000));
    }
    server.json(&["changefeed", "pause", "-c", "d"]);
    let (ok, out, err) = server.cli(&[
        "--output",
        "json",
        "plugin",
        "rollout",
        "--from",
        "sink-file@0.1.0",
        "--to",
        "sink-file@0.2.0",
        "--batch-size",
        "2",
        "--probation-ms",
        "300",
        "--probation-flushes",
        "1",
    ]);
    assert!(ok, "{out}{err}");
    let v: Json = serde_json::from_str(&out).unwrap();
    let summary = &v["summary"];
    assert_eq!(summary["state"], "finished", "{v}");
    assert_eq!(
        (summary["swapped"].as_u64(), summary["skipped"].as_u64()),
        (Some(3), Some(1)),
        "{v}"
    );
    let steps = v["steps"].as_array().unwrap();
    for name in ["a", "b", "c"] {
        let id = format!("default/{name}");
        let states: Vec<&str> = steps
            .iter()
            .filter(|s| s["changefeed"] == id.as_str())
            .map(|s| s["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["swapping", "done"], "{v}");
        assert_eq!(server.state(name)["sink"], "sink-file@0.2.0");
    }
    assert_eq!(server.state("d")["sink"], "sink-file@0.1.0");
    // A version that does not accept the running table's options: the first
    // swap is refused and the rollout stops there, non-zero, with the rest
    // untouched.
    server.json(&[
        "plugin",
        "upload",
        sluice_tests::plugin_path("misbehave").to_str().unwrap(),
        "--id",
        "sink-file@0.3.0",
        "--kind",
        "sink",
    ]);
    let (ok, out, err) = server.cli(&[
        "plugin",
        "rollout",
        "--from",
        "sink-file@0.2.0",
        "--to",
        "sink-file@0.3.0",
    ]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("the rollout stopped: 0 swapped, 1 failed, 0 skipped, 2 not tried"),
        "{err}"
    );
    assert!(out.contains("default/a") && out.contains("error"), "{out}");
    for name in ["a", "b", "c"] {
        assert_eq!(server.state(name)["sink"], "sink-file@0.2.0", "{name}");
    }
    // Bad plans are refused before anything changes.
    for (args, want) in [
        (
            vec!["--from", "sink-file@0.2.0", "--to", "sink-file@0.2.0"],
            "nothing to roll out",
        ),
        (
            vec!["--from", "sink-file@0.2.0", "--to", "filter-mask@0.1.0"],
            "different plugins",
        ),
        (
            vec![
                "--from",
                "sink-file@0.2.0",
                "--to",
                "sink-file@0.3.0",
                "--batch-size",
                "101",
            ],
            "1..=100",
        ),
        (
            vec!["--from", "sink-file", "--to", "sink-file@0.3.0"],
            "from:",
        ),
    ] {
        let mut all = vec!["plugin", "rollout"];
        all.extend(args);
        let err = server.error(&all);
        assert!(err.contains(want), "{err}");
    }
    server.stop();
}
