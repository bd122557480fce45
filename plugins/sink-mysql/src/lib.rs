//! `sink-mysql`: applies row changes to a MySQL-compatible database (MySQL,
//! MariaDB, TiDB) through the host's `sql` interface: the changefeed grants
//! the database (`capabilities.sql`), the host holds the connections.
//!
//! Rows are buffered by `write` and applied at `flush` ([`sql_apply`]):
//! transactions go into `worker-count` groups so that no two groups touch the
//! same primary or unique key or a parent row and its children, each group is
//! one downstream transaction on its own connection, and groups apply
//! concurrently. Generated columns are not written; tables tied by foreign
//! keys are written change by change in upstream order so that the target's
//! cascades run as they did upstream. Each group records what it applied
//! (`progress-table`), so rows delivered again are applied exactly once.
//!
//! DDL is replayed as it ran upstream (`ddl.rs`): in the session's current
//! database, under its `sql_mode`, foreign key checks, time zone and server
//! collation.

mod ddl;

use sluice_sdk::{BatchView, DdlEvent, Error, Sink};
use sql_apply::Applier;

pub use sql_apply::{Config, Mysql, SafeMode};

/// The sink.
pub struct MysqlSink {
    applier: Applier<Mysql>,
    /// What the target server is (read at the first DDL).
    server: Option<ddl::Server>,
}

impl Sink for MysqlSink {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            applier: Applier::new(config),
            server: None,
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        self.applier.write(batch)
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        self.applier.flush()
    }

    fn apply_ddl(&mut self, event: &DdlEvent) -> Result<(), Error> {
        // Everything before the DDL was flushed by the host already.
        self.applier.forget_keys();
        if !self.applier.config().apply_ddl {
            return Ok(());
        }
        let server = match &self.server {
            Some(s) => s.clone(),
            None => {
                let s = ddl::Server::read(&self.applier.config().database)?;
                self.server = Some(s.clone());
                s
            }
        };
        ddl::apply(&mut self.applier, &server, event)
    }
}

sluice_sdk::export_sink!(MysqlSink);
