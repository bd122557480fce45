//! Foreign keys of the upstream's DDL, created in PostgreSQL with the same
//! actions, so that PostgreSQL cascades what the upstream cascaded: MySQL and
//! MariaDB do not write the rows a cascade changes to the binlog.
//!
//! Tables are created with their first rows, so a key is kept as pending (in
//! the table `foreign_keys` of the progress table's schema, so that it
//! survives a restart) until both of its tables exist, then added.

use sluice_sdk::Error;
use sluice_sdk::host::{Level, log};
use sluice_sdk::sql::{self, Statement, Value as SqlValue};
use sql_apply::{Dialect, Postgres};

/// One foreign key, with quoted target names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    /// Its name (MySQL's, or `<table>_ibfk_<n>` as InnoDB names unnamed ones).
    pub name: String,
    /// The child table, quoted.
    pub child: String,
    /// The child's columns.
    pub columns: Vec<String>,
    /// The parent table, quoted.
    pub parent: String,
    /// The parent's columns.
    pub parent_columns: Vec<String>,
    /// `ON DELETE` action (`CASCADE`, `SET NULL`, `RESTRICT`, `NO ACTION`,
    /// `SET DEFAULT`).
    pub on_delete: String,
    /// `ON UPDATE` action.
    pub on_update: String,
}

impl ForeignKey {
    /// `ALTER TABLE child ADD CONSTRAINT ...`.
    pub fn add_statement(&self) -> String {
        let list = |cols: &[String]| {
            cols.iter()
                .map(|c| Postgres::ident(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "ALTER TABLE {} ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({}) ON DELETE {} ON UPDATE {}",
            self.child,
            Postgres::ident(&self.name),
            list(&self.columns),
            self.parent,
            list(&self.parent_columns),
            self.on_delete,
            self.on_update
        )
    }
}

/// The foreign keys waiting for their tables, kept downstream.
pub struct Registry {
    /// `schema.table` of the registry, quoted; `None`: in memory only.
    table: Option<String>,
    ready: bool,
    memory: Vec<ForeignKey>,
}

impl Registry {
    /// A registry in the schema of the progress table `progress` (empty: in
    /// memory only).
    pub fn new(progress: &str) -> Self {
        let table = progress
            .split_once('.')
            .map(|(schema, _)| Postgres::table_name(schema, "foreign_keys"));
        Self {
            table,
            ready: false,
            memory: Vec::new(),
        }
    }

    fn ensure(&mut self, database: &str) -> Result<(), Error> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        if self.ready {
            return Ok(());
        }
        let schema = table.split('.').next().unwrap_or_default().to_string();
        let group = vec![
            Statement::new(format!("CREATE SCHEMA IF NOT EXISTS {schema}"), Vec::new()),
            Statement::new(
                format!(
                    "CREATE TABLE IF NOT EXISTS {table} (child text NOT NULL, name text NOT NULL, \
                     parent text NOT NULL, definition text NOT NULL, PRIMARY KEY (child, name))"
                ),
                Vec::new(),
            ),
        ];
        match sql::execute(database, vec![group]) {
            Ok(_) => {}
            Err(e) if e.kind == sql::ErrorKind::Retryable => return Err(e.into_error()),
            Err(e) => {
                log(
                    Level::Warn,
                    &format!(
                        "foreign keys waiting for their tables are kept in memory only ({table} cannot be created: {})",
                        e.message
                    ),
                );
                self.table = None;
            }
        }
        self.ready = true;
        Ok(())
    }

    /// Keeps `fk` until its tables exist, then adds it (at once if they do).
    pub fn add(&mut self, database: &str, fk: ForeignKey) -> Result<(), Error> {
        self.ensure(database)?;
        match &self.table {
            Some(table) => {
                sql::execute(
                    database,
                    vec![vec![Statement::new(
                        format!(
                            "INSERT INTO {table} (child, name, parent, definition) VALUES ($1, $2, $3, $4) \
                             ON CONFLICT (child, name) DO UPDATE SET parent = EXCLUDED.parent, \
                             definition = EXCLUDED.definition"
                        ),
                        vec![
                            SqlValue::Text(fk.child.clone()),
                            SqlValue::Text(fk.name.clone()),
                            SqlValue::Text(fk.parent.clone()),
                            SqlValue::Text(fk.add_statement()),
                        ],
                    )]],
                )
                .map_err(sql::SqlError::into_error)?;
            }
            None => {
                self.memory
                    .retain(|k| !(k.child == fk.child && k.name == fk.name));
                self.memory.push(fk.clone());
            }
        }
        self.settle(database, Some(&fk.child))
    }

    /// Drops the key `name` of `child` (pending or created).
    pub fn drop(&mut self, database: &str, child: &str, name: &str) -> Result<(), Error> {
        self.ensure(database)?;
        self.memory
            .retain(|k| !(k.child == child && k.name == name));
        let mut group = vec![Statement::new(
            format!(
                "ALTER TABLE IF EXISTS {child} DROP CONSTRAINT IF EXISTS {}",
                Postgres::ident(name)
            ),
            Vec::new(),
        )];
        if let Some(table) = &self.table {
            group.push(Statement::new(
                format!("DELETE FROM {table} WHERE child = $1 AND name = $2"),
                vec![SqlValue::Text(child.into()), SqlValue::Text(name.into())],
            ));
        }
        sql::execute(database, vec![group])
            .map(|_| ())
            .map_err(sql::SqlError::into_error)
    }

    /// Pending keys of table `from` (quoted) follow it to `to`, as MySQL's
    /// keys follow a renamed table (created ones PostgreSQL moves itself).
    pub fn rename(&mut self, database: &str, from: &str, to: &str) -> Result<(), Error> {
        self.ensure(database)?;
        for k in &mut self.memory {
            if k.child == from {
                k.child = to.to_string();
            }
            if k.parent == from {
                k.parent = to.to_string();
            }
        }
        let Some(table) = &self.table else {
            return Ok(());
        };
        let group = ["child", "parent"]
            .iter()
            .map(|column| {
                Statement::new(
                    format!(
                        "UPDATE {table} SET {column} = $2, definition = replace(definition, $1, $2) \
                         WHERE {column} = $1"
                    ),
                    vec![SqlValue::Text(from.into()), SqlValue::Text(to.into())],
                )
            })
            .collect();
        sql::execute(database, vec![group])
            .map(|_| ())
            .map_err(sql::SqlError::into_error)
    }

    /// The next InnoDB-style name of an unnamed key of `child`
    /// (`<table>_ibfk_<n>`).
    pub fn next_name(&mut self, database: &str, child: &str, table: &str) -> Result<String, Error> {
        self.ensure(database)?;
        let prefix = format!("{table}_ibfk_");
        let mut names: Vec<String> = self
            .memory
            .iter()
            .filter(|k| k.child == child)
            .map(|k| k.name.clone())
            .collect();
        let mut queries = vec![Statement::new(
            "SELECT conname::text FROM pg_constraint WHERE conrelid = to_regclass($1)",
            vec![SqlValue::Text(child.into())],
        )];
        if let Some(registry) = &self.table {
            queries.push(Statement::new(
                format!("SELECT name FROM {registry} WHERE child = $1"),
                vec![SqlValue::Text(child.into())],
            ));
        }
        for q in queries {
            let rows = sql::query(database, q, 10_000).map_err(sql::SqlError::into_error)?;
            names.extend(rows.into_iter().filter_map(|r| match r.into_iter().next() {
                Some(SqlValue::Text(t)) => Some(t),
                _ => None,
            }));
        }
        let n = names
            .iter()
            .filter_map(|n| n.strip_prefix(&prefix)?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        Ok(format!("{prefix}{}", n + 1))
    }

    /// Adds the pending keys whose two tables now exist (those of `table`,
    /// or all); a key PostgreSQL refuses is logged and dropped.
    pub fn settle(&mut self, database: &str, table: Option<&str>) -> Result<(), Error> {
        self.ensure(database)?;
        let pending: Vec<(String, String, String, String)> = match &self.table {
            Some(registry) => {
                let rows = sql::query(
                    database,
                    Statement::new(
                        format!("SELECT child, name, parent, definition FROM {registry}"),
                        Vec::new(),
                    ),
                    10_000,
                )
                .map_err(sql::SqlError::into_error)?;
                rows.into_iter()
                    .filter_map(|r| {
                        let t = |i: usize| match r.get(i) {
                            Some(SqlValue::Text(t)) => Some(t.clone()),
                            _ => None,
                        };
                        Some((t(0)?, t(1)?, t(2)?, t(3)?))
                    })
                    .collect()
            }
            None => self
                .memory
                .iter()
                .map(|k| {
                    (
                        k.child.clone(),
                        k.name.clone(),
                        k.parent.clone(),
                        k.add_statement(),
                    )
                })
                .collect(),
        };
        for (child, name, parent, definition) in pending {
            if table.is_some_and(|t| t != child && t != parent) {
                continue;
            }
            let exists = |name: &str| -> Result<bool, Error> {
                let rows = sql::query(
                    database,
                    Statement::new(
                        "SELECT to_regclass($1) IS NOT NULL",
                        vec![SqlValue::Text(name.into())],
                    ),
                    1,
                )
                .map_err(sql::SqlError::into_error)?;
                Ok(matches!(
                    rows.first().and_then(|r| r.first()),
                    Some(SqlValue::Int(1))
                ))
            };
            if !exists(&child)? || !exists(&parent)? {
                continue;
            }
            let mut group = vec![Statement::new(
                format!(
                    "DO $sluice$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('{}') AND conname = '{}') THEN {definition}; END IF; END $sluice$",
                    child.replace('\'', "''"),
                    name.replace('\'', "''")
                ),
                Vec::new(),
            )];
            if let Some(registry) = &self.table {
                group.push(Statement::new(
                    format!("DELETE FROM {registry} WHERE child = $1 AND name = $2"),
                    vec![SqlValue::Text(child.clone()), SqlValue::Text(name.clone())],
                ));
            }
            match sql::execute(database, vec![group]) {
                Ok(_) => log(
                    Level::Info,
                    &format!("foreign key {name} of {child} created"),
                ),
                Err(e) if e.kind == sql::ErrorKind::Retryable => return Err(e.into_error()),
                Err(e) => {
                    log(
                        Level::Warn,
                        &format!(
                            "foreign key {name} of {child} cannot be created in PostgreSQL ({}); rows the upstream changes by cascade will differ. Create it on the target by hand.",
                            e.message
                        ),
                    );
                    self.forget(database, &child, &name)?;
                }
            }
            self.memory
                .retain(|k| !(k.child == child && k.name == name));
        }
        Ok(())
    }

    fn forget(&mut self, database: &str, child: &str, name: &str) -> Result<(), Error> {
        self.memory
            .retain(|k| !(k.child == child && k.name == name));
        if let Some(registry) = &self.table {
            sql::execute(
                database,
                vec![vec![Statement::new(
                    format!("DELETE FROM {registry} WHERE child = $1 AND name = $2"),
                    vec![SqlValue::Text(child.into()), SqlValue::Text(name.into())],
                )]],
            )
            .map_err(sql::SqlError::into_error)?;
        }
        Ok(())
    }
}
