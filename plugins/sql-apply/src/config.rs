//! The options of `sink-mysql` and `sink-postgres`.

use std::collections::BTreeMap;

use serde::Deserialize;
use sluice_sdk::Error;

/// When rows are written idempotently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SafeMode {
    /// Rows flagged replay (after a restart, a retry or a swap, until the
    /// checkpoint passes what was replayed).
    #[default]
    Auto,
    /// Every row.
    Always,
    /// Never (a replayed insert then fails on its duplicate key).
    Never,
}

/// What a sink does with a DDL it cannot replay on its target (say, a
/// partition dropped upstream, on a plain PostgreSQL table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnsupportedDdl {
    /// Stop the changefeed, saying what to change by hand and how to go on.
    #[default]
    Fail,
    /// Go on with a warning: the target then differs from the upstream.
    Skip,
}

/// `[sink.config]` of `sink-mysql` and `sink-postgres`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// The database to write to: a name granted in `capabilities.sql`.
    pub database: String,
    /// When to write idempotently (`auto`, `always`, `never`).
    #[serde(default)]
    pub safe_mode: SafeMode,
    /// Most rows in one multi-row statement (1 to 4096; default 256).
    #[serde(default = "default_max_txn_row")]
    pub max_txn_row: usize,
    /// Groups applied at once, each on its own connection (1 to 64; default
    /// 4). The grant's `sql-connections` bounds it too.
    #[serde(default = "default_worker_count")]
    pub worker_count: usize,
    /// Write every table into this schema instead of its upstream one.
    #[serde(default)]
    pub target_schema: Option<String>,
    /// Per table, where it goes: `"shop.orders" = "archive.orders_2026"`.
    #[serde(default)]
    pub route: BTreeMap<String, String>,
    /// Apply DDL events (default true).
    #[serde(default = "yes")]
    pub apply_ddl: bool,
    /// Write each group of transactions by its net effect per key: the
    /// rows it touches deleted in one statement, their last images inserted
    /// in multi-row statements (default true). With false, every row change
    /// is its own statement (an update stays an `UPDATE`), which downstream
    /// triggers and foreign keys with `ON DELETE` actions may need.
    #[serde(default = "yes")]
    pub batch_dml: bool,
    /// Where each group records what it applied, in the same downstream
    /// transaction, so that rows delivered again after a restart are applied
    /// exactly once (`schema.table`, created if missing; default
    /// `sluice.apply_progress`). Empty: off, and rows delivered again are
    /// written idempotently instead (safe mode).
    #[serde(default = "default_progress_table")]
    pub progress_table: String,
    /// A DDL the target cannot replay: `fail` (default) or `skip` with a
    /// warning (sink-postgres: partition operations that drop or move rows).
    #[serde(default)]
    pub unsupported_ddl: UnsupportedDdl,
}

fn default_progress_table() -> String {
    "sluice.apply_progress".into()
}

fn default_max_txn_row() -> usize {
    256
}
fn default_worker_count() -> usize {
    4
}
fn yes() -> bool {
    true
}

impl Config {
    /// Every option against its range.
    pub fn validate(&self) -> Result<(), Error> {
        if self.database.is_empty() {
            return Err(Error::config(
                "database is empty; name a database granted in capabilities.sql",
            ));
        }
        if !(1..=4096).contains(&self.max_txn_row) {
            return Err(Error::config(format!(
                "max-txn-row is {}; it must be between 1 and 4096",
                self.max_txn_row
            )));
        }
        if !(1..=64).contains(&self.worker_count) {
            return Err(Error::config(format!(
                "worker-count is {}; it must be between 1 and 64",
                self.worker_count
            )));
        }
        for (from, to) in &self.route {
            for (what, name) in [("a route's table", from), ("a route's target", to)] {
                if name.split('.').count() != 2 || name.split('.').any(str::is_empty) {
                    return Err(Error::config(format!(
                        "{what} `{name}` is not schema.table"
                    )));
                }
            }
        }
        if self.target_schema.as_deref() == Some("") {
            return Err(Error::config("target-schema is empty"));
        }
        if !self.progress_table.is_empty()
            && (self.progress_table.split('.').count() != 2
                || self.progress_table.split('.').any(str::is_empty)
                || self.progress_table.len() > 128)
        {
            return Err(Error::config(format!(
                "progress-table `{}` is not schema.table (at most 128 characters); \
                 set \"\" to turn exactly-once apply off",
                self.progress_table
            )));
        }
        Ok(())
    }

    /// Where rows of `schema.table` go.
    pub fn target(&self, schema: &str, table: &str) -> (String, String) {
        if let Some(to) = self.route.get(&format!("{schema}.{table}"))
            && let Some((s, t)) = to.split_once('.')
        {
            return (s.to_string(), t.to_string());
        }
        let schema = self.target_schema.as_deref().unwrap_or(schema);
        (schema.to_string(), table.to_string())
    }
}
