//! `filter-mask`: hashes (salted SHA-256) or redacts the values of every column
//! whose name matches one of the configured patterns, in both images of every row.

mod config;
mod mask;

pub use config::{Config, Mode};
pub use mask::MaskColumns;

sluice_sdk::export_filter!(MaskColumns);
