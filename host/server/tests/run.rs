//! `sluice run` end to end: the real binary, real plugins, the quickstart file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use sluice_core::Op;
use sluice_source::{DatagenConfig, DatagenSource};
use sluice_tests::{plugin_path, text_of, workspace_root};

mod common;
use common::{expected_rows, hash, lines_in};

/// The quickstart file with its paths moved into `dir` and `edit` applied.
fn quickstart_in(dir: &Path, edit: impl FnOnce(&mut toml::Table)) -> PathBuf {
    let text = std::fs::read_to_string(workspace_root().join("examples/quickstart.toml")).unwrap();
    let mut t: toml::Table = toml::from_str(&text).unwrap();
    let plugins = plugin_path("sink-file").parent().unwrap().to_path_buf();
    t.insert("plugin-dir".into(), plugins.display().to_string().into());
    t.insert(
        "data-dir".into(),
        dir.join("state").display().to_string().into(),
    );
    let caps = t["sink"]["capabilities"].as_table().unwrap().clone();
    let mut caps = caps;
    caps.insert(
        "data-dir".into(),
        dir.join("out").display().to_string().into(),
    );
    t["sink"]
        .as_table_mut()
        .unwrap()
        .insert("capabilities".into(), caps.into());
    t["source"]
        .as_table_mut()
        .unwrap()
        .insert("rate".into(), 0.into());
    edit(&mut t);
    let path = dir.join("changefeed.toml");
    std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
    path
}

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("sluice runs")
}

#[test]
fn quickstart_writes_exactly_the_generated_rows_masked() {
    let dir = tempfile::tempdir().unwrap();
    let config = quickstart_in(dir.path(), |_| {});
    let out = sluice(&["run", "--quiet", "--config", config.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("changefeed quickstart finished"),
        "{stdout}"
    );
    assert!(stdout.contains("20000 rows written"), "{stdout}");

    // Expected: the generator's rows, per table in commit-ts order, masked.
    let mut g = DatagenSource::new(DatagenConfig {
        seed: 42,
        total_rows: 20_000,
        rate: 0,
        ..Default::default()
    })
    .unwrap();
    let mut expected: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    while let Some(txn) = g.next_transaction() {
        for (table, row) in txn.rows() {
            let image = row.image();
            let mut data = serde_json::Map::new();
            for (col, v) in table.columns.iter().zip(&image) {
                let text = text_of(v, col.ty);
                let masked =
                    table.table_name == "users" && (col.name == "email" || col.name == "name");
                let text = match text {
                    Some(t) if masked => Some(hash("quickstart", &t)),
                    t => t,
                };
                data.insert(col.name.clone(), text.map_or(Json::Null, Json::String));
            }
            let kind = match row.op {
                Op::Insert => "INSERT",
                Op::Update => "UPDATE",
                Op::Delete => "DELETE",
            };
            expected
                .entry(table.table_name.clone())
                .or_default()
                .push(serde_json::json!({
                    "type": kind,
                    "commitTs": txn.commit_ts.get(),
                    "data": data,
                }));
        }
    }

    let lines = lines_in(&dir.path().join("out/changes"));
    assert_eq!(lines.len(), 20_000);
    let mut actual: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    for l in &lines {
        assert_eq!(l["database"], "shop");
        assert_eq!(l["_sluice"]["replay"], false);
        actual
            .entry(l["table"].as_str().unwrap().to_string())
            .or_default()
            .push(serde_json::json!({
                "type": l["type"],
                "commitTs": l["_sluice"]["commitTs"],
                "data": l["data"][0],
            }));
    }
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (table, rows) in &expected {
        let got = &actual[table];
        assert_eq!(got.len(), rows.len(), "{table}");
        for (i, (g, e)) in got.iter().zip(rows).enumerate() {
            assert_eq!(g, e, "{table} row {i}");
        }
    }
}

#[test]
fn bad_config_fails_with_the_key_named_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = quickstart_in(dir.path(), |t| {
        t["source"]
            .as_table_mut()
            .unwrap()
            .insert("total-rowz".into(), 5.into());
    });
    let out = sluice(&["run", "--config", config.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown field `total-rowz`"), "{stderr}");
    assert!(!dir.path().join("out").exists());

    let config = quickstart_in(dir.path(), |t| {
        t["sink"]
            .as_table_mut()
            .unwrap()
            .insert("plugin".into(), "sink-nope".into());
    });
    let out = sluice(&["run", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("sink.plugin `sink-nope`"), "{stderr}");
    assert!(stderr.contains("No such file or directory"), "{stderr}");

    let config = quickstart_in(dir.path(), |t| {
        t["sink"]["config"]
            .as_table_mut()
            .unwrap()
            .insert("format".into(), "xml".into());
    });
    let out = sluice(&["run", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("sink.config was rejected by `sink-file`"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("out/changes").exists(),
        "a rejected config writes nothing"
    );
}

#[test]
fn check_plugin_names_the_missing_export() {
    let out = sluice(&[
        "check-plugin",
        "--kind",
        "sink",
        plugin_path("filter-mask").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing export `sluice:plugin/sink-api@0.2.0`"),
        "{stderr}"
    );
    let out = sluice(&[
        "check-plugin",
        "--kind",
        "sink",
        plugin_path("sink-file").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ctrl_c_writes_what_was_read_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = quickstart_in(dir.path(), |t| {
        let source = t["source"].as_table_mut().unwrap();
        source.insert("rate".into(), 2000.into());
        source.insert("total-rows".into(), 1_000_000.into());
    });
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--quiet", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once rows flow: by then the pipeline listens for Ctrl-C (on a
    // loaded machine, loading the plugins alone can take longer than a fixed wait,
    // and an earlier SIGINT ends the process the default way).
    let out_dir = dir.path().join("out/changes");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::fs::read_dir(&out_dir)
        .map(|d| {
            d.flatten()
                .all(|e| e.metadata().map_or(true, |m| m.len() == 0))
        })
        .unwrap_or(true)
    {
        assert!(std::time::Instant::now() < deadline, "no row was written");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("changefeed quickstart stopped"), "{stdout}");
    // Every row read was written and flushed before exit.
    let read: usize = stdout
        .split(" rows in ")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no row count in {stdout}"));
    assert!(read > 0 && read < 1_000_000, "{read}");
    assert_eq!(lines_in(&dir.path().join("out/changes")).len(), read);
}

#[test]
fn sigkill_at_random_moments_loses_no_row_and_flags_every_duplicate() {
    const TOTAL: u64 = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let config = quickstart_in(dir.path(), |t| {
        t["changefeed"]
            .as_table_mut()
            .unwrap()
            .insert("resume".into(), true.into());
        let source = t["source"].as_table_mut().unwrap();
        source.insert("rate".into(), 12_000.into());
        source.insert("total-rows".into(), (TOTAL as i64).into());
        t["sink"]["config"]
            .as_table_mut()
            .unwrap()
            .insert("max-file-bytes".into(), (1 << 20).into());
    });
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--quiet", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out_dir = dir.path().join("out/changes");
    let written = || -> u64 {
        std::fs::read_dir(&out_dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    };
    // Ten SIGKILLs at pseudo-random moments while rows flow (a fixed seed, so a
    // failure reproduces). Each run is killed only once it has written rows of its
    // own: on a loaded machine, loading the plugins alone can outlast a fixed wait,
    // and ten runs killed before their first checkpoint would test nothing.
    let mut seed: u64 = 0x5eed;
    for _ in 0..10 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = (seed >> 33) % 800;
        let before = written();
        let mut child = run();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while written() == before && child.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "no row was written");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(wait));
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let out = run().wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("changefeed quickstart finished"),
        "{stdout}"
    );
    // The last run resumed from a saved checkpoint, not from the beginning.
    let resumed_at: u64 = stderr
        .split("resuming from checkpoint ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no resume line in {stderr}"));
    assert!(resumed_at > 0, "{stderr}");

    let lines = lines_in(&dir.path().join("out/changes"));
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for l in &lines {
        let key = row_key(l);
        let n = seen.entry(key.clone()).or_default();
        *n += 1;
        if *n > 1 {
            assert_eq!(
                l["_sluice"]["replay"], true,
                "a duplicate is not flagged replay: {key}"
            );
        }
    }
    let expected = expected_rows(TOTAL);
    let expected_keys: std::collections::HashSet<String> =
        expected.iter().map(|e| e.to_string()).collect();
    for e in &expected_keys {
        assert!(seen.contains_key(e), "row lost: {e}");
    }
    for k in seen.keys() {
        assert!(
            expected_keys.contains(k),
            "a line that was never generated: {k}"
        );
    }
    assert_eq!(seen.len(), TOTAL as usize);
    // The kills did land mid-stream: some rows were delivered twice (and flagged).
    let replayed = lines
        .iter()
        .filter(|l| l["_sluice"]["replay"] == true)
        .count();
    eprintln!(
        "{} lines for {TOTAL} rows, {replayed} flagged replay",
        lines.len()
    );
    assert!(lines.len() > TOTAL as usize && replayed >= lines.len() - TOTAL as usize);
}

/// A canal-json line's row change as `expected_rows` gives it (without the
/// replay flag and the write time, which differ between deliveries).
fn row_key(l: &Json) -> String {
    serde_json::json!({
        "table": l["table"],
        "type": l["type"],
        "commitTs": l["_sluice"]["commitTs"],
        "data": l["data"][0],
    })
    .to_string()
}

fn out_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each line of the sink-file output under `dir`, without what differs
/// between a live run and a replay (the replay flag, the write time), sorted.
fn normalized_lines(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = lines_in(dir)
        .into_iter()
        .map(|mut l| {
            let o = l.as_object_mut().unwrap();
            o.remove("es");
            o.remove("ts");
            o["_sluice"].as_object_mut().unwrap().remove("replay");
            l.to_string()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_redo_log_replayed_into_a_fresh_sink_gives_what_the_live_sink_got_and_damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let redo = dir.path().join("redo");
    let config = quickstart_in(dir.path(), |t| {
        let mut c = toml::Table::new();
        c.insert("level".into(), "eventual".into());
        c.insert(
            "storage".into(),
            format!("file://{}", redo.display()).into(),
        );
        c.insert("flush-interval".into(), 100.into());
        c.insert("max-log-size".into(), "1MiB".into());
        t.insert("consistent".into(), c.into());
    });
    let out = sluice(&["run", "--quiet", "--config", config.to_str().unwrap()]);
    let (stdout, stderr) = (out_text(&out.stdout), out_text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("20000 rows written"), "{stdout}");
    assert!(stdout.contains("redo log: resolved"), "{stdout}");
    assert!(
        stderr.contains("writing every change to the redo log"),
        "{stderr}"
    );
    let log = format!("file://{}", redo.join("quickstart").display());

    // The meta: everything resolved and downstream; several files (1 MiB each at most).
    let out = sluice(&["redo", "meta", "--storage", &log]);
    let meta = out_text(&out.stdout);
    assert!(out.status.success(), "{meta}{}", out_text(&out.stderr));
    let field = |name: &str| -> u64 {
        meta.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {meta}"))
    };
    assert_eq!(field("checkpoint-ts"), field("resolved-ts"), "{meta}");
    let files: Vec<&str> = meta
        .lines()
        .filter(|l| l.trim_start().starts_with("rows-"))
        .collect();
    assert!(files.len() >= 2, "{meta}");

    // Nothing above the checkpoint: nothing to apply.
    let apply = |to: &Path, extra: &[&str]| {
        let mut args = vec![
            "redo",
            "apply",
            "--quiet",
            "--storage",
            &log,
            "--sink-config",
            config.to_str().unwrap(),
            "--data-dir",
            to.to_str().unwrap(),
        ];
        let plugins = plugin_path("sink-file")
            .parent()
            .unwrap()
            .display()
            .to_string();
        args.extend(["--plugin-dir", &plugins]);
        args.extend(extra);
        let out = sluice(&args);
        (
            out.status.success(),
            out_text(&out.stdout),
            out_text(&out.stderr),
        )
    };
    let (ok, stdout, stderr) = apply(&dir.path().join("none"), &[]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("applied 0 rows"), "{stdout}");

    // From the start, into a fresh directory: the same lines as the live
    // sink wrote (masked by the changefeed's filter), every one flagged replay.
    let fresh = dir.path().join("fresh");
    let (ok, stdout, stderr) = apply(&fresh, &["--from-start"]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("applied 20000 rows"), "{stdout}");
    assert_eq!(
        normalized_lines(&fresh.join("changes")),
        normalized_lines(&dir.path().join("out/changes"))
    );
    assert!(
        lines_in(&fresh.join("changes"))
            .iter()
            .all(|l| l["_sluice"]["replay"] == true)
    );

    // The newest file cut mid-record: it lies at or below the resolved ts,
    // so apply refuses it, naming file and offset, rather than apply less.
    let newest = files.last().unwrap().split_whitespace().next().unwrap();
    let path = redo.join("quickstart").join(newest);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
    let (ok, stdout, stderr) = apply(&dir.path().join("torn"), &["--from-start"]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(newest) && stderr.contains("torn record at offset"),
        "{stderr}"
    );
    // A flipped bit in the meta is caught.
    std::fs::write(&path, &bytes).unwrap();
    let meta_path = redo.join("quickstart/meta");
    let mut m = std::fs::read(&meta_path).unwrap();
    m[12] ^= 0x10;
    std::fs::write(&meta_path, &m).unwrap();
    let (ok, _, stderr) = apply(&dir.path().join("flipped"), &["--from-start"]);
    assert!(!ok && stderr.contains("meta"), "{stderr}");
}

/// A webhook receiver on a private port: answers 503 or 429 to some requests
/// (taking nothing), stalls past the sink's timeout on others (after taking
/// their events) and takes the rest. Returns its address and the events taken.
fn flaky_receiver() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Json>>>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    let taken: Arc<Mutex<Vec<Json>>> = Arc::default();
    let requests = Arc::new(AtomicU64::new(0));
    let events = taken.clone();
    let handler = move |body: axum::body::Bytes| {
        let events = events.clone();
        let n = requests.fetch_add(1, Ordering::SeqCst);
        async move {
            // A fixed pattern over the first 60 requests, so a failure
            // reproduces; every later request is taken. Three failures in
            // a row (40 to 42) outlast the sink's own two retries, so the
            // host replays from the checkpoint.
            let mode = match n {
                40..=42 => 3,
                0..60 => n % 10,
                _ => 0,
            };
            if mode == 3 {
                return http::StatusCode::SERVICE_UNAVAILABLE;
            }
            if mode == 6 {
                return http::StatusCode::TOO_MANY_REQUESTS;
            }
            let body: Json = serde_json::from_slice(&body).expect("a JSON body");
            assert_eq!(body["changefeed"], "run/webhook");
            events
                .lock()
                .unwrap()
                .extend(body["events"].as_array().unwrap().iter().cloned());
            if mode == 8 {
                // Taken, but answered after the sink gave up waiting.
                tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
            }
            http::StatusCode::OK
        }
    };
    let app = axum::Router::new().route("/hook", axum::routing::post(handler));
    (common::serve_http(app), taken)
}

#[test]
fn a_webhook_receiver_that_fails_and_stalls_gets_every_row_and_duplicates_only_flagged() {
    const TOTAL: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let (addr, taken) = flaky_receiver();
    let config = quickstart_in(dir.path(), |t| {
        t["changefeed"]
            .as_table_mut()
            .unwrap()
            .insert("id".into(), "webhook".into());
        let sink: toml::Table = toml::from_str(&format!(
            r#"
plugin = "sink-webhook"
[config]
url = "http://{addr}/hook"
enable-sluice-extension = true
batch-rows = 400
timeout-ms = 1000
retries = 2
bearer-token = "never-shown-token"
[capabilities]
http = ["{addr}"]
"#
        ))
        .unwrap();
        t.insert("sink".into(), sink.into());
    });
    let out = sluice(&["run", "--quiet", "--config", config.to_str().unwrap()]);
    let stdout = out_text(&out.stdout);
    let stderr = out_text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("never-shown-token") && !stdout.contains("never-shown-token"));
    // Both paths ran: the sink's own resends, and the host's replay once three
    // failures in a row outlasted them.
    assert!(stderr.contains("sending again (2 of 2)"), "{stderr}");
    assert!(stderr.contains("replaying from the checkpoint"), "{stderr}");
    let events = taken.lock().unwrap().clone();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut by_id: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for e in &events {
        let l = &e["data"];
        assert_eq!(e["commitTs"], l["_sluice"]["commitTs"]);
        // The host's flag is in the data; the event's also covers the
        // sink's own resends.
        if l["_sluice"]["replay"] == true {
            assert_eq!(e["replay"], true);
        }
        let key = row_key(l);
        // One idempotency key per row change, the same each time it comes.
        let id = e["id"].as_str().unwrap().to_string();
        assert_eq!(by_id.entry(id).or_insert_with(|| key.clone()), &key);
        let n = seen.entry(key.clone()).or_default();
        *n += 1;
        if *n > 1 {
            assert_eq!(
                e["replay"], true,
                "a duplicate is not flagged replay: {key}"
            );
        }
    }
    let expected: std::collections::HashSet<String> =
        expected_rows(TOTAL).iter().map(|e| e.to_string()).collect();
    for e in &expected {
        assert!(seen.contains_key(e), "row lost: {e}");
    }
    assert_eq!(seen.len(), TOTAL as usize, "rows that were never generated");
    assert_eq!(by_id.len(), TOTAL as usize);
    let replayed = events.iter().filter(|e| e["replay"] == true).count();
    eprintln!(
        "{} events for {TOTAL} rows, {replayed} flagged replay",
        events.len()
    );
    // The stalls did make the host deliver rows again.
    assert!(events.len() > TOTAL as usize && replayed >= events.len() - TOTAL as usize);
}

/// `examples/NAME/sink.js` built into `dir/NAME.wasm` with the JS SDK's build
/// script (`cargo xtask test` installs Node.js and sdk/js's packages).
fn build_js_example(dir: &Path, name: &str) -> PathBuf {
    let root = workspace_root();
    let wasm = dir.join(format!("{name}.wasm"));
    let out = Command::new("node")
        .arg(root.join("sdk/js/bin/build.mjs"))
        .arg(root.join(format!("examples/{name}/sink.js")))
        .args(["--kind", "sink", "--out"])
        .arg(&wasm)
        .output()
        .expect("node runs (`cargo xtask test` installs Node.js and sdk/js's packages)");
    assert!(
        out.status.success(),
        "the JS build failed (run `npm ci` in sdk/js): {}",
        out_text(&out.stderr)
    );
    wasm
}

/// The JavaScript webhook example (`examples/sink-js-webhook`), which makes
/// its requests with the JS SDK's blocking HTTP (src/http.js over wasi:http),
/// delivers every row to a receiver that answers 503 now and then: each 503
/// is a retryable error, the host delivers the rows again, and a row seen
/// twice is flagged replay the second time.
#[test]
fn the_javascript_webhook_sink_delivers_every_row_through_failures() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    const TOTAL: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let wasm = build_js_example(dir.path(), "sink-js-webhook");

    let taken: Arc<Mutex<Vec<Json>>> = Arc::default();
    let requests = Arc::new(AtomicU64::new(0));
    let events = taken.clone();
    let handler = move |headers: http::HeaderMap, body: axum::body::Bytes| {
        let n = requests.fetch_add(1, Ordering::SeqCst);
        let events = events.clone();
        async move {
            assert_eq!(headers["authorization"], "Bearer js-token");
            if n < 40 && n % 9 == 4 {
                return http::StatusCode::SERVICE_UNAVAILABLE;
            }
            let body: Json = serde_json::from_slice(&body).expect("a JSON body");
            events
                .lock()
                .unwrap()
                .extend(body["events"].as_array().unwrap().iter().cloned());
            http::StatusCode::OK
        }
    };
    let addr = common::serve_http(axum::Router::new().route("/in", axum::routing::post(handler)));
    let config = quickstart_in(dir.path(), |t| {
        t.remove("filters");
        t["source"]
            .as_table_mut()
            .unwrap()
            .insert("total-rows".into(), (TOTAL as i64).into());
        let sink: toml::Table = toml::from_str(&format!(
            "plugin = {:?}\n[config]\nurl = \"http://{addr}/in?k=v\"\nbearer-token = \"js-token\"\n[capabilities]\nhttp = [\"{addr}\"]\n",
            wasm.to_str().unwrap()
        ))
        .unwrap();
        t.insert("sink".into(), sink.into());
    });
    let out = sluice(&["run", "--quiet", "--config", config.to_str().unwrap()]);
    let stdout = out_text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", out_text(&out.stderr));
    let events = taken.lock().unwrap();
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for e in events.iter() {
        let id = e["id"].as_str().unwrap().to_string();
        let before = seen.entry(id.clone()).or_default();
        if *before > 0 {
            assert_eq!(e["replay"], true, "{id} delivered again unflagged");
        }
        *before += 1;
    }
    assert_eq!(seen.len(), TOTAL as usize, "distinct rows received");
    assert!(
        seen.keys().all(|id| id.starts_with("run/")),
        "ids name the changefeed"
    );
    // The 503s made the host deliver rows again.
    assert!(events.len() > TOTAL as usize, "{} events", events.len());
}

/// The JavaScript example sink (`examples/sink-js`), built with the JS SDK's
/// build script, passes `sluice plugin test` and reads every value of a
/// `sluice run` exactly: its counts of rows, non-NULL values and text
/// characters equal what the generator made.
#[test]
fn the_javascript_example_sink_reads_every_value_the_generator_made() {
    const TOTAL: u64 = 20_000;
    let root = workspace_root();
    let dir = tempfile::tempdir().unwrap();
    let wasm = build_js_example(dir.path(), "sink-js");
    // The SDK's own tests (`npm test`): its TypeScript types against the WIT
    // and by tsc over a TypeScript sink, then the row reader and that sink in
    // Node (bin/test.mjs).
    let unit = Command::new("npm")
        .args(["test", "--silent"])
        .current_dir(root.join("sdk/js"))
        .output()
        .unwrap();
    let text = out_text(&unit.stdout);
    assert!(
        unit.status.success()
            && text.contains("sdk/js/types matches wit/plugin.wit")
            && text.contains("# pass 8")
            && text.contains("# fail 0"),
        "{text}{}",
        out_text(&unit.stderr)
    );
    let test = sluice(&["plugin", "test", wasm.to_str().unwrap(), "--rows", "3000"]);
    assert!(
        out_text(&test.stdout).contains("all 7 checks passed")
            // The JS build declares the memory its engine needs.
            && out_text(&test.stdout).contains("memory quota 128 MiB (declared by the plugin)"),
        "{}{}",
        out_text(&test.stdout),
        out_text(&test.stderr)
    );

    let config = quickstart_in(dir.path(), |t| {
        t.remove("filters");
        t["source"]
            .as_table_mut()
            .unwrap()
            .insert("total-rows".into(), (TOTAL as i64).into());
        let sink: toml::Table =
            toml::from_str(&format!("plugin = {:?}\n", wasm.to_str().unwrap())).unwrap();
        t.insert("sink".into(), sink.into());
    });
    let out = sluice(&["run", "--quiet", "--config", config.to_str().unwrap()]);
    let stdout = out_text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", out_text(&out.stderr));
    let line = stdout
        .lines()
        .find(|l| l.starts_with("sink "))
        .unwrap_or_else(|| panic!("no sink line in {stdout}"));
    let counter = |name: &str| -> u64 {
        line.split([' ', ','])
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    // What the generator made, counted as the sink counts it: JavaScript
    // strings (text, decimal, JSON) by UTF-16 units.
    let (mut values, mut chars) = (0u64, 0u64);
    let mut g = DatagenSource::new(DatagenConfig {
        seed: 42,
        total_rows: TOTAL,
        rate: 0,
        ..Default::default()
    })
    .unwrap();
    while let Some(txn) = g.next_transaction() {
        for (table, row) in txn.rows() {
            for image in [row.before(), row.after()].into_iter().flatten() {
                for (col, v) in table.columns.iter().zip(&image) {
                    use sluice_core::ColumnType as C;
                    match v {
                        sluice_core::Value::Null => continue,
                        sluice_core::Value::Bytes(b)
                            if matches!(col.ty, C::Text | C::Decimal | C::Json) =>
                        {
                            chars += String::from_utf8_lossy(b).encode_utf16().count() as u64;
                        }
                        _ => {}
                    }
                    values += 1;
                }
            }
        }
    }
    assert_eq!(counter("rows"), TOTAL, "{line}");
    assert_eq!(counter("values"), values, "{line}");
    assert_eq!(counter("chars"), chars, "{line}");
    assert!(line.contains("stopped 0"), "{line}");
}
