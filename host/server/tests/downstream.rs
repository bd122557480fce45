//! MariaDB → `sluice server` (binlog source) → sink-mysql → a second MariaDB
//! and → sink-postgres → PostgreSQL, both at once from one upstream, all on
//! private servers: a workload with every MySQL type, key-changing updates,
//! two rows swapping a unique value in one transaction, DDL in between and a
//! 1,000,000-row transaction, while the Sluice server is SIGKILLed 10 times
//! and restarted; at the end `sluice diff` finds both downstreams equal to
//! the upstream. Also: a wrong password or a DSN outside the granted list is
//! a clear error that never shows the password.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_tests::mariadb::PrivateMariaDb;
use sluice_tests::postgres::PrivatePostgres;

mod common;
use common::server::Server;

/// The upstream's tables, created after the changefeeds start (so the
/// downstreams get them by DDL).
const SCHEMA: &str = "CREATE DATABASE shop CHARACTER SET utf8mb4;
CREATE TABLE shop.every (
  id INT PRIMARY KEY,
  ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, i INT, bi BIGINT, ubi BIGINT UNSIGNED,
  dc DECIMAL(20,6), f FLOAT, d DOUBLE, b BIT(8),
  ch CHAR(3), vc VARCHAR(64), tx TEXT, en ENUM('a','b','c'), st SET('x','y'),
  bn BINARY(4), vb VARBINARY(32), bl BLOB,
  dt DATE, tm TIME(3), dtm DATETIME(6), ts TIMESTAMP(3) NULL, yr YEAR, js JSON,
  u VARCHAR(16) UNIQUE
);
CREATE TABLE shop.bulk (id INT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(32));";

/// Tables compared at the end.
const TABLES: [&str; 4] = ["shop.every", "shop.bulk", "shop.late", "shop.tokens"];

/// A deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One row of `shop.every` with every column filled (some NULL).
fn every_row(r: &mut Rng, id: u64) -> String {
    // The value first, then whether it is NULL instead.
    let null = |v: String, r: &mut Rng| if r.below(10) == 0 { "NULL".into() } else { v };
    let texts = [
        "plain",
        "ünïcödé ✓",
        "tab\\there",
        "new\\nline",
        "quote''s",
        "back\\\\slash",
        "",
    ];
    let values = [
        id.to_string(),
        null(format!("{}", r.below(256) as i64 - 128), r),
        null(format!("{}", r.below(65536)), r),
        null(format!("{}", r.below(16_777_216) as i64 - 8_388_608), r),
        null(format!("{}", r.next() as i64 - (1 << 30)), r),
        null(
            format!("{}", (r.next() << 31 | r.next()) as i64 - (1 << 62)),
            r,
        ),
        null(format!("{}", u64::MAX - r.below(1000)), r),
        null(
            format!(
                "{}.{:06}",
                r.below(1 << 40) as i64 - (1 << 39),
                r.below(1_000_000)
            ),
            r,
        ),
        null(format!("{}.5", r.below(1000)), r),
        null(format!("{}.25e{}", r.below(100_000), r.below(20)), r),
        null(format!("b'{:b}'", r.below(256)), r),
        null(
            format!("'{}'", ["abc", "x", "", "zz"][r.below(4) as usize]),
            r,
        ),
        null(
            format!("'{} {id}'", texts[r.below(texts.len() as u64) as usize]),
            r,
        ),
        null(
            format!(
                "'{}'",
                texts[r.below(texts.len() as u64) as usize].repeat(3)
            ),
            r,
        ),
        null(format!("'{}'", ["a", "b", "c"][r.below(3) as usize]), r),
        null(format!("'{}'", ["", "x", "x,y"][r.below(3) as usize]), r),
        null(format!("0x{:08X}", r.next() as u32), r),
        null(format!("0x{:016X}00", r.next() << 31 | r.next()), r),
        null(format!("0x{}", "AB".repeat(1 + r.below(50) as usize)), r),
        null(
            format!(
                "'{:04}-{:02}-{:02}'",
                1990 + r.below(60),
                1 + r.below(12),
                1 + r.below(28)
            ),
            r,
        ),
        null(
            format!(
                "'{}{:02}:{:02}:{:02}.{:03}'",
                if r.below(5) == 0 { "-" } else { "" },
                r.below(839),
                r.below(60),
                r.below(60),
                r.below(1000)
            ),
            r,
        ),
        null(
            format!(
                "'{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}'",
                1000 + r.below(9000),
                1 + r.below(12),
                1 + r.below(28),
                r.below(24),
                r.below(60),
                r.below(60),
                r.below(1_000_000)
            ),
            r,
        ),
        null(
            format!(
                "'{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}'",
                1971 + r.below(60),
                1 + r.below(12),
                1 + r.below(28),
                r.below(24),
                r.below(60),
                r.below(60),
                r.below(1000)
            ),
            r,
        ),
        null(format!("{}", 1901 + r.below(255)), r),
        null(
            format!(
                "'{{\"id\": {id}, \"tags\": [\"a\", {}], \"ok\": true}}'",
                r.below(100)
            ),
            r,
        ),
        // Unique where set.
        if r.below(3) == 0 {
            "NULL".into()
        } else {
            format!("'u{id}'")
        },
    ];
    format!("({})", values.join(", "))
}

/// The workload as scripts, run in order; `*` marks where the 1,000,000-row
/// transaction goes.
fn workload() -> Vec<String> {
    let mut r = Rng(42);
    let mut out = Vec::new();
    let mut next_id = 1u64;
    let mut live: Vec<u64> = Vec::new();
    for round in 0..60 {
        let mut sql = String::new();
        for _ in 0..20 {
            let multi = r.below(3) == 0;
            if multi {
                sql.push_str("BEGIN;");
            }
            for _ in 0..1 + r.below(4) {
                let id = next_id;
                next_id += 1;
                sql.push_str(&format!(
                    "INSERT INTO shop.every VALUES {};",
                    every_row(&mut r, id)
                ));
                live.push(id);
            }
            if live.len() > 10 && r.below(2) == 0 {
                let victim = live[r.below(live.len() as u64) as usize];
                sql.push_str(&format!(
                    "UPDATE shop.every SET vc = LEFT(CONCAT(COALESCE(vc, ''), '+'), 64), dc = dc + 1, js = JSON_SET(COALESCE(js, '{{}}'), '$.n', {}) WHERE id = {victim};",
                    r.below(1000)
                ));
            }
            if live.len() > 10 && r.below(4) == 0 {
                // A key-changing update.
                let at = r.below(live.len() as u64) as usize;
                let (old, new) = (live[at], next_id + 1_000_000);
                next_id += 1;
                sql.push_str(&format!(
                    "UPDATE shop.every SET id = {new} WHERE id = {old};"
                ));
                live[at] = new;
            }
            if live.len() > 10 && r.below(5) == 0 {
                let at = r.below(live.len() as u64) as usize;
                sql.push_str(&format!(
                    "DELETE FROM shop.every WHERE id = {};",
                    live.swap_remove(at)
                ));
            }
            if multi {
                sql.push_str("COMMIT;");
            }
        }
        if round % 7 == 3 && live.len() > 2 {
            // Two rows swap their unique values in one transaction.
            let (a, b) = (live[0], live[1]);
            sql.push_str(&format!(
                "BEGIN; UPDATE shop.every SET u = 'swap' WHERE id = {a}; UPDATE shop.every SET u = 'u-{a}-{round}' WHERE id = {b}; UPDATE shop.every SET u = 'u-{b}-{round}' WHERE id = {a}; COMMIT;"
            ));
        }
        // DDL in between.
        match round {
            10 => sql.push_str(
                "CREATE TABLE shop.late (id BIGINT PRIMARY KEY, name VARCHAR(32), gone INT); \
                 INSERT INTO shop.late VALUES (1, 'one', 1), (2, 'two', 2);",
            ),
            15 => sql.push_str(
                "ALTER TABLE shop.late ADD COLUMN extra VARCHAR(8) NOT NULL DEFAULT 'e', ADD COLUMN n INT DEFAULT 7; \
                 INSERT INTO shop.late (id, name, gone, extra) VALUES (3, 'three', 3, 'x');",
            ),
            20 => sql.push_str(
                "ALTER TABLE shop.late DROP COLUMN gone; UPDATE shop.late SET name = 'ONE' WHERE id = 1; \
                 INSERT INTO shop.late (id, name) VALUES (4, 'four');",
            ),
            25 => out.push("*".to_string()),
            30 => sql.push_str(
                "CREATE TABLE shop.tokens (id INT PRIMARY KEY, token VARCHAR(16) NOT NULL UNIQUE, n INT); \
                 INSERT INTO shop.tokens VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3); \
                 BEGIN; UPDATE shop.tokens SET token = 'tmp' WHERE id = 1; UPDATE shop.tokens SET token = 'a' WHERE id = 2; UPDATE shop.tokens SET token = 'b' WHERE id = 1; COMMIT; \
                 UPDATE shop.tokens SET id = 30 WHERE id = 3;",
            ),
            _ => {}
        }
        out.push(sql);
    }
    out
}

/// One server, two changefeeds from `up`: to `down` by sink-mysql and to
/// `pg` by sink-postgres.
fn changefeed(dir: &Path, name: &str, plugin: &str, source: &str, target: &str) -> PathBuf {
    common::write_file(
        dir,
        name,
        &common::sql_changefeed(
            plugin,
            source,
            target,
            "max-txn-row = 256",
            "[pipeline]\nflush-interval-ms = 200\n\n[validator]\nmode = \"full\"",
        ),
    )
}

/// Waits until changefeed `name` reads (its checkpoint moves: it reads from
/// where the binlog is now, so tables made before that would be missed).
fn running(server: &Server, name: &str) {
    let checkpoint = || {
        server.state(name)["status"]["checkpoint-ts"]
            .as_u64()
            .unwrap_or(0)
    };
    let first = checkpoint();
    server.wait_for(&format!("{name} to run"), Duration::from_secs(60), || {
        checkpoint() > first
    });
}

/// `sluice diff` of [`TABLES`]: (equal, output).
fn diff(source: &str, target: &str) -> (bool, String) {
    common::sluice_diff(source, target, &TABLES)
}

#[test]
fn both_downstreams_match_the_upstream_after_ten_kills_during_every_type_ddl_and_a_million_row_transaction()
 {
    let dir = tempfile::tempdir().unwrap();
    let up = PrivateMariaDb::start();
    up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Hidden-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
    let down = PrivateMariaDb::start();
    down.exec(
        "CREATE USER 'writer'@'%' IDENTIFIED BY 'Writer-Pw2'; GRANT ALL ON *.* TO 'writer'@'%'",
    );
    let pg = PrivatePostgres::start();
    pg.exec("CREATE USER writer PASSWORD 'Pg-Writer-Pw3'; CREATE DATABASE replica OWNER writer;");
    // The sink (and its validator) reach PostgreSQL over TLS, checking the
    // server's certificate and name against the test's own CA.
    let ca = pg.enable_tls();
    let tls = format!("?sslmode=verify-full&sslrootcert={}", ca.display());

    let data = dir.path().join("server");
    let server = Server::start(&data, &[]);
    server.upload("sink-mysql", "sink");
    server.upload("sink-postgres", "sink");
    let source = up.url("repl", "Hidden-Pw1");
    let to_mysql = changefeed(
        dir.path(),
        "to-mariadb",
        "sink-mysql",
        &source,
        &down.url("writer", "Writer-Pw2"),
    );
    let to_pg = changefeed(
        dir.path(),
        "to-postgres",
        "sink-postgres",
        &source,
        &format!(
            "{}{tls}",
            pg.url("writer", Some("Pg-Writer-Pw3"), "replica")
        ),
    );
    server.create("to-mariadb", &to_mysql);
    server.create("to-postgres", &to_pg);
    // A wrong password and an ungranted database: clear errors, no password.
    let wrong = changefeed(
        dir.path(),
        "wrong-password",
        "sink-postgres",
        &source,
        &pg.url("writer", Some("Not-The-Pw4"), "replica"),
    );
    server.create("wrong-password", &wrong);
    // verify-full without the CA: the server's certificate is refused.
    let untrusted = changefeed(
        dir.path(),
        "untrusted",
        "sink-postgres",
        &source,
        &format!(
            "{}?sslmode=verify-full",
            pg.url("writer", Some("Pg-Writer-Pw3"), "replica")
        ),
    );
    server.create("untrusted", &untrusted);
    let ungranted = common::write_file(
        dir.path(),
        "ungranted",
        &std::fs::read_to_string(&to_pg)
            .unwrap()
            .replace("database = \"target\"", "database = \"elsewhere\"")
            .replace("[validator]\nmode = \"full\"\n", ""),
    );
    server.create("ungranted", &ungranted);
    // The changefeeds read from where the binlog is now: wait until they
    // run before the tables are made.
    for name in ["to-mariadb", "to-postgres"] {
        running(&server, name);
    }

    // The workload runs on its own thread while the server is killed.
    up.exec(SCHEMA);
    let scripts = workload();
    let progress = Mutex::new(0usize);
    let server = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            for (n, script) in scripts.iter().enumerate() {
                if script == "*" {
                    up.exec(
                        "BEGIN; INSERT INTO shop.bulk SELECT seq, seq * 3, CONCAT('bulk ', seq) FROM shop.seq_1_to_1000000; COMMIT;",
                    );
                } else {
                    up.exec(script);
                }
                *progress.lock().unwrap() = n + 1;
                std::thread::sleep(Duration::from_millis(400));
            }
        });
        let mut server = Some(server);
        let mut r = Rng(7);
        for kill in 0..10 {
            std::thread::sleep(Duration::from_millis(1500 + r.below(2500)));
            let log = server.take().unwrap().kill();
            for pw in ["Writer-Pw2", "Pg-Writer-Pw3", "Not-The-Pw4", "Hidden-Pw1"] {
                assert!(!log.contains(pw), "kill {kill}: the log shows a password");
            }
            eprintln!(
                "kill {}: after script {} of {}",
                kill + 1,
                progress.lock().unwrap(),
                scripts.len()
            );
            server = Some(Server::start(&data, &[]));
        }
        worker.join().unwrap();
        server.unwrap()
    });
    assert_eq!(up.exec("SELECT COUNT(*) FROM shop.bulk").trim(), "1000000");

    // Both downstreams catch up and `sluice diff` finds them equal.
    let pg_url = pg.url(
        "postgres",
        Some(sluice_tests::postgres::ROOT_PASSWORD),
        "replica",
    );
    for (name, target) in [("to-mariadb", down.root_url()), ("to-postgres", pg_url)] {
        let started = Instant::now();
        loop {
            let (equal, text) = diff(&up.root_url(), &target);
            if equal {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "{name}: sluice diff still finds differences after 10 minutes:\n{text}\nstate: {}\nserver log:\n{}",
                server.state(name),
                server.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_secs(3));
        }
        eprintln!("{name}: equal {:.0?} after the workload", started.elapsed());
        // The validator of the last run read back what it applied and
        // found every row as upstream has it.
        let started = Instant::now();
        loop {
            let v = server.state(name)["status"]["validator"].clone();
            if v["pending"].as_u64() == Some(0) && v["matched"].as_u64() > Some(0) {
                assert_eq!(v["mismatched"].as_u64(), Some(0), "{name}: {v}");
                eprintln!("{name}: validator {v}");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{name}: the validator did not settle: {v}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        let q = server.state(name);
        assert!(
            matches!(q["state"].as_str(), Some("normal" | "warning")),
            "{q}"
        );
    }
    // The sink's and the validator's sessions are encrypted.
    let sessions = pg.exec(
        "SELECT count(*), bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.usename = 'writer' AND a.datname = 'replica'",
    );
    let (count, all_tls) = sessions.trim().split_once('|').unwrap();
    assert!(
        count.parse::<u32>().unwrap() >= 1 && all_tls == "t",
        "{sessions}"
    );
    // Without the CA, verify-full refuses the server's certificate.
    let (equal, text) = diff(
        &up.root_url(),
        &format!(
            "{}?sslmode=verify-full",
            pg.url(
                "postgres",
                Some(sluice_tests::postgres::ROOT_PASSWORD),
                "replica"
            )
        ),
    );
    assert!(!equal && text.contains("certificate"), "{text}");
    let wrong = server.state("wrong-password").to_string();
    assert!(wrong.contains("password authentication failed"), "{wrong}");
    let untrusted = server.state("untrusted").to_string();
    assert!(
        untrusted.contains("invalid peer certificate"),
        "{untrusted}"
    );
    let ungranted = server.state("ungranted").to_string();
    assert!(ungranted.contains("not granted"), "{ungranted}");
    for name in [
        "to-mariadb",
        "to-postgres",
        "wrong-password",
        "ungranted",
        "untrusted",
    ] {
        let shown = server.state(name).to_string();
        for pw in ["Writer-Pw2", "Pg-Writer-Pw3", "Not-The-Pw4", "Hidden-Pw1"] {
            assert!(!shown.contains(pw), "{name} shows a password: {shown}");
        }
    }
    // The differences are named once a downstream is changed behind its back.
    pg.exec("\\c replica\nUPDATE shop.bulk SET v = -1 WHERE id = 777; DELETE FROM shop.late WHERE id = 2;");
    let (equal, text) = diff(
        &up.root_url(),
        &pg.url(
            "postgres",
            Some(sluice_tests::postgres::ROOT_PASSWORD),
            "replica",
        ),
    );
    assert!(!equal, "{text}");
    assert!(text.contains("id=777: v: source 2331, target -1"), "{text}");
    assert!(text.contains("id=2: missing in the target"), "{text}");
    assert!(text.contains("2 of 4 tables differ"), "{text}");
    let log = server.stop();
    assert!(!log.contains("Pg-Writer-Pw3"));
}

#[test]
fn the_validator_names_rows_that_differ_downstream_and_fast_mode_only_checks_presence() {
    let dir = tempfile::tempdir().unwrap();
    let up = PrivateMariaDb::start();
    up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Hidden-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
    up.exec("CREATE DATABASE shop; CREATE TABLE shop.items (id INT PRIMARY KEY, n INT, note VARCHAR(16))");
    let down = PrivateMariaDb::start();
    // Two copies downstream, each with a trigger that changes what it is
    // given unless the note says the row was changed: the rows are there,
    // their values are not upstream's. (sink-mysql writes a group by its net
    // effect, so an updated row may be inserted again: the trigger must not
    // tell inserts from updates for the count below to hold.)
    for copy in ["fast_copy", "full_copy"] {
        down.exec(&format!(
            "CREATE DATABASE {copy}; CREATE TABLE {copy}.items (id INT PRIMARY KEY, n INT, note VARCHAR(16)); \
             CREATE TRIGGER {copy}.bump BEFORE INSERT ON {copy}.items FOR EACH ROW SET NEW.n = IF(NEW.note = 'changed', NEW.n, NEW.n + 1000)"
        ));
    }
    down.exec(
        "CREATE USER 'writer'@'%' IDENTIFIED BY 'Writer-Pw2'; GRANT ALL ON *.* TO 'writer'@'%'",
    );
    let server = Server::start(&dir.path().join("server"), &[]);
    server.upload("sink-mysql", "sink");
    for (name, copy, mode) in [("fast", "fast_copy", "fast"), ("full", "full_copy", "full")] {
        let file = common::write_file(
            dir.path(),
            name,
            &format!(
                r#"
[source]
type = "mysql"
url = "{}"
heartbeat-ms = 200

[sink]
plugin = "sink-mysql@0.1.0"
[sink.config]
database = "target"
target-schema = "{copy}"
[sink.capabilities.sql]
target = "{}"

[pipeline]
flush-interval-ms = 100

[validator]
mode = "{mode}"
retry-count = 2
interval-ms = 200
"#,
                up.url("repl", "Hidden-Pw1"),
                down.url("writer", "Writer-Pw2"),
            ),
        );
        server.create(name, &file);
        running(&server, name);
    }
    let mut sql = String::new();
    for id in 1..=50 {
        sql.push_str(&format!(
            "INSERT INTO shop.items VALUES ({id}, {id}, 'row {id}');"
        ));
    }
    sql.push_str("UPDATE shop.items SET note = 'changed' WHERE id <= 10; DELETE FROM shop.items WHERE id > 45;");
    up.exec(&sql);

    let validator = |name: &str| server.state(name)["status"]["validator"].clone();
    let settle = |name: &str, done: &dyn Fn(&serde_json::Value) -> bool| {
        let started = Instant::now();
        loop {
            let v = validator(name);
            if done(&v) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the {name} validator did not settle: {v}; status: {}",
                server.state(name)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // Full: rows 11 to 45 differ in n. Rows 1 to 10 match: their update
    // wrote every column again with the note the trigger leaves alone; rows
    // 46 to 50 are gone on both sides.
    settle("full", &|v| {
        v["mismatched"].as_u64() == Some(35) && v["pending"].as_u64() == Some(0)
    });
    let v = validator("full");
    assert_eq!(v["mode"], "full", "{v}");
    assert!(v["matched"].as_u64() >= Some(15), "{v}");
    // The latest 20 are named, each with the column and both values.
    let named = v["mismatches"].as_array().unwrap();
    assert_eq!(named.len(), 20, "{v}");
    for line in named {
        let line = line.as_str().unwrap();
        let id: u64 = line
            .strip_prefix("shop.items id=")
            .and_then(|rest| rest.split(':').next())
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!((11..=45).contains(&id), "{line}");
        assert_eq!(
            line,
            format!(
                "shop.items id={id}: n: upstream {id}, downstream {}",
                id + 1000
            )
        );
    }
    // Fast: every row is where it should be.
    settle("fast", &|v| {
        v["matched"].as_u64() >= Some(50) && v["pending"].as_u64() == Some(0)
    });
    assert_eq!(validator("fast")["mismatched"].as_u64(), Some(0));
    let (_, metrics) = server.http_get("/metrics");
    assert!(
        metrics.contains(
            r#"sluice_changefeed_validator_rows_total{tenant="default",changefeed="full",result="mismatched"} 35"#
        ),
        "{metrics}"
    );
    server.stop();
}
