//! What real schemas hold, one class a test: MariaDB → `sluice server` →
//! sink-mysql → MariaDB and → sink-postgres → PostgreSQL, each ending with
//! `sluice diff` finding both downstreams equal to the upstream (or with the
//! refusal docs/sources/mysql.md documents): generated columns, foreign keys
//! with cascades, partitions, DDL under a non-strict `sql_mode`, UCA-14.0
//! collations, views, sequences, DDL naming several tables, `CREATE TABLE ...
//! LIKE` and `... SELECT`.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

mod common;
use common::server::Server;
use sluice_tests::mariadb::PrivateMariaDb;
use sluice_tests::postgres::PrivatePostgres;

/// One test at a time: each starts three database servers and a sluice
/// server.
static ONE: Mutex<()> = Mutex::new(());

/// An upstream MariaDB, a MariaDB and a PostgreSQL downstream, and a server
/// replicating the first into both.
struct Replica {
    _dir: tempfile::TempDir,
    up: PrivateMariaDb,
    down: PrivateMariaDb,
    pg: PrivatePostgres,
    server: Server,
}

fn changefeed(dir: &Path, name: &str, plugin: &str, source: &str, target: &str, extra: &str) {
    common::write_file(
        dir,
        name,
        &common::sql_changefeed(
            plugin,
            source,
            target,
            extra,
            "[pipeline]\nflush-interval-ms = 100",
        ),
    );
}

impl Replica {
    /// Both changefeeds running; `pg_extra` adds sink-postgres options.
    fn start(pg_extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let up = PrivateMariaDb::start();
        up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Repl-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
        let down = PrivateMariaDb::start();
        down.exec(
            "CREATE USER 'writer'@'%' IDENTIFIED BY 'Writer-Pw2'; GRANT ALL ON *.* TO 'writer'@'%'",
        );
        let pg = PrivatePostgres::start();
        // The writer may turn foreign key checks off (for rows written so
        // upstream).
        pg.exec(
            "CREATE USER writer PASSWORD 'Pg-Writer-Pw3'; CREATE DATABASE replica OWNER writer;
             GRANT SET ON PARAMETER session_replication_role TO writer;",
        );
        let server = Server::start(&dir.path().join("server"), &[]);
        server.upload("sink-mysql", "sink");
        server.upload("sink-postgres", "sink");
        let source = up.url("repl", "Repl-Pw1");
        changefeed(
            dir.path(),
            "to-mariadb",
            "sink-mysql",
            &source,
            &down.url("writer", "Writer-Pw2"),
            "",
        );
        changefeed(
            dir.path(),
            "to-postgres",
            "sink-postgres",
            &source,
            &pg.url("writer", Some("Pg-Writer-Pw3"), "replica"),
            pg_extra,
        );
        for name in ["to-mariadb", "to-postgres"] {
            server.create(name, &dir.path().join(format!("{name}.toml")));
        }
        for name in ["to-mariadb", "to-postgres"] {
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
        Replica {
            _dir: dir,
            up,
            down,
            pg,
            server,
        }
    }

    fn pg_url(&self) -> String {
        self.pg.url(
            "postgres",
            Some(sluice_tests::postgres::ROOT_PASSWORD),
            "replica",
        )
    }

    /// Waits (bounded) until `sluice diff` finds `tables` equal on the
    /// MariaDB downstream, and on PostgreSQL when `pg`.
    fn equal(&self, tables: &[&str], pg: bool) {
        let mut targets = vec![("to-mariadb", self.down.root_url())];
        if pg {
            targets.push(("to-postgres", self.pg_url()));
        }
        for (name, target) in targets {
            let started = std::time::Instant::now();
            loop {
                let (equal, text) = common::sluice_diff(&self.up.root_url(), &target, tables);
                if equal {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(90),
                    "{name}: sluice diff still finds differences:\n{text}\nstate: {}\nlog:\n{}",
                    self.server.state(name),
                    self.server.stderr.lock().unwrap()
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            let state = self.server.state(name);
            assert_eq!(state["state"], "normal", "{name}: {state}");
        }
    }

    /// Waits until changefeed `name` shows an error containing `text`.
    fn refused(&self, name: &str, text: &str) -> String {
        let mut shown = String::new();
        self.server.wait_for(
            &format!("{name} to say `{text}`"),
            Duration::from_secs(60),
            || {
                shown = self.server.state(name).to_string();
                shown.contains(text)
            },
        );
        shown
    }
}

/// Rows of `sql` on a MariaDB, as text.
fn rows(db: &PrivateMariaDb, sql: &str) -> String {
    db.exec(sql)
}

#[test]
fn generated_columns_are_computed_downstream_and_serve_as_keys() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE g; CREATE TABLE g.g (id INT PRIMARY KEY, a INT, b INT AS (a * 2) VIRTUAL, \
         c INT AS (a + 1) STORED, d VARCHAR(20) AS (CONCAT('n', a)) PERSISTENT, UNIQUE KEY (c));
         INSERT INTO g.g (id, a) VALUES (1, 1), (2, 2), (3, 3);
         UPDATE g.g SET a = 10 WHERE id = 1;
         BEGIN; UPDATE g.g SET a = 20 WHERE id = 2; UPDATE g.g SET a = 2 WHERE id = 3; COMMIT;
         DELETE FROM g.g WHERE id = 3;
         INSERT INTO g.g (id, a) VALUES (4, 3);",
    );
    r.equal(&["g.g"], true);
    // The values downstream were computed there, not written.
    assert_eq!(
        rows(&r.down, "SELECT id, a, b, c, d FROM g.g ORDER BY id"),
        "1\t10\t20\t11\tn10\n2\t20\t40\t21\tn20\n4\t3\t6\t4\tn3\n"
    );
}

#[test]
fn foreign_keys_cascade_downstream_as_upstream_with_parallel_apply() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE f;
         CREATE TABLE f.parent (id INT PRIMARY KEY, name VARCHAR(20));
         CREATE TABLE f.child (id INT PRIMARY KEY, pid INT, note VARCHAR(20),
           FOREIGN KEY (pid) REFERENCES f.parent (id) ON DELETE CASCADE ON UPDATE CASCADE);
         CREATE TABLE f.tag (id INT PRIMARY KEY, cid INT,
           CONSTRAINT tag_child FOREIGN KEY (cid) REFERENCES f.child (id) ON DELETE SET NULL);
         CREATE TABLE f.plain (id INT PRIMARY KEY, v INT);",
    );
    // Transactions that insert a parent, then its children and their tags,
    // between unrelated writes (parallel groups).
    let mut script = String::new();
    for p in 1..=60 {
        script.push_str(&format!(
            "BEGIN; INSERT INTO f.parent VALUES ({p}, 'p{p}'); \
             INSERT INTO f.child VALUES ({a}, {p}, 'a'), ({b}, {p}, 'b'); \
             INSERT INTO f.tag VALUES ({a}, {a}), ({b}, {b}); INSERT INTO f.plain VALUES ({p}, {p}); COMMIT;\n",
            a = p * 10,
            b = p * 10 + 1
        ));
    }
    // Deleting parents cascades to children, and the children's tags lose
    // their reference; moving a parent's key moves its children's.
    for p in (1..=60).step_by(3) {
        script.push_str(&format!(
            "DELETE FROM f.parent WHERE id = {p}; UPDATE f.plain SET v = v + 1 WHERE id = {p};\n"
        ));
    }
    for p in (2..=60).step_by(3) {
        script.push_str(&format!(
            "UPDATE f.parent SET id = {} WHERE id = {p};\n",
            p + 1000
        ));
    }
    // A child re-inserted with the key a cascade deleted, and a child with a
    // missing parent made with foreign key checks off upstream.
    script.push_str(
        "INSERT INTO f.child VALUES (10, 3, 'again');
         SET foreign_key_checks = 0; INSERT INTO f.child VALUES (9999, 424242, 'orphan'); SET foreign_key_checks = 1;",
    );
    r.up.exec(&script);
    r.equal(&["f.parent", "f.child", "f.tag", "f.plain"], true);
    assert_eq!(
        rows(&r.down, "SELECT COUNT(*), SUM(pid) FROM f.child"),
        rows(&r.up, "SELECT COUNT(*), SUM(pid) FROM f.child")
    );
}

#[test]
fn partitions_replay_on_mariadb_and_postgres_refuses_what_drops_rows() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE p;
         CREATE TABLE p.r (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)
           (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (200));
         CREATE TABLE p.h (id INT PRIMARY KEY, v INT) PARTITION BY HASH (id) PARTITIONS 4;
         CREATE TABLE p.k (id INT PRIMARY KEY, v INT) PARTITION BY KEY (id) PARTITIONS 3;
         CREATE TABLE p.x (id INT PRIMARY KEY, v INT);
         INSERT INTO p.r VALUES (1, 1), (150, 2);
         ALTER TABLE p.r ADD PARTITION (PARTITION p2 VALUES LESS THAN (300));
         INSERT INTO p.r VALUES (250, 3);
         ALTER TABLE p.r REORGANIZE PARTITION p2 INTO
           (PARTITION p2a VALUES LESS THAN (260), PARTITION p2b VALUES LESS THAN (300));
         INSERT INTO p.r VALUES (280, 4);
         INSERT INTO p.h VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5);
         ALTER TABLE p.h COALESCE PARTITION 2;
         INSERT INTO p.k VALUES (1, 1), (2, 2);
         ALTER TABLE p.k REMOVE PARTITIONING;
         INSERT INTO p.k VALUES (3, 3);",
    );
    r.equal(&["p.r", "p.h", "p.k"], true);
    // Operations that move or drop rows without row events: MariaDB replays
    // them; PostgreSQL (plain tables) refuses, saying what to do.
    r.up.exec(
        "INSERT INTO p.x VALUES (5, 50);
         ALTER TABLE p.r EXCHANGE PARTITION p0 WITH TABLE p.x;
         ALTER TABLE p.r TRUNCATE PARTITION p1;
         ALTER TABLE p.r DROP PARTITION p2a;
         INSERT INTO p.r VALUES (150, 5);",
    );
    r.equal(&["p.r", "p.x", "p.h", "p.k"], false);
    let shown = r.refused("to-postgres", "unsupported-ddl");
    assert!(
        shown.contains("exchange table partition") && shown.contains("ignore-txn-start-ts"),
        "{shown}"
    );
}

#[test]
fn ddl_and_dml_run_under_the_upstream_sql_mode() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE m; CREATE TABLE m.t (id INT PRIMARY KEY, s VARCHAR(10), n TINYINT);
         INSERT INTO m.t VALUES (1, 'abcdefghij', 1), (2, 'xy', 2);
         SET SESSION sql_mode = '';
         INSERT INTO m.t VALUES (3, 'far too long for it', 300);
         ALTER TABLE m.t MODIFY s VARCHAR(3);
         INSERT INTO m.t VALUES (4, 'another long one', -300);",
    );
    r.equal(&["m.t"], true);
    assert_eq!(
        rows(&r.down, "SELECT id, s, n FROM m.t ORDER BY id"),
        "1\tabc\t1\n2\txy\t2\n3\tfar\t127\n4\tano\t-128\n"
    );
}

#[test]
fn uca_14_collations_and_other_charsets_replicate() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE c CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci;
         CREATE TABLE c.t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20) COLLATE utf8mb4_uca1400_as_cs,
           l VARCHAR(20) CHARACTER SET latin1, s VARCHAR(20) CHARACTER SET swe7, u TEXT CHARACTER SET utf32);
         INSERT INTO c.t VALUES (1, 'Straße', 'Ærø', 'café', 'abc', 'ünïcödé ✓'), (2, 'ﬁ', 'A', 'naïve', 'x', '日本');",
    );
    r.equal(&["c.t"], true);
}

#[test]
fn views_are_created_on_mariadb_and_noted_for_postgres() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE v; CREATE TABLE v.t (id INT PRIMARY KEY, n INT);
         INSERT INTO v.t VALUES (1, 10), (2, 20), (3, 30);
         CREATE VIEW v.big AS SELECT id, n * 2 AS twice FROM v.t WHERE n > 10;
         CREATE OR REPLACE ALGORITHM = MERGE SQL SECURITY INVOKER VIEW v.small AS SELECT id FROM v.t WHERE n <= 10;
         INSERT INTO v.t VALUES (4, 40);",
    );
    r.equal(&["v.t"], true);
    for view in ["v.big", "v.small"] {
        let select = format!("SELECT * FROM {view} ORDER BY 1");
        assert_eq!(rows(&r.down, &select), rows(&r.up, &select), "{view}");
    }
    // PostgreSQL has the table, no view, and the changefeed goes on.
    assert_eq!(
        r.pg.exec("\\c replica\nSELECT count(*) FROM pg_views WHERE schemaname = 'v'")
            .trim(),
        "0"
    );
}

#[test]
fn sequences_follow_the_upstream_state() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    let mut script = String::from(
        "CREATE DATABASE s; CREATE SEQUENCE s.seq START WITH 100 INCREMENT BY 10 CACHE 5;
         CREATE TABLE s.t (id INT PRIMARY KEY DEFAULT NEXT VALUE FOR s.seq, v INT);\n",
    );
    for v in 0..23 {
        script.push_str(&format!("INSERT INTO s.t (v) VALUES ({v});\n"));
    }
    script.push_str("SELECT SETVAL(s.seq, 5000); INSERT INTO s.t (v) VALUES (99);");
    // A statement that reserves values more than once (two columns drawing
    // from the sequence, a small cache), in a table tied by a foreign key.
    script.push_str(
        "ALTER SEQUENCE s.seq CACHE 3; CREATE TABLE s.p (id INT PRIMARY KEY);
         CREATE TABLE s.c (id INT PRIMARY KEY, a BIGINT DEFAULT NEXT VALUE FOR s.seq,
           b BIGINT DEFAULT NEXT VALUE FOR s.seq, p INT, FOREIGN KEY (p) REFERENCES s.p (id));
         INSERT INTO s.p VALUES (1); INSERT INTO s.c (id, p) VALUES (1, 1), (2, 1), (3, 1), (4, 1), (5, 1);",
    );
    r.up.exec(&script);
    r.equal(&["s.t", "s.c"], true);
    let state = "SELECT next_not_cached_value, minimum_value, maximum_value, start_value, increment, cache_size, cycle_option, cycle_count FROM s.seq";
    let started = std::time::Instant::now();
    while rows(&r.down, state) != rows(&r.up, state) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the downstream sequence is {} where the upstream's is {}; log:\n{}",
            rows(&r.down, state),
            rows(&r.up, state),
            r.server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // PostgreSQL's next value is the first the upstream has not handed out.
    let next: i64 = rows(&r.up, "SELECT next_not_cached_value FROM s.seq")
        .trim()
        .parse()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let out =
            r.pg.try_exec("\\c replica\nSELECT last_value, is_called FROM s.seq");
        if out
            .as_ref()
            .is_ok_and(|out| out.trim() == format!("{next}|f"))
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the PostgreSQL sequence is {out:?} where {next}|f was expected; log:\n{}",
            r.server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn ddl_naming_several_tables_holds_them_all_like_and_select() {
    let _one = ONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = Replica::start("");
    r.up.exec(
        "CREATE DATABASE a; CREATE DATABASE b;
         CREATE TABLE a.x (id INT PRIMARY KEY, v INT); CREATE TABLE b.z (id INT PRIMARY KEY, v INT);",
    );
    // Writes to both tables before, during and after a rename that moves them
    // across databases, in transactions that touch both.
    let mut script = String::new();
    for i in 0..40 {
        script.push_str(&format!(
            "BEGIN; INSERT INTO a.x VALUES ({i}, {i}); INSERT INTO b.z VALUES ({i}, {i}); COMMIT;\n"
        ));
    }
    script.push_str("RENAME TABLE a.x TO b.y, b.z TO a.w;\n");
    for i in 40..80 {
        script.push_str(&format!(
            "BEGIN; INSERT INTO b.y VALUES ({i}, {i}); INSERT INTO a.w VALUES ({i}, {i}); UPDATE b.y SET v = v + 1 WHERE id = {}; COMMIT;\n",
            i - 40
        ));
    }
    script.push_str(
        "USE b; CREATE TABLE a.copy LIKE y; INSERT INTO a.copy SELECT * FROM b.y WHERE id < 10;
         CREATE TABLE a.sel AS SELECT id, v * 2 AS v2 FROM b.y WHERE id >= 70;",
    );
    r.up.exec(&script);
    r.equal(&["b.y", "a.w", "a.copy"], true);
    // CREATE TABLE ... SELECT has no key: compared row by row.
    let select = "SELECT * FROM a.sel ORDER BY id";
    r.server
        .wait_for("a.sel downstream", Duration::from_secs(30), || {
            rows(&r.down, select) == rows(&r.up, select)
        });
}
