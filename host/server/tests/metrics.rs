//! `/metrics` of a running server, read by the Prometheus project's own Python
//! client parser (`prometheus_client`, installed with pip when missing), follows
//! Prometheus conventions: it parses; values are finite; no label is empty;
//! `_total` is on counters only; no two families share a name; timestamps are in
//! seconds; counters never go backwards, not even across processor restarts;
//! plugin series outlive their processor and go with their changefeed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;
use common::server::Server;

/// Parses the text format with `prometheus_client.parser` and prints every family
/// as JSON (values as Python's `repr`, so that NaN and infinities survive).
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "samples": [
        {"name": s.name, "labels": s.labels, "value": repr(float(s.value))}
        for s in f.samples]})
print(json.dumps(out))
"#;

/// One sample as the parser read it.
#[derive(Debug, Clone)]
struct Sample {
    family: String,
    kind: String,
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }

    /// The sample's name and labels, as one key.
    fn series(&self) -> String {
        format!("{}{:?}", self.name, self.labels)
    }
}

/// Python 3 with `prometheus_client`, installing it with pip if it is missing.
fn python() -> &'static str {
    let has = || {
        Command::new("python3")
            .args(["-c", "import prometheus_client.parser"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has() {
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "prometheus_client",
            ])
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success() && has(),
            "this test needs python3 with prometheus_client (pip install prometheus_client): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    "python3"
}

/// Every sample of `text`, checked against the conventions on the way.
fn parse(text: &str) -> Vec<Sample> {
    let mut child = Command::new(python())
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client cannot parse /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names = BTreeSet::new();
    let mut series = BTreeSet::new();
    let mut samples = Vec::new();
    for f in families.as_array().unwrap() {
        let family = f["name"].as_str().unwrap().to_string();
        let kind = f["type"].as_str().unwrap().to_string();
        assert_ne!(kind, "unknown", "{family} has no TYPE");
        // The parser names a counter `x_total` the family `x`: a gauge `x` beside
        // it is the same family twice.
        assert!(names.insert(family.clone()), "two families named {family}");
        for s in f["samples"].as_array().unwrap() {
            let name = s["name"].as_str().unwrap().to_string();
            let value: f64 = s["value"].as_str().unwrap().parse().unwrap();
            let labels: BTreeMap<String, String> =
                serde_json::from_value(s["labels"].clone()).unwrap();
            let sample = Sample {
                family: family.clone(),
                kind: kind.clone(),
                name,
                labels,
                value,
            };
            assert!(value.is_finite(), "not finite: {sample:?}");
            assert!(
                sample.labels.values().all(|v| !v.is_empty()),
                "empty label: {sample:?}"
            );
            assert_eq!(
                sample.name.ends_with("_total"),
                kind == "counter",
                "`_total` on counters only: {sample:?}"
            );
            if kind == "counter" || kind == "histogram" {
                assert!(value >= 0.0, "{sample:?}");
            }
            assert!(series.insert(sample.series()), "twice: {sample:?}");
            samples.push(sample);
        }
    }
    samples
}

fn scrape(server: &Server) -> Vec<Sample> {
    let (code, text) = server.http_get("/metrics");
    assert_eq!(code, 200, "{text}");
    parse(&text)
}

/// The value of the one sample named `name` of `changefeed` whose labels include
/// `labels`.
fn value(samples: &[Sample], name: &str, changefeed: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && s.label("changefeed") == changefeed
                && labels.iter().all(|(k, v)| s.label(k) == *v)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} {changefeed} {labels:?}: {found:?}"
    );
    found[0].value
}

fn feed(server: &Server, dir: &Path, name: &str, text: &str) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    server.json(&[
        "changefeed",
        "create",
        "-c",
        name,
        "--config",
        path.to_str().unwrap(),
    ]);
}

#[test]
fn metrics_parse_with_the_prometheus_parser_and_follow_its_conventions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("server"),
        &["--backoff-initial-ms", "100", "--backoff-max-ms", "200"],
    );
    server.upload("sink-blackhole", "sink");
    server.upload("misbehave", "sink");
    let blackhole = |total: u64, rate: u64| {
        format!(
            "[source]\ntype = \"datagen\"\ntotal-rows = {total}\nrate = {rate}\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n"
        )
    };
    // Ends: its processor is gone, its plugin series must stay.
    feed(&server, dir.path(), "done", &blackhole(500, 0));
    // Runs until removed.
    feed(&server, dir.path(), "gone", &blackhole(0, 1_000));
    // Reports good and bad plugin metrics, then fails and restarts, again and again.
    feed(
        &server,
        dir.path(),
        "flaky",
        "[source]\ntype = \"datagen\"\ntotal-rows = 500\n\n[sink]\nplugin = \"misbehave@0.1.0\"\nconfig = { mode = \"metrics\" }\n\n[pipeline]\nmax-retries = 0\n",
    );

    // More errors than the five records a changefeed keeps.
    let over = sluice_owner::MAX_RECORDS as f64 + 2.0;
    let mut scrapes = Vec::new();
    server.wait_for(
        "flaky to record errors and done to finish",
        Duration::from_secs(60),
        || {
            let samples = scrape(&server);
            let errors = value(&samples, "sluice_changefeed_errors_total", "flaky", &[]);
            let finished = value(
                &samples,
                "sluice_changefeed_state",
                "done",
                &[("state", "finished")],
            );
            scrapes.push(samples);
            errors >= over && finished == 1.0
        },
    );
    server.json(&["changefeed", "remove", "-c", "gone"]);
    std::thread::sleep(Duration::from_millis(300));
    scrapes.push(scrape(&server));
    let last = scrapes.last().unwrap().clone();

    // Counters never go backwards between scrapes, across the processor restarts
    // of `flaky` included.
    for pair in scrapes.windows(2) {
        let before: BTreeMap<String, &Sample> = pair[0]
            .iter()
            .filter(|s| s.kind == "counter" || s.name.ends_with("_count"))
            .map(|s| (s.series(), s))
            .collect();
        for s in &pair[1] {
            if let Some(b) = before.get(&s.series()) {
                assert!(s.value >= b.value, "went backwards: {b:?} -> {s:?}");
            }
        }
    }

    // The families, each with a sane value.
    let families: BTreeSet<&str> = last.iter().map(|s| s.family.as_str()).collect();
    for family in [
        "sluice_up",
        "sluice_changefeed_checkpoint_timestamp_seconds",
        "sluice_changefeed_resolved_timestamp_seconds",
        "sluice_changefeed_checkpoint_lag_seconds",
        "sluice_changefeed_resolved_lag_seconds",
        "sluice_changefeed_epoch",
        "sluice_changefeed_state",
        "sluice_changefeed_rows_read",
        "sluice_changefeed_rows_written",
        "sluice_changefeed_bytes_written",
        "sluice_changefeed_retries",
        "sluice_changefeed_errors",
        "sluice_plugin_memory_peak_bytes",
        "sluice_plugin_traps",
        "sluice_plugin_instantiations",
        "sluice_plugin_counter",
        "sluice_plugin_gauge",
        "sluice_plugin_call_duration_seconds",
    ] {
        assert!(families.contains(family), "no {family}: {families:?}");
    }
    let up = last.iter().find(|s| s.name == "sluice_up").unwrap();
    assert_eq!(up.value, 1.0);
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for ts in ["checkpoint", "resolved"] {
        let name = format!("sluice_changefeed_{ts}_timestamp_seconds");
        let t = value(&last, &name, "done", &[]);
        // Seconds since the Unix epoch (after 2001, not in the far future): not
        // milliseconds.
        assert!(t > 1e9 && t < now_s + 86_400.0 * 366.0, "{name} = {t}");
        let lag = value(
            &last,
            &format!("sluice_changefeed_{ts}_lag_seconds"),
            "done",
            &[],
        );
        assert!(lag >= 0.0, "{lag}");
    }
    let total = |name: &str, changefeed: &str| value(&last, name, changefeed, &[]);
    assert_eq!(total("sluice_changefeed_rows_written_total", "done"), 500.0);
    assert_eq!(total("sluice_changefeed_errors_total", "done"), 0.0);
    assert!(total("sluice_changefeed_errors_total", "flaky") >= over);

    // The finished changefeed's processor is gone; its plugin's series are not.
    let sink = [("role", "sink"), ("plugin", "sink-blackhole@0.1.0")];
    let rows = [sink[0], sink[1], ("name", "rows")];
    assert_eq!(
        value(&last, "sluice_plugin_counter_total", "done", &rows),
        500.0
    );
    assert!(
        value(
            &last,
            "sluice_plugin_call_duration_seconds_count",
            "done",
            &sink
        ) > 0.0
    );

    // `flaky` ran under several processors; its plugin counters carried on.
    let sink = [("role", "sink"), ("plugin", "misbehave@0.1.0")];
    let writes = [sink[0], sink[1], ("name", "writes")];
    assert!(
        value(&last, "sluice_plugin_instantiations_total", "flaky", &sink) >= over,
        "one instance per processor, counted across processors"
    );
    assert!(value(&last, "sluice_plugin_counter_total", "flaky", &writes) >= over);
    // Its gauge kept the good value; NaN, infinities and the empty name were refused.
    let depth = [sink[0], sink[1], ("name", "depth")];
    assert_eq!(value(&last, "sluice_plugin_gauge", "flaky", &depth), 2.5);
    let reported: BTreeSet<&str> = last
        .iter()
        .filter(|s| s.label("changefeed") == "flaky" && s.family.starts_with("sluice_plugin_"))
        .filter_map(|s| s.labels.get("name").map(String::as_str))
        .collect();
    assert_eq!(reported, BTreeSet::from(["depth", "writes"]));

    // A removed changefeed's series are gone; it had some before.
    assert!(scrapes[0].iter().any(|s| s.label("changefeed") == "gone"));
    let left: Vec<&Sample> = last
        .iter()
        .filter(|s| s.label("changefeed") == "gone")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    server.stop();
}
