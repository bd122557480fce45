//! The plugin compliance harness: the behaviour every sink and every filter must
//! show, run against every first-party plugin through the real runtime.
//!
//! Sinks: invalid options are a typed `config` error; a flush is safe to call
//! again (it changes nothing); rows delivered again flagged replay after a restart
//! come out exactly as the first time; after an error the sink can be closed and
//! used again. Filters: invalid options are a typed `config` error; the same input
//! gives the same output; the replay flag survives the transform.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value as Json, json};
use sluice_core::{Batch, CommitTs, FLAG_REPLAY, Filter, PluginError, Sink, TableSchema};
use sluice_runtime::{
    PluginKind, PluginRuntime, PluginSettings, RuntimeConfig, WasmFilter, WasmSink,
};
use sluice_tests::{batch_of, plugin_path, transactions};

fn runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig::default()).unwrap()
}

/// Every table of the data generator, inserts, updates and deletes.
fn sample() -> (Vec<Arc<TableSchema>>, Batch) {
    batch_of(&transactions(11, 300))
}

fn last_ts(batch: &Batch) -> CommitTs {
    batch
        .tables
        .iter()
        .flat_map(|t| t.commit_ts.iter().copied())
        .max()
        .map(CommitTs::new)
        .unwrap()
}

/// A first-party sink and how to read what it wrote, as canonical lines (without
/// what legitimately differs between deliveries: the replay flag and the time
/// the line was produced), sorted.
struct SinkCase {
    name: &'static str,
    config: Json,
    data_dir: bool,
    output: fn(&Path, &WasmSink) -> Vec<String>,
}

fn sink_file_lines(dir: &Path, _: &WasmSink) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for line in text.lines() {
            let mut v: Json = serde_json::from_str(line).unwrap();
            let obj = v.as_object_mut().unwrap();
            obj.remove("ts");
            if let Some(ext) = obj.get_mut("_sluice").and_then(Json::as_object_mut) {
                ext.remove("replay");
            }
            lines.push(v.to_string());
        }
    }
    lines.sort();
    lines
}

fn blackhole_counts(_: &Path, sink: &WasmSink) -> Vec<String> {
    sink.stats()
        .counters()
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}

fn sink_cases() -> Vec<SinkCase> {
    vec![
        SinkCase {
            name: "sink-file",
            config: json!({ "enable-sluice-extension": true }),
            data_dir: true,
            output: sink_file_lines,
        },
        SinkCase {
            name: "sink-blackhole",
            config: json!({}),
            data_dir: false,
            output: blackhole_counts,
        },
    ]
}

fn sink(rt: &PluginRuntime, case: &SinkCase, dir: &Path, config: &Json) -> WasmSink {
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path(case.name))
        .unwrap();
    let mut settings = PluginSettings::new(case.name, config.to_string());
    if case.data_dir {
        settings.capabilities.data_dir = Some(dir.to_path_buf());
    }
    WasmSink::new(component, settings).unwrap()
}

#[tokio::test]
async fn every_sink_reports_invalid_options_as_a_config_error() {
    let rt = runtime();
    for case in sink_cases() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = case.config.clone();
        bad["no-such-option"] = json!(1);
        let err = sink(&rt, &case, dir.path(), &bad)
            .validate_config()
            .await
            .unwrap_err();
        assert!(
            matches!(err, PluginError::Config(_)),
            "{}: {err:?}",
            case.name
        );
    }
}

#[tokio::test]
async fn every_sink_flushes_safely_twice_and_replays_exactly() {
    let rt = runtime();
    for case in sink_cases() {
        let dir = tempfile::tempdir().unwrap();
        let (schemas, batch) = sample();
        let ts = last_ts(&batch);

        let mut first = sink(&rt, &case, dir.path(), &case.config);
        first.open().await.unwrap();
        first.write(&schemas, &mut batch.clone()).await.unwrap();
        first.flush(ts).await.unwrap();
        let once = (case.output)(dir.path(), &first);
        assert!(!once.is_empty(), "{}: no output", case.name);
        first.flush(ts).await.unwrap();
        assert_eq!(
            (case.output)(dir.path(), &first),
            once,
            "{}: a second flush changed the output",
            case.name
        );
        first.close().await.unwrap();

        // A restart: the same rows again, flagged replay, into a new instance.
        let mut again =
            sink(&rt, &case, dir.path(), &case.config).with_stats(first.stats().clone());
        let mut replay = batch.clone();
        replay.mark_replay();
        again.open().await.unwrap();
        again.write(&schemas, &mut replay).await.unwrap();
        again.flush(ts).await.unwrap();
        let twice = (case.output)(dir.path(), &again);
        if case.data_dir {
            // Every line twice, identical but for the replay flag.
            let mut doubled: Vec<String> =
                once.iter().flat_map(|l| [l.clone(), l.clone()]).collect();
            doubled.sort();
            assert_eq!(twice, doubled, "{}: replayed rows differ", case.name);
        } else {
            let rows = |out: &[String]| -> u64 {
                out.iter()
                    .find_map(|l| l.strip_prefix("rows=").and_then(|n| n.parse().ok()))
                    .unwrap()
            };
            assert_eq!(rows(&twice), 2 * rows(&once), "{}", case.name);
        }
    }
}

#[tokio::test]
async fn every_sink_can_be_closed_after_an_error_and_used_again() {
    let rt = runtime();
    for case in sink_cases() {
        let dir = tempfile::tempdir().unwrap();
        let (schemas, batch) = sample();
        // Options that fail at open.
        let mut bad = case.config.clone();
        bad["no-such-option"] = json!(1);
        let mut failing = sink(&rt, &case, dir.path(), &bad);
        assert!(failing.open().await.is_err(), "{}", case.name);
        failing.close().await.unwrap();
        // The same plugin with good options works afterwards.
        let mut good = sink(&rt, &case, dir.path(), &case.config);
        good.open().await.unwrap();
        good.write(&schemas, &mut batch.clone()).await.unwrap();
        good.flush(last_ts(&batch)).await.unwrap();
        good.close().await.unwrap();
    }
}

/// Every first-party filter, with options that make it change rows.
fn filter_cases() -> Vec<(&'static str, Json)> {
    vec![
        (
            "filter-mask",
            json!({ "columns": ["email", "shop.users.name"], "mode": "hash", "salt": "s" }),
        ),
        (
            "filter-events",
            json!({ "rules": [{ "matcher": ["shop.orders"], "ignore-event": ["delete"] }] }),
        ),
    ]
}

fn filter(rt: &PluginRuntime, name: &str, config: &Json) -> WasmFilter {
    let component = rt
        .load_file(PluginKind::Filter, &plugin_path(name))
        .unwrap();
    WasmFilter::new(component, PluginSettings::new(name, config.to_string())).unwrap()
}

#[tokio::test]
async fn every_filter_reports_invalid_options_as_a_config_error() {
    let rt = runtime();
    for (name, config) in filter_cases() {
        let mut bad = config.clone();
        bad["no-such-option"] = json!(1);
        let err = filter(&rt, name, &bad).validate_config().await.unwrap_err();
        assert!(matches!(err, PluginError::Config(_)), "{name}: {err:?}");
    }
}

#[tokio::test]
async fn every_filter_is_deterministic_and_keeps_the_replay_flag() {
    let rt = runtime();
    for (name, config) in filter_cases() {
        let (schemas, batch) = sample();
        let mut f = filter(&rt, name, &config);
        f.open().await.unwrap();
        let mut a = batch.clone();
        f.transform(&schemas, &mut a).await.unwrap();
        let mut b = batch.clone();
        f.transform(&schemas, &mut b).await.unwrap();
        assert_eq!(
            a.tables, b.tables,
            "{name}: the same input gave other output"
        );
        assert!(a.row_count() > 0, "{name}: dropped everything");

        let mut replay = batch.clone();
        replay.mark_replay();
        f.transform(&schemas, &mut replay).await.unwrap();
        assert_eq!(replay.row_count(), a.row_count(), "{name}");
        for t in &replay.tables {
            assert!(
                t.flags.iter().all(|f| f & FLAG_REPLAY != 0),
                "{name}: a row lost its replay flag in table {}",
                t.table_id
            );
        }
    }
}

/// The library `sluice plugin test` runs passes every first-party plugin.
#[tokio::test]
async fn the_compliance_library_passes_every_first_party_plugin() {
    let rt = runtime();
    let options = sluice_compliance::Options {
        rows: 2_000,
        batch_rows: 300,
        ..Default::default()
    };
    for case in sink_cases() {
        let dir = tempfile::tempdir().unwrap();
        let component = rt
            .load_file(PluginKind::Sink, &plugin_path(case.name))
            .unwrap();
        let mut settings = PluginSettings::new(case.name, case.config.to_string());
        if case.data_dir {
            settings.capabilities.data_dir = Some(dir.path().to_path_buf());
        }
        let report = sluice_compliance::check_sink(&component, &settings, &options).await;
        assert!(report.passed(), "{}: {:#?}", case.name, report.checks);
        assert_eq!(report.checks.len(), 7, "{}", case.name);
        assert!(report.rows >= 2_000, "{}", case.name);
    }
    for (name, config) in filter_cases() {
        let component = rt
            .load_file(PluginKind::Filter, &plugin_path(name))
            .unwrap();
        let settings = PluginSettings::new(name, config.to_string());
        let report = sluice_compliance::check_filter(&component, &settings, &options).await;
        assert!(report.passed(), "{name}: {:#?}", report.checks);
        assert_eq!(report.checks.len(), 4, "{name}");
    }
    // A sink that writes without its data dir fails the batch check, with the reason.
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-file"))
        .unwrap();
    let settings = PluginSettings::new("sink-file", "{}");
    let report = sluice_compliance::check_sink(&component, &settings, &options).await;
    assert!(!report.passed());
    let failed = report.checks.iter().find(|c| c.outcome.is_err()).unwrap();
    assert!(
        failed.outcome.as_ref().unwrap_err().contains("/data"),
        "{failed:?}"
    );
}
