//! `sink-mysql`: applies row changes to a MySQL-compatible database (MySQL,
//! MariaDB, TiDB) through the host's `sql` interface: the changefeed grants
//! the database (`capabilities.sql`), the host holds the connections.
//!
//! Rows are buffered by `write` and applied at `flush` ([`sql_apply`]):
//! transactions go into `worker-count` groups so that no two groups touch the
//! same primary or unique key, each group is one downstream transaction on
//! its own connection, groups apply concurrently, and a transaction that
//! touches keys of two groups waits for the groups before it. Inserts become
//! multi-row statements of at most `max-txn-row` rows. Rows flagged replay
//! (or every row, with `safe-mode = "always"`) are written idempotently:
//! `REPLACE` for inserts, `DELETE` + `REPLACE` for updates. DDL is replayed
//! as it ran upstream.

use sluice_sdk::sql::{self, Statement};
use sluice_sdk::{BatchView, DdlEvent, Error, Sink};
use sql_apply::{Applier, Dialect};

pub use sql_apply::{Config, Mysql, SafeMode};

/// The sink.
pub struct MysqlSink {
    applier: Applier<Mysql>,
}

/// Server errors of a DDL that was applied before: database or table exists,
/// duplicate column or key name, unknown table or key on a drop.
const ALREADY_APPLIED: &[u32] = &[1007, 1008, 1050, 1051, 1060, 1061, 1091];

impl Sink for MysqlSink {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            applier: Applier::new(config),
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        self.applier.write(batch)
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        self.applier.flush()
    }

    fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        // Everything before the DDL was flushed by the host already.
        self.applier.forget_keys();
        let config = self.applier.config();
        if !config.apply_ddl {
            return Ok(());
        }
        let mut group = Vec::new();
        // A statement about a database itself runs alone: creating the
        // database first would give it the server's default character set
        // and make `CREATE DATABASE ... CHARACTER SET ...` a no-op.
        if !ddl.schema_name.is_empty() && !about_a_database(&ddl.query) {
            let (schema, _) = config.target(&ddl.schema_name, &ddl.table_name);
            group.push(Statement::new(
                format!("CREATE DATABASE IF NOT EXISTS {}", Mysql::ident(&schema)),
                Vec::new(),
            ));
            group.push(Statement::new(
                format!("USE {}", Mysql::ident(&schema)),
                Vec::new(),
            ));
        }
        group.push(Statement::new(ddl.query.clone(), Vec::new()));
        match sql::execute(&config.database, vec![group]) {
            Ok(_) => Ok(()),
            // A DDL delivered again (after a restart it is not flagged): what
            // it does is done already.
            Err(e) if ALREADY_APPLIED.contains(&e.code) => {
                sluice_sdk::host::log(
                    sluice_sdk::host::Level::Info,
                    &format!(
                        "DDL at {} already applied ({}); skipped",
                        ddl.commit_ts, e.message
                    ),
                );
                Ok(())
            }
            Err(e) => Err(e.into_error()),
        }
    }
}

/// Whether `query` creates, alters or drops a database (schema).
fn about_a_database(query: &str) -> bool {
    let mut words = query
        .split(|c: char| c.is_whitespace() || c == '`' || c == '(')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase);
    matches!(
        (words.next().as_deref(), words.next().as_deref()),
        (
            Some("CREATE" | "ALTER" | "DROP"),
            Some("DATABASE" | "SCHEMA")
        )
    )
}

sluice_sdk::export_sink!(MysqlSink);

#[cfg(test)]
mod tests {
    #[test]
    fn database_statements_are_told_apart() {
        assert!(super::about_a_database(
            "CREATE DATABASE shop CHARACTER SET utf8mb4"
        ));
        assert!(super::about_a_database("  drop schema if exists `x`"));
        assert!(!super::about_a_database("CREATE TABLE t (id int)"));
        assert!(!super::about_a_database(
            "ALTER TABLE database_log ADD c INT"
        ));
    }
}
