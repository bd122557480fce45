//! A plugin can only hurt itself: with as many spinning sinks as there are cores,
//! each at the largest CPU deadline the server allows, two healthy changefeeds
//! keep replicating, the API and `/healthz` keep answering, and SIGTERM stops the
//! server in bounded time.

use std::time::{Duration, Instant};

mod common;
use common::server::{Server, unsafe_sigterm};
use common::write_file;

fn feed(sink: &str, sink_extra: &str, rate: u64) -> String {
    format!(
        r#"
[source]
type = "datagen"
total-rows = 0
rate = {rate}

[sink]
plugin = "{sink}"
{sink_extra}

[pipeline]
flush-interval-ms = 100
checkpoint-interval-ms = 100
"#
    )
}

/// `sluice cli changefeed pause -c name` on a thread of its own: when it
/// returned, and what it printed.
fn pause_in_background(
    server: &Server,
    name: &str,
) -> std::thread::JoinHandle<(Instant, std::process::Output)> {
    let (grpc, name, token) = (server.grpc.clone(), name.to_string(), server.admin_token());
    std::thread::spawn(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "cli",
                "--server",
                &grpc,
                "--output",
                "json",
                "changefeed",
                "pause",
                "-c",
            ])
            .arg(&name)
            .env("SLUICE_TOKEN", token)
            .output()
            .unwrap();
        (Instant::now(), out)
    })
}

fn checkpoint(server: &Server, name: &str) -> u64 {
    server.state(name)["status"]["checkpoint-ts"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn spinning_sinks_on_every_core_do_not_stop_neighbours_the_api_or_shutdown() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        &dir.path().join("data"),
        &[
            "--max-call-timeout-ms",
            "600000",
            "--max-host-call-timeout-ms",
            "600000",
            "--stop-timeout-ms",
            "2000",
        ],
    );
    server.upload("sink-blackhole", "sink");
    server.upload("misbehave", "sink");
    let write = |name: &str, text: String| write_file(dir.path(), name, &text);
    let healthy = write("healthy", feed("sink-blackhole@0.1.0", "", 2_000));
    let spinning = write(
        "spinning",
        feed(
            "misbehave@0.1.0",
            "config = { mode = \"loop\" }\n[sink.limits]\ncall-timeout-ms = 600000\nhost-call-timeout-ms = 600000",
            0,
        ),
    );
    for name in ["h1", "h2"] {
        server.create(name, &healthy);
    }
    for i in 0..cores {
        server.create(&format!("spin{i}"), &spinning);
    }
    // Let the spinners get into their endless calls.
    std::thread::sleep(Duration::from_secs(2));

    let before: Vec<u64> = ["h1", "h2"]
        .iter()
        .map(|n| checkpoint(&server, n))
        .collect();
    let mut slowest_health = Duration::ZERO;
    let mut slowest_status = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let started = Instant::now();
        let (code, body) = server.http_get("/healthz");
        slowest_health = slowest_health.max(started.elapsed());
        assert_eq!(code, 200, "{body}");
        let started = Instant::now();
        let q = server.state("h1");
        slowest_status = slowest_status.max(started.elapsed());
        assert!(q["status"]["checkpoint-ts"].as_u64().is_some(), "{q}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let after: Vec<u64> = ["h1", "h2"]
        .iter()
        .map(|n| checkpoint(&server, n))
        .collect();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a > b,
            "healthy changefeed h{} stood still: {b} -> {a}",
            i + 1
        );
    }
    // Generous bounds for a shared 2-core machine; without isolation these calls
    // did not answer at all.
    assert!(
        slowest_health < Duration::from_secs(2),
        "{slowest_health:?}"
    );
    assert!(
        slowest_status < Duration::from_secs(3),
        "{slowest_status:?}"
    );
    // The spinners are running (their calls never return), not failed.
    let spin = server.state("spin0");
    assert_eq!(spin["state"], "normal", "{spin}");

    // Pausing a spinning changefeed waits for its stop (cancelled after
    // --stop-timeout-ms), but holds nothing others need meanwhile.
    let pause_started = Instant::now();
    let pausing = pause_in_background(&server, "spin0");
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let q = server.state("h1");
    let list = server.json(&["changefeed", "list"]);
    let during_pause = started.elapsed();
    assert_eq!(q["state"], "normal", "{q}");
    assert_eq!(list.as_array().unwrap().len(), 2 + cores, "{list}");
    let (pause_done, out) = pausing.join().unwrap();
    let pause_took = pause_done - pause_started;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(paused["state"], "stopped", "{paused}");
    assert!(
        during_pause < Duration::from_secs(1) && pause_took >= Duration::from_millis(1500),
        "other calls took {during_pause:?} while a pause took {pause_took:?}"
    );

    // SIGTERM: the healthy processors flush, the spinning ones are cancelled
    // after --stop-timeout-ms, and the server exits.
    let started = Instant::now();
    unsafe_sigterm(server.child.id());
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server did not stop within 20 s; log:\n{}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{}", server.stderr.lock().unwrap());
}

#[test]
fn a_plugin_cannot_make_its_changefeed_unmanageable_or_exhaust_the_pools() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    server.upload("misbehave", "sink");

    // A component that could never instantiate (255 memories) is refused at upload.
    let wat = format!(
        "(component (core module $m (memory 1)) {})",
        "(core instance (instantiate $m))".repeat(255)
    );
    let hog = dir.path().join("hog.wasm");
    std::fs::write(&hog, wat::parse_str(&wat).unwrap()).unwrap();
    let err = server.error(&[
        "plugin",
        "upload",
        hog.to_str().unwrap(),
        "--id",
        "hog@0.1.0",
        "--kind",
        "sink",
    ]);
    assert!(
        err.starts_with("error: invalid argument: not a usable sink plugin: ")
            && err.contains("255"),
        "{err}"
    );

    // A 2 MB fatal error, and a flood of forged log lines: the changefeed fails
    // with a bounded error and stays manageable.
    let file = dir.path().join("huge.toml");
    std::fs::write(
        &file,
        feed("misbehave@0.1.0", "config = { mode = \"huge-error\" }", 0),
    )
    .unwrap();
    server.create("huge", &file);
    server.wait_for("the changefeed to fail", Duration::from_secs(30), || {
        server.state("huge")["state"] == "failed"
    });
    let q = server.state("huge");
    let message = q["status"]["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.len() < 8 << 10, "{}", message.len());
    assert!(
        message.contains("(cut; 2097152 bytes in all)"),
        "{message:.200}"
    );
    let list = server.json(&["changefeed", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let (code, metrics) = server.http_get("/metrics");
    assert_eq!(code, 200);
    assert!(metrics.len() < 1 << 20, "{}", metrics.len());
    server.json(&["changefeed", "remove", "-c", "huge"]);

    let flood = dir.path().join("flood.toml");
    std::fs::write(
        &flood,
        feed("misbehave@0.1.0", "config = { mode = \"log-flood\" }", 100),
    )
    .unwrap();
    server.create("flood", &flood);
    std::thread::sleep(Duration::from_secs(2));
    server.json(&["changefeed", "remove", "-c", "flood"]);
    let log = server.stop();
    assert!(
        !log.contains("\nERROR sluice: forged host line"),
        "a forged line"
    );
    assert!(
        log.contains("Plugin log lines dropped"),
        "no summary of dropped lines"
    );
    assert!(log.len() < 8 << 20, "the log grew to {} bytes", log.len());
}

#[test]
fn one_tenant_cannot_take_the_plugin_instances_others_need() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--max-tenant-plugin-instances", "3"],
    );
    for tenant in ["a", "b"] {
        server.json(&["tenant", "create", tenant]);
        server.upload_as(tenant, "sink-blackhole", "sink");
        server.upload_as(tenant, "filter-mask", "filter");
    }
    // Two instances each: a filter and a sink.
    let file = dir.path().join("masked.toml");
    std::fs::write(
        &file,
        feed(
            "sink-blackhole@0.1.0",
            "",
            100,
        )
        .replace(
            "\n[sink]",
            "\n[[filters]]\nplugin = \"filter-mask@0.1.0\"\nconfig = { columns = [\"email\"] }\n\n[sink]",
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    server.json(&[
        "--tenant",
        "a",
        "changefeed",
        "create",
        "-c",
        "one",
        "--config",
        f,
    ]);
    let err = server.error(&[
        "--tenant",
        "a",
        "changefeed",
        "create",
        "-c",
        "two",
        "--config",
        f,
    ]);
    assert_eq!(
        err,
        "error: too large: tenant a would hold 4 plugin instances (its changefeeds hold 2, this one needs 2); a tenant may hold at most 3 (--max-tenant-plugin-instances): remove a changefeed or use fewer filters"
    );
    // Another tenant is not affected.
    server.json(&[
        "--tenant",
        "b",
        "changefeed",
        "create",
        "-c",
        "one",
        "--config",
        f,
    ]);
    // Removing frees the reservation.
    server.json(&["--tenant", "a", "changefeed", "remove", "-c", "one"]);
    server.json(&[
        "--tenant",
        "a",
        "changefeed",
        "create",
        "-c",
        "two",
        "--config",
        f,
    ]);
    server.stop();
}

#[test]
fn pausing_a_changefeed_whose_sink_hangs_in_close_holds_up_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--stop-timeout-ms", "3000"]);
    server.upload("sink-blackhole", "sink");
    server.upload("misbehave", "sink");
    let write = |name: &str, text: String| write_file(dir.path(), name, &text);
    let healthy = write("healthy", feed("sink-blackhole@0.1.0", "", 1_000));
    let hanging = write(
        "hanging",
        feed(
            "misbehave@0.1.0",
            "config = { mode = \"hang-close\" }",
            1_000,
        ),
    );
    server.create("healthy", &healthy);
    server.create("hanging", &hanging);
    std::thread::sleep(Duration::from_secs(1));

    let pausing = pause_in_background(&server, "hanging");
    std::thread::sleep(Duration::from_millis(300));
    let (code, metrics) = server.http_get("/metrics");
    let metrics_done = Instant::now();
    assert_eq!(code, 200);
    assert!(metrics.contains("sluice_changefeed_checkpoint_timestamp_seconds"));
    let q = server.state("healthy");
    let status_done = Instant::now();
    assert_eq!(q["state"], "normal", "{q}");
    let (pause_done, out) = pausing.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        metrics_done < pause_done && status_done < pause_done,
        "/metrics and GetStatus answered after the pause completed"
    );
    let paused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(paused["state"], "stopped", "{paused}");
    server.stop();
}

/// The value of `name{tenant="..."}` on `/metrics` (0 when absent).
fn tenant_metric(server: &Server, name: &str, tenant: &str) -> f64 {
    let (_, metrics) = server.http_get("/metrics");
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{tenant=\"{tenant}\"}}")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn tenants_share_the_plugin_threads_by_weight_not_by_thread_and_a_cpu_cap_holds() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &[
            "--max-call-timeout-ms",
            "600000",
            "--max-host-call-timeout-ms",
            "600000",
            "--stop-timeout-ms",
            "2000",
        ],
    );
    let spinning = write_file(
        dir.path(),
        "spinning",
        &feed(
            "misbehave@0.1.0",
            "config = { mode = \"loop\" }\n[sink.limits]\ncall-timeout-ms = 600000\nhost-call-timeout-ms = 600000",
            0,
        ),
    );
    // `greedy` spins on three threads per core, `fair` on one thread: left
    // to the operating system, fair would get 1 / (3 * cores + 1) of the CPU.
    for (tenant, feeds) in [("greedy", 3 * cores), ("fair", 1)] {
        server.json(&["tenant", "create", tenant]);
        server.upload_as(tenant, "misbehave", "sink");
        for i in 0..feeds {
            server.json(&[
                "--tenant",
                tenant,
                "changefeed",
                "create",
                "-c",
                &format!("spin{i}"),
                "--config",
                spinning.to_str().unwrap(),
            ]);
        }
    }
    let cpu =
        |tenant: &str| tenant_metric(&server, "sluice_tenant_plugin_cpu_seconds_total", tenant);
    // Let every spinner get into its endless call, then measure.
    std::thread::sleep(Duration::from_secs(3));
    let (g0, f0) = (cpu("greedy"), cpu("fair"));
    std::thread::sleep(Duration::from_secs(4));
    let (g1, f1) = (cpu("greedy"), cpu("fair"));
    let (greedy, fair) = (g1 - g0, f1 - f0);
    // Equal weights: fair's one thread holds one of the `cores` turns
    // whenever it asks, so it gets 1 / cores of the plugin CPU (a half on two
    // cores), far above its per-thread share.
    let share = fair / (fair + greedy);
    let per_thread = 1.0 / (3 * cores + 1) as f64;
    assert!(
        share > 0.7 / cores as f64 && share > 2.0 * per_thread,
        "fair's share of the plugin CPU is {share:.2} (greedy {greedy:.2} s, fair {fair:.2} s); per thread it would be {per_thread:.2}"
    );
    assert!(
        tenant_metric(&server, "sluice_tenant_plugin_turn_waits_total", "greedy") > 0.0,
        "greedy's calls waited for turns"
    );
    // A cap of a fifth of a core holds greedy there, whatever is idle.
    server.json(&[
        "tenant",
        "quota",
        "set",
        "greedy",
        "--max-cpu-millicores",
        "200",
    ]);
    std::thread::sleep(Duration::from_secs(1));
    let g0 = cpu("greedy");
    std::thread::sleep(Duration::from_secs(4));
    let capped = (cpu("greedy") - g0) / 4.0;
    assert!(
        capped < 0.3,
        "greedy used {capped:.2} cores under a cap of 0.2"
    );
    assert!(tenant_metric(&server, "sluice_tenant_plugin_throttled_total", "greedy") > 0.0);
    let quota = server.json(&["tenant", "get", "greedy"]);
    assert_eq!(quota["quota"]["max-cpu-millicores"], 200, "{quota}");
    server.stop();
}

/// The value of `name{...labels}` on `/metrics` for changefeed `feed` (0 when absent).
fn feed_metric(server: &Server, name: &str, feed: &str) -> f64 {
    let (_, metrics) = server.http_get("/metrics");
    metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!("{name}{{"))
                && l.contains(&format!("changefeed=\"{feed}\""))
                && l.contains("role=\"sink\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn an_idle_changefeed_gives_its_plugin_instance_back_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    server.upload("sink-blackhole", "sink");
    // 50 rows, then the source goes quiet; instances go after a second idle.
    let quiet = write_file(
        dir.path(),
        "quiet",
        "[source]\ntype = \"datagen\"\ntotal-rows = 50\nkeep-open = true\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n\n[pipeline]\nflush-interval-ms = 100\nrelease-idle-ms = 1000\n",
    );
    server.create("quiet", &quiet);
    let until = Instant::now() + Duration::from_secs(30);
    while feed_metric(&server, "sluice_plugin_idle_releases_total", "quiet") < 1.0 {
        assert!(Instant::now() < until, "the idle sink was not released");
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = server.state("quiet");
    assert_eq!(status["state"], "normal", "{status}");
    assert_eq!(status["status"]["rows-written"], 50, "{status}");
    // Released once, and not again while it stays idle.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        feed_metric(&server, "sluice_plugin_idle_releases_total", "quiet"),
        1.0
    );
    assert_eq!(
        feed_metric(&server, "sluice_plugin_instantiations_total", "quiet"),
        1.0
    );
    server.stop();
}
