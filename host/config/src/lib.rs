//! `sluice-config`: the changefeed file, its schema, defaults and bounds.

pub mod file;
mod limits;
pub mod spec;

pub use limits::ServerLimits;
