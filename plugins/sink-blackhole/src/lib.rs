//! `sink-blackhole`: reads every value of every row, counts rows and bytes, and
//! keeps nothing. Benchmarks measure the cost of the boundary with it.

mod config;
mod count;

pub use config::{Config, Read};
pub use count::Blackhole;

sluice_sdk::export_sink!(Blackhole);
