//! The one schema in both modes: the same text gives the same typed value, each
//! mode refuses what it does not take, and every number is checked by name.

use std::path::{Path, PathBuf};

use crate::*;

/// A file `sluice run` takes.
const RUN: &str = r#"
[changefeed]
id = "demo"

[source]
type = "datagen"
total-rows = 100

[[filters]]
plugin = "filter-mask"
config = { columns = ["email"] }

[sink]
plugin = "sink-file"
[sink.config]
dir = "out"
[sink.limits]
memory = "32MiB"
[sink.capabilities]
data-dir = "out/demo"
"#;

/// A file a server takes.
const SERVER: &str = r#"
[source]
type = "datagen"
total-rows = 100

[[filters]]
plugin = "filter-mask@0.1.0"
config = { columns = ["email"] }

[sink]
plugin = "sink-file@0.1.0"
[sink.config]
format = "csv"
[sink.limits]
memory = "32MiB"
[sink.capabilities]
data-dir = true

[pipeline]
max-batch-rows = 10
"#;

fn run_err(text: &str) -> String {
    RunConfig::parse(text).unwrap_err().to_string()
}

fn server_err(text: &str) -> String {
    ChangefeedConfig::parse(text).unwrap_err().to_string()
}

#[test]
fn parses_a_complete_changefeed_for_sluice_run() {
    let run = RunConfig::parse(RUN).unwrap();
    assert_eq!((run.id.as_str(), run.resume), ("demo", false));
    assert_eq!(run.plugin_dir, PathBuf::from("target/plugins"));
    assert_eq!(run.data_dir, PathBuf::from(".sluice"));
    let feed = &run.feed;
    assert_eq!(feed.sink.limits.memory, Some(ByteSize(32 << 20)));
    assert_eq!(feed.sink.config_json(), r#"{"dir":"out"}"#);
    assert_eq!(
        feed.sink.capabilities.data_dir,
        DataDir::At(PathBuf::from("out/demo"))
    );
    assert_eq!(
        feed.sink.resolve(Path::new("p")),
        PathBuf::from("p/sink-file.wasm")
    );
    assert_eq!(feed.filters.len(), 1);
    assert_eq!(feed.filters[0].name(), "filter-mask");
    let SourceConfig::Datagen(d) = &feed.source else {
        panic!("a datagen source")
    };
    assert_eq!(d.total_rows, 100);
    assert_eq!(feed.source.total_rows(), Some(100));
    assert_eq!(feed.pipeline, PipelineConfig::default());
}

#[test]
fn the_same_text_gives_the_same_typed_value_in_both_modes() {
    // The shared sections, written once; each mode adds what only it takes.
    let shared = SERVER
        .replace("filter-mask@0.1.0", "PLUGIN-F")
        .replace("sink-file@0.1.0", "PLUGIN-S")
        .replace("data-dir = true\n", "");
    let server = ChangefeedConfig::parse(
        &shared
            .replace("PLUGIN-F", "filter-mask@0.1.0")
            .replace("PLUGIN-S", "sink-file@0.1.0"),
    )
    .unwrap();
    let run = RunConfig::parse(&format!(
        "[changefeed]\nid = \"x\"\n{}",
        shared
            .replace("PLUGIN-F", "filter-mask")
            .replace("PLUGIN-S", "target/plugins/sink-file.wasm")
    ))
    .unwrap();
    assert_eq!(server.source, run.feed.source);
    assert_eq!(server.pipeline, run.feed.pipeline);
    assert_eq!(server.pipeline.max_batch_rows, 10);
    for ((_, s), (_, r)) in server.plugins().zip(run.feed.plugins()) {
        assert_eq!(s.config, r.config);
        assert_eq!(s.limits, r.limits);
        assert_eq!(s.capabilities, r.capabilities);
    }
    assert_eq!(server.sink.plugin.to_string(), "sink-file@0.1.0");
    assert_eq!(run.feed.sink.name(), "sink-file");
    // Only the mode-specific parts differ: the grant of a data dir.
    let server = ChangefeedConfig::parse(SERVER).unwrap();
    assert_eq!(server.sink.capabilities.data_dir, DataDir::HostChosen);
}

#[test]
fn the_stored_form_round_trips_with_every_default_written() {
    let config = ChangefeedConfig::parse(SERVER).unwrap();
    let json = serde_json::to_value(&config).unwrap();
    assert_eq!(json["source"]["type"], "datagen");
    assert_eq!(json["source"]["seed"], 42);
    assert_eq!(json["pipeline"]["max-batch-rows"], 10);
    assert_eq!(json["pipeline"]["flush-interval-ms"], 1000);
    assert_eq!(json["sink"]["plugin"], "sink-file@0.1.0");
    assert_eq!(json["sink"]["limits"]["memory"], 32 << 20);
    assert_eq!(json["sink"]["capabilities"]["data-dir"], true);
    let back: ChangefeedConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back, config);
    back.validate(Mode::Server).unwrap();
}

#[test]
fn the_filter_section_reads_the_same_in_both_modes_and_is_stored() {
    let section = r#"
[filter]
rules = ['*.*', '!test.*']
ignore-txn-start-ts = [5]
[[filter.event-filters]]
matcher = ["shop.orders"]
ignore-event = ["delete", "truncate table"]
"#;
    let server = ChangefeedConfig::parse(&format!("{SERVER}{section}")).unwrap();
    let run = RunConfig::parse(&format!("{RUN}{section}")).unwrap();
    assert_eq!(server.filter, run.feed.filter);
    assert_eq!(server.filter.rules, ["*.*", "!test.*"]);
    assert_eq!(server.filter.ignore_txn_start_ts, [5]);
    assert_eq!(
        server.filter.event_filters,
        [EventFilterRule {
            matcher: vec!["shop.orders".into()],
            ignore_event: vec!["delete".into(), "truncate table".into()],
        }]
    );
    let json = serde_json::to_value(&server).unwrap();
    assert_eq!(json["filter"]["rules"][1], "!test.*");
    assert_eq!(
        json["filter"]["event-filters"][0]["ignore-event"][1],
        "truncate table"
    );
    let back: ChangefeedConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back, server);
    // Without the section, and in a config stored before it existed: the default.
    assert_eq!(
        RunConfig::parse(RUN).unwrap().feed.filter,
        FilterConfig::default()
    );
    let mut json = serde_json::to_value(ChangefeedConfig::parse(SERVER).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("filter");
    let old: ChangefeedConfig = serde_json::from_value(json).unwrap();
    assert_eq!(old.filter, FilterConfig::default());
}

#[test]
fn each_mode_refuses_what_only_the_other_takes() {
    let cases = [
        (
            server_err(&format!("[changefeed]\nid = \"x\"\n{SERVER}")),
            "remove the [changefeed] section",
        ),
        (
            server_err(&format!("plugin-dir = \"p\"\n{SERVER}")),
            "remove plugin-dir",
        ),
        (
            server_err(&SERVER.replace("sink-file@0.1.0", "sink-file")),
            "sink.plugin: plugin `sink-file` has no version",
        ),
        (
            server_err(&SERVER.replace("sink-file@0.1.0", "out/sink-file.wasm")),
            "sink.plugin `out/sink-file.wasm` is a path",
        ),
        (
            server_err(&SERVER.replace("data-dir = true", "data-dir = \"/tmp\"")),
            "sink.capabilities.data-dir is the path /tmp; the server chooses the directory",
        ),
        (
            run_err(&RUN.replace("data-dir = \"out/demo\"", "data-dir = true")),
            "sink.capabilities.data-dir is true; sluice run needs the directory's path",
        ),
        (
            run_err(&RUN.replace("\"sink-file\"", "\"sink-file@0.1.0\"")),
            "sink.plugin `sink-file@0.1.0` names an uploaded plugin of a server",
        ),
        (
            run_err(&RUN.replace("[changefeed]\nid = \"demo\"\n", "")),
            "the [changefeed] section is missing",
        ),
    ];
    for (err, want) in cases {
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
}

#[test]
fn unknown_keys_are_rejected_with_their_name_and_line() {
    let text = RUN.replace("total-rows = 100", "total-rows = 100\ntotal-rowz = 5");
    let err = run_err(&text);
    assert!(err.contains("unknown field `total-rowz`"), "{err}");
    assert!(err.contains("line 5") && err.contains("[source]"), "{err}");
    let text = RUN.replace("memory = \"32MiB\"", "memory = \"32MB\"");
    assert!(run_err(&text).contains("unknown size unit `MB`"));
    let err = server_err(&SERVER.replace("[pipeline]", "[pipelin]"));
    assert!(
        err.starts_with("line 19, column ") && err.contains("unknown field `pipelin`"),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn semantic_errors_name_the_key() {
    let cases = [
        (
            run_err(&RUN.replace("id = \"demo\"", "id = \"-bad id\"")),
            "changefeed.id: changefeed name `-bad id` is invalid",
        ),
        (
            run_err(&RUN.replace("data-dir = \"out/demo\"", "tcp = [\"localhost\"]")),
            "sink.capabilities.tcp: `localhost` is not an ip:port pair",
        ),
        (
            run_err(&RUN.replace("type = \"datagen\"", "type = \"binlog\"")),
            "source.type `binlog` is not a source",
        ),
        (
            run_err(&RUN.replace("\"filter-mask\"", "\"\"")),
            "filters[0].plugin is empty",
        ),
        (
            server_err(&SERVER.replace("data-dir = true", "tcp = [\"db:5432\"]")),
            "sink.capabilities.tcp: `db:5432` is not an ip:port pair",
        ),
        (
            server_err(&SERVER.replace("data-dir = true", "http = [\"https://api.example\"]")),
            "sink.capabilities.http: `https://api.example` is not a host: write the host without a scheme",
        ),
        (
            run_err(&RUN.replace("total-rows = 100", "tables = [\"nope\"]")),
            "source.tables: unknown table `nope`",
        ),
        (
            server_err(&format!("{SERVER}\n[filter]\nrules = ['*.*', 'shop']")),
            "filter.rules[1]: `shop` is not a table pattern",
        ),
        (
            run_err(&format!(
                "{RUN}\n[[filter.event-filters]]\nmatcher = ['a.*']\nignore-event = ['upsert']"
            )),
            "filter.event-filters[0].ignore-event[0]: unknown event `upsert`",
        ),
    ];
    for (err, want) in cases {
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
}

#[test]
fn every_number_is_checked_against_its_range_at_validation() {
    let cases = [
        (
            SERVER.replace(
                "max-batch-rows = 10",
                "event-cache-count = 9223372036854775807",
            ),
            "pipeline.event-cache-count is 9223372036854775807; it must be between 1 and 1048576",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "max-batch-rows = 0"),
            "pipeline.max-batch-rows is 0; it must be between 1 and 65536",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "max-batch-rows = 4294967295"),
            "pipeline.max-batch-rows is 4294967295; it must be between 1 and 65536",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "max-batch-bytes = \"1GiB\""),
            "pipeline.max-batch-bytes is 1073741824 bytes",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "event-cache-bytes = 1"),
            "pipeline.event-cache-bytes is 1 bytes; it must be between 1MiB and 1GiB",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "max-retries = 4294967295"),
            "pipeline.max-retries is 4294967295; at most 1000",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "flush-interval-ms = 0"),
            "pipeline.flush-interval-ms must be at least 1",
        ),
        (
            SERVER.replace("max-batch-rows = 10", "fence-ahead-ms = 3600001"),
            "pipeline.fence-ahead-ms is 3600001; at most 3600000 (one hour)",
        ),
        (
            SERVER.replace(
                "total-rows = 100",
                "total-rows = 0\nmax-txn-rows = 4294967295",
            ),
            "source.max-txn-rows is 4294967295; it must be between 1 and 10000",
        ),
        (
            SERVER.replace(
                "total-rows = 100",
                "total-rows = 100\n[source.mix]\ninsert = 4294967295\nupdate = 1\ndelete = 1",
            ),
            "source.mix.insert is 4294967295",
        ),
        (
            SERVER.replace(
                "total-rows = 100",
                "total-rows = 100\nstart-millis = 70368744177660",
            ),
            "source.start-millis is 70368744177660",
        ),
        (
            SERVER.replace("total-rows = 100", "rate = 100000001"),
            "source.rate is 100000001 rows/s; at most 100000000",
        ),
        (
            SERVER.replace("memory = \"32MiB\"", "memory = \"1KiB\""),
            "sink.limits.memory is 1024 bytes; give a plugin at least 1MiB",
        ),
        (
            SERVER.replace("memory = \"32MiB\"", "memory = \"5GiB\""),
            "sink.limits.memory is 5368709120 bytes; at most 4GiB",
        ),
        (
            SERVER.replace("memory = \"32MiB\"", "call-timeout-ms = 0"),
            "sink.limits.call-timeout-ms is 0; it must be between 1 and 600000 ms",
        ),
        (
            SERVER.replace("memory = \"32MiB\"", "host-call-timeout-ms = 600001"),
            "sink.limits.host-call-timeout-ms is 600001; it must be between 1 and 600000 ms",
        ),
        (
            SERVER.replace("memory = \"32MiB\"", "max-resources = 15"),
            "sink.limits.max-resources is 15; it must be between 16 and 65536",
        ),
        (
            SERVER.replace(
                "data-dir = true",
                &format!("http = [{}]", vec!["\"h\""; 65].join(",")),
            ),
            "sink.capabilities.http lists 65 entries; at most 64",
        ),
        (
            SERVER.replace(
                "\n[sink]\n",
                &format!(
                    "{}\n[sink]\n",
                    "[[filters]]\nplugin = \"filter-mask@0.1.0\"\n".repeat(16)
                ),
            ),
            "the changefeed has 17 filters; at most 16",
        ),
        (
            SERVER.replace(
                "format = \"csv\"",
                &format!("format = \"{}\"", "c".repeat(70_000)),
            ),
            "bytes as JSON; at most 65536 (64KiB)",
        ),
        (
            format!("{SERVER}\n#{}", "x".repeat(128 << 10)),
            "bytes; at most 131072 (128KiB)",
        ),
    ];
    for (text, want) in cases {
        let err = server_err(&text);
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
}

#[test]
fn a_string_that_reads_like_a_section_is_a_string() {
    let text = SERVER.replace(
        "format = \"csv\"",
        "format = \"csv\"\nnote = \"[changefeed]\"",
    );
    let config = ChangefeedConfig::parse(&text).unwrap();
    assert_eq!(config.sink.config["note"].as_str(), Some("[changefeed]"));
}

#[test]
fn server_limits_refuse_and_clamp_by_key() {
    let limits = ServerLimits {
        max_call_timeout_ms: 1_000,
        max_host_call_timeout_ms: 60_000,
        max_resources: 4_096,
        max_tenant_instances: 8,
    };
    let config = ChangefeedConfig::parse(SERVER).unwrap();
    assert_eq!(
        limits.check(&config).unwrap_err(),
        "filters[0].limits.call-timeout-ms is 5000; this server allows at most 1000 \
         (--max-call-timeout-ms)"
    );
    let clamped = limits.clamp(config);
    limits.check(&clamped).unwrap();
    assert_eq!(clamped.sink.limits.call_timeout_ms, 1_000);
    assert_eq!(clamped.sink.limits.host_call_timeout_ms, 30_000);
}

proptest::proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,400}") {
        let _ = RunConfig::parse(&text);
        let _ = ChangefeedConfig::parse(&text);
    }

    #[test]
    fn parser_never_panics_on_mutated_configs(pos in 0usize..400, byte in proptest::num::u8::ANY) {
        for good in [RUN, SERVER] {
            let mut bytes = good.as_bytes().to_vec();
            let at = pos % bytes.len();
            bytes[at] = byte;
            if let Ok(text) = String::from_utf8(bytes) {
                let _ = RunConfig::parse(&text);
                if let Ok(config) = ChangefeedConfig::parse(&text) {
                    // What a server stores reads back the same.
                    let json = serde_json::to_string(&config).unwrap();
                    let back: ChangefeedConfig = serde_json::from_str(&json).unwrap();
                    proptest::prop_assert_eq!(back, config);
                }
            }
        }
    }
}

#[test]
fn consistent_replication_is_read_stored_and_range_checked_by_key() {
    let run = RUN.to_string()
        + "\n[consistent]\nlevel = \"eventual\"\nstorage = \"file:///var/lib/sluice/redo\"\nflush-interval = 500\nmax-log-size = \"8MiB\"\n";
    let config = RunConfig::parse(&run).unwrap();
    let c = &config.feed.consistent;
    assert!(c.enabled());
    assert_eq!(c.storage, "file:///var/lib/sluice/redo");
    assert_eq!(
        (
            c.flush_interval,
            c.meta_flush_interval,
            c.max_log_size.0,
            c.memory_percent
        ),
        (500, 200, 8 << 20, 50)
    );
    // Off by default, and then not written back out.
    let plain = ChangefeedConfig::parse(SERVER).unwrap();
    assert!(!plain.consistent.enabled());
    assert!(
        !serde_json::to_string(&plain)
            .unwrap()
            .contains("consistent")
    );
    // A server's changefeed keeps its log in the server's data dir.
    let server = SERVER.to_string() + "\n[consistent]\nlevel = \"eventual\"\n";
    let stored = ChangefeedConfig::parse(&server).unwrap();
    assert!(stored.consistent.enabled());
    let json = serde_json::to_string(&stored).unwrap();
    let back: ChangefeedConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, stored);

    let with = |body: &str| format!("{RUN}\n[consistent]\n{body}\n");
    let cases = [
        (
            with("level = \"eventual\""),
            "consistent.level = \"eventual\" needs consistent.storage",
        ),
        (
            with("level = \"eventual\"\nstorage = \"gs://bucket/redo\""),
            "a storage location is a file:// URI (file:///dir) or an s3:// URI",
        ),
        (
            with(
                "level = \"eventual\"\nstorage = \"s3://bucket/redo?endpoint=ftp://x&secret-access-key=HUSH\"",
            ),
            "endpoint \"ftp://x\" of an s3:// URI is an http:// or https:// URL",
        ),
        (
            with("level = \"eventual\"\nstorage = \"s3://bucket/redo?color=red\""),
            "an s3:// URI has no key \"color\"",
        ),
        (
            with("level = \"eventual\"\nstorage = \"file://redo\""),
            "`file://redo`: a file URI names an absolute directory",
        ),
        (
            with("level = \"eventual\"\nstorage = \"file:///a/../etc\""),
            "it may not contain `..`",
        ),
        (
            with("flush-interval = 49"),
            "consistent.flush-interval is 49 ms; it must be between 50 and 600000",
        ),
        (
            with("meta-flush-interval = 18446744073709551615"),
            "consistent.meta-flush-interval is 18446744073709551615 ms",
        ),
        (
            with("max-log-size = \"2GiB\""),
            "consistent.max-log-size is 2147483648 bytes; it must be between 1MiB and 1GiB",
        ),
        (
            with("memory-percent = 95"),
            "consistent.memory-percent is 95; it must be between 10 and 90",
        ),
        (
            format!(
                "{RUN}\n[pipeline]\nevent-cache-count = 63\n[consistent]\nlevel = \"eventual\"\nstorage = \"file:///tmp/redo\"\n"
            ),
            "pipeline.event-cache-count is 63; with consistent.level = \"eventual\" it must be at least 64",
        ),
        (with("level = \"strong\""), "unknown variant `strong`"),
        (with("compression = \"brotli\""), "unknown variant `brotli`"),
        (with("retention = \"forever\""), "unknown variant `forever`"),
        (
            with("flush-interval-ms = 100"),
            "unknown field `flush-interval-ms`",
        ),
    ];
    for (text, want) in cases {
        let err = run_err(&text);
        assert!(err.contains(want), "{want:?} not in {err:?}");
        assert!(!err.contains("HUSH"), "a secret in {err:?}");
    }
    let s3 = RunConfig::parse(&with(
        "level = \"eventual\"\nstorage = \"s3://bucket/dc1?endpoint=http://127.0.0.1:9000&region=eu-west-1\"",
    ))
    .unwrap();
    assert!(s3.feed.consistent.enabled());
    let err = server_err(&format!(
        "{SERVER}\n[consistent]\nlevel = \"eventual\"\nstorage = \"file:///etc\"\n"
    ));
    assert!(err.contains("remove consistent.storage"), "{err}");
}
