//! `sluice-formats`: the row formats Sluice's sinks write — canal-json, CSV and
//! Debezium JSON, as TiCDC writes them — with their options. `sink-file` writes
//! them as lines into files, `sink-webhook` as the events of HTTP requests.

mod encode;
mod mysql_type;
mod options;

pub use encode::{Encoder, TableHeader};
pub use options::{
    BinaryEncoding, CsvOptions, EncodeOptions, Format, MAX_DELIMITER_CHARS, MAX_NULL_CHARS,
    validate_csv,
};
