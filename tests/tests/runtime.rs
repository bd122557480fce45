//! The plugin runtime with real components built from source: loading checks,
//! the precompile cache, quotas, capabilities and containment of misbehaving
//! plugins. Every test asserts the exact outcome and that the host keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_core::{Batch, CommitTs, PluginError, Sink, TableSchema};
use sluice_runtime::{
    LoadError, PluginKind, PluginLimits, PluginRuntime, PluginSettings, RuntimeConfig, WasmSink,
};
use sluice_tests::{batch_of, plugin_path, transactions};

fn runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig::default()).expect("runtime")
}

fn sample() -> (Vec<Arc<TableSchema>>, Batch) {
    batch_of(&transactions(7, 50))
}

fn misbehave(
    rt: &PluginRuntime,
    mode: &str,
    target: &str,
    tweak: impl FnOnce(&mut PluginSettings),
) -> WasmSink {
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("misbehave"))
        .expect("misbehave loads");
    let config = serde_json::json!({ "mode": mode, "target": target }).to_string();
    let mut settings = PluginSettings::new(format!("misbehave-{mode}"), config);
    settings.limits.call_timeout = Duration::from_millis(300);
    tweak(&mut settings);
    WasmSink::new(component, settings).expect("a sink")
}

/// A good plugin in the same runtime still works, and the misbehaving sink gets
/// a fresh instance on its next call.
async fn host_still_serves(rt: &PluginRuntime, bad: &mut WasmSink) {
    let (schemas, mut batch) = sample();
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-blackhole"))
        .unwrap();
    let mut good = WasmSink::new(component, PluginSettings::new("sink-blackhole", "{}")).unwrap();
    good.write(&schemas, &mut batch)
        .await
        .expect("good plugin writes");
    good.flush(CommitTs::new(u64::MAX))
        .await
        .expect("good plugin flushes");
    assert_eq!(good.stats().counters()["rows"], batch.row_count() as u64);
    assert!(!bad.is_live(), "the failed instance was dropped");
    let before = bad.stats().instantiations.load(Ordering::Relaxed);
    let _ = bad.open().await;
    assert_eq!(
        bad.stats().instantiations.load(Ordering::Relaxed),
        before + 1,
        "a fresh instance was made"
    );
}

async fn write_err(sink: &mut WasmSink) -> PluginError {
    let (schemas, mut batch) = sample();
    let rows = batch.row_count();
    let err = sink
        .write(&schemas, &mut batch)
        .await
        .expect_err("the write must fail");
    assert_eq!(
        batch.row_count(),
        rows,
        "the batch is handed back intact for a retry"
    );
    err
}

#[tokio::test]
async fn blackhole_reads_every_row_through_the_runtime() {
    let rt = runtime();
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-blackhole"))
        .unwrap();
    let mut sink = WasmSink::new(component, PluginSettings::new("sink-blackhole", "{}")).unwrap();
    let (schemas, mut batch) = sample();
    sink.write(&schemas, &mut batch).await.unwrap();
    let (_, mut second) = batch_of(&transactions(8, 30));
    sink.write(&schemas, &mut second).await.unwrap();
    sink.flush(CommitTs::new(u64::MAX)).await.unwrap();

    // The same rows through the same logic natively must count the same bytes.
    let mut native =
        sluice_sdk::testing::SinkHarness::<sink_blackhole::Blackhole>::open("{}").unwrap();
    let sdk: Vec<_> = schemas
        .iter()
        .map(|s| sluice_tests::sdk_schema(s))
        .collect();
    let refs: Vec<_> = sdk.iter().collect();
    for b in [&batch, &second] {
        native
            .write(
                &refs,
                b.tables.iter().map(sluice_tests::sdk_table).collect(),
            )
            .unwrap();
    }
    native.flush(1).unwrap();
    let counters = sink.stats().counters();
    assert_eq!(counters["rows"], 80);
    assert_eq!(counters["rows"], native.sink().rows);
    assert_eq!(counters["bytes"], native.sink().bytes);
    assert_eq!(sink.stats().instantiations.load(Ordering::Relaxed), 1);
    // open, two writes, flush: four guarded calls, each in the latency histogram.
    let latency = &sink.stats().call_latency;
    assert_eq!(latency.count(), 4);
    assert!(latency.cumulative().last().copied().unwrap() <= 4);
    assert!(latency.sum_seconds() > 0.0);
}

#[tokio::test]
async fn rejects_inputs_that_are_not_components_of_the_world() {
    let rt = runtime();
    let err = rt.load(PluginKind::Sink, b"hello, world").unwrap_err();
    assert!(matches!(err, LoadError::NotWasm), "{err}");
    let err = rt.load(PluginKind::Sink, b"\0asm\x01\0\0\0").unwrap_err();
    assert!(matches!(err, LoadError::CoreModule), "{err}");
    assert!(
        err.to_string()
            .contains("core WebAssembly module, not a component"),
        "{err}"
    );
    let err = rt
        .load(PluginKind::Sink, b"\0asm\x0d\0\x01\0garbage")
        .unwrap_err();
    assert!(matches!(err, LoadError::Invalid(_)), "{err}");
    let filter = std::fs::read(plugin_path("filter-events")).unwrap();
    let err = rt.load(PluginKind::Sink, &filter).unwrap_err();
    assert_eq!(
        err.to_string(),
        "component does not implement the sluice:plugin sink world: missing export `sluice:plugin/sink-api@0.2.0`"
    );
    let sink = std::fs::read(plugin_path("sink-blackhole")).unwrap();
    let err = rt.load(PluginKind::Filter, &sink).unwrap_err();
    assert!(
        err.to_string()
            .contains("missing export `sluice:plugin/filter-api@0.2.0`"),
        "{err}"
    );
    // A plugin built against the previous contract is told to be rebuilt.
    let old = wat::parse_str(
        r#"(component
            (instance $api)
            (export "sluice:plugin/sink-api@0.1.0" (instance $api)))"#,
    )
    .unwrap();
    let err = rt.load(PluginKind::Sink, &old).unwrap_err();
    assert!(matches!(err, LoadError::ContractVersion { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "the plugin was built for the contract sluice:plugin@0.1.0, but this host implements \
         sluice:plugin@0.2.0: rebuild it against the current wit/plugin.wit (with the Rust SDK: \
         update sluice-sdk and build again)"
    );
}

#[tokio::test]
async fn precompiled_artifacts_are_cached_and_a_corrupt_one_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let config = || RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let bytes = std::fs::read(plugin_path("sink-blackhole")).unwrap();
    let first = PluginRuntime::new(config())
        .unwrap()
        .load(PluginKind::Sink, &bytes)
        .unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(first.digest()) && name.ends_with(".cwasm"),
        "{name}"
    );
    let written = std::fs::metadata(&files[0]).unwrap();

    // A second host loads the artifact instead of compiling: the file is not
    // written again (a write makes a new file and renames it over the old
    // one), only marked used for the cache's bound.
    let second = PluginRuntime::new(config())
        .unwrap()
        .load(PluginKind::Sink, &bytes)
        .unwrap();
    assert_eq!(second.digest(), first.digest());
    let loaded = std::fs::metadata(&files[0]).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(loaded.ino(), written.ino());
    assert!(loaded.modified().unwrap() >= written.modified().unwrap());

    // A corrupt artifact is dropped and rebuilt; the plugin still runs.
    std::fs::write(&files[0], b"not an artifact").unwrap();
    let rt = PluginRuntime::new(config()).unwrap();
    let third = rt.load(PluginKind::Sink, &bytes).unwrap();
    assert!(std::fs::metadata(&files[0]).unwrap().len() > 1000);
    let mut sink = WasmSink::new(third, PluginSettings::new("sink-blackhole", "{}")).unwrap();
    let (schemas, mut batch) = sample();
    sink.write(&schemas, &mut batch).await.unwrap();
}

#[tokio::test]
async fn loads_of_the_same_bytes_share_one_compiled_component_while_held() {
    let rt = runtime();
    let bytes = std::fs::read(plugin_path("sink-blackhole")).unwrap();
    let first = rt.load(PluginKind::Sink, &bytes).unwrap();
    let second = rt.load(PluginKind::Sink, &bytes).unwrap();
    assert!(first.shares_code_with(&second));
    let other = rt
        .load_file(PluginKind::Sink, &plugin_path("misbehave"))
        .unwrap();
    assert!(!other.shares_code_with(&first));
    // Each shared load still makes instances of its own that work.
    let mut rows = 0;
    for component in [first.clone(), second] {
        let mut sink =
            WasmSink::new(component, PluginSettings::new("sink-blackhole", "{}")).unwrap();
        let (schemas, mut batch) = sample();
        rows += batch.row_count();
        sink.write(&schemas, &mut batch).await.unwrap();
        sink.flush(CommitTs::new(1)).await.unwrap();
    }
    assert_eq!(rows, 2 * 50);
    // Once nothing holds it, it is made again, and later loads share that.
    drop(first);
    let again = rt.load(PluginKind::Sink, &bytes).unwrap();
    let twice = rt.load(PluginKind::Sink, &bytes).unwrap();
    assert!(again.shares_code_with(&twice));
}

/// A growth past the quota is refused, not trapped: a guest that can do
/// without it (a garbage-collected engine collects) keeps its instance.
#[tokio::test]
async fn a_guest_that_survives_a_refused_growth_keeps_its_instance() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "try-oom", "", |s| s.limits.memory_bytes = 16 << 20);
    for _ in 0..3 {
        let (schemas, mut batch) = sample();
        sink.write(&schemas, &mut batch)
            .await
            .expect("the guest went on without the memory");
    }
    let stats = sink.stats();
    assert_eq!(stats.stops.load(Ordering::Relaxed), 0);
    assert_eq!(stats.instantiations.load(Ordering::Relaxed), 1);
    // At least one per write (the allocator may ask more than once).
    assert!(stats.memory_refusals.load(Ordering::Relaxed) >= 3);
    assert!(stats.peak_memory_bytes.load(Ordering::Relaxed) <= 16 << 20);
}

#[tokio::test]
async fn allocating_past_the_memory_quota_stops_the_instance() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "oom", "", |s| s.limits.memory_bytes = 16 << 20);
    let err = write_err(&mut sink).await;
    let PluginError::Stopped(reason) = &err else {
        panic!("{err:?}")
    };
    assert!(reason.starts_with("memory quota exceeded"), "{reason}");
    // The growth was refused (memory.grow gave -1); the Rust guest cannot
    // go on without it and traps, which stops the instance.
    assert!(
        reason.contains("its quota is 16777216 bytes; the instance then trapped"),
        "{reason}"
    );
    assert!(err.is_retryable());
    assert_eq!(sink.stats().stops.load(Ordering::Relaxed), 1);
    assert!(sink.stats().memory_refusals.load(Ordering::Relaxed) >= 1);
    host_still_serves(&rt, &mut sink).await;
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_at_the_cpu_deadline() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "loop", "", |_| {});
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Stopped("exceeded its CPU time limit of 300ms per call".into())
    );
    host_still_serves(&rt, &mut sink).await;
}

#[tokio::test]
async fn a_panic_is_reported_with_its_message() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "panic", "", |_| {});
    let err = write_err(&mut sink).await;
    let PluginError::Stopped(reason) = &err else {
        panic!("{err:?}")
    };
    assert!(
        reason.starts_with("plugin panicked: panicked at"),
        "{reason}"
    );
    assert!(
        reason.contains("misbehave: deliberate panic in write"),
        "{reason}"
    );
    host_still_serves(&rt, &mut sink).await;

    let mut sink = misbehave(&rt, "flush-panic", "", |_| {});
    let err = sink.flush(CommitTs::new(5)).await.unwrap_err();
    assert!(
        matches!(&err, PluginError::Stopped(r) if r.contains("deliberate panic in flush")),
        "{err:?}"
    );
}

#[tokio::test]
async fn files_outside_the_granted_directory_cannot_be_read() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "read-file", "/etc/passwd", |_| {});
    let err = write_err(&mut sink).await;
    let PluginError::Retryable(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.starts_with("denied: read /etc/passwd"), "{msg}");
    host_still_serves(&rt, &mut sink).await;

    let dir = tempfile::tempdir().unwrap();
    let grant = |s: &mut PluginSettings| s.capabilities.data_dir = Some(dir.path().to_path_buf());
    for path in [
        "/data/../etc/passwd",
        "/data/../../etc/passwd",
        "../etc/passwd",
        "/etc/passwd",
    ] {
        let mut sink = misbehave(&rt, "read-file", path, grant);
        let err = write_err(&mut sink).await;
        assert!(
            matches!(&err, PluginError::Retryable(m) if m.starts_with("denied: read")),
            "{path}: {err:?}"
        );
    }
    // Inside the granted directory the plugin may write.
    let mut sink = misbehave(&rt, "write-file", "/data/note.txt", grant);
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Fatal("ALLOWED: wrote /data/note.txt".into())
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "written by misbehave\n"
    );
}

#[tokio::test]
async fn tcp_only_to_allowlisted_addresses() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let rt = runtime();
    let mut sink = misbehave(&rt, "connect", &addr.to_string(), |_| {});
    let err = write_err(&mut sink).await;
    assert!(
        matches!(&err, PluginError::Retryable(m) if m.starts_with(&format!("denied: connect {addr}"))),
        "{err:?}"
    );

    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut sink = misbehave(&rt, "connect", &addr.to_string(), |s| {
        s.capabilities.tcp_allow = vec![other.local_addr().unwrap()];
    });
    let err = write_err(&mut sink).await;
    assert!(
        matches!(&err, PluginError::Retryable(m) if m.starts_with("denied: connect")),
        "{err:?}"
    );

    let mut sink = misbehave(&rt, "connect", &addr.to_string(), |s| {
        s.capabilities.tcp_allow = vec![addr]
    });
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Fatal(format!("ALLOWED: connected to {addr}"))
    );
    host_still_serves(&rt, &mut sink).await;
}

#[tokio::test]
async fn a_host_call_that_hangs_hits_the_call_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accept and never answer.
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let rt = runtime();
    let mut sink = misbehave(&rt, "hang-read", &addr.to_string(), |s| {
        s.capabilities.tcp_allow = vec![addr];
        s.limits.host_call_timeout = Duration::from_millis(400);
    });
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Stopped(
            "the call did not return within 400ms (blocked in a host call)".into()
        )
    );
    host_still_serves(&rt, &mut sink).await;
    server.abort();
}

async fn http_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(
                    b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        }
    });
    (addr, task)
}

#[tokio::test]
async fn http_only_to_allowlisted_hosts() {
    let (addr, server) = http_server().await;
    let url = format!("http://{addr}/hook");
    let rt = runtime();
    let mut sink = misbehave(&rt, "http", &url, |_| {});
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Retryable(format!("denied: GET {url}: ErrorCode::HttpRequestDenied"))
    );
    // Allowing TCP to the address does not open HTTP to it: wasi-http has its own check.
    let mut sink = misbehave(&rt, "http", &url, |s| s.capabilities.tcp_allow = vec![addr]);
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Retryable(format!("denied: GET {url}: ErrorCode::HttpRequestDenied"))
    );

    let mut sink = misbehave(&rt, "http", &url, |s| {
        s.capabilities.http_allow = vec![addr.to_string()]
    });
    let err = write_err(&mut sink).await;
    assert_eq!(
        err,
        PluginError::Fatal(format!("ALLOWED: GET {url} answered 204"))
    );
    host_still_serves(&rt, &mut sink).await;
    server.abort();
}

#[tokio::test]
async fn each_error_kind_reaches_the_host_typed() {
    let rt = runtime();
    for (mode, expected) in [
        (
            "error-retryable",
            PluginError::Retryable("mode error-retryable".into()),
        ),
        ("error-fatal", PluginError::Fatal("mode error-fatal".into())),
        (
            "error-config",
            PluginError::Config("mode error-config".into()),
        ),
    ] {
        let mut sink = misbehave(&rt, mode, "", |_| {});
        assert_eq!(write_err(&mut sink).await, expected);
        assert_eq!(expected.is_retryable(), mode == "error-retryable");
        // A returned error also drops the instance: the host replays into a fresh one.
        host_still_serves(&rt, &mut sink).await;
    }
    let mut sink = misbehave(&rt, "reject-config", "", |_| {});
    assert_eq!(
        sink.validate_config().await,
        Err(PluginError::Config(
            "mode reject-config: this config is refused".into()
        ))
    );
    let mut sink = misbehave(&rt, "ok", "", |_| {});
    sink.validate_config().await.unwrap();
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-blackhole"))
        .unwrap();
    let mut sink = WasmSink::new(
        component,
        PluginSettings::new("sink-blackhole", r#"{"nope": 1}"#),
    )
    .unwrap();
    let err = sink.validate_config().await.unwrap_err();
    assert!(
        matches!(&err, PluginError::Config(m) if m.contains("unknown field `nope`")),
        "{err:?}"
    );
}

#[tokio::test]
async fn batches_over_the_plugin_bound_are_refused_before_the_call() {
    let rt = runtime();
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-blackhole"))
        .unwrap();
    let mut settings = PluginSettings::new("sink-blackhole", "{}");
    settings.limits = PluginLimits {
        memory_bytes: 4 << 20,
        ..PluginLimits::default()
    };
    let mut sink = WasmSink::new(component, settings).unwrap();
    assert_eq!(sink.max_batch_bytes(), 1 << 20);
    let (schemas, mut big) = batch_of(&transactions(1, 8000));
    assert!(big.wire_bytes() > 1 << 20);
    let err = sink.write(&schemas, &mut big).await.unwrap_err();
    assert!(
        matches!(&err, PluginError::Refused(m) if m.contains("over this plugin's bound of 1048576 bytes")),
        "{err:?}"
    );
    assert_eq!(
        sink.stats().instantiations.load(Ordering::Relaxed),
        0,
        "the plugin never saw it"
    );
}

#[tokio::test]
async fn a_plugin_that_prints_a_lot_is_not_stopped_and_its_last_panic_is_reported() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "noisy", "", |_| {});
    let (schemas, mut batch) = sample();
    for _ in 0..3 {
        sink.write(&schemas, &mut batch)
            .await
            .expect("printing is not a failure");
    }
    assert_eq!(sink.stats().stops.load(Ordering::Relaxed), 0);
    assert!(sink.is_live());

    let mut sink = misbehave(&rt, "noisy-panic", "", |_| {});
    let err = write_err(&mut sink).await;
    let PluginError::Stopped(reason) = &err else {
        panic!("{err:?}")
    };
    assert!(
        reason.contains("misbehave: panic after a lot of output"),
        "{reason}"
    );
}

#[tokio::test]
async fn waiting_in_a_host_call_does_not_count_against_the_cpu_limit() {
    let rt = runtime();
    // 100 ms of CPU per call, 5 s of wall time: a 600 ms sleep is a wait.
    let mut sink = misbehave(&rt, "sleep", "600", |s| {
        s.limits.call_timeout = Duration::from_millis(100);
        s.limits.host_call_timeout = Duration::from_secs(5);
    });
    let (schemas, mut batch) = sample();
    let started = std::time::Instant::now();
    sink.write(&schemas, &mut batch)
        .await
        .expect("a guest that waits is not stopped by its CPU limit");
    assert!(started.elapsed() >= Duration::from_millis(600));
    // The same guest busy is stopped at its CPU limit. It spins for up to 30 s
    // of wall time: on a loaded machine its thread (nice 10) may get a small
    // share of a core, and the limit counts CPU time, so it needs wall time to
    // reach 100 ms.
    let mut busy = misbehave(&rt, "spin-for", "30000", |s| {
        s.limits.call_timeout = Duration::from_millis(100);
        s.limits.host_call_timeout = Duration::from_secs(40);
    });
    assert_eq!(
        write_err(&mut busy).await,
        PluginError::Stopped("exceeded its CPU time limit of 100ms per call".into())
    );
}

#[test]
fn a_spinning_guest_leaves_the_callers_thread_free() {
    // One caller thread: the call and a timer task share it. Guest code runs on
    // the plugin's own thread, so the timer runs all along; were the guest on the
    // caller's thread, the timer would wait until the CPU limit (2 s) stopped it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let plugins = runtime();
        let mut sink = misbehave(&plugins, "loop", "", |s| {
            s.limits.call_timeout = Duration::from_secs(2);
        });
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = ticks.clone();
        let timer = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(20));
            loop {
                every.tick().await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        let started = std::time::Instant::now();
        let err = write_err(&mut sink).await;
        let took = started.elapsed();
        timer.abort();
        assert_eq!(
            err,
            PluginError::Stopped("exceeded its CPU time limit of 2s per call".into())
        );
        // The timer ran all along: about one tick per 20 ms of the 2 s.
        let n = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            u128::from(n) * 20 * 2 >= took.as_millis(),
            "{n} timer ticks in {took:?}"
        );
    });
}

/// A component that instantiates `instances` times a core module with one memory
/// (or `tables` tables, one per module instance when `tables` is set).
fn component_with(instances: usize, with_table: bool) -> Vec<u8> {
    let body = if with_table {
        "(table 1 funcref)"
    } else {
        "(memory 1)"
    };
    let wat = format!(
        "(component (core module $m {body}) {})",
        "(core instance (instantiate $m))".repeat(instances)
    );
    wat::parse_str(&wat).expect("valid component text")
}

#[test]
fn components_past_the_per_component_maximums_are_refused_when_loaded() {
    let rt = runtime();
    for (bytes, what) in [
        (component_with(5, false), "5 Wasm linear memories"),
        (component_with(17, true), "17 tables"),
        (component_with(255, false), "255 core module instances"),
    ] {
        let Err(err) = rt.load(PluginKind::Sink, &bytes) else {
            panic!("`{what}` must be refused");
        };
        let text = format!("{err:#}");
        assert!(text.contains(what), "want `{what}` in: {text}");
    }
    // Within the maximums, the same shape gets past that check (and fails on the
    // missing sink export instead).
    let err = rt
        .load(PluginKind::Sink, &component_with(4, false))
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("sluice:plugin/sink"), "{err:#}");
}

#[tokio::test]
async fn open_files_past_the_resource_limit_fail_the_plugin_not_the_host() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let rt = runtime();
    let mut sink = misbehave(&rt, "hold-files", "/data/f", |s| {
        s.capabilities.data_dir = Some(dir.path().to_path_buf());
        s.limits.max_resources = 64;
    });
    assert_eq!(
        write_err(&mut sink).await,
        PluginError::Stopped(
            "exceeded its limit of 64 host resources (open files, sockets, streams, HTTP fields) per instance".into()
        )
    );
    // The host and other plugins go on.
    host_still_serves(&rt, &mut sink).await;
}

#[tokio::test]
async fn host_objects_count_against_the_memory_quota() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "hold-fields", "", |s| {
        s.limits.memory_bytes = 8 << 20;
    });
    let (schemas, _) = sample();
    // 64 fields of 16 KiB per call (about 1 MiB), kept: within a few calls the
    // instance's linear memory plus its host objects pass 8 MiB.
    let mut stopped = None;
    for _ in 0..12 {
        let (_, mut batch) = sample();
        if let Err(e) = sink.write(&schemas, &mut batch).await {
            stopped = Some(e);
            break;
        }
    }
    let Some(PluginError::Stopped(reason)) = stopped else {
        panic!("the instance was not stopped: {stopped:?}");
    };
    assert!(
        reason.starts_with("memory quota exceeded: ")
            && reason.contains("bytes held in host objects"),
        "{reason}"
    );
    let peak = sink
        .stats()
        .peak_memory_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(peak > 8 << 20, "the peak includes host objects: {peak}");
}

#[tokio::test]
async fn plugin_logs_are_rate_limited_and_errors_bounded() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "log-flood", "", |_| {});
    let (schemas, mut batch) = sample();
    sink.write(&schemas, &mut batch).await.unwrap();
    // At most 100 lines a second get through; the rest are counted.
    let dropped = sink.stats().log_dropped.load(Ordering::Relaxed);
    assert!((9_800..=9_900).contains(&dropped), "{dropped}");

    let mut huge = misbehave(&rt, "huge-error", "", |_| {});
    let PluginError::Fatal(message) = write_err(&mut huge).await else {
        panic!("a fatal error");
    };
    assert!(message.len() < 4200, "{}", message.len());
    assert!(
        message.ends_with(" ... (cut; 2097152 bytes in all)"),
        "{}",
        &message[message.len() - 60..]
    );
}

/// Nice values of this process's threads whose name starts with `prefix`.
fn nice_of_threads(prefix: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the `(comm)`: state is field 3, nice is field 19.
        if let Some((_, rest)) = stat.rsplit_once(')')
            && let Some(nice) = rest.split_whitespace().nth(16)
        {
            out.push(nice.parse().unwrap());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_code_past_a_slice_runs_on_a_lower_priority_thread_of_its_own() {
    let rt = runtime();
    let mut sink = misbehave(&rt, "loop", "", |s| {
        s.limits.call_timeout = Duration::from_millis(800);
    });
    let spinning = tokio::spawn(async move { write_err(&mut sink).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The plugin's thread is named after it (`p:` and the first 13 characters).
    // (Other tests may run a `misbehave-loop` plugin at the same time.)
    let nice = nice_of_threads("p:misbehave-lo");
    assert!(
        !nice.is_empty() && nice.iter().all(|&n| n == 10),
        "plugin threads at nice 10: {nice:?}"
    );
    assert_eq!(
        spinning.await.unwrap(),
        PluginError::Stopped("exceeded its CPU time limit of 800ms per call".into())
    );
}
