//! `sluice`: the Sluice command line.

mod plugin;
mod redo;
mod run;
mod server;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Sluice: change data capture with sandboxed WebAssembly sinks and filters.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one changefeed described in a TOML file until its source ends (or Ctrl-C).
    Run {
        /// The changefeed file.
        #[arg(long, short)]
        config: PathBuf,
        /// Look plugins up here instead of the file's `plugin-dir`.
        #[arg(long)]
        plugin_dir: Option<PathBuf>,
        /// Print no progress lines, only the summary.
        #[arg(long)]
        quiet: bool,
    },
    /// Run the server: the owner, the processors, the gRPC admin API and the HTTP
    /// listener (`/metrics`, `/healthz`, `/api/v1/`), until Ctrl-C or SIGTERM.
    Server(server::ServeArgs),
    /// Talk to a running server: changefeeds, plugins, captures, status.
    Cli(sluice_api::client::CliArgs),
    /// Compare tables of two databases, MySQL-compatible or PostgreSQL
    /// (chunked checksums over the primary key, then row by row where a
    /// chunk differs; across engines row by row); exits non-zero when they
    /// differ.
    Diff {
        /// The source database, `mysql://user:password@host:port/` or
        /// `postgres://user:password@host:port/database`.
        #[arg(long, env = "SLUICE_DIFF_SOURCE")]
        source: String,
        /// The target database.
        #[arg(long, env = "SLUICE_DIFF_TARGET")]
        target: String,
        /// A table to compare, `schema.table`, or `schema.table=schema.table`
        /// when the target holds it under another name (repeat for more).
        #[arg(long = "table", required = true)]
        tables: Vec<String>,
        /// Rows per checksummed chunk.
        #[arg(long, default_value_t = 10_000)]
        chunk_rows: u64,
        /// Differences printed per table (all are counted).
        #[arg(long, default_value_t = 20)]
        max_reported: usize,
        /// No progress lines on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Read a changefeed's redo log back: its meta, or a replay into a sink
    /// (disaster recovery).
    Redo {
        #[command(subcommand)]
        command: redo::RedoCommand,
    },
    /// Make, build and test plugins: `plugin new`, `plugin build`, `plugin test`.
    Plugin {
        #[command(subcommand)]
        command: plugin::PluginCommand,
    },
    /// Print this binary's version and the plugin contract it hosts.
    Version,
    /// Check that a file is a valid sink or filter component.
    CheckPlugin {
        /// The component (.wasm).
        path: PathBuf,
        /// Which world it must implement.
        #[arg(long, value_parser = ["sink", "filter"])]
        kind: String,
    },
}

// The global allocator, chosen by measurement (see the features in Cargo.toml).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| "warn,sluice=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run {
                config,
                plugin_dir,
                quiet,
            } => run::run(&config, plugin_dir, quiet).await,
            Command::CheckPlugin { path, kind } => run::check_plugin(&path, &kind),
            Command::Diff {
                source,
                target,
                tables,
                chunk_rows,
                max_reported,
                quiet,
            } => {
                let options = sluice_diff::DiffOptions {
                    source,
                    target,
                    tables,
                    chunk_rows,
                    max_reported,
                    progress: !quiet,
                };
                run::diff(&options).await
            }
            Command::Server(args) => server::serve(args).await,
            Command::Redo { command } => redo::redo(command).await,
            Command::Plugin { command } => plugin::plugin(command).await,
            Command::Version => {
                println!(
                    "sluice {}\nplugin contract: sluice:plugin@{} (wit/plugin.wit)",
                    env!("CARGO_PKG_VERSION"),
                    sluice_runtime::CONTRACT_VERSION
                );
                Ok(())
            }
            Command::Cli(args) => sluice_api::client::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
