//! `sluice redo meta` and `sluice redo apply`: a changefeed's redo log read
//! back after the loss of its site.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_config::{DataDir, Mode, PluginConfig};
use sluice_core::{CommitTs, Filter, Sink};
use sluice_redo::{Listing, Replay, ReplayEvent, Storage, StorageUri};
use sluice_runtime::{PluginKind, PluginRuntime, RuntimeConfig, WasmFilter, WasmSink};

use crate::run::{describe_ts, settings};

/// `sluice redo ...`.
#[derive(Debug, clap::Subcommand)]
pub enum RedoCommand {
    /// Print a redo log's meta (checkpoint and resolved ts), its files and
    /// their sizes.
    Meta {
        /// The changefeed's log: `file:///dir/<changefeed id>`.
        #[arg(long)]
        storage: String,
    },
    /// Replay a redo log's (checkpoint, resolved] into a sink plugin, in
    /// commit-ts order with each DDL in its place, every row flagged replay
    /// (safe mode: a sink applies it idempotently, so an interrupted apply
    /// can be run again).
    Apply {
        /// The changefeed's log: `file:///dir/<changefeed id>`.
        #[arg(long)]
        storage: String,
        /// The sink: a `.wasm` file, or a plugin name looked up in
        /// `--plugin-dir` (overrides `plugin` in `--sink-config`).
        #[arg(long)]
        sink: Option<String>,
        /// A TOML file with the sink's table (`config`, `limits`,
        /// `capabilities`, optionally `plugin`): a changefeed file (its
        /// `[sink]` is used, and its `[[filters]]` run before it, as in the
        /// changefeed: the log holds rows as the source read them) or that
        /// table alone.
        #[arg(long)]
        sink_config: PathBuf,
        /// Where plugins given by name are (default `target/plugins`).
        #[arg(long, default_value = "target/plugins")]
        plugin_dir: PathBuf,
        /// The sink's data directory, for a sink that writes files (granted
        /// as `capabilities.data-dir`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Replay everything the log has up to its resolved ts, not only
        /// what lies above its checkpoint: for a fresh downstream, when the
        /// log was kept from the changefeed's start (`sluice redo meta`
        /// shows its first file).
        #[arg(long)]
        from_start: bool,
        /// No progress lines.
        #[arg(long)]
        quiet: bool,
    },
}

pub async fn redo(command: RedoCommand) -> anyhow::Result<()> {
    match command {
        RedoCommand::Meta { storage } => meta(&storage).await,
        RedoCommand::Apply {
            storage,
            sink,
            sink_config,
            plugin_dir,
            data_dir,
            from_start,
            quiet,
        } => {
            let (filters, sink) = load_plugins(sink, &sink_config, &plugin_dir, data_dir).await?;
            apply(&storage, filters, sink, from_start, !quiet).await
        }
    }
}

/// The storage of one changefeed's log, which must exist.
async fn open_log(uri: &str) -> anyhow::Result<Storage> {
    let parsed = StorageUri::parse(uri).map_err(|e| anyhow::anyhow!("--storage: {e}"))?;
    if let StorageUri::Local(dir) = &parsed
        && !dir.is_dir()
    {
        anyhow::bail!(
            "--storage {parsed}: there is no directory {}",
            dir.display()
        );
    }
    let Some((parent, name)) = parsed.split_last() else {
        anyhow::bail!(
            "--storage {parsed}: name the changefeed's log, file:///dir/<changefeed id> or \
             s3://bucket/prefix/<changefeed id>"
        );
    };
    let storage = Storage::open(&parent, &name)
        .await
        .with_context(|| format!("opening {parsed}"))?;
    if storage.local_dir().is_none() && storage.list().await?.is_empty() {
        anyhow::bail!("--storage {parsed}: there is nothing there");
    }
    Ok(storage)
}

async fn meta(uri: &str) -> anyhow::Result<()> {
    let storage = open_log(uri).await?;
    let shown = storage.location().to_string();
    let listing = Listing::read(&storage)
        .await
        .with_context(|| format!("reading {shown}"))?;
    match listing.meta {
        Some(m) => {
            println!(
                "checkpoint-ts {}",
                describe_ts(CommitTs::new(m.checkpoint_ts))
            );
            println!(
                "resolved-ts   {}",
                describe_ts(CommitTs::new(m.resolved_ts))
            );
        }
        None => println!("no meta: nothing of this log was made durable"),
    }
    let total: u64 = listing.files.iter().map(|(_, size)| size).sum();
    println!("files         {} ({total} bytes)", listing.files.len());
    for (f, size) in &listing.files {
        println!("  {}  {size} bytes", f.name());
    }
    if listing.removed {
        println!("removed       its changefeed was removed: the log is being deleted");
    }
    for other in &listing.others {
        println!("  (not a log file) {}  {} bytes", other.name, other.size);
    }
    Ok(())
}

/// The filters and the sink `sink_config` describes (with `--sink` and
/// `--data-dir` over the sink), loaded and their options checked.
async fn load_plugins(
    sink: Option<String>,
    sink_config: &Path,
    plugin_dir: &Path,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<(Vec<WasmFilter>, WasmSink)> {
    let text = std::fs::read_to_string(sink_config)
        .with_context(|| format!("cannot read {}", sink_config.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", sink_config.display()))?;
    let filter_tables = match table.remove("filters") {
        Some(toml::Value::Array(filters)) => filters,
        _ => Vec::new(),
    };
    if let Some(toml::Value::Table(sink)) = table.remove("sink") {
        table = sink;
    }
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let mut filters = Vec::new();
    for (i, f) in filter_tables.into_iter().enumerate() {
        let at = format!("filters[{i}]");
        let section: PluginConfig<String> = f
            .try_into()
            .with_context(|| format!("{at} in {}", sink_config.display()))?;
        section.validate(&at, Mode::Run)?;
        let path = section.resolve(plugin_dir);
        let component = runtime
            .load_file(PluginKind::Filter, &path)
            .with_context(|| format!("{at} `{}` ({})", section.plugin, path.display()))?;
        let mut filter = WasmFilter::new(component, settings(&section, "redo-apply"))?;
        filter
            .validate_config()
            .await
            .with_context(|| format!("{at}.config was rejected by `{}`", section.plugin))?;
        filters.push(filter);
    }
    if let Some(sink) = sink {
        table.insert("plugin".into(), toml::Value::String(sink));
    }
    if !table.contains_key("plugin") {
        anyhow::bail!("name the sink: --sink FILE.wasm|NAME, or `plugin` in its table");
    }
    let mut section: PluginConfig<String> = toml::Value::Table(table)
        .try_into()
        .with_context(|| format!("the sink table in {}", sink_config.display()))?;
    if let Some(dir) = data_dir {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        section.capabilities.data_dir = DataDir::At(dir);
    }
    section.validate("sink", Mode::Run)?;
    let path = section.resolve(plugin_dir);
    let component = runtime
        .load_file(PluginKind::Sink, &path)
        .with_context(|| format!("sink `{}` ({})", section.plugin, path.display()))?;
    let mut sink = WasmSink::new(component, settings(&section, "redo-apply"))?;
    sink.validate_config()
        .await
        .with_context(|| format!("the sink's config was rejected by `{}`", section.plugin))?;
    Ok((filters, sink))
}

/// Rows written between two flushes of the sink. A flush may fall inside a
/// large transaction, as in the pipeline: a sink keeps what it has not
/// flushed within its memory quota, so a 1 M-row transaction cannot wait whole.
const FLUSH_ROWS: usize = 100_000;

async fn apply(
    uri: &str,
    mut filters: Vec<WasmFilter>,
    mut sink: WasmSink,
    from_start: bool,
    progress: bool,
) -> anyhow::Result<()> {
    let storage = open_log(uri).await?;
    let shown = storage.location().to_string();
    let mut replay = Replay::open(storage, from_start)
        .await
        .with_context(|| format!("reading {shown}"))?;
    let meta = replay.meta();
    eprintln!(
        "applying ({}, {}] of {shown} into {}",
        describe_ts(CommitTs::new(meta.checkpoint_ts)),
        describe_ts(CommitTs::new(meta.resolved_ts)),
        sink.name()
    );
    if from_start && replay.collected() {
        eprintln!(
            "note: files below the checkpoint ({}) were removed from this log: what they held \
             is not replayed",
            describe_ts(CommitTs::new(
                replay.stored_meta().map_or(0, |m| m.checkpoint_ts)
            ))
        );
    }
    let started = Instant::now();
    for f in &mut filters {
        f.open()
            .await
            .with_context(|| format!("filter `{}`'s open failed", f.name()))?;
    }
    sink.open().await.context("the sink's open failed")?;
    let (mut rows, mut ddls, mut unflushed) = (0u64, 0u64, 0usize);
    let mut at = CommitTs::new(meta.checkpoint_ts);
    let mut last_line = Instant::now();
    while let Some(event) = replay
        .next()
        .await
        .with_context(|| format!("reading {shown} (nothing past this point was applied)"))?
    {
        match event {
            ReplayEvent::Rows {
                schemas,
                mut batch,
                max_ts,
            } => {
                batch.mark_replay();
                for f in &mut filters {
                    f.transform(&schemas, &mut batch)
                        .await
                        .with_context(|| format!("filter `{}` failed at ts {max_ts}", f.name()))?;
                }
                let n = batch.row_count();
                sink.write(&schemas, &mut batch)
                    .await
                    .with_context(|| format!("the sink's write failed at ts {max_ts}"))?;
                rows += n as u64;
                unflushed += n;
                at = at.max(max_ts);
                if unflushed >= FLUSH_ROWS {
                    sink.flush(at)
                        .await
                        .with_context(|| format!("the sink's flush failed at ts {at}"))?;
                    unflushed = 0;
                }
            }
            ReplayEvent::Ddl(ddl) => {
                sink.flush(at)
                    .await
                    .with_context(|| format!("the sink's flush failed at ts {at}"))?;
                unflushed = 0;
                sink.apply_ddl(&ddl).await.with_context(|| {
                    format!(
                        "the sink's DDL at ts {} failed: {}",
                        ddl.commit_ts, ddl.query
                    )
                })?;
                ddls += 1;
                at = at.max(ddl.commit_ts);
            }
        }
        if progress && last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            eprintln!(
                "{}",
                line(rows, ddls, at, meta.resolved_ts, started.elapsed())
            );
        }
    }
    let end = CommitTs::new(meta.resolved_ts);
    sink.flush(end)
        .await
        .with_context(|| format!("the sink's flush failed at ts {end}"))?;
    sink.close().await.context("the sink's close failed")?;
    for s in replay.skipped() {
        eprintln!(
            "skipped past the resolved ts in {}: {} (nothing there is needed)",
            s.file, s.damage
        );
    }
    println!(
        "applied {rows} rows and {ddls} DDLs up to {} in {:.2}s ({:.0} rows/s)",
        describe_ts(end),
        started.elapsed().as_secs_f64(),
        rows as f64 / started.elapsed().as_secs_f64().max(1e-9)
    );
    Ok(())
}

fn line(rows: u64, ddls: u64, at: CommitTs, resolved: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let left_ms = CommitTs::new(resolved)
        .physical_millis()
        .saturating_sub(at.physical_millis());
    format!(
        "  {rows} rows, {ddls} DDLs ({:.0} rows/s); at {}, {:.1}s of upstream time left",
        rows as f64 / secs,
        describe_ts(at),
        left_ms as f64 / 1000.0
    )
}
