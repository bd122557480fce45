//! `sink-postgres`: applies row changes from MySQL or MariaDB to PostgreSQL
//! through the host's `sql` interface: the changefeed grants the database
//! (`capabilities.sql`, a `postgres://` DSN), the host holds the connections.
//!
//! Rows are buffered and applied as `sink-mysql` applies them
//! ([`sql_apply`]): parallel groups without shared primary or unique keys,
//! multi-row inserts of at most `max-txn-row` rows, key-changing updates as a
//! delete and an insert, and safe mode for replayed rows with
//! `INSERT ... ON CONFLICT (key) DO UPDATE`.
//!
//! MySQL DDL does not run on PostgreSQL, so tables follow the upstream
//! schema instead: before the first rows of a table version are written, the
//! target table is created if missing (types mapped by [`types::pg_type`])
//! and given the columns it lacks; after an upstream `ALTER TABLE`, columns
//! the upstream table no longer has are dropped. `ALTER TABLE ... ADD
//! COLUMN` (with its default) and `DROP COLUMN`, `DROP TABLE`, `TRUNCATE`,
//! `RENAME TABLE`, `CREATE DATABASE` and `DROP DATABASE` are replayed as
//! statements when they arrive; see the README for what is not.

mod ddl;
mod foreign_keys;
mod sequence;
pub mod types;

use std::collections::{BTreeSet, HashSet};

use sluice_sdk::host::{Level, log};
use sluice_sdk::sql::{self, Statement, Value as SqlValue};
use sluice_sdk::{BatchView, DdlEvent, Error, Sink, TableSchema};
use sql_apply::{Applier, Dialect};

pub use sql_apply::{Config, Postgres, SafeMode};

/// The sink.
pub struct PostgresSink {
    applier: Applier<Postgres>,
    /// Foreign keys waiting for their tables.
    keys: foreign_keys::Registry,
    /// Upstream (table id, schema version) whose target table is in shape.
    synced: HashSet<(u32, u32)>,
    /// Target tables an upstream DDL changed since they were last shaped:
    /// their columns that upstream lacks are dropped.
    altered: BTreeSet<String>,
}

impl Sink for PostgresSink {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            keys: foreign_keys::Registry::new(&config.progress_table),
            applier: Applier::new(config),
            synced: HashSet::new(),
            altered: BTreeSet::new(),
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        if self.applier.config().apply_ddl {
            for table in batch.tables() {
                let schema = table.schema();
                if !self.synced.contains(&(schema.table_id, schema.version)) {
                    self.shape(schema)?;
                    self.synced.insert((schema.table_id, schema.version));
                }
            }
        }
        self.applier.write(batch)
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        self.applier.flush()
    }

    fn apply_ddl(&mut self, event: &DdlEvent) -> Result<(), Error> {
        // Everything before the DDL was flushed by the host already. Every
        // table is shaped again before its next rows.
        self.applier.forget_keys();
        self.synced.clear();
        if !self.applier.config().apply_ddl {
            return Ok(());
        }
        if self.applier.ddl_applied(event)? {
            log(
                Level::Info,
                &format!("DDL at {} applied already; skipped", event.commit_ts),
            );
            return Ok(());
        }
        let config = self.applier.config();
        let plan = ddl::plan(event, config);
        if let Some(why) = plan.refusal {
            return Err(Error::fatal(why));
        }
        for note in &plan.notes {
            log(Level::Info, note);
        }
        for warning in &plan.warnings {
            log(Level::Warn, warning);
        }
        self.altered.extend(plan.altered);
        let database = config.database.clone();
        if !plan.statements.is_empty() {
            sql::execute(&database, vec![plan.statements]).map_err(|e| {
                let message = format!(
                    "the DDL at commit ts {} ({}) failed downstream: {}",
                    event.commit_ts, event.kind, e.message
                );
                match e.kind {
                    sql::ErrorKind::Retryable => Error::retryable(message),
                    _ => Error::fatal(message),
                }
            })?;
        }
        for (from, to) in &plan.renamed {
            self.keys.rename(&database, from, to)?;
        }
        for (child, name) in plan.dropped_keys {
            self.keys.drop(&database, &child, &name)?;
        }
        for key in plan.foreign_keys {
            let name = match key.name {
                Some(name) => name,
                None => self
                    .keys
                    .next_name(&database, &key.child, &key.child_name)?,
            };
            self.keys.add(
                &database,
                foreign_keys::ForeignKey {
                    name,
                    child: key.child,
                    columns: key.columns,
                    parent: key.parent,
                    parent_columns: key.parent_columns,
                    on_delete: key.on_delete,
                    on_update: key.on_update,
                },
            )?;
        }
        self.applier.ddl_done(event)
    }
}

impl PostgresSink {
    /// Creates the target table of `schema` if missing and adds the columns
    /// it lacks; drops the columns upstream no longer has if an upstream DDL
    /// changed the table.
    fn shape(&mut self, schema: &TableSchema) -> Result<(), Error> {
        let config = self.applier.config();
        let (s, t) = config.target(&schema.schema_name, &schema.table_name);
        let target = Postgres::table_name(&s, &t);
        if is_sequence(schema) {
            // A MariaDB sequence's rows are its state: a PostgreSQL sequence.
            let group = vec![
                Statement::new(
                    format!("CREATE SCHEMA IF NOT EXISTS {}", Postgres::ident(&s)),
                    Vec::new(),
                ),
                Statement::new(
                    format!("CREATE SEQUENCE IF NOT EXISTS {target}"),
                    Vec::new(),
                ),
            ];
            sql::execute(&config.database, vec![group]).map_err(sql::SqlError::into_error)?;
            return Ok(());
        }
        let columns: Vec<String> = schema
            .columns
            .iter()
            .map(|c| {
                format!(
                    "{} {}{}",
                    Postgres::ident(&c.name),
                    types::pg_type(c),
                    if c.nullable { "" } else { " NOT NULL" }
                )
            })
            .collect();
        let keys: Vec<String> = schema
            .key_indexes()
            .into_iter()
            .map(|i| Postgres::ident(&schema.columns[i].name))
            .collect();
        let mut create = format!(
            "CREATE TABLE IF NOT EXISTS {target} ({}",
            columns.join(", ")
        );
        if !keys.is_empty() {
            create.push_str(&format!(", PRIMARY KEY ({})", keys.join(", ")));
        }
        create.push(')');
        let existing = sql::query(
            &config.database,
            Statement::new(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = $1 AND table_name = $2",
                vec![SqlValue::Text(s.clone()), SqlValue::Text(t.clone())],
            ),
            10_000,
        )
        .map_err(sql::SqlError::into_error)?;
        let existing: BTreeSet<String> = existing
            .into_iter()
            .filter_map(|row| match row.into_iter().next() {
                Some(SqlValue::Text(name)) => Some(name),
                _ => None,
            })
            .collect();
        let mut group = Vec::new();
        if existing.is_empty() {
            group.push(Statement::new(
                format!("CREATE SCHEMA IF NOT EXISTS {}", Postgres::ident(&s)),
                Vec::new(),
            ));
            group.push(Statement::new(create, Vec::new()));
        } else {
            for c in &schema.columns {
                if !existing.contains(&c.name) {
                    // Added columns are nullable: the table may hold rows.
                    // (An ADD COLUMN replayed from upstream DDL added it
                    // already, with its default.)
                    group.push(Statement::new(
                        format!(
                            "ALTER TABLE {target} ADD COLUMN IF NOT EXISTS {} {}",
                            Postgres::ident(&c.name),
                            types::pg_type(c)
                        ),
                        Vec::new(),
                    ));
                }
            }
            if self.altered.contains(&target) {
                for name in &existing {
                    if !schema.columns.iter().any(|c| c.name == *name) {
                        group.push(Statement::new(
                            format!(
                                "ALTER TABLE {target} DROP COLUMN IF EXISTS {}",
                                Postgres::ident(name)
                            ),
                            Vec::new(),
                        ));
                    }
                }
            }
        }
        if !group.is_empty() {
            let what: Vec<String> = group.iter().map(|g| g.sql.clone()).collect();
            sql::execute(&config.database, vec![group]).map_err(sql::SqlError::into_error)?;
            log(
                Level::Info,
                &format!(
                    "table {target} shaped for schema version {}: {}",
                    schema.version,
                    what.join("; ")
                ),
            );
            self.applier.forget_keys();
        }
        self.altered.remove(&target);
        let database = self.applier.config().database.clone();
        self.keys.settle(&database, Some(&target))
    }
}

/// Whether `schema` is a MariaDB sequence's: exactly its eight columns.
fn is_sequence(schema: &TableSchema) -> bool {
    const COLUMNS: [&str; 8] = [
        "next_not_cached_value",
        "minimum_value",
        "maximum_value",
        "start_value",
        "increment",
        "cache_size",
        "cycle_option",
        "cycle_count",
    ];
    schema.columns.len() == COLUMNS.len()
        && schema.columns.iter().zip(COLUMNS).all(|(c, n)| c.name == n)
        && schema.key_indexes().is_empty()
}

sluice_sdk::export_sink!(PostgresSink);
