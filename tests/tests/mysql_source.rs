//! The MySQL/MariaDB binlog source against a private MariaDB server: exact
//! values of every type (checked against the server's own `SELECT`),
//! transactions and DDL in order, resume by GTID and by file and offset, an
//! upstream restart, binlog rotation, a purged binlog, misconfigured servers,
//! and a transaction too large to hold whole.

use std::time::Duration;

use sluice_config::{MysqlConfig, StartPosition};
use sluice_core::{Checkpoint, ColumnType, Source, SourceEvent, Transaction, Value};
use sluice_source::mysql::{MysqlError, MysqlSource};
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

/// The ids of `table`'s rows in `events` (after images; deletes' before images),
/// in order.
fn ids(events: &[SourceEvent], table: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for t in row_txns(events) {
        for changes in &t.tables {
            if changes.schema().table_name != table {
                continue;
            }
            for row in changes.rows() {
                if let Value::Int(id) = row.image()[0] {
                    out.push(id);
                }
            }
        }
    }
    out
}

/// The position saved with the last transaction of `events`.
fn last_position(events: &[SourceEvent]) -> (sluice_core::CommitTs, sluice_core::SourcePosition) {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            SourceEvent::Transaction(t) if !t.more => {
                Some((t.commit_ts, t.position.clone().unwrap()))
            }
            _ => None,
        })
        .unwrap()
}

#[test]
fn transactions_and_ddl_arrive_in_commit_order_with_new_schema_versions() {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app");
    db.exec("CREATE TABLE app.a (id INT PRIMARY KEY, v VARCHAR(10)); CREATE TABLE app.b (id INT PRIMARY KEY, n INT)");
    let start = gtid_now(&db);
    db.exec(
        "BEGIN; INSERT INTO app.a VALUES (1, 'x'); INSERT INTO app.b VALUES (10, 1); INSERT INTO app.a VALUES (2, 'y'); COMMIT;
         ALTER TABLE app.a ADD COLUMN extra INT DEFAULT 5;
         INSERT INTO app.a VALUES (3, 'z', 6);
         ALTER TABLE app.a DROP COLUMN v;
         INSERT INTO app.a VALUES (4, 7);
         ALTER TABLE app.a MODIFY extra BIGINT;
         INSERT INTO app.a VALUES (5, 8);
         RENAME TABLE app.a TO app.a2;
         INSERT INTO app.a2 VALUES (6, 9);
         TRUNCATE TABLE app.b;
         INSERT INTO app.b VALUES (11, 2);",
    );
    let rt = rt();
    let mut src = source(&db, start);
    let events = rt.block_on(read(&mut src, |ev| ids(ev, "b").len() >= 2));
    // One transaction with both tables, rows in statement order per table.
    let first = row_txns(&events)[0];
    assert_eq!(first.tables.len(), 2);
    assert_eq!(first.row_count(), 3);
    // DDLs in order, between the rows around them, with the tables they change.
    let ddls: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            SourceEvent::Ddl(d) => Some((
                d.table_name.clone(),
                d.query
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" "),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        ddls,
        [
            ("a".to_string(), "ALTER TABLE".to_string()),
            ("a".into(), "ALTER TABLE".into()),
            ("a".into(), "ALTER TABLE".into()),
            (String::new(), "RENAME TABLE".into()),
            ("b".into(), "TRUNCATE TABLE".into()),
        ]
    );
    // Commit ts strictly increase over transactions and DDLs alike (a DDL and
    // the empty transaction carrying its position share one).
    let mut last = sluice_core::CommitTs::ZERO;
    for e in &events {
        match e {
            SourceEvent::Ddl(d) => {
                assert!(d.commit_ts > last);
                last = d.commit_ts;
            }
            SourceEvent::Transaction(t) => {
                assert!(t.commit_ts >= last);
                assert!(t.commit_ts > last || t.row_count() == 0);
                last = t.commit_ts;
            }
            _ => {}
        }
    }
    // Each column change gives the table a new schema version with the new columns.
    let versions: Vec<(u32, Vec<String>)> = row_txns(&events)
        .iter()
        .flat_map(|t| t.tables.iter())
        .filter(|c| c.schema().table_name.starts_with('a'))
        .map(|c| {
            (
                c.schema().version,
                c.schema()
                    .columns
                    .iter()
                    .map(|c| format!("{} {}", c.name, c.sql_type))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        versions[0],
        (1, vec!["id int".into(), "v varchar(10)".into()])
    );
    assert_eq!(
        versions[1],
        (
            2,
            vec!["id int".into(), "v varchar(10)".into(), "extra int".into()]
        )
    );
    assert_eq!(versions[2], (3, vec!["id int".into(), "extra int".into()]));
    assert_eq!(
        versions[3],
        (4, vec!["id int".into(), "extra bigint".into()])
    );
    assert_eq!(ids(&events, "a"), [1, 2, 3, 4, 5]);
    assert_eq!(ids(&events, "a2"), [6]);
    assert_eq!(ids(&events, "b"), [10, 11]);
}

fn resume_continues_exactly_after_the_checkpoint(use_gtid: bool) {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY)");
    let status = db.exec("SHOW MASTER STATUS");
    let mut fields = status.split('\t');
    let start = StartPosition::File {
        name: fields.next().unwrap().to_string(),
        pos: fields.next().unwrap().trim().parse().unwrap(),
    };
    for i in 1..=20 {
        db.exec(&format!("INSERT INTO app.t VALUES ({i})"));
    }
    let config = || {
        let mut cfg = MysqlConfig::new(db.root_url());
        cfg.use_gtid = use_gtid;
        cfg.start_position = start.clone();
        cfg
    };
    let rt = rt();
    let mut src = MysqlSource::new(config());
    src.resume(&Checkpoint::default()).unwrap();
    let events = rt.block_on(read(&mut src, |ev| ids(ev, "t").len() >= 10));
    assert_eq!(ids(&events, "t"), (1..=10).collect::<Vec<_>>());
    let (ts, position) = last_position(&events);
    drop(src);
    for i in 21..=30 {
        db.exec(&format!("INSERT INTO app.t VALUES ({i})"));
    }
    // A new reader from the saved checkpoint: exactly the rest, commit ts above it.
    let mut again = MysqlSource::new(config());
    again
        .resume(&Checkpoint {
            ts: ts.into(),
            position: Some(position.clone()),
        })
        .unwrap();
    let events = rt.block_on(read(&mut again, |ev| ids(ev, "t").len() >= 20));
    assert_eq!(ids(&events, "t"), (11..=30).collect::<Vec<_>>());
    assert!(row_txns(&events).iter().all(|t| t.commit_ts > ts));
    let saved = sluice_source::mysql::Position::decode(&position).unwrap();
    assert_eq!(saved.gtid.is_some(), use_gtid, "{saved:?}");
}

#[test]
fn resume_by_gtid_continues_exactly_after_the_checkpoint() {
    resume_continues_exactly_after_the_checkpoint(true);
}

#[test]
fn resume_by_file_and_offset_continues_exactly_after_the_checkpoint() {
    resume_continues_exactly_after_the_checkpoint(false);
}

#[test]
fn an_upstream_restart_and_binlog_rotation_lose_nothing() {
    let mut db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY)");
    let start = gtid_now(&db);
    let rt = rt();
    let mut src = source(&db, start);
    for i in 1..=5 {
        db.exec(&format!("INSERT INTO app.t VALUES ({i})"));
    }
    db.exec("FLUSH BINARY LOGS");
    for i in 6..=10 {
        db.exec(&format!("INSERT INTO app.t VALUES ({i})"));
    }
    let mut events = rt.block_on(read(&mut src, |ev| ids(ev, "t").len() >= 8));
    // The server goes away mid-stream and comes back with more rows.
    db.restart();
    for i in 11..=15 {
        db.exec(&format!("INSERT INTO app.t VALUES ({i})"));
    }
    events.extend(rt.block_on(read(&mut src, |ev| ids(ev, "t").len() >= 7)));
    assert_eq!(ids(&events, "t"), (1..=15).collect::<Vec<_>>());
}

#[test]
fn a_purged_binlog_fails_with_position_lost() {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY)");
    let old = gtid_now(&db);
    db.exec("INSERT INTO app.t VALUES (1)");
    db.exec("FLUSH BINARY LOGS");
    db.exec("INSERT INTO app.t VALUES (2)");
    db.exec("FLUSH BINARY LOGS");
    // Purging waits for the binlog checkpoint of the files: retry until the
    // oldest file left is the current one.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = db.exec("SHOW MASTER STATUS");
        let current = status.split('\t').next().unwrap().to_string();
        db.exec(&format!("PURGE BINARY LOGS TO '{current}'"));
        let logs = db.exec("SHOW BINARY LOGS");
        let oldest = logs.split('\t').next().unwrap().to_string();
        if oldest == current {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the binlogs were not purged: {logs}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let rt = rt();
    let mut src = source(&db, old);
    let err = rt.block_on(src.next_event()).unwrap_err();
    assert!(matches!(err, MysqlError::PositionLost(_)), "{err}");
    assert!(err.is_fatal());
    assert!(err.to_string().starts_with("position lost"), "{err}");
}

#[test]
fn misconfigured_servers_are_refused_with_the_setting_to_change() {
    let mut db = PrivateMariaDb::start();
    let rt = rt();
    let check = |url: String| {
        let cfg = MysqlConfig::new(url);
        rt.block_on(sluice_source::mysql::prepare(&cfg))
            .map(drop)
            .unwrap_err()
            .to_string()
    };
    // A good server passes and pins `now` to a GTID position.
    let pinned = rt
        .block_on(sluice_source::mysql::prepare(&MysqlConfig::new(
            db.root_url(),
        )))
        .unwrap();
    assert!(
        matches!(pinned.start_position, StartPosition::Gtid(_)),
        "{:?}",
        pinned.start_position
    );
    for (set, word) in [
        ("binlog_format=STATEMENT", "binlog_format=ROW"),
        ("binlog_row_image=MINIMAL", "binlog_row_image=FULL"),
        ("binlog_row_metadata=MINIMAL", "binlog_row_metadata=FULL"),
        ("log_bin_compress=ON", "log_bin_compress=OFF"),
    ] {
        db.exec(&format!("SET GLOBAL {set}"));
        let e = check(db.root_url());
        assert!(e.contains(word), "{set}: {e}");
        let var = set.split('=').next().unwrap();
        db.exec(&format!("SET GLOBAL {var}=DEFAULT"));
        if var != "log_bin_compress" {
            db.exec(&format!(
                "SET GLOBAL {}",
                set.split('=').next().unwrap().to_string()
                    + match var {
                        "binlog_format" => "=ROW",
                        "binlog_row_image" => "=FULL",
                        _ => "=FULL",
                    }
            ));
        }
    }
    // A user without the grants: each missing one is named, never the password.
    db.exec("CREATE USER 'weak'@'%' IDENTIFIED BY 'Secr3t!'; GRANT SELECT ON app.* TO 'weak'@'%'");
    let e = check(db.url("weak", "Secr3t!"));
    assert!(
        e.contains("REPLICATION SLAVE") && e.contains("BINLOG MONITOR") && e.contains("SELECT"),
        "{e}"
    );
    assert!(!e.contains("Secr3t!"), "{e}");
    db.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'weak'@'%'");
    rt.block_on(sluice_source::mysql::prepare(&MysqlConfig::new(
        db.url("weak", "Secr3t!"),
    )))
    .unwrap();
    // A wrong password is a clear refusal, without the password.
    let e = check(db.url("weak", "wrong-pw"));
    assert!(
        e.contains("refused the login") && !e.contains("wrong-pw"),
        "{e}"
    );
    // Binary logging off.
    db.restart_with(&["--skip-log-bin"]);
    let e = check(db.root_url());
    assert!(e.contains("binary logging is off"), "{e}");
}

#[test]
fn a_large_transaction_streams_in_parts() {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app; CREATE TABLE app.big (id INT PRIMARY KEY, pad VARCHAR(100))");
    let start = gtid_now(&db);
    db.exec("USE app; INSERT INTO app.big SELECT seq, REPEAT('p', 100) FROM seq_1_to_1000000");
    db.exec("INSERT INTO app.big VALUES (0, 'after')");
    let rt = rt();
    let mut cfg = MysqlConfig::new(db.root_url());
    cfg.start_position = start;
    let mut src = MysqlSource::new(cfg);
    src.resume(&Checkpoint::default()).unwrap();
    let events = rt.block_on(read(&mut src, |ev| ids(ev, "big").last() == Some(&0)));
    let txns: Vec<&Transaction> = row_txns(&events);
    let parts = txns.iter().filter(|t| t.more).count();
    // 1M rows of ~120 bytes in parts of about 4 MiB (the default): dozens of
    // parts, each without a position, all at one commit ts; the last part has
    // the position.
    assert!(parts >= 25, "{parts} parts");
    let big_ts = txns[0].commit_ts;
    assert!(txns[..=parts].iter().all(|t| t.commit_ts == big_ts));
    assert!(txns[..parts].iter().all(|t| t.position.is_none()));
    assert!(
        txns.iter().all(|t| t.wire_bytes() < (4 << 20) + (64 << 10)),
        "no part is much above the bound"
    );
    assert_eq!(
        ids(&events, "big"),
        (1..=1_000_000).chain([0]).collect::<Vec<_>>()
    );
}

#[test]
fn stop_at_end_reads_what_was_there_and_ends() {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY)");
    let start = gtid_now(&db);
    for i in 1..=5 {
        db.exec(&format!("INSERT INTO app.t VALUES ({i})"));
    }
    let rt = rt();
    let mut cfg = MysqlConfig::new(db.root_url());
    cfg.start_position = start;
    cfg.stop_at_end = true;
    cfg.heartbeat_ms = 100;
    let mut src = MysqlSource::new(cfg.clone());
    src.resume(&Checkpoint::default()).unwrap();
    let events = rt.block_on(read(&mut src, |ev| {
        matches!(ev.last(), Some(SourceEvent::End))
    }));
    assert_eq!(ids(&events, "t"), [1, 2, 3, 4, 5]);
    // Started at the end: it ends at the first heartbeat.
    cfg.start_position = gtid_now(&db);
    let mut src = MysqlSource::new(cfg);
    src.resume(&Checkpoint::default()).unwrap();
    let events = rt.block_on(read(&mut src, |ev| {
        matches!(ev.last(), Some(SourceEvent::End))
    }));
    assert!(ids(&events, "t").is_empty());
}

#[test]
fn filters_leave_out_tables_events_and_transactions() {
    let db = PrivateMariaDb::start();
    db.exec("CREATE DATABASE app; CREATE DATABASE logs; CREATE TABLE app.keep (id INT PRIMARY KEY); CREATE TABLE app.skip (id INT PRIMARY KEY); CREATE TABLE logs.l (id INT PRIMARY KEY)");
    let start = gtid_now(&db);
    db.exec(
        "INSERT INTO app.keep VALUES (1); INSERT INTO app.skip VALUES (1); INSERT INTO logs.l VALUES (1);
         DELETE FROM app.keep WHERE id = 1; INSERT INTO app.keep VALUES (2);
         ALTER TABLE app.skip ADD COLUMN x INT; TRUNCATE TABLE app.keep; ALTER TABLE app.keep ADD COLUMN y INT;
         INSERT INTO app.keep VALUES (3, 3);",
    );
    let filter: sluice_config::FilterConfig = toml::from_str(
        r#"
rules = ['*.*', '!logs.*', '!app.skip']
[[event-filters]]
matcher = ["app.keep"]
ignore-event = ["delete", "truncate table"]
"#,
    )
    .unwrap();
    filter.validate().unwrap();
    let mut cfg = MysqlConfig::new(db.root_url());
    cfg.start_position = start;
    let mut src =
        MysqlSource::new(cfg).with_filter(sluice_source::filter::TableFilter::new(&filter));
    src.resume(&Checkpoint::default()).unwrap();
    let rt = rt();
    let events = rt.block_on(read(&mut src, |ev| ids(ev, "keep").last() == Some(&3)));
    let tables: std::collections::BTreeSet<String> = row_txns(&events)
        .iter()
        .flat_map(|t| t.tables.iter().map(|c| c.schema().qualified_name()))
        .collect();
    assert_eq!(tables.into_iter().collect::<Vec<_>>(), ["app.keep"]);
    // Inserts only: the delete was skipped.
    assert!(
        row_txns(&events)
            .iter()
            .all(|t| t.tables[0].ops().iter().all(|&op| op == 0))
    );
    assert_eq!(ids(&events, "keep"), [1, 2, 3]);
    let ddls: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SourceEvent::Ddl(d) => Some(d.query.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ddls, ["ALTER TABLE app.keep ADD COLUMN y INT"]);
    // Every transaction still carries its position, filtered or not.
    let with_position = events
        .iter()
        .filter(|e| matches!(e, SourceEvent::Transaction(t) if t.position.is_some()))
        .count();
    assert!(with_position >= 9, "{with_position}");
}

#[test]
fn every_collation_the_server_has_decodes_as_the_server_converts_it() {
    let db = PrivateMariaDb::start();
    // Every collation id, from both tables (MariaDB 10.10+ keeps the ids of
    // its UCA-14.0 collations in the second one only).
    let listed = db.exec(
        "SELECT ID, COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS \
         WHERE ID IS NOT NULL \
         UNION SELECT ID, FULL_COLLATION_NAME, CHARACTER_SET_NAME \
         FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY WHERE ID IS NOT NULL \
         ORDER BY 1",
    );
    let collations: Vec<(String, String)> = listed
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1].to_string(), f[2].to_string())
        })
        .collect();
    assert!(
        collations.iter().any(|(c, _)| c == "utf8mb4_uca1400_ai_ci"),
        "the test server has the UCA-14.0 collations"
    );
    assert!(collations.len() > 500, "{} collations", collations.len());
    db.exec("CREATE DATABASE coll CHARACTER SET utf8mb4");
    // One column per collation, 200 to a table (InnoDB takes at most 1017).
    let tables: Vec<&[(String, String)]> = collations.chunks(200).collect();
    for (n, chunk) in tables.iter().enumerate() {
        let columns: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, (coll, cs))| format!("c{i} VARCHAR(4) CHARACTER SET {cs} COLLATE {coll}"))
            .collect();
        db.exec(&format!(
            "CREATE TABLE coll.t{n} (id INT PRIMARY KEY, {}) ROW_FORMAT=DYNAMIC",
            columns.join(", ")
        ));
    }
    let start = gtid_now(&db);
    // Text with a letter, an accented letter, a euro sign and a sharp s: each
    // column holds what its charset can of it ('?' for the rest).
    for (n, chunk) in tables.iter().enumerate() {
        let values = vec!["_utf8mb4 'aé€ß'"; chunk.len()].join(", ");
        db.exec(&format!(
            "SET sql_mode = ''; INSERT INTO coll.t{n} VALUES (1, {values})"
        ));
    }
    let rt = rt();
    let mut src = source(&db, start);
    let events = rt.block_on(read(&mut src, |ev| row_txns(ev).len() >= tables.len()));
    let mut mismatches = Vec::new();
    for (n, chunk) in tables.iter().enumerate() {
        let txn = row_txns(&events)
            .into_iter()
            .find(|t| t.tables[0].schema().table_name == format!("t{n}"))
            .unwrap_or_else(|| panic!("no row of coll.t{n}"));
        let row = txn.tables[0].rows().next().unwrap().after().unwrap();
        // Bytes stay bytes (binary); text is compared as UTF-8.
        let exprs: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, (_, cs))| {
                if cs == "binary" {
                    format!("HEX(c{i})")
                } else {
                    format!("HEX(CONVERT(c{i} USING utf8mb4))")
                }
            })
            .collect();
        let selected = db.exec(&format!("SELECT {} FROM coll.t{n}", exprs.join(", ")));
        for (i, want) in selected.trim_end().split('\t').enumerate() {
            let got = match &row[i + 1] {
                Value::Bytes(b) => hex(b),
                other => format!("{other:?}"),
            };
            if got != want {
                mismatches.push(format!(
                    "{} ({}): source {got}, server {want}",
                    chunk[i].0, chunk[i].1
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} collations differ:\n{}",
        mismatches.len(),
        collations.len(),
        mismatches.join("\n")
    );
}
