//! Golden tests: every column type of the SDK in every format, and every option,
//! asserted as exact output.

use sluice_sdk::testing::schema;
use sluice_sdk::{
    ColumnType, DdlEvent, FLAG_REPLAY, Op, TableBatch, TableBatchBuilder, TableSchema, TableView,
    Value,
};

use sluice_formats::Encoder;

use crate::Config;

const TS: u64 = 449_167_000_000_000_000; // ms = TS >> 18 = 1_713_436_126_708
const ES: u64 = 1_713_436_126_708;
/// The encoder's wall clock in these tests (canal-json `ts`, Debezium `ts_ms`).
const NOW: u64 = 1_713_436_127_000;

fn now() -> u64 {
    NOW
}

/// One column of every SDK column type, without SQL types.
fn every_type() -> TableSchema {
    schema(
        1,
        "db",
        "all",
        &[
            ("id", ColumnType::Int, true),
            ("u", ColumnType::Uint, false),
            ("f", ColumnType::Float, false),
            ("d", ColumnType::Decimal, false),
            ("t", ColumnType::Text, false),
            ("b", ColumnType::Blob, false),
            ("dt", ColumnType::Datetime, false),
            ("day", ColumnType::Date, false),
            ("j", ColumnType::Json, false),
            ("ok", ColumnType::Boolean, false),
        ],
    )
}

const BLOB: &[u8] = b"x\xff\x00<";
const DT: Value<'static> = Value::DateTime(1_700_000_000_123_456);
const DAY: Value<'static> = Value::Date(19_675);

/// An insert; an update (delivered again, so flagged replay) that changes some
/// columns and sets some NULL; a delete of the updated row with more NULLs.
fn every_type_rows(s: &TableSchema) -> TableBatch {
    let inserted = [
        Value::Int(7),
        Value::UInt(u64::MAX),
        Value::Float(-1.5),
        Value::Decimal("-0.25"),
        Value::Text("say \"hi\"\nbye"),
        Value::Blob(BLOB),
        DT,
        DAY,
        Value::Json(r#"{"a":[1,"é"]}"#),
        Value::Bool(true),
    ];
    let updated = [
        Value::Int(7),
        Value::UInt(0),
        Value::Float(1_234_567.5),
        Value::Null,
        Value::Text("ada"),
        Value::Blob(BLOB),
        DT,
        DAY,
        Value::Null,
        Value::Bool(false),
    ];
    let deleted = [
        Value::Int(7),
        Value::UInt(0),
        Value::Float(1_234_567.5),
        Value::Null,
        Value::Text("ada"),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Bool(false),
    ];
    let mut b = TableBatchBuilder::new(s);
    b.insert(TS, &inserted);
    b.push(
        Op::Update,
        TS + 1,
        FLAG_REPLAY,
        Some(&inserted),
        Some(&updated),
    );
    b.delete(TS + 2, &deleted);
    b.finish()
}

/// Parse `config` (JSON, as the host passes it), validate it and encode every row.
fn encode(config: &str, s: &TableSchema, batch: &TableBatch) -> Vec<String> {
    let config: Config = serde_json::from_str(config).unwrap();
    config.validate().unwrap();
    let mut encoder = Encoder::with_clock(config.encode_options(), now);
    let header = encoder.table(s);
    TableView::new(s, batch)
        .rows()
        .map(|row| {
            let mut out = Vec::new();
            encoder.row(&header, &row, &mut out);
            String::from_utf8(out).unwrap()
        })
        .collect()
}

fn header_of(config: &str, s: &TableSchema) -> String {
    let config: Config = serde_json::from_str(config).unwrap();
    let encoder = Encoder::with_clock(config.encode_options(), now);
    String::from_utf8(encoder.table(s).file_header().to_vec()).unwrap()
}

// ---- canal-json ----

const CANAL_HEAD: &str = r#"{"id":0,"database":"db","table":"all","pkNames":["id"],"isDdl":false"#;
const CANAL_MYSQL_TYPES: &str = r#""mysqlType":{"id":"bigint","u":"bigint unsigned","f":"double","d":"decimal","t":"text","b":"blob","dt":"datetime","day":"date","j":"json","ok":"tinyint"}"#;
const CANAL_INSERTED: &str = r#"{"id":"7","u":"18446744073709551615","f":"-1.5","d":"-0.25","t":"say \"hi\"\nbye","b":"xÿ\u0000<","dt":"2023-11-14 22:13:20.123456","day":"2023-11-14","j":"{\"a\":[1,\"é\"]}","ok":"1"}"#;
const CANAL_UPDATED: &str = r#"{"id":"7","u":"0","f":"1234567.5","d":null,"t":"ada","b":"xÿ\u0000<","dt":"2023-11-14 22:13:20.123456","day":"2023-11-14","j":null,"ok":"0"}"#;
const CANAL_DELETED: &str = r#"{"id":"7","u":"0","f":"1234567.5","d":null,"t":"ada","b":null,"dt":null,"day":null,"j":null,"ok":"0"}"#;

/// `sqlType` with `u` at `u_code` (a BIGINT UNSIGNED above 2^63-1 is a DECIMAL).
fn canal_sql_types(u_code: i32) -> String {
    format!(
        r#""sqlType":{{"id":-5,"u":{u_code},"f":8,"d":3,"t":2005,"b":2004,"dt":93,"day":91,"j":12,"ok":-6}}"#
    )
}

#[test]
fn canal_json_writes_every_column_type_as_ticdc_does() {
    let s = every_type();
    let lines = encode("{}", &s, &every_type_rows(&s));
    let (head, types) = (CANAL_HEAD, CANAL_MYSQL_TYPES);
    let line = |kind: &str, u_code: i32, data: &str, old: &str| {
        format!(
            r#"{head},"type":"{kind}","es":{ES},"ts":{NOW},"sql":"",{},{types},"data":[{data}],"old":{old}}}"#,
            canal_sql_types(u_code)
        ) + "\n"
    };
    assert_eq!(
        lines,
        vec![
            line("INSERT", 3, CANAL_INSERTED, "null"),
            line("UPDATE", -5, CANAL_UPDATED, &format!("[{CANAL_INSERTED}]")),
            line("DELETE", -5, CANAL_DELETED, "null"),
        ]
    );
    for line in &lines {
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(parsed.get("_sluice").is_none());
    }
}

#[test]
fn canal_json_only_output_updated_columns_keeps_changed_columns_in_old() {
    let s = every_type();
    let lines = encode(
        r#"{"only-output-updated-columns": true}"#,
        &s,
        &every_type_rows(&s),
    );
    let old = r#""old":[{"u":"18446744073709551615","f":"-1.5","d":"-0.25","t":"say \"hi\"\nbye","j":"{\"a\":[1,\"é\"]}","ok":"1"}]}"#;
    assert!(lines[1].ends_with(&format!("{old}\n")), "{}", lines[1]);
    assert!(lines[0].ends_with("\"old\":null}\n"));
    let all = encode(
        r#"{"only-output-updated-columns": false}"#,
        &s,
        &every_type_rows(&s),
    );
    assert!(all[1].ends_with(&(format!(r#""old":[{CANAL_INSERTED}]}}"#) + "\n")));
}

#[test]
fn canal_json_sluice_extension_adds_commit_ts_and_replay() {
    let s = every_type();
    let lines = encode(
        r#"{"enable-sluice-extension": true}"#,
        &s,
        &every_type_rows(&s),
    );
    let tails: Vec<String> = lines
        .iter()
        .map(|l| l[l.find(r#","_sluice""#).unwrap()..].to_string())
        .collect();
    assert_eq!(
        tails,
        vec![
            format!(r#","_sluice":{{"commitTs":{TS},"replay":false}}}}"#) + "\n",
            format!(r#","_sluice":{{"commitTs":{},"replay":true}}}}"#, TS + 1) + "\n",
            format!(r#","_sluice":{{"commitTs":{},"replay":false}}}}"#, TS + 2) + "\n",
        ]
    );
    // Without the extension the lines are the same up to `_sluice`.
    let plain = encode("{}", &s, &every_type_rows(&s));
    for (with, without) in lines.iter().zip(&plain) {
        assert_eq!(
            &with[..with.find(r#","_sluice""#).unwrap()],
            &without[..without.len() - 2]
        );
    }
}

#[test]
fn canal_json_ddl_lines_with_and_without_the_extension() {
    let ddl = |query: &str| DdlEvent::new(TS, "app", "users", query);
    let line = |config: &str, query: &str| {
        let config: Config = serde_json::from_str(config).unwrap();
        let mut out = Vec::new();
        assert!(Encoder::with_clock(config.encode_options(), now).ddl(&ddl(query), &mut out));
        String::from_utf8(out).unwrap()
    };
    let query = "ALTER TABLE `users` ADD COLUMN note VARCHAR(10) DEFAULT \"x\"";
    assert_eq!(
        line("{}", query),
        format!(
            r#"{{"id":0,"database":"app","table":"users","pkNames":null,"isDdl":true,"type":"ALTER","es":{ES},"ts":{NOW},"sql":"ALTER TABLE `users` ADD COLUMN note VARCHAR(10) DEFAULT \"x\"","sqlType":null,"mysqlType":null,"data":null,"old":null}}"#
        ) + "\n"
    );
    assert_eq!(
        line(
            r#"{"enable-sluice-extension": true}"#,
            "TRUNCATE TABLE users"
        ),
        format!(
            r#"{{"id":0,"database":"app","table":"users","pkNames":null,"isDdl":true,"type":"TRUNCATE","es":{ES},"ts":{NOW},"sql":"TRUNCATE TABLE users","sqlType":null,"mysqlType":null,"data":null,"old":null,"_sluice":{{"commitTs":{TS},"replay":false}}}}"#
        ) + "\n"
    );
    let kinds = [
        ("create table t (a int)", "CREATE"),
        ("CREATE UNIQUE INDEX i ON t (a)", "CINDEX"),
        ("drop index i on t", "DINDEX"),
        ("DROP TABLE t", "ERASE"),
        ("RENAME TABLE t TO u", "RENAME"),
        ("CREATE DATABASE d", "QUERY"),
    ];
    for (query, kind) in kinds {
        assert!(
            line("{}", query).contains(&format!(r#""type":"{kind}""#)),
            "{query}"
        );
    }
    for format in ["csv", "debezium"] {
        let config: Config = serde_json::from_str(&format!(r#"{{"format":"{format}"}}"#)).unwrap();
        let mut out = Vec::new();
        assert!(!Encoder::new(config.encode_options()).ddl(&ddl(query), &mut out));
        assert!(out.is_empty());
    }
}

#[test]
fn canal_json_pk_names_is_null_without_a_key() {
    let s = schema(9, "db", "nokey", &[("a", ColumnType::Int, false)]);
    let mut b = TableBatchBuilder::new(&s);
    b.insert(TS, &[Value::Int(1)]);
    let lines = encode("{}", &s, &b.finish());
    assert!(
        lines[0].starts_with(
            r#"{"id":0,"database":"db","table":"nokey","pkNames":null,"isDdl":false,"#
        )
    );
}

// ---- CSV ----

#[test]
fn csv_writes_every_column_type_as_ticdc_does() {
    let s = every_type();
    let lines = encode(r#"{"format":"csv"}"#, &s, &every_type_rows(&s));
    assert_eq!(
        lines,
        vec![
            "\"I\",\"all\",\"db\",7,18446744073709551615,-1.5,\"-0.25\",\"say \"\"hi\"\"\nbye\",\"eP8APA==\",\"2023-11-14 22:13:20.123456\",\"2023-11-14\",\"{\"\"a\"\":[1,\"\"é\"\"]}\",1\r\n",
            "\"U\",\"all\",\"db\",7,0,1.2345675e+06,\\N,\"ada\",\"eP8APA==\",\"2023-11-14 22:13:20.123456\",\"2023-11-14\",\\N,0\r\n",
            "\"D\",\"all\",\"db\",7,0,1.2345675e+06,\\N,\"ada\",\\N,\\N,\\N,\\N,0\r\n",
        ]
    );
    assert_eq!(
        header_of(r#"{"format":"csv"}"#, &s),
        "",
        "no header unless asked"
    );
}

#[test]
fn csv_meta_columns_follow_the_options() {
    let s = every_type();
    let config = r#"{"format":"csv","include-commit-ts":true,"output-old-value":true,"enable-sluice-extension":true,"terminator":"\n"}"#;
    let lines = encode(config, &s, &every_type_rows(&s));
    assert_eq!(
        lines,
        vec![
            format!(
                "\"I\",\"all\",\"db\",{TS},false,false,7,18446744073709551615,-1.5,\"-0.25\",\"say \"\"hi\"\"\nbye\",\"eP8APA==\",\"2023-11-14 22:13:20.123456\",\"2023-11-14\",\"{{\"\"a\"\":[1,\"\"é\"\"]}}\",1\n"
            ),
            // An update is split into the old row as D and the new one as I, both
            // with is-update = true, in one line so that they rotate together.
            format!(
                "\"D\",\"all\",\"db\",{ts},true,true,7,18446744073709551615,-1.5,\"-0.25\",\"say \"\"hi\"\"\nbye\",\"eP8APA==\",\"2023-11-14 22:13:20.123456\",\"2023-11-14\",\"{{\"\"a\"\":[1,\"\"é\"\"]}}\",1\n\
                 \"I\",\"all\",\"db\",{ts},true,true,7,0,1.2345675e+06,\\N,\"ada\",\"eP8APA==\",\"2023-11-14 22:13:20.123456\",\"2023-11-14\",\\N,0\n",
                ts = TS + 1
            ),
            format!(
                "\"D\",\"all\",\"db\",{},false,false,7,0,1.2345675e+06,\\N,\"ada\",\\N,\\N,\\N,\\N,0\n",
                TS + 2
            ),
        ]
    );
    assert_eq!(
        header_of(
            &config.replace(r#""terminator":"\n""#, r#""output-field-header":true"#),
            &s
        ),
        "ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,ticdc-meta$commit-ts,ticdc-meta$is-update,sluice-meta$replay,id,u,f,d,t,b,dt,day,j,ok\r\n"
    );
    assert_eq!(
        header_of(
            r#"{"format":"csv","output-field-header":true,"delimiter":"|@|"}"#,
            &s
        ),
        "ticdc-meta$operation|@|ticdc-meta$table|@|ticdc-meta$schema|@|id|@|u|@|f|@|d|@|t|@|b|@|dt|@|day|@|j|@|ok\r\n"
    );
}

#[test]
fn csv_delimiter_quote_null_and_binary_encoding_options() {
    let s = every_type();
    let lines = encode(
        r#"{"format":"csv","delimiter":"|@|","quote":"'","null":"NULL","binary-encoding-method":"hex"}"#,
        &s,
        &every_type_rows(&s),
    );
    assert_eq!(
        lines[0],
        "'I'|@|'all'|@|'db'|@|7|@|18446744073709551615|@|-1.5|@|'-0.25'|@|'say \"hi\"\nbye'|@|'78ff003c'|@|'2023-11-14 22:13:20.123456'|@|'2023-11-14'|@|'{\"a\":[1,\"é\"]}'|@|1\r\n"
    );
    assert_eq!(
        lines[2],
        "'D'|@|'all'|@|'db'|@|7|@|0|@|1.2345675e+06|@|NULL|@|'ada'|@|NULL|@|NULL|@|NULL|@|NULL|@|0\r\n"
    );
}

#[test]
fn csv_without_a_quote_escapes_line_breaks_backslashes_and_the_delimiter() {
    let s = schema(
        2,
        "d,b",
        "t",
        &[
            ("id", ColumnType::Int, true),
            ("note", ColumnType::Text, false),
        ],
    );
    let mut b = TableBatchBuilder::new(&s);
    b.insert(TS, &[Value::Int(1), Value::Text("a,b\r\nc\\N;;d")]);
    b.insert(TS, &[Value::Int(2), Value::Null]);
    let batch = b.finish();
    assert_eq!(
        encode(r#"{"format":"csv","quote":""}"#, &s, &batch),
        vec![
            "I,t,d\\,b,1,a\\,b\\r\\nc\\\\N;;d\r\n",
            "I,t,d\\,b,2,\\N\r\n"
        ]
    );
    assert_eq!(
        encode(
            r#"{"format":"csv","quote":"","delimiter":";;"}"#,
            &s,
            &batch
        )[0],
        "I;;t;;d,b;;1;;a,b\\r\\nc\\\\N\\;\\;d\r\n"
    );
}

#[test]
fn csv_quotes_the_quote_character_by_doubling_it() {
    let s = schema(2, "d'b", "t", &[("note", ColumnType::Text, false)]);
    let mut b = TableBatchBuilder::new(&s);
    b.insert(TS, &[Value::Text("it's \"x\"")]);
    assert_eq!(
        encode(r#"{"format":"csv","quote":"'"}"#, &s, &b.finish()),
        vec!["'I','t','d''b','it''s \"x\"'\r\n"]
    );
}

// ---- Debezium ----

const DBZ_FIELDS: &str = concat!(
    r#"{"type":"int64","optional":false,"field":"id"},"#,
    r#"{"type":"int64","optional":true,"field":"u"},"#,
    r#"{"type":"double","optional":true,"field":"f"},"#,
    r#"{"type":"double","optional":true,"field":"d"},"#,
    r#"{"type":"string","optional":true,"field":"t"},"#,
    r#"{"type":"bytes","optional":true,"field":"b"},"#,
    r#"{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"dt"},"#,
    r#"{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"day"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"j"},"#,
    r#"{"type":"int16","optional":true,"field":"ok"}"#,
);

const DBZ_SOURCE_SCHEMA: &str = concat!(
    r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},"#,
    r#"{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},"#,
    r#"{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"string","optional":true,"field":"table"},"#,
    r#"{"type":"int64","optional":false,"field":"server_id"},{"type":"string","optional":true,"field":"gtid"},{"type":"string","optional":false,"field":"file"},"#,
    r#"{"type":"int64","optional":false,"field":"pos"},{"type":"int32","optional":false,"field":"row"},{"type":"int64","optional":true,"field":"thread"},"#,
    r#"{"type":"string","optional":true,"field":"query"}],"optional":false,"name":"io.debezium.connector.mysql.Source","field":"source"},"#,
    r#"{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},"#,
    r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},"#,
    r#"{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"}"#,
);

fn dbz_schema(db: &str, table: &str, fields: &str) -> String {
    format!(
        r#","schema":{{"type":"struct","optional":false,"name":"sluice.{db}.{table}.Envelope","version":1,"fields":[{{"type":"struct","optional":true,"name":"sluice.{db}.{table}.Value","field":"before","fields":[{fields}]}},{{"type":"struct","optional":true,"name":"sluice.{db}.{table}.Value","field":"after","fields":[{fields}]}},{DBZ_SOURCE_SCHEMA}]}}}}"#
    )
}

fn dbz_source(ts: u64) -> String {
    format!(
        r#"{{"payload":{{"source":{{"version":"2.4.0.Final","connector":"sluice","name":"sluice","ts_ms":{},"snapshot":"false","db":"db","table":"all","server_id":0,"gtid":null,"file":"","pos":0,"row":0,"thread":0,"query":null,"commit_ts":{ts},"cluster_id":"sluice"}},"ts_ms":{NOW},"transaction":null"#,
        ts >> 18
    )
}

const DBZ_INSERTED: &str = r#"{"id":7,"u":-1,"f":-1.5,"d":-0.25,"t":"say \"hi\"\nbye","b":"eP8APA==","dt":1700000000123456,"day":19675,"j":"{\"a\":[1,\"é\"]}","ok":1}"#;
const DBZ_UPDATED: &str = r#"{"id":7,"u":0,"f":1234567.5,"d":null,"t":"ada","b":"eP8APA==","dt":1700000000123456,"day":19675,"j":null,"ok":0}"#;
const DBZ_DELETED: &str = r#"{"id":7,"u":0,"f":1234567.5,"d":null,"t":"ada","b":null,"dt":null,"day":null,"j":null,"ok":0}"#;

#[test]
fn debezium_writes_every_column_type_with_its_schema() {
    let s = every_type();
    let lines = encode(r#"{"format":"debezium"}"#, &s, &every_type_rows(&s));
    let schema = dbz_schema("db", "all", DBZ_FIELDS);
    assert_eq!(
        lines,
        vec![
            format!(
                r#"{},"op":"c","before":null,"after":{DBZ_INSERTED}}}{schema}"#,
                dbz_source(TS)
            ) + "\n",
            format!(
                r#"{},"op":"u","before":{DBZ_INSERTED},"after":{DBZ_UPDATED}}}{schema}"#,
                dbz_source(TS + 1)
            ) + "\n",
            format!(
                r#"{},"op":"d","after":null,"before":{DBZ_DELETED}}}{schema}"#,
                dbz_source(TS + 2)
            ) + "\n",
        ]
    );
    for line in &lines {
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            parsed.as_object().unwrap().len(),
            2,
            "only payload and schema"
        );
    }
}

#[test]
fn debezium_without_schema_and_with_the_extension() {
    let s = every_type();
    let lines = encode(
        r#"{"format":"debezium","debezium-disable-schema":true,"enable-sluice-extension":true}"#,
        &s,
        &every_type_rows(&s),
    );
    assert_eq!(
        lines[1],
        format!(
            r#"{},"op":"u","before":{DBZ_INSERTED},"after":{DBZ_UPDATED},"_sluice":{{"commitTs":{},"replay":true}}}}}}"#,
            dbz_source(TS + 1),
            TS + 1
        ) + "\n"
    );
}

// ---- SQL types ----

/// Columns whose SQL types carry parameters, widths and flags.
fn typed() -> TableSchema {
    let mut s = schema(
        3,
        "shop",
        "typed",
        &[
            ("id", ColumnType::Uint, true),
            ("tiny", ColumnType::Uint, false),
            ("price", ColumnType::Decimal, false),
            ("ratio", ColumnType::Float, false),
            ("name", ColumnType::Text, false),
            ("code", ColumnType::Text, false),
            ("raw", ColumnType::Blob, false),
            ("at", ColumnType::Datetime, false),
            ("seen", ColumnType::Datetime, false),
            ("flag", ColumnType::Uint, false),
            ("yr", ColumnType::Int, false),
            ("kind", ColumnType::Text, false),
            ("ok", ColumnType::Boolean, false),
        ],
    );
    let sql = [
        "int(10) unsigned",
        "TINYINT UNSIGNED",
        "decimal(6,2)",
        "float",
        "varchar(64)",
        "char(4)",
        "varbinary(16)",
        "datetime(3)",
        "timestamp",
        "bit(1)",
        "year",
        "enum('a','b')",
        "tinyint(1)",
    ];
    for (column, sql) in s.columns.iter_mut().zip(sql) {
        column.sql_type = sql.to_string();
    }
    s
}

fn typed_row(s: &TableSchema) -> TableBatch {
    let mut b = TableBatchBuilder::new(s);
    b.insert(
        TS,
        &[
            Value::UInt(3_000_000_000),
            Value::UInt(200),
            Value::Decimal("1.50"),
            Value::Float(f64::from(0.1f32)),
            Value::Text("ada"),
            Value::Text("AB"),
            Value::Blob(b"\x01\x02"),
            DT,
            DT,
            Value::UInt(1),
            Value::Int(2024),
            Value::Text("b"),
            Value::Bool(true),
        ],
    );
    b.finish()
}

#[test]
fn canal_json_types_drop_parameters_and_floats_keep_their_precision() {
    let s = typed();
    let line = &encode("{}", &s, &typed_row(&s))[0];
    let expected = concat!(
        r#""sqlType":{"id":-5,"tiny":5,"price":3,"ratio":7,"name":12,"code":1,"raw":2004,"at":93,"seen":93,"flag":-7,"yr":12,"kind":4,"ok":-6},"#,
        r#""mysqlType":{"id":"int unsigned","tiny":"tinyint unsigned","price":"decimal","ratio":"float","name":"varchar","code":"char","raw":"varbinary","at":"datetime","seen":"timestamp","flag":"bit","yr":"year","kind":"enum","ok":"tinyint"},"#,
        r#""data":[{"id":"3000000000","tiny":"200","price":"1.50","ratio":"0.1","name":"ada","code":"AB","raw":"\u0001\u0002","at":"2023-11-14 22:13:20.123","seen":"2023-11-14 22:13:20","flag":"1","yr":"2024","kind":"b","ok":"1"}],"old":null}"#,
    );
    assert!(line.ends_with(&(expected.to_string() + "\n")), "{line}");
}

#[test]
fn csv_types_follow_the_sql_type() {
    let s = typed();
    assert_eq!(
        encode(r#"{"format":"csv"}"#, &s, &typed_row(&s)),
        vec![
            "\"I\",\"typed\",\"shop\",3000000000,200,\"1.50\",0.1,\"ada\",\"AB\",\"AQI=\",\"2023-11-14 22:13:20.123\",\"2023-11-14 22:13:20\",1,2024,\"b\",1\r\n"
        ]
    );
}

#[test]
fn debezium_types_follow_the_sql_type() {
    let s = typed();
    let line = &encode(r#"{"format":"debezium"}"#, &s, &typed_row(&s))[0];
    let fields = concat!(
        r#"{"type":"int64","optional":false,"field":"id"},"#,
        r#"{"type":"int16","optional":true,"field":"tiny"},"#,
        r#"{"type":"double","optional":true,"field":"price"},"#,
        r#"{"type":"float","optional":true,"field":"ratio"},"#,
        r#"{"type":"string","optional":true,"field":"name"},"#,
        r#"{"type":"string","optional":true,"field":"code"},"#,
        r#"{"type":"bytes","optional":true,"field":"raw"},"#,
        r#"{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"at"},"#,
        r#"{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"seen"},"#,
        r#"{"type":"boolean","optional":true,"field":"flag"},"#,
        r#"{"type":"int32","optional":true,"name":"io.debezium.time.Year","version":1,"field":"yr"},"#,
        r#"{"type":"string","optional":true,"field":"kind"},"#,
        r#"{"type":"int16","optional":true,"field":"ok"}"#,
    );
    let after = r#""after":{"id":3000000000,"tiny":200,"price":1.5,"ratio":0.1,"name":"ada","code":"AB","raw":"AQI=","at":1700000000123,"seen":"2023-11-14T22:13:20Z","flag":true,"yr":2024,"kind":"b","ok":1}}"#;
    assert!(line.contains(after), "{line}");
    assert!(
        line.ends_with(&(dbz_schema("shop", "typed", fields) + "\n")),
        "{line}"
    );
}

// ---- values ----

#[test]
fn floats_in_csv_use_go_notation_and_in_canal_json_plain_digits() {
    let s = schema(4, "d", "t", &[("f", ColumnType::Float, false)]);
    let values = [
        0.0,
        -0.0,
        1.0,
        0.0001,
        0.00001,
        123_456.0,
        999_999.5,
        1e6,
        1.5e300,
        -2.5e-7,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let mut b = TableBatchBuilder::new(&s);
    for x in values {
        b.insert(TS, &[Value::Float(x)]);
    }
    let batch = b.finish();
    let csv: Vec<String> = encode(
        r#"{"format":"csv","quote":"","terminator":"\n"}"#,
        &s,
        &batch,
    )
    .into_iter()
    .map(|l| l.trim_start_matches("I,t,d,").trim_end().to_string())
    .collect();
    assert_eq!(
        csv,
        [
            "0", "-0", "1", "0.0001", "1e-05", "123456", "999999.5", "1e+06", "1.5e+300",
            "-2.5e-07", "NaN", "+Inf", "-Inf"
        ]
    );
    let canal: Vec<String> = encode("{}", &s, &batch)
        .into_iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            v["data"][0]["f"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(&canal[..5], ["0", "-0", "1", "0.0001", "0.00001"]);
    assert_eq!(canal[7], "1000000");
    assert_eq!(canal[10..], ["NaN", "+Inf", "-Inf"]);
}
