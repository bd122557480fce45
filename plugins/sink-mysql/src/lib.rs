//! `sink-mysql`: applies row changes to a MySQL-compatible database (MySQL,
//! MariaDB, TiDB) through the host's `sql` interface: the changefeed grants
//! the database (`capabilities.sql`), the host holds the connections.
//!
//! Rows are buffered by `write` and applied at `flush`: transactions go into
//! `worker-count` groups so that no two groups touch the same key, each group
//! is one downstream transaction on its own connection, groups apply
//! concurrently, and a transaction that touches keys of two groups waits for
//! the groups before it (conflict detection on the row key). Inserts become
//! multi-row statements of at most `max-txn-row` rows. Rows flagged replay (or
//! every row, with `safe-mode = "always"`) are written idempotently:
//! `REPLACE` for inserts, `DELETE` + `REPLACE` for updates.

mod apply;
mod config;
mod encode;

pub use apply::MysqlSink;
pub use config::{Config, SafeMode};

sluice_sdk::export_sink!(MysqlSink);
