//! The MySQL/MariaDB binlog source against a private MariaDB server: exact
//! values of every type (checked against the server's own `SELECT`),
//! transactions and DDL in order, resume by GTID and by file and offset, an
//! upstream restart, binlog rotation, a purged binlog, misconfigured servers,
//! and a transaction too large to hold whole.

use std::time::Duration;

use sluice_config::{MysqlConfig, StartPosition};
use sluice_core::{Checkpoint, ColumnType, Source, SourceEvent, Transaction, Value};
use sluice_source::mysql::MysqlSource;
use sluice_tests::mariadb::PrivateMariaDb;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A source reading `db` from `start`.
fn source(db: &PrivateMariaDb, start: StartPosition) -> MysqlSource {
    let mut cfg = MysqlConfig::new(db.root_url());
    cfg.start_position = start;
    cfg.heartbeat_ms = 200;
    let mut s = MysqlSource::new(cfg);
    s.resume(&Checkpoint::default()).unwrap();
    s
}

fn gtid_now(db: &PrivateMariaDb) -> StartPosition {
    StartPosition::Gtid(db.exec("SELECT @@gtid_binlog_pos").trim().to_string())
}

/// Reads events until `n` transactions with rows (or DDLs) have come, or the
/// stream is quiet for a few seconds.
async fn read(
    src: &mut MysqlSource,
    mut want: impl FnMut(&[SourceEvent]) -> bool,
) -> Vec<SourceEvent> {
    let mut out = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), src.next_event())
            .await
            .expect("the source answers within 30 s")
            .expect("the source reads");
        if matches!(e, SourceEvent::Resolved(_)) {
            continue;
        }
        out.push(e);
        if want(&out) {
            return out;
        }
    }
}

fn row_txns(events: &[SourceEvent]) -> Vec<&Transaction> {
    events
        .iter()
        .filter_map(|e| match e {
            SourceEvent::Transaction(t) if t.row_count() > 0 => Some(t),
            _ => None,
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

const TYPES_TABLE: &str = "CREATE TABLE t1.types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED,
  bi BIGINT, biu BIGINT UNSIGNED,
  dec1 DECIMAL(10,2), dec2 DECIMAL(30,10), dec3 DECIMAL(5,0),
  f FLOAT, d DOUBLE,
  c CHAR(10), vc VARCHAR(100), vl VARCHAR(20) CHARACTER SET latin1, tx TEXT, lt LONGTEXT,
  bn BINARY(4), vb VARBINARY(20), bl BLOB,
  dt DATE, tm TIME, tm3 TIME(3), tm6 TIME(6),
  dtm DATETIME, dtm2 DATETIME(2), dtm6 DATETIME(6),
  ts TIMESTAMP NULL DEFAULT NULL, ts3 TIMESTAMP(3) NULL DEFAULT NULL,
  yr YEAR, en ENUM('small','medium','large'), st SET('a','b','c','d'),
  bt1 BIT(1), bt12 BIT(12), bt64 BIT(64),
  js JSON, n INT NULL
) DEFAULT CHARSET=utf8mb4";

/// The `SELECT` expression that shows column `name` the way the test prints
/// the source's value of it.
fn select_expr(name: &str, ty: ColumnType, sql_type: &str) -> String {
    if sql_type.starts_with("bit") {
        return format!("{name}+0");
    }
    match ty {
        ColumnType::Text
            if !sql_type.starts_with("time")
                && !sql_type.starts_with("enum")
                && !sql_type.starts_with("set") =>
        {
            format!("HEX(CONVERT({name} USING utf8mb4))")
        }
        ColumnType::Blob => format!("HEX({name})"),
        _ => name.to_string(),
    }
}

/// (year, month, day) of a day count since 1970-01-01.
fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The fractional digits of `datetime(3)` and the like.
fn fsp(sql_type: &str) -> usize {
    sql_type
        .split_once('(')
        .and_then(|(_, r)| r.trim_end_matches(')').parse().ok())
        .unwrap_or(0)
}

fn show(v: &Value, ty: ColumnType, sql_type: &str) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Int(x) if ty == ColumnType::Date => {
            let (y, m, d) = civil(*x);
            format!("{y:04}-{m:02}-{d:02}")
        }
        Value::Int(x) if ty == ColumnType::Datetime => {
            let (days, micros) = (x.div_euclid(86_400_000_000), x.rem_euclid(86_400_000_000));
            let (y, m, d) = civil(days);
            let secs = micros / 1_000_000;
            let mut out = format!(
                "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
                secs / 3600,
                (secs / 60) % 60,
                secs % 60
            );
            let digits = fsp(sql_type);
            if digits > 0 {
                out.push('.');
                out.push_str(&format!("{:06}", micros % 1_000_000)[..digits]);
            }
            out
        }
        Value::Int(x) => x.to_string(),
        Value::UInt(x) => x.to_string(),
        Value::Float(x) => x.to_string(),
        Value::Bytes(b) => match ty {
            ColumnType::Blob => hex(b),
            ColumnType::Text
                if !sql_type.starts_with("time")
                    && !sql_type.starts_with("enum")
                    && !sql_type.starts_with("set") =>
            {
                hex(b)
            }
            _ => String::from_utf8(b.clone()).unwrap(),
        },
    }
}

const INSERT_ROWS: &str = "SET time_zone='+00:00';
 INSERT INTO t1.types VALUES
 (1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0,
  -12345678.99, -12345678901234567890.0123456789, -99999, -3.25, -2.5e-10,
  'abc', 'héllo wörld ✓ 🎉', 'café', 'tab\there\nnewline', REPEAT('x', 70000),
  'ab', 0x00FF10, 0xDEADBEEF00,
  '1000-01-01', '-838:59:59', '-00:00:01.500', '12:34:56.123456',
  '1000-01-01 00:00:00', '2026-12-01 10:20:30.45', '9999-12-31 23:59:59.999999',
  '1970-01-01 00:00:01', '2038-01-19 03:14:07.999',
  1901, 'small', '', 0, 0, 0, '{\"a\": [1, 2, {\"b\": null}], \"c\": \"ü\"}', NULL),
 (2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, 18446744073709551615,
  99999999.99, 99999999999999999999.9999999999, 99999, 3.14, 1.5,
  '', '', '', '', '',
  '', '', '',
  '9999-12-31', '838:59:59', '00:00:00.000', '-01:02:03.000004',
  '2026-01-01 00:00:00', '2026-01-01 00:00:00.00', '2026-01-01 00:00:00.000001',
  '2026-12-01 10:20:30', '2026-12-01 10:20:30.001',
  2155, 'large', 'a,c,d', 1, 4095, 18446744073709551615, '[]', 7),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);";

#[test]
fn every_type_arrives_exactly_as_select_shows_it() {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE t1 CHARACTER SET utf8mb4");
    db.exec(TYPES_TABLE);
    let start = gtid_now(&db);
    db.exec(INSERT_ROWS);
    let rt = rt();
    let mut src = source(&db, start);
    let events = rt.block_on(read(&mut src, |ev| !row_txns(ev).is_empty()));
    let txns = row_txns(&events);
    let inserted = &txns[0].tables[0];
    let schema = inserted.schema().clone();
    assert_eq!(schema.qualified_name(), "t1.types");
    assert_eq!(inserted.len(), 3);
    assert!(schema.columns[0].key && !schema.columns[1].key);
    assert!(!schema.columns[0].nullable && schema.columns[1].nullable);

    // Every column of every row against the server's SELECT of it.
    let exprs: Vec<String> = schema
        .columns
        .iter()
        .map(|c| select_expr(&c.name, c.ty, &c.sql_type))
        .collect();
    let selected = db.exec(&format!(
        "SET time_zone='+00:00'; SELECT {} FROM t1.types ORDER BY id",
        exprs.join(", ")
    ));
    let mut mismatches = Vec::new();
    for (row, line) in inserted.rows().zip(selected.lines()) {
        let values = row.after().unwrap();
        for ((col, v), want) in schema.columns.iter().zip(&values).zip(line.split('\t')) {
            let got = show(v, col.ty, &col.sql_type);
            if got != want {
                mismatches.push(format!(
                    "row {:?} column {} ({}): source {got:?}, SELECT {want:?}",
                    values[0], col.name, col.sql_type
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_eq!(selected.lines().count(), 3);

    // Updates and deletes carry full images.
    db.exec("UPDATE t1.types SET vc = 'changed', d = 0.1 WHERE id = 2; DELETE FROM t1.types WHERE id = 3");
    let events = rt.block_on(read(&mut src, |ev| row_txns(ev).len() >= 2));
    let txns = row_txns(&events);
    let vc = schema.columns.iter().position(|c| c.name == "vc").unwrap();
    let update = txns[0].tables[0].rows().next().unwrap();
    assert_eq!(update.before().unwrap()[vc], Value::Bytes(b"".to_vec()));
    assert_eq!(
        update.after().unwrap()[vc],
        Value::Bytes(b"changed".to_vec())
    );
    assert_eq!(
        txns[1].tables[0].rows().next().unwrap().before().unwrap()[0],
        Value::Int(3)
    );
}
