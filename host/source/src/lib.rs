//! `sluice-source`: upstream readers behind the `sluice_core::Source` trait.
//!
//! [`mysql::MysqlSource`] reads a MySQL/MariaDB binlog; [`DatagenSource`] is a seeded, deterministic synthetic workload over several
//! tables covering every column type, for the demo, tests and benchmarks.
//!
//! [`filter::TableFilter`] is `[filter]` compiled: which tables a source
//! replicates and which of their events it skips (TiCDC's table filter and
//! event filters).
//!
//! Sources are built from their config (`sluice_config::SourceConfig`) in one
//! place, [`build`], which `sluice run` and a server's processors both call.

mod build;
mod datagen;
pub mod filter;
pub mod mysql;

pub use build::{AnySource, SourceError, build, prepare};

pub use datagen::{DatagenConfig, DatagenError, DatagenSource, Mix};
