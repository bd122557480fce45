//! A plugin can only hurt itself: with as many spinning sinks as there are cores,
//! each at the largest CPU deadline the server allows, two healthy changefeeds
//! keep replicating, the API and `/healthz` keep answering, and SIGTERM stops the
//! server in bounded time.

use std::time::{Duration, Instant};

mod common;
use common::server::{Server, unsafe_sigterm};

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
    let write = |name: &str, text: String| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
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
        server.json(&[
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            healthy.to_str().unwrap(),
        ]);
    }
    for i in 0..cores {
        server.json(&[
            "changefeed",
            "create",
            "-c",
            &format!("spin{i}"),
            "--config",
            spinning.to_str().unwrap(),
        ]);
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
