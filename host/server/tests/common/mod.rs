//! Helpers shared by the end-to-end tests of the `sluice` binary.
#![allow(dead_code)]

pub mod server;

use std::path::Path;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use sluice_core::Op;
use sluice_source::{DatagenConfig, DatagenSource};
use sluice_tests::text_of;

/// Writes `text` to `<dir>/<name>.toml` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Every canal-json line in the files of `dir`, in file order.
pub fn lines_in(dir: &Path) -> Vec<Json> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

pub fn hash(salt: &str, value: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(value.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Expected output lines (type, commit ts, data) per row, as sink-file writes them
/// after filter-mask, for the quickstart workload with `total` rows.
pub fn expected_rows(total: u64) -> Vec<Json> {
    let mut g = DatagenSource::new(DatagenConfig {
        seed: 42,
        total_rows: total,
        rate: 0,
        ..Default::default()
    })
    .unwrap();
    let mut rows = Vec::new();
    while let Some(txn) = g.next_transaction() {
        for (table, row) in txn.rows() {
            let image = row.image();
            let mut data = serde_json::Map::new();
            for (col, v) in table.columns.iter().zip(&image) {
                let masked =
                    table.table_name == "users" && (col.name == "email" || col.name == "name");
                let text =
                    text_of(v, col.ty).map(|t| if masked { hash("quickstart", &t) } else { t });
                data.insert(col.name.clone(), text.map_or(Json::Null, Json::String));
            }
            let kind = match row.op {
                Op::Insert => "INSERT",
                Op::Update => "UPDATE",
                Op::Delete => "DELETE",
            };
            rows.push(serde_json::json!({
                "table": table.table_name,
                "type": kind,
                "commitTs": txn.commit_ts.get(),
                "data": data,
            }));
        }
    }
    rows
}
