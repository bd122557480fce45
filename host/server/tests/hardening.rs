//! The server against an adversarial user: changefeed files with extreme and
//! mutated values, start and target ts anywhere in `u64`, requests that are not
//! what the API expects, uploads past the server's budget, a closed stdout. The
//! server never aborts; everything it accepts can be paused and removed; every
//! refusal is one documented line with the right code.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use sluice_api::v1 as pb;
use sluice_tests::plugin_path;

mod common;
use common::server::Server;

#[path = "hardening/auth.rs"]
mod auth;
#[path = "hardening/tls.rs"]
mod tls;

const BASE: &str = r#"
[source]
type = "datagen"
seed = 7
total-rows = 0
rate = 0
max-txn-rows = 4

[source.mix]
insert = 6
update = 3
delete = 1

[[filters]]
plugin = "filter-mask@0.1.0"
[filters.config]
columns = ["email"]

[sink]
plugin = "sink-blackhole@0.1.0"
[sink.limits]
memory = "64MiB"
call-timeout-ms = 5000
host-call-timeout-ms = 30000
max-resources = 1024

[pipeline]
max-batch-rows = 1024
max-batch-bytes = 4194304
flush-interval-ms = 100
event-cache-count = 10240
event-cache-bytes = 67108864
max-retries = 2
checkpoint-interval-ms = 500
fence-ahead-ms = 2000
"#;

fn upload_plugins(server: &Server) {
    server.upload("sink-blackhole", "sink");
    server.upload("filter-mask", "filter");
}

/// `BASE` with `key = value` in place of the key's line (the first line that
/// starts with `key =` after `[section]`).
fn with_value(section: &str, key: &str, value: &str) -> String {
    let mut out = String::new();
    let mut in_section = false;
    let mut done = false;
    for line in BASE.lines() {
        if line.starts_with('[') {
            in_section = line == section;
        }
        if in_section && !done && line.starts_with(&format!("{key} =")) {
            out.push_str(&format!("{key} = {value}\n"));
            done = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(done, "{section} {key} is not in BASE");
    out
}

/// The refusal categories a changefeed file may get: one line, a documented kind
/// (a mutated plugin name is a plugin that does not exist).
fn assert_refusal(err: &str, case: &str) {
    assert_eq!(err.lines().count(), 1, "{case}: one line: {err}");
    assert!(
        err.starts_with("error: invalid argument: ")
            || err.starts_with("error: too large: ")
            || err.starts_with("error: not found: "),
        "{case}: a refusal says what kind it is: {err}"
    );
    assert!(!err.contains("panicked"), "{case}: {err}");
}

/// Creates `text` as changefeed `name`. If it is accepted, it must run, pause and
/// be removed; if refused, the refusal is one clear line. Returns whether it was
/// accepted.
fn create_pause_remove(server: &Server, dir: &Path, name: &str, text: &str) -> bool {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let (ok, _, err) = server.cli(&[
        "changefeed",
        "create",
        "-c",
        name,
        "--config",
        file.to_str().unwrap(),
    ]);
    if !ok {
        assert_refusal(err.trim(), name);
        return false;
    }
    std::thread::sleep(Duration::from_millis(150));
    let (ok, out, err) = server.cli(&["--output", "json", "changefeed", "pause", "-c", name]);
    if ok {
        let paused: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(paused["state"], "stopped", "{name}: {paused}");
    } else {
        // Only a changefeed that already ended (finished, or failed) has nothing
        // to pause.
        assert!(err.starts_with("error: not allowed now: "), "{name}: {err}");
        let state = server.state(name)["state"].clone();
        assert!(
            state == "finished" || state == "failed",
            "{name}: {state}: {err}"
        );
    }
    let removed = server.json(&["changefeed", "remove", "-c", name]);
    assert_eq!(removed["state"], "removed", "{name}: {removed}");
    true
}

fn assert_alive(server: &mut Server, case: &str) {
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "{case}: the server exited; log:\n{}",
        server.stderr.lock().unwrap()
    );
    let status = server.json(&["status"]);
    assert_eq!(status["healthy"], true, "{case}: {status}");
}

#[test]
fn extreme_values_are_refused_or_run_and_can_be_paused_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"), &[]);
    upload_plugins(&server);
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();

    // Every numeric key at 0, 1, max-1 and max of the types a user reaches for
    // (TOML integers stop at i64::MAX).
    let keys = [
        ("[source]", "seed"),
        ("[source]", "total-rows"),
        ("[source]", "rate"),
        ("[source]", "max-txn-rows"),
        ("[source.mix]", "insert"),
        ("[source.mix]", "update"),
        ("[source.mix]", "delete"),
        ("[sink.limits]", "memory"),
        ("[sink.limits]", "call-timeout-ms"),
        ("[sink.limits]", "host-call-timeout-ms"),
        ("[sink.limits]", "max-resources"),
        ("[pipeline]", "max-batch-rows"),
        ("[pipeline]", "max-batch-bytes"),
        ("[pipeline]", "flush-interval-ms"),
        ("[pipeline]", "event-cache-count"),
        ("[pipeline]", "event-cache-bytes"),
        ("[pipeline]", "max-retries"),
        ("[pipeline]", "checkpoint-interval-ms"),
        ("[pipeline]", "fence-ahead-ms"),
    ];
    let values = [
        "0",
        "1",
        "4294967294",
        "4294967295",
        "9223372036854775806",
        "9223372036854775807",
        "-1",
    ];
    let mut n = 0;
    let mut accepted = 0;
    for (section, key) in keys {
        for value in values {
            n += 1;
            let case = format!("x{n}");
            let text = with_value(section, key, value);
            if create_pause_remove(&server, &files, &case, &text) {
                accepted += 1;
            }
            assert_alive(&mut server, &format!("{section} {key} = {value}"));
        }
    }
    // start-millis past what a commit ts holds, and at the largest accepted.
    for value in ["70368744177663", "32503680000000"] {
        n += 1;
        let text = BASE.replace(
            "max-txn-rows = 4",
            &format!("max-txn-rows = 4\nstart-millis = {value}"),
        );
        create_pause_remove(&server, &files, &format!("x{n}"), &text);
        assert_alive(&mut server, &format!("start-millis = {value}"));
    }
    // Huge arrays and long strings.
    let filter =
        "\n[[filters]]\nplugin = \"filter-mask@0.1.0\"\n[filters.config]\ncolumns = [\"email\"]\n";
    let many_filters = BASE.replace("\n[sink]", &format!("{}\n[sink]", filter.repeat(130)));
    let tables = format!("tables = [{}]", vec!["\"users\""; 5_000].join(","));
    let grants = format!(
        "[sink.capabilities]\ntcp = [{}]\n",
        (0..100)
            .map(|i| format!("\"127.0.0.1:{}\"", 1000 + i))
            .collect::<Vec<_>>()
            .join(",")
    );
    let long_schema = format!("schema = \"{}\"", "s".repeat(100_000));
    let big_config = BASE.replace(
        "columns = [\"email\"]",
        &format!("columns = [\"email\"]\nsalt = \"{}\"", "x".repeat(120_000)),
    );
    let huge = format!("{BASE}\n# {}\n", "x".repeat(2 << 20));
    let cases = [
        ("130 filters", many_filters),
        (
            "5000 tables",
            BASE.replace("max-txn-rows = 4", &format!("max-txn-rows = 4\n{tables}")),
        ),
        (
            "100 tcp grants",
            format!("{BASE}\n{grants}").replace("\n[pipeline]", "\n[pipeline]"),
        ),
        (
            "a long schema name",
            BASE.replace(
                "max-txn-rows = 4",
                &format!("max-txn-rows = 4\n{long_schema}"),
            ),
        ),
        ("a big plugin config", big_config),
        ("a 2 MiB file", huge),
        (
            "a string that reads like a section",
            BASE.replace(
                "columns = [\"email\"]",
                "columns = [\"email\"]\nsalt = \"[changefeed]\"",
            ),
        ),
    ];
    for (what, text) in cases {
        n += 1;
        let ok = create_pause_remove(&server, &files, &format!("x{n}"), &text);
        if what == "a string that reads like a section" {
            assert!(
                ok,
                "a string value `[changefeed]` is a value, not a section"
            );
        }
        if what == "130 filters" || what == "a 2 MiB file" || what == "100 tcp grants" {
            assert!(!ok, "{what} must be refused");
        }
        assert_alive(&mut server, what);
    }
    assert!(accepted > 20, "only {accepted} of the numeric cases ran");

    // Byte-level mutations of a valid file, drawn by proptest (seeded per run).
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::default();
    let strategy = (0usize..BASE.len(), proptest::num::u8::ANY);
    for _ in 0..16 {
        let (at, byte) = strategy.new_tree(&mut runner).unwrap().current();
        let mut bytes = BASE.as_bytes().to_vec();
        bytes[at] = byte;
        n += 1;
        if let Ok(text) = String::from_utf8(bytes) {
            create_pause_remove(&server, &files, &format!("m{n}"), &text);
        }
        assert_alive(&mut server, &format!("byte {byte} at {at}"));
    }

    // Nothing is left running, and the server stops cleanly.
    let list = server.json(&["changefeed", "list", "--all-tenants"]);
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    server.stop();
}

/// The current time as a TSO.
#[test]
fn a_changefeed_cannot_grant_its_plugin_the_servers_own_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"), &[]);
    upload_plugins(&server);
    let grpc = server.grpc.trim_start_matches("http://").to_string();
    let http = server.http.trim_start_matches("http://").to_string();
    let (grpc_port, http_port) = (
        grpc.rsplit_once(':').unwrap().1.to_string(),
        http.rsplit_once(':').unwrap().1.to_string(),
    );
    let grants = |section: &str| BASE.replace("\n[pipeline]", &format!("\n{section}\n[pipeline]"));
    let cases = [
        (
            format!("[sink.capabilities]\ntcp = [\"127.0.0.1:{grpc_port}\"]"),
            format!(
                "sink.capabilities.tcp[0]: `127.0.0.1:{grpc_port}` reaches this server's gRPC listener ({grpc})"
            ),
        ),
        (
            format!("[sink.capabilities]\nhttp = [\"localhost:{http_port}\"]"),
            format!(
                "sink.capabilities.http[0]: `localhost:{http_port}` reaches this server's HTTP listener ({http})"
            ),
        ),
        (
            "[sink.capabilities]\nhttp = [\"127.0.0.1\"]".to_string(),
            "a host without a port grants every port of it: name the port".to_string(),
        ),
    ];
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    for (n, (section, want)) in cases.iter().enumerate() {
        let file = files.join(format!("g{n}.toml"));
        std::fs::write(&file, grants(section)).unwrap();
        let (ok, _, err) = server.cli(&[
            "changefeed",
            "create",
            "-c",
            &format!("g{n}"),
            "--config",
            file.to_str().unwrap(),
        ]);
        assert!(!ok, "{section} was granted");
        assert!(err.starts_with("error: invalid argument: "), "{err}");
        assert!(err.contains(want.as_str()), "{err}\nwant: {want}");
    }
    // Another port of this machine is granted.
    let file = files.join("ok.toml");
    std::fs::write(
        &file,
        grants("[sink.capabilities]\ntcp = [\"127.0.0.1:9\"]"),
    )
    .unwrap();
    let (ok, _, err) = server.cli(&[
        "changefeed",
        "create",
        "-c",
        "ok",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_alive(&mut server, "grants");
}

fn now_tso() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    ms << 18
}

#[test]
fn any_start_and_target_ts_is_refused_or_handled() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"), &[]);
    upload_plugins(&server);
    let file = dir.path().join("feed.toml");
    std::fs::write(&file, BASE.replace("rate = 0", "rate = 2000")).unwrap();
    let f = file.to_str().unwrap();

    for start in [
        u64::MAX,
        u64::MAX - 1,
        (now_tso() >> 18).saturating_add(3_600_000) << 18,
    ] {
        let err = server.error(&[
            "changefeed",
            "create",
            "-c",
            "future",
            "--config",
            f,
            "--start-ts",
            &start.to_string(),
        ]);
        assert!(
            err.starts_with(&format!("error: invalid argument: start-ts {start} is "))
                && err.contains("in the future"),
            "{err}"
        );
    }
    let err = server.error(&[
        "changefeed",
        "create",
        "-c",
        "t",
        "--config",
        f,
        "--start-ts",
        "100",
        "--target-ts",
        "50",
    ]);
    assert!(
        err.contains("target ts 50 is not after start ts 100"),
        "{err}"
    );

    // "now" as a TSO, as TiCDC users give it: the generator starts after it at
    // once (no spinning through a year of generated time), with any target.
    let now = now_tso();
    server.json(&[
        "changefeed",
        "create",
        "-c",
        "now",
        "--config",
        f,
        "--start-ts",
        &now.to_string(),
        "--target-ts",
        &u64::MAX.to_string(),
    ]);
    server.wait_for(
        "the checkpoint to pass the start ts",
        Duration::from_secs(30),
        || {
            let q = server.state("now");
            q["status"]["checkpoint-ts"].as_u64().unwrap_or(0) > now
                && q["status"]["rows-written"].as_u64().unwrap_or(0) > 0
        },
    );
    server.json(&["changefeed", "pause", "-c", "now"]);
    let err = server.error(&[
        "changefeed",
        "resume",
        "-c",
        "now",
        "--overwrite-checkpoint-ts",
        &u64::MAX.to_string(),
    ]);
    assert!(
        err.contains("overwrite-checkpoint-ts 18446744073709551615 is"),
        "{err}"
    );
    server.json(&["changefeed", "remove", "-c", "now"]);
    assert_alive(&mut server, "start and target ts");
    server.stop();
}

/// `/api/v1/status` as JSON.
fn status(server: &Server) -> Json {
    let (code, body) = server.http_get("/api/v1/status");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_removed_changefeed_leaves_no_task_and_no_memory_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    upload_plugins(&server);
    let file = dir.path().join("feed.toml");
    std::fs::write(&file, BASE).unwrap();
    let f = file.to_str().unwrap();
    // Settle, then take the baseline.
    std::thread::sleep(Duration::from_millis(500));
    let before = status(&server);
    let tasks =
        |s: &Json| s["tokio-tasks"].as_u64().unwrap() + s["plugin-threads"].as_u64().unwrap();
    let tasks_before = tasks(&before);
    let rss_before = before["rss-bytes"].as_u64().unwrap();
    assert!(rss_before > 0, "{before}");

    // Endless generators, one starting "now" (a source that would otherwise have
    // spun through every transaction up to it).
    let now = now_tso().to_string();
    for (name, start) in [("a", "0"), ("b", now.as_str()), ("c", "0")] {
        server.json(&[
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            f,
            "--start-ts",
            start,
        ]);
    }
    std::thread::sleep(Duration::from_secs(2));
    let running = status(&server);
    assert!(tasks(&running) > tasks_before, "{running}");
    for name in ["a", "b", "c"] {
        server.json(&["changefeed", "remove", "-c", name]);
    }
    let start = Instant::now();
    let mut after = status(&server);
    while tasks(&after) > tasks_before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "tasks left behind: {before} -> {after}"
        );
        std::thread::sleep(Duration::from_millis(100));
        after = status(&server);
    }
    // No source keeps growing memory after removal.
    let rss_removed = after["rss-bytes"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let rss_later = status(&server)["rss-bytes"].as_u64().unwrap();
    assert!(
        rss_later < rss_removed + (32 << 20),
        "memory grows after remove: {rss_removed} -> {rss_later}"
    );
    assert!(
        rss_later < rss_before + (512 << 20),
        "memory: {rss_before} before, {rss_later} after"
    );
    server.stop();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A codec that sends raw bytes, to speak malformed protobuf to the server.
#[derive(Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

async fn raw_call(server: &Server, path: &'static str, body: Vec<u8>) -> tonic::Status {
    let channel = server.channel().await;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary::<Vec<u8>, Vec<u8>, _>(
        tonic::Request::new(body),
        http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .unwrap_err()
}

#[test]
fn api_errors_have_the_documented_form_and_code() {
    use pb::changefeed_service_client::ChangefeedServiceClient;
    use pb::plugin_service_client::PluginServiceClient;
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    upload_plugins(&server);
    let rt = runtime();
    rt.block_on(async {
        let channel = server.channel().await;
        let mut feeds = ChangefeedServiceClient::new(channel.clone());
        let mut plugins = PluginServiceClient::new(channel.clone());

        // A 10 MB changefeed file from a foreign client.
        let err = feeds
            .create_changefeed(pb::CreateChangefeedRequest {
                id: Some(pb::ChangefeedRef {
                    tenant: String::new(),
                    name: "big".into(),
                }),
                config_toml: "#".repeat(10 << 20),
                start_ts: 0,
                target_ts: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(
            err.message()
                .starts_with("the request is over the server's limit of 4194304 bytes"),
            "{err:?}"
        );
        // Just over the file limit, under the message limit: refused by size.
        let err = feeds
            .create_changefeed(pb::CreateChangefeedRequest {
                id: Some(pb::ChangefeedRef {
                    tenant: String::new(),
                    name: "big".into(),
                }),
                config_toml: format!("{BASE}#{}", "x".repeat(128 << 10)),
                start_ts: 0,
                target_ts: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("at most 131072 (128KiB)"), "{err:?}");

        // Invalid UTF-8 in a string field, and a truncated message.
        let mut bad_utf8 = pb::ChangefeedRef {
            tenant: "default".into(),
            name: "x".into(),
        }
        .encode_to_vec();
        let at = bad_utf8.len() - 1;
        bad_utf8[at] = 0xff;
        let good = pb::CreateChangefeedRequest {
            id: Some(pb::ChangefeedRef {
                tenant: String::new(),
                name: "x".into(),
            }),
            config_toml: BASE.into(),
            start_ts: 0,
            target_ts: 0,
        }
        .encode_to_vec();
        for (what, path, body) in [
            (
                "invalid UTF-8",
                "/sluice.v1.ChangefeedService/GetStatus",
                bad_utf8,
            ),
            (
                "a truncated message",
                "/sluice.v1.ChangefeedService/CreateChangefeed",
                good[..good.len() / 2].to_vec(),
            ),
        ] {
            let err = raw_call(&server, path, body).await;
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
            assert!(
                err.message()
                    .starts_with("the request is not a valid message"),
                "{what}: {err:?}"
            );
        }

        // Tenant names are checked the same everywhere.
        let err = feeds
            .list_changefeeds(pb::ListChangefeedsRequest {
                tenant: "no such/tenant".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        let err = plugins
            .list_plugins(pb::ListPluginsRequest {
                tenant: "no such/tenant".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

        // The standard health service.
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
        for service in ["", "sluice.v1.ChangefeedService", "sluice.v1.PluginService"] {
            let answer = health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(
                answer.status,
                tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
                "{service:?}"
            );
        }
    });

    // The same bytes under the same id as another kind: refused, not OK.
    let err = server.error(&[
        "plugin",
        "upload",
        plugin_path("sink-blackhole").to_str().unwrap(),
        "--id",
        "sink-blackhole@0.1.0",
        "--kind",
        "filter",
    ]);
    assert!(
        err.starts_with(
            "error: already exists: sink-blackhole@0.1.0 already exists as a sink plugin"
        ),
        "{err}"
    );
    // Plugin deadlines past the server's maximums.
    let slow = dir.path().join("slow.toml");
    std::fs::write(
        &slow,
        BASE.replace("call-timeout-ms = 5000", "call-timeout-ms = 120000"),
    )
    .unwrap();
    let err = server.error(&[
        "changefeed",
        "create",
        "-c",
        "slow",
        "--config",
        slow.to_str().unwrap(),
    ]);
    assert_eq!(
        err,
        "error: invalid argument: sink.limits.call-timeout-ms is 120000; this server allows at most 60000 (--max-call-timeout-ms)"
    );
    // The CLI refuses a file over the limit before sending it.
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "#".repeat(10 << 20)).unwrap();
    let err = server.error(&[
        "changefeed",
        "create",
        "-c",
        "big",
        "--config",
        big.to_str().unwrap(),
    ]);
    assert!(
        err.starts_with("error: invalid argument: ")
            && err.ends_with("the changefeed file is 10485760 bytes; at most 131072 (128KiB)"),
        "{err}"
    );
    server.stop();
}

#[test]
fn uploads_in_flight_are_bounded_server_wide() {
    use pb::plugin_service_client::PluginServiceClient;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--max-plugin-mib", "8", "--max-uploads-mib", "8"],
    );
    let rt = runtime();
    rt.block_on(async {
        let channel = server.channel().await;
        let header = |name: &str| pb::UploadPluginRequest {
            part: Some(pb::upload_plugin_request::Part::Header(pb::PluginHeader {
                id: Some(pb::PluginRef {
                    tenant: String::new(),
                    name: name.into(),
                    version: "1.0.0".into(),
                }),
                world: pb::PluginWorld::Sink.into(),
                sha256: String::new(),
            })),
        };
        let chunk = || pb::UploadPluginRequest {
            part: Some(pb::upload_plugin_request::Part::Chunk(vec![0u8; 1 << 20])),
        };
        // The first upload holds 6 MiB and stays open.
        let (first_tx, first_rx) = tokio::sync::mpsc::channel(16);
        first_tx.send(header("first")).await.unwrap();
        for _ in 0..6 {
            first_tx.send(chunk()).await.unwrap();
        }
        let mut client = PluginServiceClient::new(channel.clone());
        let first = tokio::spawn(async move {
            client
                .upload_plugin(tokio_stream::wrappers::ReceiverStream::new(first_rx))
                .await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The second goes past the server's budget: refused, to retry.
        let second: Vec<_> = std::iter::once(header("second"))
            .chain((0..6).map(|_| chunk()))
            .collect();
        let err = PluginServiceClient::new(channel.clone())
            .upload_plugin(tokio_stream::iter(second))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(err.message().contains("uploads in flight"), "{err:?}");
        // The first ends (not a component: refused as such), freeing its budget.
        drop(first_tx);
        let err = first.await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        let third: Vec<_> = std::iter::once(header("third"))
            .chain((0..6).map(|_| chunk()))
            .collect();
        let err = PluginServiceClient::new(channel)
            .upload_plugin(tokio_stream::iter(third))
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "budget freed: {err:?}"
        );
    });
    server.stop();
}

#[test]
fn the_cli_ends_quietly_when_its_stdout_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    upload_plugins(&server);
    for _ in 0..20 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["cli", "--server", &server.grpc, "plugin", "list"])
            .env("SLUICE_TOKEN", server.admin_token())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    server.stop();
}

#[test]
fn an_empty_meta_store_file_is_refused_and_blobs_without_records_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    upload_plugins(&server);
    server.stop();
    let meta = data.join("meta.redb");
    std::fs::write(&meta, b"").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["server", "--data-dir"])
        .arg(&data)
        .args(["--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "meta.redb is damaged or is not a Sluice meta store (the file is empty (0 bytes)"
        ),
        "{stderr}"
    );
    assert_eq!(
        std::fs::metadata(&meta).unwrap().len(),
        0,
        "the file is kept"
    );
    // Moved away: a new store starts, and says that the uploaded plugins have no
    // records any more.
    std::fs::remove_file(&meta).unwrap();
    let server = Server::start(&data, &[]);
    std::thread::sleep(Duration::from_millis(200));
    let log = server.stop();
    assert!(
        log.contains("The meta store holds no changefeed or plugin records, but the plugin store holds uploaded plugin files"),
        "{log}"
    );
}
