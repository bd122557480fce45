//! The line formats, as TiCDC writes them: one canal-json object, one CSV record
//! or one Debezium change event per row change.

use std::fmt::Write as _;
use std::io::Write as _;

use sluice_sdk::{DdlEvent, Image, Op, Row, TableSchema, Value, host};

use crate::mysql_type::{Base, MySqlType};
use crate::{BinaryEncoding, EncodeOptions, Format};

/// Debezium's `source.version` that TiCDC's messages claim, and so do ours.
const DEBEZIUM_VERSION: &str = "2.4.0.Final";
/// Debezium's `source.name` (the logical server name) and `cluster_id`, and the
/// first part of every Debezium schema name.
const DEBEZIUM_SERVER: &str = "sluice";

/// Encodes rows and DDL events as lines (or, in CSV, records ending in the
/// terminator).
#[derive(Debug)]
pub struct Encoder {
    options: EncodeOptions,
    /// Wall-clock milliseconds: canal-json's `ts`, Debezium's `ts_ms`.
    clock: fn() -> u64,
    /// CSV: the operation field (quoted or escaped) for `I`, `U` and `D`.
    csv_ops: [Vec<u8>; 3],
    /// Scratch space for one value's text.
    text: String,
}

/// What every line of one table batch shares, encoded once per batch.
#[derive(Debug)]
pub struct TableHeader {
    /// Each column's type, in schema order.
    columns: Vec<MySqlType>,
    /// The clock when the batch was encoded.
    now_ms: u64,
    /// canal-json: `"database":"db","table":"t","pkNames":["id"]`;
    /// csv: `,"t","db"` (delimiter first); debezium: `"db":"db","table":"t"`.
    names: Vec<u8>,
    /// canal-json: `"sqlType":{..}` when no value can change it, else empty (the
    /// codes of unsigned integer columns depend on the value).
    sql_type: Vec<u8>,
    /// canal-json: `"mysqlType":{..}`; debezium: `,"schema":{..}}` (or `}`).
    types: Vec<u8>,
    /// JSON formats: `"col":` for every column, in schema order.
    keys: Vec<Vec<u8>>,
    /// CSV: the header record when `output-field-header` is on, else empty.
    file_header: Vec<u8>,
}

impl TableHeader {
    /// The line that must precede this table's lines in a file (CSV's header
    /// record), or empty.
    pub fn file_header(&self) -> &[u8] {
        &self.file_header
    }
}

impl Encoder {
    /// An encoder for `options`, reading the wall clock from the host.
    pub fn new(options: EncodeOptions) -> Self {
        Self::with_clock(options, host::now_millis)
    }

    /// An encoder whose wall clock is `clock` (tests use a fixed one).
    pub fn with_clock(options: EncodeOptions, clock: fn() -> u64) -> Self {
        let mut csv_ops: [Vec<u8>; 3] = Default::default();
        if options.format == Format::Csv {
            for (field, op) in csv_ops.iter_mut().zip(["I", "U", "D"]) {
                csv_text(field, &options, op);
            }
        }
        Self {
            options,
            clock,
            csv_ops,
            text: String::new(),
        }
    }

    /// Encode what the lines of a batch of `schema` share.
    pub fn table(&self, schema: &TableSchema) -> TableHeader {
        let columns: Vec<MySqlType> = schema.columns.iter().map(MySqlType::of).collect();
        let mut header = TableHeader {
            now_ms: (self.clock)(),
            names: Vec::new(),
            sql_type: Vec::new(),
            types: Vec::new(),
            keys: Vec::new(),
            file_header: Vec::new(),
            columns,
        };
        if self.options.format != Format::Csv {
            for column in &schema.columns {
                let mut key = Vec::with_capacity(column.name.len() + 3);
                json_str(&mut key, &column.name);
                key.push(b':');
                header.keys.push(key);
            }
        }
        match self.options.format {
            Format::CanalJson => self.canal_json_table(schema, &mut header),
            Format::Csv => self.csv_table(schema, &mut header),
            Format::Debezium => self.debezium_table(schema, &mut header),
        }
        header
    }

    /// Append the line(s) for one row change of the table `header` was made for.
    pub fn row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        match self.options.format {
            Format::CanalJson => self.canal_json_row(header, row, out),
            Format::Csv => self.csv_row(header, row, out),
            Format::Debezium => self.debezium_row(header, row, out),
        }
    }

    /// Append the line for a DDL event; returns false when the format has none
    /// (CSV and Debezium, as in TiCDC).
    pub fn ddl(&mut self, ddl: &DdlEvent, out: &mut Vec<u8>) -> bool {
        if self.options.format != Format::CanalJson {
            return false;
        }
        let es = ddl.commit_ts >> 18;
        out.extend_from_slice(b"{\"id\":0,\"database\":");
        json_str(out, &ddl.schema_name);
        out.extend_from_slice(b",\"table\":");
        json_str(out, &ddl.table_name);
        out.extend_from_slice(b",\"pkNames\":null,\"isDdl\":true,\"type\":\"");
        out.extend_from_slice(ddl_type(&ddl.query).as_bytes());
        push_fmt(
            out,
            format_args!("\",\"es\":{es},\"ts\":{},\"sql\":", (self.clock)()),
        );
        json_str(out, &ddl.query);
        out.extend_from_slice(b",\"sqlType\":null,\"mysqlType\":null,\"data\":null,\"old\":null");
        if self.options.sluice_extension {
            push_fmt(
                out,
                format_args!(
                    ",\"_sluice\":{{\"commitTs\":{},\"replay\":false}}",
                    ddl.commit_ts
                ),
            );
        }
        out.extend_from_slice(b"}\n");
        true
    }

    // ---- canal-json ----

    fn canal_json_table(&self, schema: &TableSchema, header: &mut TableHeader) {
        let names = &mut header.names;
        names.extend_from_slice(b"\"database\":");
        json_str(names, &schema.schema_name);
        names.extend_from_slice(b",\"table\":");
        json_str(names, &schema.table_name);
        names.extend_from_slice(b",\"pkNames\":");
        let mut keys = schema.columns.iter().filter(|c| c.key).peekable();
        if keys.peek().is_none() {
            names.extend_from_slice(b"null");
        } else {
            names.push(b'[');
            for (n, column) in keys.enumerate() {
                if n > 0 {
                    names.push(b',');
                }
                json_str(names, &column.name);
            }
            names.push(b']');
        }

        if header.columns.iter().all(|c| c.java_promotion().is_none()) {
            let codes = header.columns.iter().map(MySqlType::java_type);
            canal_sql_type(&header.keys, codes, &mut header.sql_type);
        }

        let types = &mut header.types;
        types.extend_from_slice(b"\"mysqlType\":{");
        for (i, column) in header.columns.iter().enumerate() {
            if i > 0 {
                types.push(b',');
            }
            types.extend_from_slice(&header.keys[i]);
            json_str(types, &column.canal_name());
        }
        types.push(b'}');
    }

    fn canal_json_row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        let kind: &[u8] = match row.op() {
            Op::Insert => b"INSERT",
            Op::Update => b"UPDATE",
            Op::Delete => b"DELETE",
        };
        let image = row.image();
        out.extend_from_slice(b"{\"id\":0,");
        out.extend_from_slice(&header.names);
        out.extend_from_slice(b",\"isDdl\":false,\"type\":\"");
        out.extend_from_slice(kind);
        push_fmt(
            out,
            format_args!(
                "\",\"es\":{},\"ts\":{},\"sql\":\"\",",
                row.commit_ts() >> 18,
                header.now_ms
            ),
        );
        if header.sql_type.is_empty() {
            let codes = (header.columns.iter().enumerate())
                .map(|(i, column)| column.java_type_of(image.value(i)));
            canal_sql_type(&header.keys, codes, out);
        } else {
            out.extend_from_slice(&header.sql_type);
        }
        out.push(b',');
        out.extend_from_slice(&header.types);
        out.extend_from_slice(b",\"data\":[");
        self.canal_image(header, &image, |_| true, out);
        out.extend_from_slice(b"],\"old\":");
        match (row.op(), row.before(), row.after()) {
            (Op::Update, Some(before), Some(after)) => {
                out.push(b'[');
                if self.options.only_output_updated_columns {
                    self.canal_image(
                        header,
                        &before,
                        |i| differs(before.value(i), after.value(i)),
                        out,
                    );
                } else {
                    self.canal_image(header, &before, |_| true, out);
                }
                out.push(b']');
            }
            _ => out.extend_from_slice(b"null"),
        }
        if self.options.sluice_extension {
            sluice_extension(row, out);
        }
        out.extend_from_slice(b"}\n");
    }

    /// `{"col":"value",...}` for the columns `include` accepts, in schema order.
    fn canal_image(
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
                value_text(&mut self.text, &header.columns[i], value, FloatStyle::Plain);
                json_str(out, &self.text);
            }
        }
        out.push(b'}');
    }

    // ---- CSV ----

    fn csv_table(&self, schema: &TableSchema, header: &mut TableHeader) {
        let csv = &self.options.csv;
        header.names.extend_from_slice(csv.delimiter.as_bytes());
        csv_text(&mut header.names, &self.options, &schema.table_name);
        header.names.extend_from_slice(csv.delimiter.as_bytes());
        csv_text(&mut header.names, &self.options, &schema.schema_name);

        if csv.output_field_header {
            let mut fields = vec![
                "ticdc-meta$operation",
                "ticdc-meta$table",
                "ticdc-meta$schema",
            ];
            if csv.include_commit_ts {
                fields.push("ticdc-meta$commit-ts");
            }
            if csv.output_old_value {
                fields.push("ticdc-meta$is-update");
            }
            if self.options.sluice_extension {
                fields.push("sluice-meta$replay");
            }
            fields.extend(schema.columns.iter().map(|c| c.name.as_str()));
            header.file_header = fields.join(&csv.delimiter).into_bytes();
            header
                .file_header
                .extend_from_slice(csv.terminator.as_bytes());
        }
    }

    fn csv_row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        let split_update = self.options.csv.output_old_value && row.op() == Op::Update;
        match (split_update, row.before(), row.after()) {
            (true, Some(before), Some(after)) => {
                self.csv_record(header, row, 2, &before, out);
                self.csv_record(header, row, 0, &after, out);
            }
            _ => {
                let op = match row.op() {
                    Op::Insert => 0,
                    Op::Update => 1,
                    Op::Delete => 2,
                };
                self.csv_record(header, row, op, &row.image(), out);
            }
        }
    }

    /// One record: the meta columns, then the values of `image`.
    fn csv_record(
        &mut self,
        header: &TableHeader,
        row: &Row<'_>,
        op: usize,
        image: &Image<'_>,
        out: &mut Vec<u8>,
    ) {
        let csv = &self.options.csv;
        let delimiter = csv.delimiter.as_bytes();
        out.extend_from_slice(&self.csv_ops[op]);
        out.extend_from_slice(&header.names);
        if csv.include_commit_ts {
            out.extend_from_slice(delimiter);
            push_fmt(out, format_args!("{}", row.commit_ts()));
        }
        if csv.output_old_value {
            out.extend_from_slice(delimiter);
            out.extend_from_slice(bool_text(row.op() == Op::Update));
        }
        if self.options.sluice_extension {
            out.extend_from_slice(delimiter);
            out.extend_from_slice(bool_text(row.is_replay()));
        }
        for (i, column) in header.columns.iter().enumerate() {
            out.extend_from_slice(delimiter);
            let value = image.value(i);
            match value {
                Value::Null => out.extend_from_slice(csv.null.as_bytes()),
                Value::Int(_) | Value::UInt(_) | Value::Bool(_) | Value::Float(_) => {
                    value_text(&mut self.text, column, value, FloatStyle::Go);
                    out.extend_from_slice(self.text.as_bytes());
                }
                Value::Blob(bytes) => {
                    self.text.clear();
                    match csv.binary_encoding {
                        BinaryEncoding::Base64 => base64(&mut self.text, bytes),
                        BinaryEncoding::Hex => hex(&mut self.text, bytes),
                    }
                    csv_text(out, &self.options, &self.text);
                }
                _ => {
                    value_text(&mut self.text, column, value, FloatStyle::Go);
                    csv_text(out, &self.options, &self.text);
                }
            }
        }
        out.extend_from_slice(csv.terminator.as_bytes());
    }

    // ---- Debezium ----

    fn debezium_table(&self, schema: &TableSchema, header: &mut TableHeader) {
        let names = &mut header.names;
        names.extend_from_slice(b"\"db\":");
        json_str(names, &schema.schema_name);
        names.extend_from_slice(b",\"table\":");
        json_str(names, &schema.table_name);

        let out = &mut header.types;
        if !self.options.debezium_schema {
            out.push(b'}');
            return;
        }
        let mut prefix = String::new();
        for part in [DEBEZIUM_SERVER, &schema.schema_name, &schema.table_name] {
            prefix.push_str(part);
            prefix.push('.');
        }
        let mut fields = Vec::new();
        for (i, (column, ty)) in schema.columns.iter().zip(&header.columns).enumerate() {
            if i > 0 {
                fields.push(b',');
            }
            let (kind, name) = ty.debezium_type();
            push_fmt(
                &mut fields,
                format_args!("{{\"type\":\"{kind}\",\"optional\":{}", column.nullable),
            );
            if let Some(name) = name {
                push_fmt(
                    &mut fields,
                    format_args!(",\"name\":\"{name}\",\"version\":1"),
                );
            }
            fields.extend_from_slice(b",\"field\":");
            json_str(&mut fields, &column.name);
            fields.push(b'}');
        }
        out.extend_from_slice(b",\"schema\":{\"type\":\"struct\",\"optional\":false,\"name\":");
        json_str(out, &format!("{prefix}Envelope"));
        out.extend_from_slice(b",\"version\":1,\"fields\":[");
        for field in ["before", "after"] {
            out.extend_from_slice(b"{\"type\":\"struct\",\"optional\":true,\"name\":");
            json_str(out, &format!("{prefix}Value"));
            push_fmt(out, format_args!(",\"field\":\"{field}\",\"fields\":["));
            out.extend_from_slice(&fields);
            out.extend_from_slice(b"]},");
        }
        out.extend_from_slice(DEBEZIUM_SOURCE_AND_REST_SCHEMA.as_bytes());
        out.extend_from_slice(b"]}}");
    }

    fn debezium_row(&mut self, header: &TableHeader, row: &Row<'_>, out: &mut Vec<u8>) {
        let ts = row.commit_ts();
        out.extend_from_slice(b"{\"payload\":{\"source\":{\"version\":\"");
        out.extend_from_slice(DEBEZIUM_VERSION.as_bytes());
        out.extend_from_slice(b"\",\"connector\":\"sluice\",\"name\":\"");
        out.extend_from_slice(DEBEZIUM_SERVER.as_bytes());
        push_fmt(
            out,
            format_args!("\",\"ts_ms\":{},\"snapshot\":\"false\",", ts >> 18),
        );
        out.extend_from_slice(&header.names);
        out.extend_from_slice(
            b",\"server_id\":0,\"gtid\":null,\"file\":\"\",\"pos\":0,\"row\":0,\"thread\":0,\"query\":null",
        );
        push_fmt(
            out,
            format_args!(
                ",\"commit_ts\":{ts},\"cluster_id\":\"{DEBEZIUM_SERVER}\"}},\"ts_ms\":{},\"transaction\":null",
                header.now_ms
            ),
        );
        match (row.op(), row.before(), row.after()) {
            (Op::Insert, _, Some(after)) => {
                out.extend_from_slice(b",\"op\":\"c\",\"before\":null,\"after\":");
                self.debezium_image(header, &after, out);
            }
            (Op::Delete, Some(before), _) => {
                out.extend_from_slice(b",\"op\":\"d\",\"after\":null,\"before\":");
                self.debezium_image(header, &before, out);
            }
            (_, before, after) => {
                out.extend_from_slice(b",\"op\":\"u\",\"before\":");
                match before {
                    Some(before) => self.debezium_image(header, &before, out),
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"after\":");
                match after {
                    Some(after) => self.debezium_image(header, &after, out),
                    None => out.extend_from_slice(b"null"),
                }
            }
        }
        if self.options.sluice_extension {
            sluice_extension(row, out);
        }
        out.push(b'}');
        out.extend_from_slice(&header.types);
        out.push(b'\n');
    }

    /// `{"col":value,...}` with Debezium's value for each column.
    fn debezium_image(&mut self, header: &TableHeader, image: &Image<'_>, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (key, column)) in header.keys.iter().zip(&header.columns).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            self.debezium_value(column, image.value(i), out);
        }
        out.push(b'}');
    }

    fn debezium_value(&mut self, column: &MySqlType, value: Value<'_>, out: &mut Vec<u8>) {
        let boolean = column.debezium_type().0 == "boolean";
        match value {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(b) if boolean => out.extend_from_slice(bool_text(b)),
            Value::Bool(b) => out.push(if b { b'1' } else { b'0' }),
            Value::Int(x) if boolean => out.extend_from_slice(bool_text(x != 0)),
            Value::UInt(x) if boolean => out.extend_from_slice(bool_text(x != 0)),
            Value::Int(x) => push_fmt(out, format_args!("{x}")),
            // Debezium's default `bigint.unsigned.handling.mode` (long), as TiCDC:
            // a BIGINT UNSIGNED above 2^63-1 wraps to a negative int64.
            Value::UInt(x) if column.base == Base::Bigint => {
                push_fmt(out, format_args!("{}", x as i64))
            }
            Value::UInt(x) => push_fmt(out, format_args!("{x}")),
            Value::Float(x) => json_number(out, x, column.is_float32()),
            Value::Decimal(s)
                if matches!(column.base, Base::Decimal | Base::Double | Base::Float) =>
            {
                match s.parse::<f64>() {
                    Ok(x) => json_number(out, x, false),
                    Err(_) => json_str(out, s),
                }
            }
            Value::Blob(bytes) => {
                self.text.clear();
                base64(&mut self.text, bytes);
                json_str(out, &self.text);
            }
            Value::DateTime(_) if column.base == Base::Timestamp => {
                // io.debezium.time.ZonedTimestamp: ISO 8601 in UTC, fsp digits.
                value_text(&mut self.text, column, value, FloatStyle::Plain);
                if let Some(space) = self.text.find(' ') {
                    self.text.replace_range(space..=space, "T");
                }
                self.text.push('Z');
                json_str(out, &self.text);
            }
            Value::DateTime(micros) if column.fsp() <= 3 => {
                push_fmt(out, format_args!("{}", micros.div_euclid(1000)))
            }
            Value::DateTime(micros) => push_fmt(out, format_args!("{micros}")),
            Value::Date(days) => push_fmt(out, format_args!("{days}")),
            Value::Decimal(s) | Value::Text(s) | Value::Json(s) => json_str(out, s),
        }
    }
}

/// The Debezium schema of `source`, `op`, `ts_ms` and `transaction`, the same for
/// every table (Debezium's MySQL connector layout, as TiCDC writes it).
const DEBEZIUM_SOURCE_AND_REST_SCHEMA: &str = concat!(
    r#"{"type":"struct","fields":["#,
    r#"{"type":"string","optional":false,"field":"version"},"#,
    r#"{"type":"string","optional":false,"field":"connector"},"#,
    r#"{"type":"string","optional":false,"field":"name"},"#,
    r#"{"type":"int64","optional":false,"field":"ts_ms"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},"#,
    r#"{"type":"string","optional":false,"field":"db"},"#,
    r#"{"type":"string","optional":true,"field":"sequence"},"#,
    r#"{"type":"string","optional":true,"field":"table"},"#,
    r#"{"type":"int64","optional":false,"field":"server_id"},"#,
    r#"{"type":"string","optional":true,"field":"gtid"},"#,
    r#"{"type":"string","optional":false,"field":"file"},"#,
    r#"{"type":"int64","optional":false,"field":"pos"},"#,
    r#"{"type":"int32","optional":false,"field":"row"},"#,
    r#"{"type":"int64","optional":true,"field":"thread"},"#,
    r#"{"type":"string","optional":true,"field":"query"}"#,
    r#"],"optional":false,"name":"io.debezium.connector.mysql.Source","field":"source"},"#,
    r#"{"type":"string","optional":false,"field":"op"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_ms"},"#,
    r#"{"type":"struct","fields":["#,
    r#"{"type":"string","optional":false,"field":"id"},"#,
    r#"{"type":"int64","optional":false,"field":"total_order"},"#,
    r#"{"type":"int64","optional":false,"field":"data_collection_order"}"#,
    r#"],"optional":true,"name":"event.block","version":1,"field":"transaction"}"#,
);

/// `,"_sluice":{"commitTs":..,"replay":..}`.
fn sluice_extension(row: &Row<'_>, out: &mut Vec<u8>) {
    push_fmt(
        out,
        format_args!(
            ",\"_sluice\":{{\"commitTs\":{},\"replay\":{}}}",
            row.commit_ts(),
            row.is_replay()
        ),
    );
}

/// `"sqlType":{"col":code,...}`.
fn canal_sql_type(keys: &[Vec<u8>], codes: impl Iterator<Item = i32>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"\"sqlType\":{");
    for (i, (key, code)) in keys.iter().zip(codes).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(key);
        push_fmt(out, format_args!("{code}"));
    }
    out.push(b'}');
}

/// Canal's event type of a DDL statement, from its leading keywords (TiCDC maps
/// the DDL job type the same way).
fn ddl_type(query: &str) -> &'static str {
    let mut words = query
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .filter(|w| !matches!(w.as_str(), "UNIQUE" | "FULLTEXT" | "SPATIAL" | "TEMPORARY"));
    match (words.next().as_deref(), words.next().as_deref()) {
        (Some("CREATE"), Some("TABLE")) => "CREATE",
        (Some("CREATE"), Some("INDEX")) => "CINDEX",
        (Some("DROP"), Some("INDEX")) => "DINDEX",
        (Some("DROP"), Some("TABLE")) => "ERASE",
        (Some("ALTER"), Some("TABLE")) => "ALTER",
        (Some("RENAME"), Some("TABLE")) => "RENAME",
        (Some("TRUNCATE"), _) => "TRUNCATE",
        _ => "QUERY",
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

/// How floats are written as text.
#[derive(Clone, Copy)]
enum FloatStyle {
    /// Shortest round-trip digits, never an exponent (canal-json, as Go's
    /// `FormatFloat(x, 'f', -1, ..)`).
    Plain,
    /// Go's `%v`: shortest digits, with an exponent below 1e-4 and from 1e6 on
    /// (CSV, as TiCDC formats a float field).
    Go,
}

/// The text of a non-NULL value as TiCDC writes it in canal-json and CSV: the
/// canonical text, but single-precision floats with single-precision digits and
/// datetimes with as many fractional digits as the column's fsp.
fn value_text(text: &mut String, column: &MySqlType, value: Value<'_>, floats: FloatStyle) {
    text.clear();
    match value {
        Value::Float(x) => float_text(text, x, column.is_float32(), floats),
        Value::DateTime(_) => {
            value.write_text(text);
            if let Some(dot) = text.rfind('.') {
                let fsp = usize::from(column.fsp());
                text.truncate(if fsp == 0 { dot } else { dot + 1 + fsp });
            }
        }
        _ => value.write_text(text),
    }
}

fn float_text(out: &mut String, x: f64, float32: bool, style: FloatStyle) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    let start = out.len();
    if let FloatStyle::Go = style {
        if float32 {
            let _ = write!(out, "{:e}", x as f32);
        } else {
            let _ = write!(out, "{x:e}");
        }
        let e = out[start..].rfind('e').expect("{:e} writes an exponent") + start;
        let exp: i32 = out[e + 1..]
            .parse()
            .expect("{:e} writes a decimal exponent");
        if !(-4..6).contains(&exp) {
            out.truncate(e);
            let _ = write!(
                out,
                "e{}{:02}",
                if exp < 0 { '-' } else { '+' },
                exp.unsigned_abs()
            );
            return;
        }
        out.truncate(start);
    }
    if float32 {
        let _ = write!(out, "{}", x as f32);
    } else {
        let _ = write!(out, "{x}");
    }
}

/// A JSON number for a float; `null` for NaN and infinities, which JSON lacks.
fn json_number(out: &mut Vec<u8>, x: f64, float32: bool) {
    if !x.is_finite() {
        out.extend_from_slice(b"null");
    } else if float32 {
        push_fmt(out, format_args!("{}", x as f32));
    } else {
        push_fmt(out, format_args!("{x}"));
    }
}

fn bool_text(b: bool) -> &'static [u8] {
    if b { b"true" } else { b"false" }
}

/// Append `s` as a CSV field: enclosed in the quote with inner quotes doubled,
/// or, without a quote, with line breaks, `\` and the delimiter escaped by `\`.
fn csv_text(out: &mut Vec<u8>, options: &EncodeOptions, s: &str) {
    let csv = &options.csv;
    if let Some(quote) = csv.quote_byte() {
        out.push(quote);
        for &b in s.as_bytes() {
            out.push(b);
            if b == quote {
                out.push(quote);
            }
        }
        out.push(quote);
        return;
    }
    let delimiter = csv.delimiter.as_bytes();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(delimiter) {
            for &d in delimiter {
                out.extend_from_slice(&[b'\\', d]);
            }
            i += delimiter.len();
            continue;
        }
        match bytes[i] {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b => out.push(b),
        }
        i += 1;
    }
}

/// Append `bytes` in standard base64 with padding.
fn base64(out: &mut String, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= n {
                out.push(ALPHABET[(v >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
}

/// Append `bytes` as lowercase hex.
fn hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
}

/// Append `s` as a JSON string, escaped.
fn json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("a str always serializes into a Vec");
}

fn push_fmt(out: &mut Vec<u8>, args: std::fmt::Arguments<'_>) {
    out.write_fmt(args).expect("writing into a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_and_hex_match_rfc_4648() {
        let cases: [(&[u8], &str, &str); 5] = [
            (b"", "", ""),
            (b"f", "Zg==", "66"),
            (b"fo", "Zm8=", "666f"),
            (b"foo", "Zm9v", "666f6f"),
            (b"foob\xff", "Zm9vYv8=", "666f6f62ff"),
        ];
        for (bytes, b64, hx) in cases {
            let mut out = String::new();
            super::base64(&mut out, bytes);
            assert_eq!(out, b64);
            out.clear();
            super::hex(&mut out, bytes);
            assert_eq!(out, hx);
        }
    }
}
