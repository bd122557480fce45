//! `sink-lines`: appends one text line per row change to a file in the sink's data
//! directory; `flush` syncs the file before it acknowledges.

mod config;
mod sink;

pub use config::Config;
pub use sink::LineSink;

sluice_sdk::export_sink!(LineSink);
