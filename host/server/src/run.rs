//! `sluice run`: one changefeed in the foreground.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_core::{CheckpointTs, CommitTs};
use sluice_processor::{Pipeline, Report};
use sluice_runtime::{PluginKind, PluginRuntime, RuntimeConfig, WasmFilter, WasmSink};
use tracing::Instrument;

use std::sync::Arc;

use sluice_meta::{EmbeddedMetaStore, MetaStore};

use sluice_capture::progress::MetaProgressStore;
use sluice_capture::{Changefeed, ChangefeedBuilder, plugin_settings};
use sluice_config::{DataDir, PluginConfig, RunConfig};

pub async fn run(path: &Path, plugin_dir: Option<PathBuf>, quiet: bool) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut file = RunConfig::parse(&text)
        .with_context(|| format!("invalid changefeed file {}", path.display()))?;
    let plugin_dir = plugin_dir.unwrap_or_else(|| file.plugin_dir.clone());
    check_private_dirs(&file)?;
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(file.data_dir.join("precompiled")),
        ..RuntimeConfig::default()
    })?;

    let run_id = run_id(&file);
    let mut filters = Vec::new();
    for (i, section) in file.feed.filters.iter_mut().enumerate() {
        let at = format!("filters[{i}]");
        let file_path = section.resolve(&plugin_dir);
        let component = runtime
            .load_file(PluginKind::Filter, &file_path)
            .with_context(|| {
                format!("{at}.plugin `{}` ({})", section.plugin, file_path.display())
            })?;
        section.limits.resolve_memory(component.declared_memory());
        let mut filter = WasmFilter::new(component, settings(section, &run_id))?;
        filter
            .validate_config()
            .await
            .with_context(|| format!("{at}.config was rejected by `{}`", section.plugin))?;
        filters.push(filter);
    }
    let sink_section = &mut file.feed.sink;
    let sink_path = sink_section.resolve(&plugin_dir);
    let component = runtime
        .load_file(PluginKind::Sink, &sink_path)
        .with_context(|| {
            format!(
                "sink.plugin `{}` ({})",
                sink_section.plugin,
                sink_path.display()
            )
        })?;
    sink_section
        .limits
        .resolve_memory(component.declared_memory());
    let mut sink = WasmSink::new(component, settings(sink_section, &run_id))?;
    sink.validate_config()
        .await
        .with_context(|| format!("sink.config was rejected by `{}`", sink_section.plugin))?;

    let total = file.feed.source.total_rows().unwrap_or(0);
    let id = file.id.clone();
    let mut builder = ChangefeedBuilder::new(&file.feed, filters, sink);
    if file.resume {
        std::fs::create_dir_all(&file.data_dir)
            .with_context(|| format!("cannot create the data dir {}", file.data_dir.display()))?;
        let path = file.data_dir.join(EmbeddedMetaStore::FILE_NAME);
        let store: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::open(&path).await?);
        let (store, previous) = MetaProgressStore::claim(
            store,
            sluice_capture::progress::Claim::local(&file.id),
            None,
            None,
        )
        .await?;
        if previous.epoch > 0 {
            builder = builder.resume(
                previous.resume_point(CheckpointTs::new(previous.checkpoint_ts)),
                CommitTs::new(previous.fence_ts),
            );
            eprintln!(
                "[{}] resuming from checkpoint {} (run {}); rows up to {} are flagged replay",
                file.id,
                describe_ts(CommitTs::new(previous.checkpoint_ts)),
                previous.epoch + 1,
                previous.fence_ts
            );
        }
        builder = builder.progress_store(Box::new(store));
    }
    if file.feed.consistent.enabled() {
        let root = sluice_redo::StorageUri::parse(&file.feed.consistent.storage)
            .map_err(|e| anyhow::anyhow!("consistent.storage: {e}"))?;
        let log = sluice_capture::open_redo(
            &file.feed.consistent,
            &root,
            (&file.id, 0),
            &sluice_core::WriteFence::open(),
        )
        .await?;
        eprintln!(
            "[{}] writing every change to the redo log in {root}/{} before the sink",
            file.id, file.id
        );
        builder = builder.redo(log);
    }
    let Changefeed {
        mut pipeline,
        source,
        validator,
    } = builder.build()?;
    // The continuous validator, if `[validator]` asks for one: at the end
    // it checks what is still pending (each row up to its retries, bounded)
    // and its findings are printed with the summary.
    let validator = validator
        .zip(sluice_capture::validate::settings(&file.feed))
        .map(|(running, settings)| {
            // Each row settles within retry-count rounds; a downstream that
            // cannot be read keeps rows pending, so the wait is bounded.
            let limit = (settings.interval * (settings.retries + 2) + Duration::from_secs(30))
                .min(MAX_VALIDATOR_DRAIN);
            (running, limit)
        });
    let reporter = (!quiet).then(|| {
        let mut progress = pipeline.progress();
        let id = id.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut last = (Instant::now(), 0u64);
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let p = progress.borrow_and_update().clone();
                let rate = (p.rows_read - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), p.rows_read);
                let of = if total > 0 { format!("/{total}") } else { String::new() };
                let redo = p.redo.as_ref().map_or(String::new(), |r| {
                    format!(
                        "  redo resolved {} (+{} waiting)",
                        describe_ts(r.resolved_ts),
                        p.redo_waiting
                    )
                });
                eprintln!(
                    "[{id}] {:>6.1}s  read {}{of} rows  written {}  checkpoint {}  {:.0} rows/s  retries {}{redo}",
                    started.elapsed().as_secs_f64(),
                    p.rows_read,
                    p.rows_written,
                    describe_ts(CommitTs::from(p.checkpoint_ts)),
                    rate,
                    p.retries
                );
            }
        })
    });
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("[{id}] interrupted: writing what was read, flushing, closing");
    };
    let span = tracing::info_span!("changefeed", id = %id);
    let result = pipeline.run(source, shutdown).instrument(span).await;
    if let Some(r) = reporter {
        r.abort();
    }
    let report = result.with_context(|| format!("changefeed `{id}` failed"))?;
    print_summary(&id, &report, &pipeline);
    if let Some((running, limit)) = validator {
        // Nothing more will come: the validator settles what it holds.
        drop(pipeline.take_ack_listener());
        if !quiet {
            eprintln!("[{id}] validator: checking the last changed rows downstream ...");
        }
        // Ctrl-C stops the wait (the signal no longer ends the process
        // once tokio listens for it).
        let reports = running.reports.clone();
        let v = tokio::select! {
            v = running.finish(limit) => v,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("[{id}] interrupted: the validator's rows still pending stay unchecked");
                reports.borrow().clone()
            }
        };
        println!("{}", validator_summary(&v));
        if v.mismatched > 0 {
            anyhow::bail!(
                "the validator found {} row(s) that differ downstream (the latest are named above)",
                v.mismatched
            );
        }
    }
    Ok(())
}

/// Longest `sluice run` waits at its end for the validator's pending rows.
const MAX_VALIDATOR_DRAIN: Duration = Duration::from_secs(600);

/// The validator's findings: counts, then each named mismatch on a line.
fn validator_summary(v: &sluice_core::ValidatorReport) -> String {
    let mut text = format!(
        "validator ({}): {} rows matched, {} mismatched, {} skipped, {} still pending, {} failed reads",
        v.mode, v.matched, v.mismatched, v.skipped, v.pending, v.errors
    );
    if let Some(e) = &v.last_error {
        text.push_str(&format!(" (last: {e})"));
    }
    for line in &v.mismatches {
        text.push_str("\n  ");
        text.push_str(line);
    }
    text
}

/// A plugin's granted directory must not overlap the host's own state (the
/// precompiled artifacts and the meta store live there), nor another plugin's.
fn check_private_dirs(file: &RunConfig) -> anyhow::Result<()> {
    let canonical = |p: &Path| -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(std::fs::canonicalize(p)?)
    };
    let host = canonical(&file.data_dir)?;
    let mut granted: Vec<(String, PathBuf)> = Vec::new();
    for (at, section) in file.feed.plugins() {
        let DataDir::At(dir) = &section.capabilities.data_dir else {
            continue;
        };
        let dir = canonical(dir)?;
        if dir.starts_with(&host) || host.starts_with(&dir) {
            anyhow::bail!(
                "{at}.capabilities.data-dir {} overlaps the host's data-dir {}; give the plugin a directory of its own",
                dir.display(),
                host.display()
            );
        }
        if let Some((other, _)) = granted
            .iter()
            .find(|(_, d)| d.starts_with(&dir) || dir.starts_with(d))
        {
            anyhow::bail!(
                "{at}.capabilities.data-dir overlaps the directory granted to {other}; give each plugin its own"
            );
        }
        granted.push((at, dir));
    }
    Ok(())
}

/// Runtime settings of a plugin `sluice run` loads: named by its file stem, with
/// the directory the file grants it.
pub(crate) fn settings(section: &PluginConfig<String>, id: &str) -> sluice_runtime::PluginSettings {
    let dir = match &section.capabilities.data_dir {
        DataDir::At(dir) => Some(dir.clone()),
        DataDir::Denied | DataDir::HostChosen => None,
    };
    plugin_settings(section, id, section.name(), dir)
}

/// How the plugins of `sluice run` name their changefeed (`host.changefeed`):
/// `run/<[changefeed] id>`.
fn run_id(file: &RunConfig) -> String {
    format!("run/{}", file.id)
}

pub(crate) fn describe_ts(ts: CommitTs) -> String {
    if ts.get() == 0 {
        return "0".into();
    }
    let ms = ts.physical_millis();
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
    format!("{} ({h:02}:{m:02}:{s:02}.{:03} UTC)", ts.get(), ms % 1000)
}

/// Prints the run's summary. The run is over by then: a closed stdout (say, piped
/// into `head`) loses only the summary, so write errors are ignored.
fn print_summary(id: &str, report: &Report, pipeline: &Pipeline<WasmSink, WasmFilter>) {
    use std::io::Write;
    let text = summary(id, report, pipeline);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn summary(id: &str, report: &Report, pipeline: &Pipeline<WasmSink, WasmFilter>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let p = &report.progress;
    let how = if report.interrupted {
        "stopped"
    } else {
        "finished"
    };
    let _ = writeln!(
        out,
        "changefeed {id} {how} in {:.2}s: {} rows in {} transactions read, {} rows written, checkpoint {}",
        report.elapsed.as_secs_f64(),
        p.rows_read,
        p.transactions,
        p.rows_written,
        describe_ts(CommitTs::from(p.checkpoint_ts))
    );
    if let Some(r) = &p.redo {
        let _ = writeln!(
            out,
            "redo log: resolved {}, checkpoint {}, {} bytes in {} flushes ({:.0} ms flushing, {:.0} ms busy)",
            describe_ts(r.resolved_ts),
            describe_ts(r.checkpoint_ts),
            r.bytes_written,
            r.flushes,
            r.flush_time.as_secs_f64() * 1000.0,
            r.busy_time.as_secs_f64() * 1000.0
        );
    }
    let _ = writeln!(out, "{:<24} {:>10} {:>10}", "table", "rows in", "rows out");
    for (table, n) in &report.rows_in {
        let written = report.rows_out.get(table).copied().unwrap_or(0);
        let _ = writeln!(out, "{table:<24} {n:>10} {written:>10}");
    }
    for filter in pipeline.filters() {
        use sluice_core::Filter;
        plugin_line(&mut out, "filter", filter.name(), filter.stats());
    }
    use sluice_core::Sink;
    plugin_line(
        &mut out,
        "sink",
        pipeline.sink().name(),
        pipeline.sink().stats(),
    );
    out
}

fn plugin_line(out: &mut String, role: &str, name: &str, stats: &sluice_runtime::PluginStats) {
    use std::fmt::Write;
    use std::sync::atomic::Ordering;
    let counters: Vec<String> = stats
        .counters()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(
        out,
        "{role} {name}: instances {}, stopped {}, peak memory {} KiB{}{}{}",
        stats.instantiations.load(Ordering::Relaxed),
        stats.stops.load(Ordering::Relaxed),
        stats.peak_memory_bytes.load(Ordering::Relaxed) / 1024,
        match stats.memory_refusals.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(" ({n} growths refused at the quota)"),
        },
        if counters.is_empty() {
            String::new()
        } else {
            format!(", counters {}", counters.join(" "))
        },
        stats
            .last_stop()
            .map(|r| format!(", last stop: {r}"))
            .unwrap_or_default(),
    );
}

pub fn check_plugin(path: &Path, kind: &str) -> anyhow::Result<()> {
    let kind = if kind == "sink" {
        PluginKind::Sink
    } else {
        PluginKind::Filter
    };
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let component = runtime
        .load_file(kind, path)
        .with_context(|| format!("{} is not a usable {} plugin", path.display(), kind.world()))?;
    // The check is done; a closed stdout loses only this line.
    use std::io::Write;
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}: ok, implements the {} world, sha256 {}",
        path.display(),
        kind.world(),
        component.digest()
    );
    Ok(())
}

/// `sluice diff`: prints how each table compared; an error when any differs.
pub async fn diff(options: &sluice_diff::DiffOptions) -> anyhow::Result<()> {
    let tables = sluice_diff::diff(options).await?;
    let mut differing = 0;
    for t in &tables {
        if t.is_equal() {
            println!(
                "{}: equal ({} chunks{})",
                t.table,
                t.chunks,
                if t.by_checksum { "" } else { ", row by row" }
            );
            continue;
        }
        differing += 1;
        if let Some(why) = &t.schema {
            println!("{}: {why}", t.table);
            continue;
        }
        println!(
            "{}: {} ({} of {} chunks)",
            t.table,
            match t.rows_differing {
                1 => "1 row differs".to_string(),
                n => format!("{n} rows differ"),
            },
            t.chunks_differing,
            t.chunks
        );
        for d in &t.differences {
            match d {
                sluice_diff::RowDiff::Missing { key } => println!("  {key}: missing in the target"),
                sluice_diff::RowDiff::Extra { key } => println!("  {key}: only in the target"),
                sluice_diff::RowDiff::Changed { key, columns } => {
                    for (column, a, b) in columns {
                        println!("  {key}: {column}: source {a}, target {b}");
                    }
                }
            }
        }
        if t.rows_differing as usize > t.differences.len() {
            println!(
                "  ... and {} more",
                t.rows_differing as usize - t.differences.len()
            );
        }
    }
    if differing > 0 {
        anyhow::bail!("{differing} of {} tables differ", tables.len());
    }
    Ok(())
}
