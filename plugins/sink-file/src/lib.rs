//! `sink-file`: writes every row change as one line (canal-json, CSV or Debezium
//! JSON, as TiCDC writes them) into numbered files inside the plugin's private
//! directory, rotating by size. A `flush` syncs the current file to disk before it
//! acknowledges.

mod config;
#[cfg(test)]
mod encode_tests;
mod files;
mod sink;

pub use config::{BinaryEncoding, Config, Format};
#[cfg(not(target_arch = "wasm32"))]
pub use files::set_native_data_root;
pub use sink::SinkFile;

sluice_sdk::export_sink!(SinkFile);
