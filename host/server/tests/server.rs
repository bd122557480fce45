//! `sluice server` end to end, driven through `sluice cli`: the real binary, the
//! embedded meta store, real plugins uploaded through the API.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use sluice_tests::plugin_path;

mod common;
use common::server::Server;
use common::{expected_rows, lines_in};

/// A changefeed file: datagen (quickstart seed) -> filter-mask -> sink-file.
fn feed_file(dir: &Path, name: &str, total: u64, rate: u64) -> PathBuf {
    feed_file_with(dir, name, total, rate, "")
}

fn feed_file_with(dir: &Path, name: &str, total: u64, rate: u64, pipeline: &str) -> PathBuf {
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
# `_sluice` on every line: the tests check commit ts and replay flags.
enable-sluice-extension = true
dir = "changes"
max-file-bytes = 1048576
[sink.capabilities]
data-dir = true

[pipeline]
{pipeline}
"#
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn blackhole_file(dir: &Path, name: &str, total: u64, rate: u64) -> PathBuf {
    let text = format!(
        "[source]\ntype = \"datagen\"\ntotal-rows = {total}\nrate = {rate}\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_cli_drives_plugins_and_changefeeds_through_their_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), &[]);
    let sink = server.upload("sink-file", "sink");
    assert_eq!(sink["id"], "sink-file@0.1.0");
    assert_eq!(sink["world"], "sink");
    server.upload("filter-mask", "filter");
    server.upload("sink-blackhole", "sink");
    let plugins = server.json(&["plugin", "list"]);
    let ids: Vec<&str> = plugins
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "filter-mask@0.1.0",
            "sink-blackhole@0.1.0",
            "sink-file@0.1.0"
        ]
    );

    // A bounded changefeed runs to the end: finished, every row in the files.
    let file = feed_file(dir.path(), "masked", 3_000, 0);
    let created = server.json(&[
        "changefeed",
        "create",
        "-c",
        "masked",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert_eq!(created["id"], "default/masked");
    assert_eq!(created["epoch"], 1);
    server.wait_for("masked to finish", Duration::from_secs(60), || {
        server.state("masked")["state"] == "finished"
    });
    let q = server.state("masked");
    let out_dir = PathBuf::from(q["status"]["sink-data-dir"].as_str().unwrap()).join("changes");
    let lines = lines_in(&out_dir);
    let expected = expected_rows(3_000);
    assert_eq!(lines.len(), expected.len());
    // Exactly the generated rows, masked, in commit order per table.
    for table in ["users", "orders", "events"] {
        let got: Vec<Json> = lines
            .iter()
            .filter(|l| l["table"] == table)
            .map(|l| {
                serde_json::json!({
                    "table": l["table"], "type": l["type"],
                    "commitTs": l["_sluice"]["commitTs"], "data": l["data"][0],
                })
            })
            .collect();
        let want: Vec<&Json> = expected.iter().filter(|e| e["table"] == table).collect();
        assert_eq!(got.len(), want.len(), "{table}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g, w);
        }
    }
    assert_eq!(q["status"]["rows-written"], 3_000, "{q}");
    assert_eq!(
        q["checkpoint-ts"],
        expected.last().unwrap()["commitTs"],
        "{q}"
    );

    // Resume the finished changefeed from an earlier checkpoint: everything above
    // it is delivered again, nothing below.
    let from = expected[1_999]["commitTs"].as_u64().unwrap();
    let resumed = server.json(&[
        "changefeed",
        "resume",
        "-c",
        "masked",
        "--overwrite-checkpoint-ts",
        &from.to_string(),
    ]);
    assert_eq!(resumed["epoch"], 2);
    server.wait_for("masked to finish again", Duration::from_secs(60), || {
        server.state("masked")["state"] == "finished"
    });
    let again: Vec<u64> = lines_in(&out_dir)[3_000..]
        .iter()
        .map(|l| l["_sluice"]["commitTs"].as_u64().unwrap())
        .collect();
    let above = expected
        .iter()
        .filter(|e| e["commitTs"].as_u64().unwrap() > from)
        .count();
    assert_eq!(again.len(), above);
    assert!(again.iter().all(|&ts| ts > from));

    // An endless one: the checkpoint moves; update is refused while it runs.
    let endless = blackhole_file(dir.path(), "endless", 0, 5_000);
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "endless",
        "--config",
        endless.to_str().unwrap(),
    ]);
    let mut first = 0;
    server.wait_for("the checkpoint to move", Duration::from_secs(30), || {
        let cp = server.state("endless")["checkpoint-ts"].as_u64().unwrap();
        if first == 0 && cp > 0 {
            first = cp;
        }
        first > 0 && cp > first
    });
    let err = server.error(&[
        "changefeed",
        "update",
        "-c",
        "endless",
        "--config",
        endless.to_str().unwrap(),
    ]);
    assert!(
        err.starts_with("error: not allowed now:") && err.contains("pause"),
        "{err}"
    );
    let err = server.error(&["plugin", "remove", "--id", "sink-blackhole@0.1.0"]);
    assert!(
        err.contains("is used by default/endless; remove or update those changefeeds first"),
        "{err}"
    );

    // Metrics and JSON status while it runs.
    let (code, metrics) = server.http_get("/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains(
            "sluice_changefeed_state{tenant=\"default\",changefeed=\"endless\",state=\"normal\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_plugin_call_duration_seconds_bucket{tenant=\"default\",changefeed=\"endless\",role=\"sink\",plugin=\"sink-blackhole@0.1.0\",le=\"0.001\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "sluice_changefeed_rows_written_total{{tenant=\"default\",changefeed=\"masked\"}} {}",
            3_000 + above
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "sluice_plugin_counter_total{tenant=\"default\",changefeed=\"endless\",role=\"sink\",plugin=\"sink-blackhole@0.1.0\",name=\"rows\"}"
        ),
        "{metrics}"
    );
    let (code, body) = server.http_get("/healthz");
    assert_eq!((code, body.starts_with("ok")), (200, true), "{body}");
    let (code, body) = server.http_get("/api/v1/changefeeds/default/masked");
    assert_eq!(code, 200);
    let v: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["status"]["rows-written"].as_u64()),
        (Some("finished"), Some(3_000 + above as u64))
    );
    let (code, _) = server.http_get("/api/v1/changefeeds/default/nope");
    assert_eq!(code, 404);

    // Pause, update, resume (a new epoch), remove.
    let paused = server.json(&["changefeed", "pause", "-c", "endless"]);
    assert_eq!(paused["state"], "stopped");
    let at_pause = server.state("endless")["checkpoint-ts"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        server.state("endless")["checkpoint-ts"].as_u64().unwrap(),
        at_pause,
        "a paused changefeed does not move"
    );
    let updated = blackhole_file(dir.path(), "endless2", 0, 8_000);
    server.json(&[
        "changefeed",
        "update",
        "-c",
        "endless",
        "--config",
        updated.to_str().unwrap(),
    ]);
    assert!(
        server.state("endless")["config"]
            .as_str()
            .unwrap()
            .contains("rate = 8000")
    );
    let resumed = server.json(&["changefeed", "resume", "-c", "endless"]);
    assert_eq!(
        (resumed["state"].as_str(), resumed["epoch"].as_u64()),
        (Some("normal"), Some(2))
    );
    server.wait_for(
        "the checkpoint to move after resume",
        Duration::from_secs(30),
        || server.state("endless")["checkpoint-ts"].as_u64().unwrap() > at_pause,
    );
    let list = server.json(&["changefeed", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let removed = server.json(&["changefeed", "remove", "-c", "endless"]);
    assert_eq!(removed["state"], "removed");
    let err = server.error(&["changefeed", "query", "-c", "endless"]);
    assert!(
        err.starts_with("error: not found: no changefeed default/endless"),
        "{err}"
    );
    let err = server.error(&["changefeed", "resume", "-c", "endless"]);
    assert!(
        err.contains("not allowed now") && err.contains("removed"),
        "{err}"
    );
    assert_eq!(
        server
            .json(&["changefeed", "list"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // No longer used: the plugin can go.
    server.json(&["plugin", "remove", "--id", "sink-blackhole@0.1.0"]);

    let captures = server.json(&["capture", "list"]);
    assert_eq!(captures.as_array().unwrap().len(), 1);
    assert_eq!(captures[0]["owner"], true);
    assert_eq!(captures[0]["is-owner"], true);
    let status = server.json(&["status"]);
    assert_eq!(status["healthy"], true);
    assert_eq!(status["owner"], captures[0]["id"]);
    // The table output is for people: a header and one row per changefeed.
    let (ok, table, _) = server.cli(&["changefeed", "list"]);
    assert!(ok);
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows[0].starts_with("ID") && rows[0].contains("CHECKPOINT-TS"),
        "{table}"
    );
    assert!(
        rows[1].starts_with("default/masked") && rows[1].contains("finished"),
        "{table}"
    );
    server.stop();
}

#[test]
fn bad_requests_get_a_status_that_says_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), &["--max-plugin-mib", "1"]);
    server.upload("sink-file", "sink");
    server.upload("filter-mask", "filter");
    let bad = |name: &str, text: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        server.error(&[
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            path.to_str().unwrap(),
        ])
    };
    let good = std::fs::read_to_string(feed_file(dir.path(), "good", 10, 0)).unwrap();
    let cases = [
        (
            bad("toml", "[source\n"),
            "invalid argument: invalid changefeed file: line 1, column 8: unclosed table, expected `]`",
        ),
        (
            bad(
                "unknown",
                &good.replace("sink-file@0.1.0", "sink-nope@0.1.0"),
            ),
            "not found: sink.plugin: no plugin sink-nope@0.1.0 in tenant default; upload it first",
        ),
        (
            bad(
                "world",
                &good.replace("sink-file@0.1.0", "filter-mask@0.1.0"),
            ),
            "invalid argument: sink.plugin: filter-mask@0.1.0 is a filter plugin; sink needs a sink",
        ),
        (
            bad("options", &good.replace("canal-json", "xml")),
            "invalid argument: sink.config was rejected by `sink-file@0.1.0`",
        ),
        (
            bad("Bad_Name", &good),
            "invalid argument: changefeed name `Bad_Name` is invalid",
        ),
    ];
    for (err, want) in &cases {
        assert!(
            err.starts_with(&format!("error: {want}")),
            "want `{want}`, got: {err}"
        );
    }
    // Not a component, too large, the wrong world, other bytes under the same id.
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0").unwrap();
    let up = |file: &Path, id: &str, kind: &str| {
        server.error(&[
            "plugin",
            "upload",
            file.to_str().unwrap(),
            "--id",
            id,
            "--kind",
            kind,
        ])
    };
    let err = up(&junk, "junk@0.1.0", "sink");
    assert!(
        err.contains("invalid argument: not a usable sink plugin") && err.contains("wasm32-wasip2"),
        "{err}"
    );
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, vec![0u8; (1 << 20) + 1]).unwrap();
    let err = up(&big, "big@0.1.0", "sink");
    assert!(err.starts_with("error: too large:"), "{err}");
    let err = up(&plugin_path("filter-mask"), "mask@0.1.0", "sink");
    assert!(
        err.contains("missing export `sluice:plugin/sink-api@0.2.0`"),
        "{err}"
    );
    let err = up(&plugin_path("sink-blackhole"), "sink-file@0.1.0", "sink");
    assert!(
        err.starts_with("error: already exists:") && err.contains("upload it as a new version"),
        "{err}"
    );
    let err = server.error(&["plugin", "remove", "--id", "nothing"]);
    assert!(err.contains("has no version"), "{err}");
    let err = server.error(&["changefeed", "pause", "-c", "ghost"]);
    assert!(
        err.starts_with("error: not found: no changefeed default/ghost"),
        "{err}"
    );
    // Nothing was created by the bad requests.
    assert_eq!(server.json(&["changefeed", "list"]), serde_json::json!([]));
    server.stop();
}

/// SIGKILL the server at random moments while two changefeeds write into
/// sink-file; every generated row must be in each output, every duplicate flagged
/// replay and above the checkpoint its run resumed from.
#[test]
fn sigkill_the_server_ten_times_loses_no_row() {
    const TOTAL: u64 = 40_000;
    const FEEDS: [&str; 2] = ["crash", "crash2"];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let server = Server::start(&data, &[]);
    server.upload("sink-file", "sink");
    server.upload("filter-mask", "filter");
    let file = feed_file_with(
        dir.path(),
        "crash",
        TOTAL,
        12_000,
        "flush-interval-ms = 200",
    );
    let mut out_dirs = Vec::new();
    for name in FEEDS {
        server.json(&[
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            file.to_str().unwrap(),
        ]);
        let q = server.state(name);
        out_dirs
            .push(PathBuf::from(q["status"]["sink-data-dir"].as_str().unwrap()).join("changes"));
    }
    let mut logs = vec![server.kill()];
    let mut seed: u64 = 0x5eed;
    for _ in 0..10 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = 300 + (seed >> 33) % 1200;
        let server = Server::start(&data, &[]);
        std::thread::sleep(Duration::from_millis(wait));
        if seed.is_multiple_of(2) {
            logs.push(server.kill());
        } else {
            // The next server starts while this one is still going down: it
            // waits for the meta store's lock instead of exiting.
            let dying = server.kill_now();
            let next = Server::start(&data, &[]);
            logs.push(dying.kill());
            std::thread::sleep(Duration::from_millis(wait / 2));
            logs.push(next.kill());
        }
    }
    let server = Server::start(&data, &[]);
    server.wait_for(
        "the changefeeds to finish",
        Duration::from_secs(180),
        || {
            FEEDS
                .iter()
                .all(|name| server.state(name)["state"] == "finished")
        },
    );
    logs.push(server.stop());
    for (name, out_dir) in FEEDS.iter().zip(&out_dirs) {
        check_crash_output(name, &logs, std::slice::from_ref(out_dir), TOTAL);
    }
}

/// Two servers on one etcd with a shared plugin store. The second stands by,
/// forwards the API (a streamed upload, a create, queries) to the owner and
/// runs the work the owner places on it (the least loaded capture). A drain of
/// the owner's capture moves its changefeed to the other one; a rebalance
/// moves one back, and `changefeed move` moves one there and back. SIGKILL the
/// owner mid-run: the standby takes over within two leases, adopts the
/// changefeed its own capture runs (same epoch, no restart), places the other
/// one under a new epoch, and finishes both. Then the killed server comes back as a standby, takes
/// work, and is killed again: the owner places its work on itself. Every row
/// is delivered, a duplicate only flagged replay.
#[test]
fn captures_share_the_work_and_take_over_from_a_killed_owner_or_capture() {
    const TOTAL: u64 = 20_000;
    const LEASE_S: u64 = 2;
    let (_etcd, dir, args) = cluster(LEASE_S);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (data_a, data_b) = (dir.path().join("a"), dir.path().join("b"));
    let a = Server::start(&data_a, &args);
    let b = Server::start_standby(&data_b, &args, &a);
    // Through the standby: it forwards to the owner, token and all.
    b.upload("sink-file", "sink");
    b.upload("filter-mask", "filter");
    assert_eq!(a.json(&["plugin", "list"]).as_array().unwrap().len(), 2);
    assert_eq!(
        std::fs::read_dir(dir.path().join("shared-plugins"))
            .unwrap()
            .count(),
        2,
        "the files are in the shared store"
    );
    let captures = b.json(&["capture", "list"]);
    let list = captures.as_array().unwrap();
    assert_eq!(list.len(), 2, "{captures}");
    let owner: Vec<&Json> = list.iter().filter(|c| c["owner"] == true).collect();
    assert_eq!(owner.len(), 1, "{captures}");
    assert_eq!(
        format!("http://{}", owner[0]["address"].as_str().unwrap()),
        a.grpc
    );
    let (code, health) = b.http_get("/healthz");
    assert_eq!(code, 200, "{health}");
    assert!(
        health.contains("is a standby; the owner is capture"),
        "{health}"
    );
    // The HTTP API too: the owner answers, the token checked there.
    let (code, body) = b.http_get("/api/v1/status");
    assert_eq!(code, 200, "{body}");
    let status: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(
        format!("http://{}", status["address"].as_str().unwrap()),
        a.grpc,
        "{status}"
    );
    let (code, body) = b.http_get_with("/api/v1/status", None);
    assert_eq!(code, 401, "{body}");
    let (code, body) = b.http_get("/api/v1/nothing-here");
    assert_eq!(code, 404, "{body}");
    // A bad request forwarded comes back as the owner answered it.
    let err = b.error(&["changefeed", "pause", "-c", "ghost"]);
    assert!(
        err.starts_with("error: not found: no changefeed default/ghost"),
        "{err}"
    );

    // Two changefeeds: the first on the owner's capture (equal load), the
    // second on the standby's (less loaded then).
    // Slow enough to run through the moves below.
    let file = feed_file_with(
        dir.path(),
        "feed",
        TOTAL,
        400,
        "flush-interval-ms = 200\n\n[filter]\nrules = [\"shop.*\"]",
    );
    let create = |server: &Server, name: &str| {
        server.json(&[
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            file.to_str().unwrap(),
        ]);
        server.wait_for("rows to flow", Duration::from_secs(30), || {
            server.state(name)["checkpoint-ts"].as_u64().unwrap_or(0) > 0
        });
    };
    create(&b, "first");
    create(&b, "second");
    let (code, body) = b.http_get("/api/v1/changefeeds/default/first");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("default/first"), "{body}");
    let per_capture = |server: &Server| -> Vec<u64> {
        let captures = server.json(&["capture", "list"]);
        let mut n: Vec<u64> = captures
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["changefeeds"].as_u64().unwrap())
            .collect();
        n.sort();
        n
    };
    assert_eq!(per_capture(&b), [1, 1], "one changefeed on each capture");
    let runs_on = |name: &str| {
        a.state(name)["status"]["capture"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_ne!(runs_on("first"), runs_on("second"));
    assert!(!runs_on("first").is_empty() && !runs_on("second").is_empty());
    let first_dir = sink_dir_of(&a, "first", &data_a);
    let second_dir = sink_dir_of(&a, "second", &data_a);

    // Drain the owner's capture: its changefeed moves to the other one, and
    // it gets no new work.
    let captures = b.json(&["capture", "list"]);
    let owner_id = captures
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["owner"] == true)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let drained = b.json(&["capture", "drain", "--capture", &owner_id, "--wait"]);
    assert_eq!(drained["remaining"], 0, "{drained}");
    let captures = b.json(&["capture", "list"]);
    for c in captures.as_array().unwrap() {
        let drained = c["id"] == owner_id.as_str();
        assert_eq!(c["draining"], drained, "{captures}");
        assert_eq!(c["changefeeds"], if drained { 0 } else { 2 }, "{captures}");
    }
    // Ended, the capture takes work again (what moved stays).
    let ended = b.json(&["capture", "drain", "--capture", &owner_id, "--cancel"]);
    assert_eq!(ended["draining"], false, "{ended}");
    let captures = b.json(&["capture", "list"]);
    assert!(
        captures
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["draining"] == false),
        "{captures}"
    );
    assert_eq!(per_capture(&b), [0, 2]);
    let err = b.error(&["capture", "drain", "--capture", "nobody"]);
    assert!(err.contains("no live capture nobody"), "{err}");

    // Rebalance: one of the two moves to the empty capture.
    let moves = b.json(&["changefeed", "rebalance"]);
    let moves = moves.as_array().unwrap();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0]["to"], owner_id.as_str(), "{moves:?}");
    let moved = moves[0]["id"]
        .as_str()
        .unwrap()
        .trim_start_matches("default/")
        .to_string();
    b.wait_for("the rebalance", Duration::from_secs(30), || {
        runs_on(&moved) == owner_id && a.state(&moved)["checkpoint-ts"].as_u64() > Some(0)
    });
    assert_eq!(per_capture(&b), [1, 1]);
    assert!(
        b.json(&["changefeed", "rebalance"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    // By rows: both run at the same rate, one on each capture; no move
    // narrows their gap.
    let by_rows = b.json(&["changefeed", "rebalance", "--by", "rows"]);
    assert_eq!(by_rows.as_array().map(Vec::len), Some(0), "{by_rows}");
    // One table of `moved` runs on the other capture, its events shipped
    // there by the capture that reads the source; then it comes back.
    let reader = runs_on(&moved);
    let helper = b
        .json(&["capture", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .find(|c| *c != reader)
        .unwrap();
    let epoch_of = |name: &str| a.state(name)["epoch"].as_u64().unwrap();
    let tables_on = |capture: &str| {
        b.json(&["capture", "list"])
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == capture)
            .map_or(0, |c| c["tables"].as_u64().unwrap())
    };
    for (to, tables) in [(&helper, 1), (&reader, 0)] {
        let before = epoch_of(&moved);
        let m = b.json(&[
            "changefeed",
            "move-table",
            "-c",
            &moved,
            "--table",
            "shop.orders",
            "--capture",
            to,
        ]);
        assert_eq!(
            (m["table"].as_str(), m["to"].as_str()),
            (Some("shop.orders"), Some(to.as_str())),
            "{m}"
        );
        b.wait_for("the table to move", Duration::from_secs(60), || {
            epoch_of(&moved) > before && tables_on(&helper) == tables && runs_on(&moved) == reader
        });
        let at = a.state(&moved)["checkpoint-ts"].as_u64().unwrap();
        b.wait_for(
            "the split run to make progress",
            Duration::from_secs(60),
            || a.state(&moved)["checkpoint-ts"].as_u64().unwrap() > at,
        );
        // `changefeed query` shows each capture's part.
        let parts = |q: &Json| -> Vec<(String, bool, String)> {
            let mut parts: Vec<_> = q["processors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["capture"].as_str().unwrap().to_string(),
                        p["reads"].as_bool().unwrap(),
                        p["tables"].to_string(),
                    )
                })
                .collect();
            parts.sort();
            parts
        };
        let mut want = vec![(reader.clone(), true, "[]".to_string())];
        if tables == 1 {
            want.push((helper.clone(), false, r#"["shop.orders"]"#.to_string()));
        }
        want.sort();
        b.wait_for("the processors listed", Duration::from_secs(60), || {
            parts(&a.state(&moved)) == want
        });
        if tables == 1 {
            // The standby's `/metrics` has its own runs, sides and plugins:
            // `moved`'s received table among them.
            let run_line = |text: &str, family: &str| {
                text.lines().any(|l| {
                    l.starts_with(family)
                        && l.contains(&format!("changefeed=\"{moved}\""))
                        && l.contains("side=\"receives\"")
                })
            };
            let mut text = String::new();
            b.wait_for("the standby's series", Duration::from_secs(30), || {
                let (code, body) = b.http_get("/metrics");
                assert_eq!(code, 200, "{body}");
                text = body;
                run_line(&text, "sluice_capture_run_rows_written_total{")
            });
            assert!(
                text.lines().any(|l| l.starts_with("sluice_capture_info{")
                    && l.contains(&format!("capture=\"{helper}\""))
                    && l.contains("owner=\"false\"")),
                "{text}"
            );
            assert!(
                run_line(&text, "sluice_capture_run_checkpoint_timestamp_seconds{"),
                "{text}"
            );
            assert!(
                text.lines()
                    .any(|l| l.starts_with("sluice_plugin_instantiations_total{")
                        && l.contains(&format!("changefeed=\"{moved}\""))
                        && l.contains("role=\"sink\"")),
                "{text}"
            );
            // Open without a token, as the owner's is (no --metrics-auth).
            let (code, _) = b.http_get_with("/metrics", None);
            assert_eq!(code, 200);
            // The owner's has the capture series of its own runs, not the
            // standby's.
            let (code, text) = a.http_get("/metrics");
            assert_eq!(code, 200);
            assert!(
                text.lines()
                    .any(|l| l.starts_with("sluice_capture_run_epoch{")
                        && l.contains(&format!("changefeed=\"{moved}\""))
                        && l.contains("side=\"reads\"")),
                "{text}"
            );
            assert!(!run_line(&text, "sluice_capture_run_epoch{"), "{text}");
        }
    }
    // The captures measure their load: rows/s per capture, and per table
    // for a rebalance of the tables by count (all on the reader now: one
    // moves), carried out in one restart; then it comes back.
    b.wait_for("the rows/s measured", Duration::from_secs(60), || {
        b.json(&["capture", "list"])
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["rows-per-s"].as_u64() > Some(0))
    });
    let before = epoch_of(&moved);
    // Its tables are known once its run saved what it measured.
    let mut moves = Vec::new();
    b.wait_for("a rebalance of the tables", Duration::from_secs(60), || {
        let asked = b.json(&[
            "changefeed",
            "rebalance-tables",
            "-c",
            &moved,
            "--by",
            "tables",
        ]);
        moves = asked.as_array().unwrap().clone();
        !moves.is_empty()
    });
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0]["to"], helper.as_str(), "{moves:?}");
    b.wait_for("the rebalance of tables", Duration::from_secs(60), || {
        epoch_of(&moved) > before && tables_on(&helper) == 1
    });
    let back = moves[0]["table"].as_str().unwrap();
    let before = epoch_of(&moved);
    b.json(&[
        "changefeed",
        "move-table",
        "-c",
        &moved,
        "--table",
        back,
        "--capture",
        &reader,
    ]);
    b.wait_for(
        "the table back on the reader",
        Duration::from_secs(60),
        || epoch_of(&moved) > before && tables_on(&helper) == 0 && runs_on(&moved) == reader,
    );
    let err = b.error(&[
        "changefeed",
        "move-table",
        "-c",
        &moved,
        "--table",
        "orders",
        "--capture",
        &helper,
    ]);
    assert!(err.contains("not of the form schema.table"), "{err}");
    let err = b.error(&[
        "changefeed",
        "move-table",
        "-c",
        &moved,
        "--table",
        "stock.orders",
        "--capture",
        &helper,
    ]);
    assert!(err.contains("its [filter] rules leave it out"), "{err}");
    assert_eq!(per_capture(&b), [1, 1]);

    // Move the other one there too, then back.
    let other = if moved == "first" { "second" } else { "first" };
    let there = runs_on(other);
    let m = b.json(&["changefeed", "move", "-c", other, "--capture", &owner_id]);
    assert_eq!(
        (m["from"].as_str(), m["to"].as_str()),
        (Some(there.as_str()), Some(owner_id.as_str())),
        "{m}"
    );
    b.wait_for("the move", Duration::from_secs(30), || {
        runs_on(other) == owner_id
    });
    assert_eq!(per_capture(&b), [0, 2]);
    let m = b.json(&["changefeed", "move", "-c", other, "--capture", &there]);
    assert_eq!(m["to"], there.as_str(), "{m}");
    b.wait_for("the move back", Duration::from_secs(30), || {
        runs_on(other) == there
    });
    assert_eq!(per_capture(&b), [1, 1]);
    let err = b.error(&["changefeed", "move", "-c", other, "--capture", "nobody"]);
    assert!(err.contains("no live capture nobody"), "{err}");
    let err = b.error(&["changefeed", "move", "-c", "ghost", "--capture", &there]);
    assert!(err.starts_with("error: not found"), "{err}");

    let epoch = |server: &Server, name: &str| server.state(name)["epoch"].as_u64().unwrap();
    let (kept_epoch, moved_epoch) = (epoch(&a, other), epoch(&a, &moved));
    let log_a = a.kill();
    let taken_over = b.wait_ready(Duration::from_secs(4 * LEASE_S + 10));
    eprintln!("the standby became the owner {taken_over:?} after the owner was killed");
    // The lease ends at most one TTL after the owner's last renewal; the
    // rest is the election and the new owner's start (slack for a busy machine).
    assert!(
        taken_over < Duration::from_secs(2 * LEASE_S + 4),
        "took {taken_over:?}"
    );
    // The new owner adopted what ran on its own capture (same epoch, not
    // started again); what ran on the killed one runs under a new epoch.
    let on_b = |name: &str| b.state(name)["status"]["capture"] == there.as_str();
    assert_eq!(epoch(&b, other), kept_epoch);
    // Its status names the capture once the new owner has read the
    // adopted run's task position (its first rounds).
    b.wait_for("the adopted run's capture", Duration::from_secs(10), || {
        on_b(other)
    });
    assert_eq!(epoch(&b, other), kept_epoch);
    b.wait_for(
        "the killed capture's work to move",
        Duration::from_secs(30),
        || epoch(&b, &moved) > moved_epoch && on_b(&moved),
    );
    // The killed server comes back, as a standby, and takes the new work
    // (the owner's capture runs the other two).
    let a = Server::start_standby(&data_a, &args, &b);
    let third = feed_file_with(dir.path(), "third", TOTAL, 2_000, "flush-interval-ms = 200");
    b.json(&[
        "changefeed",
        "create",
        "-c",
        "third",
        "--config",
        third.to_str().unwrap(),
    ]);
    b.wait_for(
        "third to run on the standby",
        Duration::from_secs(30),
        || b.state("third")["checkpoint-ts"].as_u64().unwrap_or(0) > 0,
    );
    let captures = b.json(&["capture", "list"]);
    let standby = captures
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["owner"] == false)
        .unwrap();
    assert_eq!(standby["changefeeds"], 1, "{captures}");
    let third_dir = sink_dir_of(&b, "third", &data_b);
    let log_a2 = a.kill();
    b.wait_for(
        "third to finish on the owner",
        Duration::from_secs(120),
        || b.state("third")["state"] == "finished",
    );
    for name in ["first", "second"] {
        b.wait_for(
            &format!("{name} to finish"),
            Duration::from_secs(120),
            || b.state(name)["state"] == "finished",
        );
    }
    assert_eq!(per_capture(&b), [0], "{}", b.json(&["capture", "list"]));
    let log_b = b.stop();
    let logs = in_time_order(&[log_a, log_a2, log_b]);
    let both = |rel: &PathBuf| [data_a.join(rel), data_b.join(rel)];
    check_crash_output("first", &logs, &both(&first_dir), TOTAL);
    check_crash_output("second", &logs, &both(&second_dir), TOTAL);
    check_crash_output("third", &logs, &both(&third_dir), TOTAL);
}

/// Chaos: three servers on a private etcd, three changefeeds under load, and
/// rounds that each SIGKILL or SIGSTOP (a partition longer than the lease) a
/// capture picked at random, the owner included. After every round the
/// cluster converges (the live captures listed, one owner, every changefeed
/// running on a live capture with its checkpoint moving) while the stopped
/// one is still stopped; once continued, a stopped capture finds its lease
/// gone and exits without writing. At the end every row is there, every
/// duplicate is flagged replay, and no epoch of a changefeed ran in two
/// processes. `SLUICE_CHAOS_ROUNDS` (default 20) and `SLUICE_CHAOS_SEED`.
#[test]
fn chaos_sigkill_and_sigstop_of_random_captures_lose_no_row_and_run_no_epoch_twice() {
    const TOTAL: u64 = 30_000;
    const RATE: u64 = 200;
    const LEASE_S: u64 = 2;
    const FEEDS: [&str; 3] = ["c0", "c1", "c2"];
    let (rounds, mut random) = common::chaos_rounds("chaos", "SLUICE_CHAOS_ROUNDS", 20);
    let (_etcd, dir, args) = cluster(LEASE_S);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let data: Vec<PathBuf> = ["a", "b", "c"].iter().map(|n| dir.path().join(n)).collect();
    let first = Server::start(&data[0], &args);
    let token_of = first.token_file.clone();
    let standby = |i: usize, live: &Server| {
        let mut s = Server::start_standby(&data[i], &args, live);
        s.token_file = token_of.clone();
        s
    };
    let mut servers: Vec<Option<Server>> = vec![Some(first), None, None];
    for i in 1..3 {
        let s = standby(i, servers[0].as_ref().unwrap());
        servers[i] = Some(s);
    }
    let mut logs: Vec<String> = Vec::new();
    {
        let a = servers[0].as_ref().unwrap();
        a.upload("sink-file", "sink");
        a.upload("filter-mask", "filter");
        for name in FEEDS {
            let file = feed_file_with(dir.path(), name, TOTAL, RATE, "flush-interval-ms = 200");
            a.json(&[
                "changefeed",
                "create",
                "-c",
                name,
                "--config",
                file.to_str().unwrap(),
            ]);
        }
    }
    let json_of = |server: &Server, args: &[&str]| -> Option<Json> {
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let (ok, out, _) = server.cli(&all);
        ok.then(|| serde_json::from_str(&out).ok()).flatten()
    };
    let checkpoints = |server: &Server| -> Option<Vec<(u64, String, String)>> {
        FEEDS
            .iter()
            .map(|name| {
                let state = json_of(server, &["changefeed", "query", "-c", name])?;
                Some((
                    state["checkpoint-ts"].as_u64().unwrap_or(0),
                    state["state"].as_str().unwrap_or("").to_string(),
                    state["status"]["capture"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                ))
            })
            .collect()
    };
    // The cluster has converged when `server` lists `live` captures with one
    // owner, and every changefeed is finished or runs on a listed capture
    // with its checkpoint past `before`.
    let converged = |server: &Server, live: usize, before: &[u64]| -> bool {
        let Some(captures) = json_of(server, &["capture", "list"]) else {
            return false;
        };
        let list = captures.as_array().unwrap();
        let ids: Vec<&str> = list.iter().map(|c| c["id"].as_str().unwrap()).collect();
        if list.len() != live || list.iter().filter(|c| c["owner"] == true).count() != 1 {
            return false;
        }
        let Some(now) = checkpoints(server) else {
            return false;
        };
        now.iter().zip(before).all(|((ts, state, capture), b)| {
            state == "finished" || (ids.contains(&capture.as_str()) && ts > b)
        })
    };
    let wait_converged = |server: &Server, live: usize, before: &[u64], what: &str| {
        let start = Instant::now();
        while !converged(server, live, before) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}: the cluster did not converge in 60 s: captures {:?}, changefeeds {:?}",
                json_of(server, &["capture", "list"]),
                checkpoints(server)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        start.elapsed()
    };
    wait_converged(servers[0].as_ref().unwrap(), 3, &[0, 0, 0], "start");

    let mut took = Vec::new();
    for round in 0..rounds {
        let victim = (random() % 3) as usize;
        let sigstop = random() % 2 == 0;
        let witness = (victim + 1) % 3;
        let before: Vec<u64> = loop {
            if let Some(c) = checkpoints(servers[witness].as_ref().unwrap()) {
                break c.iter().map(|(ts, ..)| *ts).collect();
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let server = servers[victim].take().unwrap();
        let what = format!(
            "round {round}: {} server {victim}",
            if sigstop { "SIGSTOP" } else { "SIGKILL" }
        );
        eprintln!("chaos: {what}");
        if sigstop {
            server.freeze();
            // The others take its work while it is stopped (a partition).
            took.push(wait_converged(
                servers[witness].as_ref().unwrap(),
                2,
                &before,
                &what,
            ));
            let log = server.resume_until_exit(Duration::from_secs(4 * LEASE_S + 10), &what);
            assert!(log.contains("lease"), "{what}: says why it stopped: {log}");
            logs.push(log);
        } else {
            logs.push(server.kill());
            took.push(wait_converged(
                servers[witness].as_ref().unwrap(),
                2,
                &before,
                &what,
            ));
        }
        let back = standby(victim, servers[witness].as_ref().unwrap());
        servers[victim] = Some(back);
        wait_converged(servers[witness].as_ref().unwrap(), 3, &[0, 0, 0], &what);
    }
    took.sort();
    if !took.is_empty() {
        eprintln!(
            "chaos: converged after a round in p50 {:?}, max {:?}",
            took[took.len() / 2],
            took.last().unwrap()
        );
    }
    let any = servers[0].as_ref().unwrap();
    any.wait_for(
        "every changefeed to finish",
        Duration::from_secs(300),
        || checkpoints(any).is_some_and(|c| c.iter().all(|(_, state, _)| state == "finished")),
    );
    // Each capture's sink writes under its own data dir.
    let sink_dirs: Vec<PathBuf> = FEEDS
        .iter()
        .map(|name| {
            let rel = PathBuf::from(format!("plugin-data/default/{name}/sink/changes"));
            assert!(data.iter().any(|d| d.join(&rel).exists()), "{rel:?}");
            rel
        })
        .collect();
    for server in servers.into_iter().flatten() {
        logs.push(server.stop());
    }
    // No epoch of a changefeed started in two processes.
    let mut ran = std::collections::HashMap::<String, usize>::new();
    for (process, log) in logs.iter().enumerate() {
        for line in log.lines().filter(|l| l.contains("Processor starting.")) {
            let span = line.split("changefeed{").nth(1).unwrap();
            let span = span.split('}').next().unwrap().to_string();
            if let Some(other) = ran.insert(span.clone(), process) {
                assert_eq!(other, process, "{span} started in two processes");
            }
        }
    }
    let merged = in_time_order(&logs);
    for (name, sink) in FEEDS.iter().zip(&sink_dirs) {
        let dirs: Vec<PathBuf> = data.iter().map(|d| d.join(sink)).collect();
        check_crash_output(name, &merged, &dirs, TOTAL);
    }
}

/// A private etcd, a temporary dir and the arguments of a cluster's servers
/// on them: that etcd, a plugin store in the dir, a lease of `lease_s`.
fn cluster(
    lease_s: u64,
) -> (
    sluice_tests::etcd::PrivateEtcd,
    tempfile::TempDir,
    Vec<String>,
) {
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().join("shared-plugins").display());
    let args = vec![
        "--etcd".to_string(),
        etcd.endpoint.clone(),
        "--plugin-store".into(),
        store,
        "--lease-ttl-s".into(),
        lease_s.to_string(),
    ];
    (etcd, dir, args)
}

/// The processors' starts of several servers' logs as one log, in the order
/// of their timestamps (for the order of the checkpoints they started at).
fn in_time_order(logs: &[String]) -> [String; 1] {
    let mut starts: Vec<&str> = logs
        .iter()
        .flat_map(|l| l.lines())
        .filter(|l| l.contains("Processor starting."))
        .collect();
    starts.sort_by_key(|l| l.split_whitespace().next().unwrap_or(""));
    [starts.join("\n")]
}

/// Where `name`'s sink writes, relative to the data dir of the capture that
/// runs it (each capture writes into its own): the server that answers, with
/// data dir `data`, shows its own paths whole and other captures' relative.
fn sink_dir_of(server: &Server, name: &str, data: &Path) -> PathBuf {
    let path = PathBuf::from(
        server.state(name)["status"]["sink-data-dir"]
            .as_str()
            .unwrap(),
    );
    match path.strip_prefix(data) {
        Ok(relative) => relative.join("changes"),
        Err(_) => {
            assert!(path.is_relative(), "{}", path.display());
            path.join("changes")
        }
    }
}

fn check_crash_output(name: &str, logs: &[String], out_dirs: &[PathBuf], total: u64) {
    // Where each of its processors started: `checkpoint=N` of "Processor
    // starting." in the changefeed's span.
    let span = format!("id=default/{name} ");
    let starts: Vec<u64> = logs
        .iter()
        .flat_map(|log| log.lines())
        .filter(|l| l.contains("Processor starting.") && l.contains(&span))
        .map(|l| {
            l.split("checkpoint=")
                .nth(1)
                .unwrap()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(starts.len() >= 2, "{name}: {logs:?}");
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "{name}: checkpoints only move forward: {starts:?}"
    );
    assert!(
        *starts.last().unwrap() > 0,
        "{name}: the last run resumed from a saved checkpoint: {starts:?}"
    );

    // Each line with the data dir it is in.
    let lines: Vec<(usize, Json)> = out_dirs
        .iter()
        .enumerate()
        .filter(|(_, d)| d.exists())
        .flat_map(|(at, d)| lines_in(d).into_iter().map(move |l| (at, l)))
        .collect();
    // Generated commit ts per table, in order: where a run that starts after
    // checkpoint C must begin in each table (the first ts above C).
    let mut generated = std::collections::HashMap::<String, Vec<u64>>::new();
    for r in expected_rows(total) {
        let ts = generated
            .entry(r["table"].as_str().unwrap().to_string())
            .or_default();
        ts.push(r["commitTs"].as_u64().unwrap());
    }
    let first_above = |table: &str, c: u64| generated[table].iter().copied().find(|&t| t > c);
    // Per row: the data dir of each copy and whether it is flagged replay.
    let mut seen = std::collections::HashMap::<String, Vec<(usize, bool)>>::new();
    let mut previous_ts = std::collections::HashMap::<String, u64>::new();
    let mut restarts_below = 0;
    for (at, l) in &lines {
        let ts = l["_sluice"]["commitTs"].as_u64().unwrap();
        let table = l["table"].as_str().unwrap();
        let previous = previous_ts.insert(table.to_string(), ts).unwrap_or(0);
        if ts < previous {
            // A later run went back in this table: it must have started right
            // after one of the saved checkpoints, so what it repeats lies above it.
            restarts_below += 1;
            assert!(
                starts.iter().any(|&c| first_above(table, c) == Some(ts)),
                "{name}: a run restarted {table} at {ts}, which is not the first ts above any saved checkpoint {starts:?}"
            );
        }
        let key = serde_json::json!({
            "table": l["table"], "type": l["type"],
            "commitTs": l["_sluice"]["commitTs"], "data": l["data"][0],
        })
        .to_string();
        let copies = seen.entry(key.clone()).or_default();
        copies.push((*at, l["_sluice"]["replay"] == true));
        // Captures write into their own dirs, read one after the other: the
        // first copy read need not be the first written, but only one copy
        // may be unflagged (the others are replays).
        assert!(
            copies.iter().filter(|(_, replay)| !replay).count() <= 1,
            "{name}: a row is written twice without the replay flag (copies: data dir, \
             replay): {copies:?}: {key}"
        );
    }
    let expected: std::collections::HashSet<String> =
        expected_rows(total).iter().map(|e| e.to_string()).collect();
    for e in &expected {
        assert!(seen.contains_key(e), "{name}: row lost: {e}");
    }
    for k in seen.keys() {
        assert!(
            expected.contains(k),
            "{name}: a line that was never generated: {k}"
        );
    }
    let replayed = lines
        .iter()
        .filter(|(_, l)| l["_sluice"]["replay"] == true)
        .count();
    eprintln!(
        "{name}: {} lines for {total} rows, {replayed} flagged replay, {restarts_below} restarts below the written rows, starts {starts:?}",
        lines.len()
    );
    assert!(replayed >= lines.len() - total as usize);
    assert_eq!(seen.len(), total as usize);
}

/// A misbehaving sink drives the feed state manager: retryable errors back off
/// and restart under new epochs until the no-progress limit fails the changefeed;
/// a fatal error fails it at once; update and resume bring it back.
#[test]
fn failing_sinks_back_off_restart_and_fail_then_update_and_resume_fix_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("server"),
        &[
            "--backoff-initial-ms",
            "200",
            "--backoff-max-ms",
            "400",
            "--fail-after-ms",
            "3000",
        ],
    );
    let misbehave = plugin_path("misbehave");
    server.json(&[
        "plugin",
        "upload",
        misbehave.to_str().unwrap(),
        "--id",
        "misbehave@0.1.0",
        "--kind",
        "sink",
    ]);
    server.upload("sink-blackhole", "sink");
    let file = |name: &str, mode: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "[source]\ntype = \"datagen\"\ntotal-rows = 500\n\n[sink]\nplugin = \"misbehave@0.1.0\"\nconfig = {{ mode = \"{mode}\" }}\n\n[pipeline]\nmax-retries = 0\n"
            ),
        )
        .unwrap();
        path
    };
    let flaky = file("flaky", "error-retryable");
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "flaky",
        "--config",
        flaky.to_str().unwrap(),
    ]);
    let mut states = std::collections::BTreeSet::new();
    server.wait_for("flaky to fail", Duration::from_secs(30), || {
        let q = server.state("flaky");
        states.insert(q["state"].as_str().unwrap().to_string());
        q["state"] == "failed"
    });
    let q = server.state("flaky");
    assert!(states.contains("pending"), "{states:?}");
    assert!(
        q["epoch"].as_u64().unwrap() >= 3,
        "restarted under new epochs: {q}"
    );
    let failure = q["failure"].as_str().unwrap();
    assert!(failure.contains("did not move for 3s"), "{failure}");
    let errors = q["status"]["errors"].as_array().unwrap();
    assert!(!errors.is_empty() && errors.len() <= 5, "{q}");
    assert_eq!(errors[0]["kind"], "retryable");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("mode error-retryable"),
        "{q}"
    );

    let fatal = file("fatal", "error-fatal");
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "fatal",
        "--config",
        fatal.to_str().unwrap(),
    ]);
    server.wait_for("fatal to fail", Duration::from_secs(10), || {
        server.state("fatal")["state"] == "failed"
    });
    let q = server.state("fatal");
    assert_eq!(q["epoch"], 1, "no restart after a fatal error: {q}");
    assert!(
        q["failure"].as_str().unwrap().contains("mode error-fatal"),
        "{q}"
    );

    // Failed: an update is allowed; resume starts a new epoch that finishes.
    let fixed = blackhole_file(dir.path(), "fixed", 500, 0);
    server.json(&[
        "changefeed",
        "update",
        "-c",
        "fatal",
        "--config",
        fixed.to_str().unwrap(),
    ]);
    let resumed = server.json(&["changefeed", "resume", "-c", "fatal"]);
    assert_eq!(resumed["epoch"], 2);
    server.wait_for(
        "the fixed changefeed to finish",
        Duration::from_secs(30),
        || server.state("fatal")["state"] == "finished",
    );
    assert_eq!(server.state("fatal")["status"]["rows-written"], 500);
    server.stop();
}

/// A server cut off from its meta store (etcd frozen: connections open,
/// nothing answers) stops by itself within its lease, before the store could
/// end the lease and another capture take over its work.
#[test]
fn a_server_cut_off_from_etcd_stops_within_its_lease() {
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        &dir.path().join("server"),
        &["--etcd", &etcd.endpoint, "--lease-ttl-s", "2"],
    );
    let captures = server.json(&["capture", "list"]);
    assert_eq!(captures.as_array().unwrap().len(), 1);
    assert_eq!(captures[0]["changefeeds"], 0);
    // A changefeed runs while the store goes away.
    server.upload("sink-file", "sink");
    server.upload("filter-mask", "filter");
    let file = feed_file(dir.path(), "cut-off", 100_000_000, 2_000);
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "cut-off",
        "--config",
        file.to_str().unwrap(),
    ]);
    server.wait_for("rows to flow", Duration::from_secs(30), || {
        server.state("cut-off")["status"]["rows-written"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    let captures = server.json(&["capture", "list"]);
    assert_eq!(captures[0]["changefeeds"], 1, "{captures}");
    assert_eq!(captures[0]["owner"], true);
    // Another tenant sees the capture, not a count of this tenant's work.
    server.json(&["tenant", "create", "acme"]);
    let (ok, out, err) = server.cli(&[
        "--output", "json", "token", "create", "--tenant", "acme", "--role", "viewer",
    ]);
    assert!(ok, "{err}");
    let viewer: Json = serde_json::from_str(&out).unwrap();
    let (ok, out, err) = server.cli_with_token(
        viewer["token"].as_str().unwrap(),
        &["--output", "json", "capture", "list"],
    );
    assert!(ok, "{err}");
    let seen: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(seen[0]["owner"], true, "{seen}");
    assert_eq!(seen[0]["changefeeds"], 0, "{seen}");
    etcd.pause();
    let cut_at = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        // 1.6 s to notice, then at most 5 s for the owner's last writes.
        assert!(
            cut_at.elapsed() < Duration::from_secs(15),
            "the server still runs {:?} after etcd froze; stderr: {}",
            cut_at.elapsed(),
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    etcd.resume();
    let stderr = server.stderr.lock().unwrap().clone();
    assert!(!status.success(), "it stops with an error: {stderr}");
    assert!(
        stderr.contains("the capture's lease could not be renewed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("stopping: cancelling every changefeed"),
        "{stderr}"
    );
}

/// The same server on etcd: state survives a restart of the server.
#[test]
fn the_server_keeps_its_state_in_etcd() {
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let server = Server::start(&data, &["--etcd", &etcd.endpoint]);
    server.upload("sink-file", "sink");
    server.upload("filter-mask", "filter");
    let file = feed_file(dir.path(), "on-etcd", 2_000, 0);
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "on-etcd",
        "--config",
        file.to_str().unwrap(),
    ]);
    server.wait_for("the changefeed to finish", Duration::from_secs(60), || {
        server.state("on-etcd")["state"] == "finished"
    });
    let before = server.state("on-etcd");
    // A second server must share the cluster's plugin store: with its own
    // data dir's, it refuses to start.
    let second = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["server", "--data-dir"])
        .arg(dir.path().join("second"))
        .args(["--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--etcd", &etcd.endpoint])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(
        err.contains(&format!(
            "this cluster keeps its plugin files in file://{}; start this server with the same \
             --plugin-store (it uses file://{})",
            data.join("plugins").display(),
            dir.path().join("second/plugins").display()
        )),
        "{err}"
    );
    server.stop();
    // The records live in etcd (plugin bytes and outputs stay in the data dir).
    assert!(!data.join("meta.redb").exists());
    let server = Server::start(&data, &["--etcd", &etcd.endpoint]);
    let after = server.state("on-etcd");
    assert_eq!(after["state"], "finished");
    assert_eq!(after["checkpoint-ts"], before["checkpoint-ts"]);
    assert_eq!(
        server.json(&["plugin", "list"]).as_array().unwrap().len(),
        2
    );
    let out = PathBuf::from(after["status"]["sink-data-dir"].as_str().unwrap()).join("changes");
    assert_eq!(lines_in(&out).len(), 2_000);
    server.stop();
}

/// A clean stop (SIGTERM) flushes and saves the checkpoint: after a restart the
/// changefeed continues where it stopped and nothing is delivered twice.
#[test]
fn a_clean_stop_resumes_exactly_where_it_stopped() {
    const TOTAL: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let server = Server::start(&data, &[]);
    server.upload("sink-file", "sink");
    server.upload("filter-mask", "filter");
    let file = feed_file(dir.path(), "clean", TOTAL, 10_000);
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "clean",
        "--config",
        file.to_str().unwrap(),
    ]);
    server.wait_for("some rows to be written", Duration::from_secs(30), || {
        server.state("clean")["checkpoint-ts"].as_u64().unwrap() > 0
    });
    let out_dir = PathBuf::from(
        server.state("clean")["status"]["sink-data-dir"]
            .as_str()
            .unwrap(),
    )
    .join("changes");
    server.stop();
    let written = lines_in(&out_dir).len();
    assert!(written > 0 && written < TOTAL as usize, "{written}");
    let server = Server::start(&data, &[]);
    server.wait_for("the changefeed to finish", Duration::from_secs(60), || {
        server.state("clean")["state"] == "finished"
    });
    server.stop();
    let lines = lines_in(&out_dir);
    let mut keys = std::collections::HashSet::new();
    for l in &lines {
        let key = serde_json::json!({
            "table": l["table"], "type": l["type"],
            "commitTs": l["_sluice"]["commitTs"], "data": l["data"][0],
        })
        .to_string();
        assert!(
            keys.insert(key.clone()),
            "delivered twice after a clean stop: {key}"
        );
    }
    let expected: std::collections::HashSet<String> =
        expected_rows(TOTAL).iter().map(|e| e.to_string()).collect();
    assert_eq!(keys, expected);
}

/// The upload stream's protocol, spoken directly (the CLI always gets it right).
#[test]
fn malformed_upload_streams_are_refused_with_what_to_fix() {
    use sluice_api::v1 as pb;
    use sluice_api::v1::plugin_service_client::PluginServiceClient;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), &[]);
    server.json(&["tenant", "create", "acme"]);
    let bytes = std::fs::read(plugin_path("sink-blackhole")).unwrap();
    let header = |sha256: &str, world: pb::PluginWorld| pb::UploadPluginRequest {
        part: Some(pb::upload_plugin_request::Part::Header(pb::PluginHeader {
            id: Some(pb::PluginRef {
                tenant: "acme".into(),
                name: "sink-blackhole".into(),
                version: "1.0.0".into(),
            }),
            world: world.into(),
            sha256: sha256.into(),
        })),
    };
    let chunk = |b: &[u8]| pb::UploadPluginRequest {
        part: Some(pb::upload_plugin_request::Part::Chunk(b.to_vec())),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upload = |messages: Vec<pb::UploadPluginRequest>| {
        runtime.block_on(async {
            let mut client = PluginServiceClient::new(server.channel().await);
            client.upload_plugin(tokio_stream::iter(messages)).await
        })
    };
    let half = bytes.len() / 2;
    let cases = [
        (
            vec![chunk(&bytes)],
            tonic::Code::InvalidArgument,
            "the first message of an upload must be the header",
        ),
        (
            vec![header("", pb::PluginWorld::Unspecified), chunk(&bytes)],
            tonic::Code::InvalidArgument,
            "say whether the plugin is a sink or a filter",
        ),
        (
            vec![
                header("", pb::PluginWorld::Sink),
                chunk(&bytes[..half]),
                header("", pb::PluginWorld::Sink),
            ],
            tonic::Code::InvalidArgument,
            "only the first message of an upload may be a header",
        ),
        (
            vec![
                header(&"0".repeat(64), pb::PluginWorld::Sink),
                chunk(&bytes[..half]),
                chunk(&bytes[half..]),
            ],
            tonic::Code::InvalidArgument,
            "as announced; upload again",
        ),
    ];
    for (messages, code, want) in cases {
        let status = upload(messages).unwrap_err();
        assert_eq!(status.code(), code, "{status:?}");
        assert!(status.message().contains(want), "want `{want}`: {status:?}");
    }
    // In two chunks with the right checksum it is accepted, in its tenant only.
    let sha: String = {
        use sha2::Digest;
        sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let plugin = upload(vec![
        header(&sha, pb::PluginWorld::Sink),
        chunk(&bytes[..half]),
        chunk(&bytes[half..]),
    ])
    .unwrap()
    .into_inner();
    assert_eq!(
        (plugin.sha256.as_str(), plugin.size_bytes),
        (sha.as_str(), bytes.len() as u64)
    );
    let acme = server.json(&["--tenant", "acme", "plugin", "list"]);
    assert_eq!(acme[0]["id"], "sink-blackhole@1.0.0");
    assert_eq!(server.json(&["plugin", "list"]), serde_json::json!([]));
    server.stop();
}

/// A new author's path: `sluice plugin new`, `plugin build`, `plugin test`, then
/// upload the component and run it in a server.
#[test]
fn a_sink_made_with_plugin_new_builds_passes_plugin_test_and_runs_in_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || sluice_tests::workspace_root().join("target"),
            PathBuf::from,
        )
        .join("plugin-new-e2e");
    let sluice = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            // Its own target dir beside the workspace's, kept between runs; with
            // the workspace's lock file (below) the build takes the versions
            // already fetched.
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let root = dir.path().to_str().unwrap();
    let (ok, text) = sluice(&[
        "plugin",
        "new",
        "--kind",
        "sink",
        "--dir",
        root,
        "row-counter",
    ]);
    assert!(ok, "{text}");
    let project = dir.path().join("row-counter");
    for file in [
        "Cargo.toml",
        ".cargo/config.toml",
        "src/lib.rs",
        ".gitignore",
    ] {
        assert!(project.join(file).is_file(), "{file} missing: {text}");
    }
    let (ok, text) = sluice(&["plugin", "new", "--dir", root, "row-counter"]);
    assert!(!ok && text.contains("exists already"), "{text}");
    let (ok, text) = sluice(&["plugin", "new", "--dir", root, "9lives"]);
    assert!(!ok && text.contains("is not a plugin name"), "{text}");
    std::fs::copy(
        sluice_tests::workspace_root().join("Cargo.lock"),
        project.join("Cargo.lock"),
    )
    .unwrap();

    let (ok, text) = sluice(&["plugin", "build", project.to_str().unwrap()]);
    assert!(ok, "{text}");
    assert!(text.contains("implements the sink world"), "{text}");
    let wasm = project.join("row-counter.wasm");
    let size = std::fs::metadata(&wasm).unwrap().len();
    // The size profile and a small stack: a few hundred KB, not megabytes.
    assert!(size < 600 << 10, "{size} bytes");

    let (ok, text) = sluice(&["plugin", "test", wasm.to_str().unwrap(), "--rows", "3000"]);
    assert!(ok, "{text}");
    assert!(text.contains("all 7 checks passed"), "{text}");
    assert!(
        text.contains("3000 rows") || text.contains("rows in"),
        "{text}"
    );
    // A filter is not a sink: the check names the world.
    let (ok, text) = sluice(&["plugin", "test", wasm.to_str().unwrap(), "--kind", "filter"]);
    assert!(!ok && text.contains("filter"), "{text}");

    // The same in JavaScript: `plugin new --lang js`, built with sdk/js.
    let (ok, text) = sluice(&[
        "plugin",
        "new",
        "--lang",
        "js",
        "--kind",
        "sink",
        "--dir",
        root,
        "js-counter",
    ]);
    assert!(ok, "{text}");
    let js = dir.path().join("js-counter");
    let (ok, text) = sluice(&["plugin", "build", js.to_str().unwrap()]);
    assert!(ok, "{text}");
    assert!(text.contains("implements the sink world"), "{text}");
    let js_wasm = js.join("js-counter.wasm");
    let (ok, text) = sluice(&[
        "plugin",
        "test",
        js_wasm.to_str().unwrap(),
        "--rows",
        "2000",
    ]);
    assert!(ok && text.contains("all 7 checks passed"), "{text}");

    let server = Server::start(&dir.path().join("server"), &[]);
    let up = server.json(&[
        "plugin",
        "upload",
        wasm.to_str().unwrap(),
        "--id",
        "row-counter@0.1.0",
        "--kind",
        "sink",
    ]);
    assert_eq!(up["id"], "row-counter@0.1.0");
    let feed = dir.path().join("counted.toml");
    std::fs::write(
        &feed,
        "[source]\ntype = \"datagen\"\ntotal-rows = 3000\nrate = 0\n\n[sink]\nplugin = \"row-counter@0.1.0\"\n",
    )
    .unwrap();
    server.create("counted", &feed);
    server.wait_for("counted to finish", Duration::from_secs(60), || {
        server.state("counted")["state"] == "finished"
    });
    let (code, metrics) = server.http_get("/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains(
            "sluice_plugin_counter_total{tenant=\"default\",changefeed=\"counted\",role=\"sink\",plugin=\"row-counter@0.1.0\",name=\"rows\"} 3000"
        ),
        "{metrics}"
    );

    // The webhook sink of docs/writing-a-sink.md, Part 1, as written there: made
    // with `plugin new`, its code pasted in, built, uploaded and run against a
    // receiver.
    let (ok, text) = sluice(&["plugin", "new", "--dir", root, "hook"]);
    assert!(ok, "{text}");
    let hook = dir.path().join("hook");
    let doc =
        std::fs::read_to_string(sluice_tests::workspace_root().join("docs/writing-a-sink.md"))
            .unwrap();
    let part1 = &doc[doc.find("# Part 1").unwrap()..doc.find("# Part 2").unwrap()];
    let code: Vec<&str> = part1
        .split("```rust\n")
        .skip(1)
        .map(|b| &b[..b.find("```").unwrap()])
        .collect();
    assert_eq!(code.len(), 2, "the sink and its test");
    let own = code[0]
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim().starts_with("//"))
        .count();
    assert!(own <= 40, "the doc's sink is {own} lines");
    std::fs::write(hook.join("src/lib.rs"), code.join("\n")).unwrap();
    std::fs::copy(
        sluice_tests::workspace_root().join("Cargo.lock"),
        hook.join("Cargo.lock"),
    )
    .unwrap();
    // Its native test, as the doc runs it.
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .arg("test")
        .current_dir(&hook)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("posts_one_line_per_row_and_a_503_is_retried ... ok"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, text) = sluice(&["plugin", "build", hook.to_str().unwrap()]);
    assert!(ok, "{text}");
    let (addr, bodies) = line_receiver();
    server.json(&[
        "plugin",
        "upload",
        hook.join("hook.wasm").to_str().unwrap(),
        "--id",
        "hook@0.1.0",
        "--kind",
        "sink",
    ]);
    let feed = dir.path().join("hooked.toml");
    std::fs::write(
        &feed,
        format!(
            "[source]\ntype = \"datagen\"\ntotal-rows = 3000\nrate = 0\n\n[sink]\nplugin = \"hook@0.1.0\"\n[sink.config]\nurl = \"http://{addr}/cdc\"\n[sink.capabilities]\nhttp = [\"{addr}\"]\n"
        ),
    )
    .unwrap();
    server.create("hooked", &feed);
    server.wait_for("hooked to finish", Duration::from_secs(60), || {
        server.state("hooked")["state"] == "finished"
    });
    // One line per row change (a text value may hold a line break of its own).
    let rows = bodies
        .lock()
        .unwrap()
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| {
            let mut words = l.split(' ');
            ["Insert", "Update", "Delete"].contains(&words.next().unwrap_or(""))
                && ["users", "orders", "events"].contains(&words.next().unwrap_or(""))
                && words.next().is_some_and(|ts| ts.parse::<u64>().is_ok())
        })
        .count();
    assert_eq!(rows, 3000);
    server.stop();
}

/// An HTTP receiver on a private port that answers 204 to every POST and keeps
/// the bodies.
fn line_receiver() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let bodies: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/cdc",
        axum::routing::post(move |body: String| {
            kept.lock().unwrap().push(body);
            async { http::StatusCode::NO_CONTENT }
        }),
    );
    (common::serve_http(app), bodies)
}
