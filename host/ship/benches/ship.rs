//! What shipping costs against reading locally: a datagen workload drained
//! (1) by one consumer in process, and (2) through a `Split` that ships
//! every table over the `TableShipping` gRPC stream on loopback to a
//! `ShippedSource` drained by a second task. Prints rows/s of each, per
//! round, the medians and their ratio, and the bytes shipped per row.
//!
//! `cargo bench -p sluice-ship --bench ship` (`SHIP_BENCH_ROWS`, default
//! 1,000,000; `SHIP_BENCH_ROUNDS`, default 5; `SHIP_BENCH_WINDOW`, bytes,
//! default 8 MiB).

use std::time::{Duration, Instant};

use sluice_core::{Source, SourceEvent};
use sluice_ship::{ShipKey, ShipRequest, ShipService, ShippedSource, Shipping, Split};
use sluice_source::{DatagenConfig, DatagenSource};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Endpoint, Server};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn datagen(rows: u64) -> DatagenSource {
    DatagenSource::new(DatagenConfig {
        total_rows: rows,
        ..DatagenConfig::default()
    })
    .expect("datagen")
}

/// Rows `source` yields until its end, read as the pipeline reads: by runs.
async fn drain<S: Source>(source: &mut S) -> Result<u64, S::Error> {
    let mut rows = 0;
    loop {
        if let Some(run) = source.next_run(4096, 8 << 20).await? {
            rows += run.row_count() as u64;
            continue;
        }
        match source.next_event().await? {
            SourceEvent::Transaction(t) => {
                rows += t.tables.iter().map(|t| t.len() as u64).sum::<u64>()
            }
            SourceEvent::End => return Ok(rows),
            _ => {}
        }
    }
}

async fn local(rows: u64) -> Duration {
    let start = Instant::now();
    let n = drain(&mut datagen(rows)).await.expect("drain");
    assert_eq!(n, rows);
    start.elapsed()
}

async fn shipped(rows: u64, window: u64, round: u64) -> (Duration, u64) {
    let shipping = Shipping::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(
        Server::builder()
            .add_service(ShipService::new(shipping.clone()).into_server())
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let key = ShipKey {
        tenant: "default".into(),
        changefeed: "bench".into(),
        epoch: round,
        capture: "b".into(),
    };
    let token = "bench-secret-0123456789".to_string();
    let schema = DatagenConfig::default().schema;
    let tables = ["users", "orders", "events"]
        .map(|t| format!("{schema}.{t}"))
        .to_vec();
    let start = Instant::now();
    let outbox = shipping.open(key.clone(), token.clone()).expect("open");
    let mut split = Split::new(datagen(rows), vec![(outbox, tables)]);
    let receiver = tokio::spawn(async move {
        let mut source = ShippedSource::connect(
            channel,
            ShipRequest {
                key,
                token,
                window,
                patience: Duration::from_secs(10),
            },
        )
        .await
        .expect("connect");
        let n = drain(&mut source).await.expect("drain shipped");
        (n, source.bytes_received())
    });
    let kept = drain(&mut split).await.expect("drain split");
    drop(split);
    let (n, bytes) = receiver.await.expect("receiver");
    let took = start.elapsed();
    assert_eq!((kept, n), (0, rows));
    server.abort();
    (took, bytes)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rows = env("SHIP_BENCH_ROWS", 1_000_000);
    let rounds = env("SHIP_BENCH_ROUNDS", 5);
    let window = env("SHIP_BENCH_WINDOW", 8 << 20);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (mut here, mut there) = (Vec::new(), Vec::new());
    let mut per_row = 0.0;
    println!(
        "shipping bench: {rows} datagen rows, window {window} bytes, {rounds} rounds (local and shipped side by side)"
    );
    for round in 0..rounds {
        let l = runtime.block_on(local(rows));
        let (s, bytes) = runtime.block_on(shipped(rows, window, round));
        per_row = bytes as f64 / rows as f64;
        let (lr, sr) = (rows as f64 / l.as_secs_f64(), rows as f64 / s.as_secs_f64());
        println!(
            "round {round}: local {:>10.0} rows/s   shipped {:>10.0} rows/s   ({:.2}x)",
            lr,
            sr,
            sr / lr
        );
        here.push(lr);
        there.push(sr);
    }
    let (l, s) = (median(here), median(there));
    println!(
        "median: local {l:.0} rows/s, shipped {s:.0} rows/s, shipped/local {:.2}x; {per_row:.0} bytes shipped per row",
        s / l
    );
}
