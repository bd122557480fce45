//! The line formats: one canal-json object or one CSV record per row change.

use std::io::Write as _;

use sluice_sdk::{ColumnType, DdlEvent, Image, Op, Row, TableSchema, Value};

use crate::Format;

/// Encodes rows and DDL events as lines, each ending in `\n`.
#[derive(Debug)]
pub struct Encoder {
    format: Format,
    /// Scratch space for one value's canonical text.
    text: String,
}

/// What every line of one table batch shares, encoded once per batch.
#[derive(Debug)]
pub struct TableHeader {
    /// canal-json: `"database":"db","table":"t"`; csv: `"db","t"`.
    names: Vec<u8>,
    /// canal-json: `"pkNames":["id"]`.
    pk_names: Vec<u8>,
    /// canal-json: `"mysqlType":{"id":"int"}`.
    mysql_type: Vec<u8>,
    /// canal-json: `"col":` for every column, in schema order.
    keys: Vec<Vec<u8>>,
}

impl Encoder {
    /// An encoder for `format`.
    pub fn new(format: Format) -> Self {
        Self {
            format,
            text: String::new(),
        }
    }

    /// Encode what the lines of a batch of `schema` share.
    pub fn table(&self, schema: &TableSchema) -> TableHeader {
        let mut header = TableHeader {
            names: Vec::new(),
            pk_names: Vec::new(),
            mysql_type: Vec::new(),
            keys: Vec::new(),
        };
        match self.format {
            Format::CanalJson => {
                let names = &mut header.names;
                names.extend_from_slice(b"\"database\":");
                json_str(names, &schema.schema_name);
                names.extend_from_slice(b",\"table\":");
                json_str(names, &schema.table_name);

                let pk = &mut header.pk_names;
                pk.extend_from_slice(b"\"pkNames\":[");
                for (n, column) in schema.columns.iter().filter(|c| c.key).enumerate() {
                    if n > 0 {
                        pk.push(b',');
                    }
                    json_str(pk, &column.name);
                }
                pk.push(b']');

                for column in &schema.columns {
                    let mut key = Vec::with_capacity(column.name.len() + 3);
                    json_str(&mut key, &column.name);
                    key.push(b':');
                    header.keys.push(key);
                }

                let types = &mut header.mysql_type;
                types.extend_from_slice(b"\"mysqlType\":{");
                for (i, column) in schema.columns.iter().enumerate() {
                    if i > 0 {
                        types.push(b',');
                    }
                    types.extend_from_slice(&header.keys[i]);
                    let sql_type = if column.sql_type.is_empty() {
                        type_name(column.ty)
                    } else {
                        &column.sql_type
                    };
                    json_str(types, sql_type);
                }
                types.push(b'}');
            }
            Format::Csv => {
                csv_quoted(&mut header.names, &schema.schema_name);
                header.names.push(b',');
                csv_quoted(&mut header.names, &schema.table_name);
            }
        }
        header
    }

    /// Append the line for one row change of the table `header` was made for.
    pub fn row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        match self.format {
            Format::CanalJson => self.canal_json_row(header, row, out),
            Format::Csv => self.csv_row(header, row, out),
        }
    }

    /// Append the line for a DDL event; returns false when the format has none.
    pub fn ddl(&mut self, ddl: &DdlEvent, out: &mut Vec<u8>) -> bool {
        match self.format {
            Format::Csv => false,
            Format::CanalJson => {
                let ms = ddl.commit_ts >> 18;
                out.extend_from_slice(b"{\"id\":0,\"database\":");
                json_str(out, &ddl.schema_name);
                out.extend_from_slice(b",\"table\":");
                json_str(out, &ddl.table_name);
                out.extend_from_slice(b",\"pkNames\":null,\"isDdl\":true,\"type\":\"QUERY\"");
                push_fmt(out, format_args!(",\"es\":{ms},\"ts\":{ms},\"sql\":"));
                json_str(out, &ddl.query);
                out.extend_from_slice(b",\"mysqlType\":null,\"data\":null,\"old\":null");
                push_fmt(
                    out,
                    format_args!(
                        ",\"_sluice\":{{\"commitTs\":{},\"replay\":false}}}}\n",
                        ddl.commit_ts
                    ),
                );
                true
            }
        }
    }

    fn canal_json_row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        let ms = row.commit_ts() >> 18;
        let kind: &[u8] = match row.op() {
            Op::Insert => b"INSERT",
            Op::Update => b"UPDATE",
            Op::Delete => b"DELETE",
        };
        out.extend_from_slice(b"{\"id\":0,");
        out.extend_from_slice(&header.names);
        out.push(b',');
        out.extend_from_slice(&header.pk_names);
        out.extend_from_slice(b",\"isDdl\":false,\"type\":\"");
        out.extend_from_slice(kind);
        push_fmt(
            out,
            format_args!("\",\"es\":{ms},\"ts\":{ms},\"sql\":\"\","),
        );
        out.extend_from_slice(&header.mysql_type);
        out.extend_from_slice(b",\"data\":[");
        self.json_image(header, &row.image(), |_| true, out);
        out.extend_from_slice(b"],\"old\":");
        match (row.op(), row.before(), row.after()) {
            (Op::Update, Some(before), Some(after)) => {
                out.push(b'[');
                self.json_image(
                    header,
                    &before,
                    |i| differs(before.value(i), after.value(i)),
                    out,
                );
                out.push(b']');
            }
            _ => out.extend_from_slice(b"null"),
        }
        push_fmt(
            out,
            format_args!(
                ",\"_sluice\":{{\"commitTs\":{},\"replay\":{}}}}}\n",
                row.commit_ts(),
                row.is_replay()
            ),
        );
    }

    /// `{"col":"value",...}` for the columns `include` accepts, in schema order.
    fn json_image(
        &mut self,
        header: &TableHeader,
        image: &Image<'_>,
        include: impl Fn(usize) -> bool,
        out: &mut Vec<u8>,
    ) {
        out.push(b'{');
        let mut first = true;
        for (i, key) in header.keys.iter().enumerate().filter(|(i, _)| include(*i)) {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(key);
            let value = image.value(i);
            if value.is_null() {
                out.extend_from_slice(b"null");
            } else {
                self.text.clear();
                value.write_text(&mut self.text);
                json_str(out, &self.text);
            }
        }
        out.push(b'}');
    }

    fn csv_row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        out.extend_from_slice(match row.op() {
            Op::Insert => b"\"I\",",
            Op::Update => b"\"U\",",
            Op::Delete => b"\"D\",",
        });
        out.extend_from_slice(&header.names);
        push_fmt(out, format_args!(",{}", row.commit_ts()));
        let image = row.image();
        for i in 0..image.len() {
            out.push(b',');
            let value = image.value(i);
            if value.is_null() {
                out.extend_from_slice(b"\\N");
                continue;
            }
            self.text.clear();
            value.write_text(&mut self.text);
            match value {
                Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Bool(_) => {
                    out.extend_from_slice(self.text.as_bytes())
                }
                _ => csv_quoted(out, &self.text),
            }
        }
        out.push(b'\n');
    }
}

/// Whether an update changed a column. Floats compare by bit pattern, so a NaN
/// that stays NaN is unchanged and `0.0` to `-0.0` (written differently) is a change.
fn differs(before: Value<'_>, after: Value<'_>) -> bool {
    match (before, after) {
        (Value::Float(b), Value::Float(a)) => b.to_bits() != a.to_bits(),
        (b, a) => b != a,
    }
}

/// The lowercase name of a column type, used when the schema has no SQL type.
fn type_name(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::Int => "int",
        ColumnType::Uint => "uint",
        ColumnType::Float => "float",
        ColumnType::Decimal => "decimal",
        ColumnType::Text => "text",
        ColumnType::Blob => "blob",
        ColumnType::Datetime => "datetime",
        ColumnType::Date => "date",
        ColumnType::Json => "json",
        ColumnType::Boolean => "boolean",
    }
}

/// Append `s` as a JSON string, escaped.
fn json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("a str always serializes into a Vec");
}

/// Append `s` as a double-quoted CSV field, inner quotes doubled.
fn csv_quoted(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for part in s.split_inclusive('"') {
        out.extend_from_slice(part.as_bytes());
        if part.ends_with('"') {
            out.push(b'"');
        }
    }
    out.push(b'"');
}

fn push_fmt(out: &mut Vec<u8>, args: std::fmt::Arguments<'_>) {
    out.write_fmt(args).expect("writing into a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use sluice_sdk::testing::schema;
    use sluice_sdk::{ColumnType, DdlEvent, FLAG_REPLAY, TableBatchBuilder, TableView, Value};

    use super::Encoder;
    use crate::Format;

    const TS: u64 = 449_167_000_000_000_000; // ms = TS >> 18 = 1_713_436_126_708

    fn users() -> sluice_sdk::TableSchema {
        let mut s = schema(
            1,
            "app",
            "users",
            &[
                ("id", ColumnType::Int, true),
                ("name", ColumnType::Text, false),
                ("score", ColumnType::Decimal, false),
                ("seen", ColumnType::Datetime, false),
                ("ok", ColumnType::Boolean, false),
            ],
        );
        s.columns[2].sql_type = "decimal(6,2)".to_string();
        s
    }

    fn encode_all(format: Format, batch: &sluice_sdk::TableBatch) -> Vec<String> {
        let schema = users();
        let mut encoder = Encoder::new(format);
        let header = encoder.table(&schema);
        TableView::new(&schema, batch)
            .rows()
            .map(|row| {
                let mut out = Vec::new();
                encoder.row(&header, &row, &mut out);
                String::from_utf8(out).unwrap()
            })
            .collect()
    }

    fn sample() -> sluice_sdk::TableBatch {
        let s = users();
        let seen = Value::DateTime(1_700_000_000_123_456);
        let mut b = TableBatchBuilder::new(&s);
        b.insert(
            TS,
            &[
                Value::Int(7),
                Value::Text("say \"hi\"\nbye"),
                Value::Null,
                seen,
                Value::Bool(true),
            ],
        );
        b.push(
            sluice_sdk::Op::Update,
            TS + 1,
            FLAG_REPLAY,
            Some(&[
                Value::Int(7),
                Value::Text("ada"),
                Value::Decimal("1.50"),
                seen,
                Value::Bool(true),
            ]),
            Some(&[
                Value::Int(7),
                Value::Text("ada"),
                Value::Null,
                seen,
                Value::Bool(false),
            ]),
        );
        b.delete(
            TS + 2,
            &[
                Value::Int(7),
                Value::Text("ada"),
                Value::Decimal("-0.25"),
                Value::Null,
                Value::Bool(false),
            ],
        );
        b.finish()
    }

    #[test]
    fn canal_json_lines_for_insert_update_delete() {
        let lines = encode_all(Format::CanalJson, &sample());
        let head = r#"{"id":0,"database":"app","table":"users","pkNames":["id"],"isDdl":false"#;
        let types = r#""mysqlType":{"id":"int","name":"text","score":"decimal(6,2)","seen":"datetime","ok":"boolean"}"#;
        let ms = TS >> 18;
        assert_eq!(ms, 1_713_436_126_708);
        assert_eq!(
            lines,
            vec![
                format!(
                    r#"{head},"type":"INSERT","es":{ms},"ts":{ms},"sql":"",{types},"data":[{{"id":"7","name":"say \"hi\"\nbye","score":null,"seen":"2023-11-14 22:13:20.123456","ok":"1"}}],"old":null,"_sluice":{{"commitTs":{TS},"replay":false}}}}"#
                ) + "\n",
                format!(
                    r#"{head},"type":"UPDATE","es":{ms},"ts":{ms},"sql":"",{types},"data":[{{"id":"7","name":"ada","score":null,"seen":"2023-11-14 22:13:20.123456","ok":"0"}}],"old":[{{"score":"1.50","ok":"1"}}],"_sluice":{{"commitTs":{},"replay":true}}}}"#,
                    TS + 1
                ) + "\n",
                format!(
                    r#"{head},"type":"DELETE","es":{ms},"ts":{ms},"sql":"",{types},"data":[{{"id":"7","name":"ada","score":"-0.25","seen":null,"ok":"0"}}],"old":null,"_sluice":{{"commitTs":{},"replay":false}}}}"#,
                    TS + 2
                ) + "\n",
            ]
        );
        for line in &lines {
            let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(parsed["database"], "app");
        }
    }

    #[test]
    fn csv_lines_for_insert_update_delete() {
        let lines = encode_all(Format::Csv, &sample());
        assert_eq!(
            lines,
            vec![
                format!(
                    "\"I\",\"app\",\"users\",{TS},7,\"say \"\"hi\"\"\nbye\",\\N,\"2023-11-14 22:13:20.123456\",1\n"
                ),
                format!(
                    "\"U\",\"app\",\"users\",{},7,\"ada\",\\N,\"2023-11-14 22:13:20.123456\",0\n",
                    TS + 1
                ),
                format!(
                    "\"D\",\"app\",\"users\",{},7,\"ada\",\"-0.25\",\\N,0\n",
                    TS + 2
                ),
            ]
        );
    }

    #[test]
    fn csv_quotes_every_text_like_type_and_leaves_numbers_bare() {
        let s = schema(
            2,
            "d\"b",
            "t",
            &[
                ("u", ColumnType::Uint, true),
                ("f", ColumnType::Float, false),
                ("j", ColumnType::Json, false),
                ("b", ColumnType::Blob, false),
                ("day", ColumnType::Date, false),
            ],
        );
        let mut b = TableBatchBuilder::new(&s);
        b.insert(
            5,
            &[
                Value::UInt(u64::MAX),
                Value::Float(-1.5),
                Value::Json(r#"{"a":1}"#),
                Value::Blob(b"x\xff"),
                Value::Date(0),
            ],
        );
        let batch = b.finish();
        let mut encoder = Encoder::new(Format::Csv);
        let header = encoder.table(&s);
        let view = TableView::new(&s, &batch);
        let row = view.rows().next().unwrap();
        let mut out = Vec::new();
        encoder.row(&header, &row, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"I\",\"d\"\"b\",\"t\",5,18446744073709551615,-1.5,\"{\"\"a\"\":1}\",\"x\u{ff}\",\"1970-01-01\"\n"
        );
    }

    #[test]
    fn canal_json_ddl_line_and_none_in_csv() {
        let ddl = DdlEvent {
            commit_ts: TS,
            schema_name: "app".to_string(),
            table_name: "users".to_string(),
            query: "ALTER TABLE `users` ADD COLUMN note VARCHAR(10) DEFAULT \"x\"".to_string(),
        };
        let mut out = Vec::new();
        assert!(Encoder::new(Format::CanalJson).ddl(&ddl, &mut out));
        let ms = TS >> 18;
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                r#"{{"id":0,"database":"app","table":"users","pkNames":null,"isDdl":true,"type":"QUERY","es":{ms},"ts":{ms},"sql":"ALTER TABLE `users` ADD COLUMN note VARCHAR(10) DEFAULT \"x\"","mysqlType":null,"data":null,"old":null,"_sluice":{{"commitTs":{TS},"replay":false}}}}"#
            ) + "\n"
        );
        let mut out = Vec::new();
        assert!(!Encoder::new(Format::Csv).ddl(&ddl, &mut out));
        assert!(out.is_empty());
    }
}
