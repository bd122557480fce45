//! `sluice-source`: upstream readers behind the `sluice_core::Source` trait.
//!
//! Today: [`DatagenSource`], a seeded, deterministic synthetic workload over several
//! tables covering every column type, for the demo, tests and benchmarks.

mod datagen;

pub use datagen::{DatagenConfig, DatagenError, DatagenSource, Mix};
