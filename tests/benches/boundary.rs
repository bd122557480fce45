//! The plugin-boundary benchmark: rows/s through `sink-blackhole` via the runtime
//! against the same logic called natively, plus instantiate time, precompiled load
//! time and idle instance memory. Prints a table and writes
//! `target/bench/boundary.json`.
//!
//! Run with `cargo xtask bench` (builds the plugins, release profile). Unset
//! `RUST_BACKTRACE` first: with it set every wasmtime error captures a backtrace.

use sluice_tests::bench::median;
use std::sync::Arc;
use std::time::Instant;

use sink_blackhole::Blackhole;
use sluice_core::{Batch, Column, ColumnType, CommitTs, Op, Sink, TableSchema, Value};
use sluice_runtime::{PluginKind, PluginRuntime, PluginSettings, RuntimeConfig, WasmSink};
use sluice_sdk::testing::SinkHarness;
use sluice_tests::{plugin_path, sdk_schema, sdk_table};

const ROUNDS: usize = 5;

fn schema() -> Arc<TableSchema> {
    use ColumnType::*;
    let c = |name: &str, ty: ColumnType, key: bool| Column {
        name: name.into(),
        ty,
        sql_type: String::new(),
        nullable: !key,
        key,
    };
    Arc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "bench".into(),
        table_name: "wide".into(),
        columns: vec![
            c("id", Int, true),
            c("qty", Uint, false),
            c("price", Float, false),
            c("amount", Decimal, false),
            c("title", Text, false),
            c("created", Datetime, false),
            c("attrs", Json, false),
            c("digest", Blob, false),
            c("day", Date, false),
            c("active", Boolean, false),
        ],
    })
}

fn image(id: i64) -> Vec<Value> {
    vec![
        Value::Int(id),
        Value::UInt(id as u64 * 7),
        Value::Float(id as f64 * 1.25),
        Value::Bytes(format!("{}.{:02}", id * 13, id % 100).into_bytes()),
        Value::Bytes(
            format!("title of row {id:08}, a fairly ordinary product name ...").into_bytes(),
        ),
        Value::Int(1_767_225_600_000_000 + id),
        Value::Bytes(
            format!(
                r#"{{"color":"blue","size":{},"tags":["a","b","c"]}}"#,
                id % 50
            )
            .into_bytes(),
        ),
        Value::Bytes((0..40u8).map(|b| b ^ id as u8).collect()),
        Value::Int(20_454),
        Value::Int(id % 2),
    ]
}

/// `n` rows, mixed: 7 of 10 inserts, 2 updates, 1 delete.
fn batches(schema: &Arc<TableSchema>, rows: usize, batch_rows: usize) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut b = sluice_core::BatchBuilder::new();
    for i in 0..rows as i64 {
        let (op, before, after) = match i % 10 {
            7 | 8 => (Op::Update, Some(image(i - 1)), Some(image(i))),
            9 => (Op::Delete, Some(image(i - 2)), None),
            _ => (Op::Insert, None, Some(image(i))),
        };
        b.push_values(
            schema,
            CommitTs::new(1000 + i as u64),
            0,
            op,
            before.as_deref(),
            after.as_deref(),
        );
        if b.rows() == batch_rows {
            out.push(std::mem::take(&mut b).finish().1);
        }
    }
    if !b.is_empty() {
        out.push(b.finish().1);
    }
    out
}

struct Row {
    batch: usize,
    read: &'static str,
    wasm: f64,
    native: f64,
    bytes_per_row: f64,
}

fn main() -> anyhow::Result<()> {
    if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
        eprintln!(
            "note: RUST_BACKTRACE is set; wasmtime errors will capture backtraces (unset it for clean figures)"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let cache = std::env::temp_dir().join(format!("sluice-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let config = || RuntimeConfig {
        cache_dir: Some(cache.clone()),
        ..RuntimeConfig::default()
    };
    let bytes = std::fs::read(plugin_path("sink-blackhole"))?;

    // Compile (cold) and load from the precompiled cache (warm).
    let runtime = PluginRuntime::new(config())?;
    let t = Instant::now();
    runtime.load(PluginKind::Sink, &bytes)?;
    let compile = t.elapsed();
    let mut loads = Vec::new();
    for _ in 0..20 {
        let fresh = PluginRuntime::new(config())?;
        let t = Instant::now();
        fresh.load(PluginKind::Sink, &bytes)?;
        loads.push(t.elapsed().as_secs_f64());
    }
    let component = runtime.load(PluginKind::Sink, &bytes)?;

    // Instantiate (+ open) and idle memory.
    let mut inst = Vec::new();
    let mut idle = 0;
    for _ in 0..200 {
        let mut sink = WasmSink::new(
            component.clone(),
            PluginSettings::new("sink-blackhole", "{}"),
        )?;
        let t = Instant::now();
        sink.open().await?;
        inst.push(t.elapsed().as_secs_f64());
        idle = sink.instance_memory_bytes().unwrap_or(0);
    }

    let schema = schema();
    let schemas = vec![schema.clone()];
    let sdk = sdk_schema(&schema);
    let mut rows_out = Vec::new();
    for (read, batch_rows) in [
        ("columns", 1usize),
        ("columns", 100),
        ("columns", 1000),
        ("columns", 4000),
        ("rows", 1000),
    ] {
        let config = format!(r#"{{"read": "{read}"}}"#);
        let total = if batch_rows == 1 { 20_000 } else { 200_000 };
        let mut host_batches = batches(&schema, total, batch_rows);
        let bytes_per_row =
            host_batches.iter().map(Batch::wire_bytes).sum::<usize>() as f64 / total as f64;
        let sdk_batches: Vec<_> = host_batches
            .iter()
            .map(|b| b.tables.iter().map(sdk_table).collect::<Vec<_>>())
            .collect();
        let mut wasm = Vec::new();
        let mut native = Vec::new();
        for _ in 0..ROUNDS {
            let mut sink = WasmSink::new(
                component.clone(),
                PluginSettings::new("sink-blackhole", config.clone()),
            )?;
            sink.open().await?;
            let t = Instant::now();
            for b in &mut host_batches {
                sink.write(&schemas, b).await?;
            }
            sink.flush(CommitTs::new(u64::MAX)).await?;
            wasm.push(total as f64 / t.elapsed().as_secs_f64());
            let counted = sink.stats().counters().get("rows").copied().unwrap_or(0);
            assert_eq!(counted, total as u64, "the plugin saw every row");

            let mut harness =
                SinkHarness::<Blackhole>::open(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
            let t = Instant::now();
            for tables in &sdk_batches {
                harness
                    .write(&[&sdk], tables.clone())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            harness
                .flush(u64::MAX)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let elapsed = t.elapsed();
            native.push(total as f64 / elapsed.as_secs_f64());
            assert_eq!(harness.sink().rows, total as u64);
        }
        rows_out.push(Row {
            batch: batch_rows,
            read,
            wasm: median(wasm),
            native: median(native),
            bytes_per_row,
        });
    }

    println!("boundary benchmark (sink-blackhole, 10 mixed columns, medians of {ROUNDS} rounds)");
    println!(
        "{:>8} {:>6} {:>14} {:>14} {:>12} {:>10}",
        "read", "batch", "wasm rows/s", "native rows/s", "wasm/native", "B/row"
    );
    for r in &rows_out {
        println!(
            "{:>8} {:>6} {:>14.0} {:>14.0} {:>12.2} {:>10.0}",
            r.read,
            r.batch,
            r.wasm,
            r.native,
            r.wasm / r.native,
            r.bytes_per_row
        );
    }
    let us = |s: f64| s * 1e6;
    println!(
        "compile (cold load)          {:>10.1} ms",
        compile.as_secs_f64() * 1e3
    );
    println!(
        "precompiled load (median)    {:>10.1} µs",
        us(median(loads.clone()))
    );
    println!(
        "instantiate + open (median)  {:>10.1} µs",
        us(median(inst.clone()))
    );
    println!("idle instance linear memory  {:>10} KiB", idle / 1024);

    let json = serde_json::json!({
        "plugin": "sink-blackhole",
        "columns": 10,
        "rounds": ROUNDS,
        "throughput": rows_out.iter().map(|r| serde_json::json!({
            "read": r.read,
            "batch_rows": r.batch,
            "wasm_rows_per_s": r.wasm.round(),
            "native_rows_per_s": r.native.round(),
            "ratio": (r.wasm / r.native * 1000.0).round() / 1000.0,
            "wire_bytes_per_row": r.bytes_per_row.round(),
        })).collect::<Vec<_>>(),
        "compile_ms": (compile.as_secs_f64() * 1e4).round() / 10.0,
        "precompiled_load_us": us(median(loads)).round(),
        "instantiate_open_us": us(median(inst)).round(),
        "idle_instance_memory_bytes": idle,
    });
    let dir = sluice_tests::workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("boundary.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    println!("written to target/bench/boundary.json");
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}
