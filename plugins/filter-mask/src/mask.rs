use std::collections::HashMap;

use sha2::{Digest, Sha256};
use sluice_sdk::{
    ColumnData, ColumnType, ColumnValues, Error, Filter, Schemas, TableBatch, TableSchema,
    glob_match, host,
};

use crate::{Config, Mode};

/// Hashes or redacts the columns matched by name patterns.
#[derive(Debug)]
pub struct MaskColumns {
    patterns: Vec<String>,
    rewrite: Rewrite,
    /// Matched column indexes per (table id, schema version).
    matched: HashMap<(u32, u32), Vec<usize>>,
}

/// How one value is rewritten.
#[derive(Debug)]
struct Rewrite {
    mode: Mode,
    /// A hasher that has already consumed the salt.
    salted: Sha256,
    /// `redact-with` as raw bytes, and as a JSON string.
    redact_text: Vec<u8>,
    redact_json: Vec<u8>,
}

impl Filter for MaskColumns {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        let redact_json = serde_json::to_vec(&config.redact_with)
            .map_err(|e| Error::config(format!("redact-with cannot be written as JSON: {e}")))?;
        Ok(Self {
            patterns: config.columns,
            rewrite: Rewrite {
                mode: config.mode,
                salted: Sha256::new_with_prefix(config.salt.as_bytes()),
                redact_text: config.redact_with.into_bytes(),
                redact_json,
            },
            matched: HashMap::new(),
        })
    }

    fn transform(
        &mut self,
        schemas: &Schemas,
        mut tables: Vec<TableBatch>,
    ) -> Result<Vec<TableBatch>, Error> {
        let mut masked = 0;
        for table in &mut tables {
            let schema = schemas.of(table).ok_or_else(|| {
                Error::fatal(format!(
                    "no schema for table {} version {}",
                    table.table_id, table.schema_version
                ))
            })?;
            let columns = self
                .matched
                .entry((table.table_id, table.schema_version))
                .or_insert_with(|| matched_columns(&self.patterns, schema));
            for &i in columns.iter() {
                let ty = schema.columns[i].ty;
                for image in [&mut table.before, &mut table.after] {
                    if let Some(column) = image.get_mut(i) {
                        masked += self.rewrite.column(column, ty);
                    }
                }
            }
        }
        if masked > 0 {
            host::counter_add("masked", masked);
        }
        Ok(tables)
    }
}

/// Indexes of the columns of `schema` that any pattern matches.
fn matched_columns(patterns: &[String], schema: &TableSchema) -> Vec<usize> {
    schema
        .columns
        .iter()
        .enumerate()
        .filter(|(_, column)| {
            patterns.iter().any(|pattern| {
                if pattern.contains('.') {
                    let qualified = format!(
                        "{}.{}.{}",
                        schema.schema_name, schema.table_name, column.name
                    );
                    glob_match(pattern, &qualified)
                } else {
                    glob_match(pattern, &column.name)
                }
            })
        })
        .map(|(i, _)| i)
        .collect()
}

impl Rewrite {
    /// Rewrite every non-NULL value of `column`; returns how many there were.
    fn column(&self, column: &mut ColumnData, ty: ColumnType) -> u64 {
        let values = (0..column.len()).filter(|&i| !column.is_null(i)).count() as u64;
        if values == 0 {
            return 0;
        }
        match ty {
            ColumnType::Text | ColumnType::Blob => {
                column.map_bytes(|v, out| self.value(v, false, out))
            }
            ColumnType::Json => column.map_bytes(|v, out| self.value(v, true, out)),
            ColumnType::Int
            | ColumnType::Uint
            | ColumnType::Float
            | ColumnType::Decimal
            | ColumnType::Datetime
            | ColumnType::Date
            | ColumnType::Boolean => set_all_null(column),
        }
        values
    }

    /// Append the replacement for `value`, as a JSON string when `json`.
    fn value(&self, value: &[u8], json: bool, out: &mut Vec<u8>) {
        match self.mode {
            Mode::Hash => {
                let digest = self.salted.clone().chain_update(value).finalize();
                if json {
                    out.push(b'"');
                }
                for byte in digest {
                    out.push(HEX[usize::from(byte >> 4)]);
                    out.push(HEX[usize::from(byte & 0x0f)]);
                }
                if json {
                    out.push(b'"');
                }
            }
            Mode::Redact if json => out.extend_from_slice(&self.redact_json),
            Mode::Redact => out.extend_from_slice(&self.redact_text),
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Make every value NULL, and clear the stored values so the originals do not
/// travel on behind the NULL bits.
fn set_all_null(column: &mut ColumnData) {
    match &mut column.values {
        ColumnValues::Int64(v) => v.fill(0),
        ColumnValues::Uint64(v) => v.fill(0),
        ColumnValues::Float64(v) => v.fill(0.0),
        ColumnValues::Bytes(_) => column.map_bytes(|_, _| {}),
    }
    for i in 0..column.len() {
        column.set_null(i);
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};
    use sluice_sdk::testing::{FilterHarness, schema};
    use sluice_sdk::{
        ColumnType, ColumnValues, Error, Op, TableBatch, TableBatchBuilder, TableSchema, Value,
    };

    use super::MaskColumns;

    use sluice_sdk::testing::ImageText as Image;

    fn rows(
        schema: &TableSchema,
        batch: &TableBatch,
    ) -> Vec<(Op, u64, Option<Image>, Option<Image>)> {
        sluice_sdk::testing::rows_as_text(schema, batch)
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    fn sha256_hex(data: &[u8]) -> String {
        Sha256::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn users() -> TableSchema {
        schema(
            1,
            "app",
            "users",
            &[
                ("id", ColumnType::Int, true),
                ("email", ColumnType::Text, false),
                ("avatar", ColumnType::Blob, false),
                ("profile", ColumnType::Json, false),
                ("city", ColumnType::Text, false),
            ],
        )
    }

    #[test]
    fn hashes_text_blob_and_json_with_the_salt_and_keeps_nulls() {
        let t = users();
        let mut b = TableBatchBuilder::new(&t);
        b.insert(
            10,
            &[
                Value::Int(1),
                Value::Text("abc"),
                Value::Blob(b"\x00\xff"),
                Value::Json("{}"),
                Value::Text("Oslo"),
            ],
        );
        b.update(
            11,
            &[
                Value::Int(1),
                Value::Text("abc"),
                Value::Null,
                Value::Json("{}"),
                Value::Text("Oslo"),
            ],
            &[
                Value::Int(1),
                Value::Null,
                Value::Null,
                Value::Json("[1]"),
                Value::Text("Rome"),
            ],
        );
        b.delete(
            12,
            &[
                Value::Int(1),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Text("Rome"),
            ],
        );

        let mut unsalted = FilterHarness::<MaskColumns>::open(r#"{"columns": ["email"]}"#).unwrap();
        let out = unsalted.transform(&[&t], vec![b.clone().finish()]).unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        let got = rows(&t, &out[0]);
        assert_eq!(got[0].3.as_ref().unwrap()[1], s(abc));
        assert_eq!(got[1].2.as_ref().unwrap()[1], s(abc));

        let mut salted = FilterHarness::<MaskColumns>::open(
            r#"{"columns": ["email", "avatar", "prof*"], "salt": "pepper"}"#,
        )
        .unwrap();
        let out = salted.transform(&[&t], vec![b.finish()]).unwrap();
        assert_eq!(out.len(), 1);
        let h = |v: &[u8]| [b"pepper".as_slice(), v].concat();
        let (email, avatar) = (sha256_hex(&h(b"abc")), sha256_hex(&h(b"\x00\xff")));
        let (empty, one) = (
            format!("\"{}\"", sha256_hex(&h(b"{}"))),
            format!("\"{}\"", sha256_hex(&h(b"[1]"))),
        );
        assert_eq!(
            rows(&t, &out[0]),
            vec![
                (
                    Op::Insert,
                    10,
                    None,
                    Some(vec![s("1"), s(&email), s(&avatar), s(&empty), s("Oslo")])
                ),
                (
                    Op::Update,
                    11,
                    Some(vec![s("1"), s(&email), None, s(&empty), s("Oslo")]),
                    Some(vec![s("1"), None, None, s(&one), s("Rome")]),
                ),
                (
                    Op::Delete,
                    12,
                    Some(vec![s("1"), None, None, None, s("Rome")]),
                    None
                ),
            ]
        );
        // The unsalted run masked 2 emails; this one 2 emails, 1 avatar, 3 profiles.
        assert_eq!(
            sluice_sdk::host::native_counters().get("masked"),
            Some(&(2 + 6))
        );
    }

    #[test]
    fn redacts_by_qualified_pattern_and_nulls_other_types() {
        let events = schema(
            2,
            "app",
            "events",
            &[
                ("id", ColumnType::Uint, true),
                ("amount", ColumnType::Decimal, false),
                ("at", ColumnType::Datetime, false),
                ("day", ColumnType::Date, false),
                ("rate", ColumnType::Float, false),
                ("paid", ColumnType::Boolean, false),
                ("n", ColumnType::Int, false),
                ("note", ColumnType::Text, false),
                ("meta", ColumnType::Json, false),
            ],
        );
        let mut other = events.clone();
        other.table_id = 3;
        other.schema_name = "audit".to_string();
        let row = [
            Value::UInt(5),
            Value::Decimal("12.50"),
            Value::DateTime(1_700_000_000_000_000),
            Value::Date(19_000),
            Value::Float(0.5),
            Value::Bool(true),
            Value::Int(-3),
            Value::Text("secret"),
            Value::Json(r#"{"k":"v"}"#),
        ];
        let mut with_null = row;
        with_null[7] = Value::Null;
        let mut b = TableBatchBuilder::new(&events);
        b.insert(20, &row);
        b.update(21, &row, &with_null);
        let mut c = TableBatchBuilder::new(&other);
        c.insert(22, &row);

        let config = r#"{"columns": ["app.*.?mount", "*.events.at", "app.events.day", "app.events.rate", "app.events.paid", "app.events.n", "app.events.no*", "app.events.meta"], "mode": "redact", "redact-with": "<\"x\">"}"#;
        let mut filter = FilterHarness::<MaskColumns>::open(config).unwrap();
        let out = filter
            .transform(&[&events, &other], vec![b.finish(), c.finish()])
            .unwrap();

        let masked = vec![
            s("5"),
            None,
            None,
            None,
            None,
            None,
            None,
            s("<\"x\">"),
            s(r#""<\"x\">""#),
        ];
        let mut masked_null = masked.clone();
        masked_null[7] = None;
        assert_eq!(
            rows(&events, &out[0]),
            vec![
                (Op::Insert, 20, None, Some(masked.clone())),
                (Op::Update, 21, Some(masked), Some(masked_null)),
            ]
        );
        // The originals of NULLed columns do not travel on.
        let ColumnValues::Int64(at) = &out[0].after[2].values else {
            panic!("datetime is int64")
        };
        assert_eq!(at, &[0, 0]);
        let ColumnValues::Bytes(amount) = &out[0].after[1].values else {
            panic!("decimal is bytes")
        };
        assert!(amount.data.is_empty());
        // The other schema's table matches only "*.events.at".
        let audit = rows(&other, &out[1]);
        let mut expected: Vec<Option<String>> = row.iter().map(|v| v.to_text()).collect();
        expected[2] = None;
        assert_eq!(audit, vec![(Op::Insert, 22, None, Some(expected))]);
        // Non-NULL masked values: insert 8, update before 8 and after 7, audit 1.
        assert_eq!(
            sluice_sdk::host::native_counters().get("masked"),
            Some(&(8 + 8 + 7 + 1))
        );
    }

    #[test]
    fn rejects_bad_configs_with_config_errors() {
        let cases = [
            (r#"{"columns": []}"#, "columns is empty"),
            (r#"{"columns": [""]}"#, "empty pattern"),
            (r#"{}"#, "missing field `columns`"),
            (
                r#"{"columns": ["a"], "mode": "scramble"}"#,
                "unknown variant `scramble`, expected `hash` or `redact`",
            ),
            (
                r#"{"columns": ["a"], "pepper": "x"}"#,
                "unknown field `pepper`",
            ),
        ];
        for (config, message) in cases {
            let err = FilterHarness::<MaskColumns>::open(config).err().unwrap();
            assert!(matches!(err, Error::Config(_)), "{config}: {err}");
            assert!(err.message().contains(message), "{config}: {err}");
        }
    }
}
