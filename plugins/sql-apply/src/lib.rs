//! What `sink-mysql` and `sink-postgres` share: row changes buffered by
//! `write` and applied at `flush` through the host's `sql` interface.
//!
//! At flush, transactions (in commit order) go into at most `worker-count`
//! groups so that no two groups of a round touch the same primary or unique
//! key; each group is one downstream transaction on its own connection and
//! the groups of a round apply concurrently. A transaction whose keys are in
//! two groups waits for the round (conflicting transactions keep commit
//! order). Inserts become multi-row statements of at most `max-txn-row` rows;
//! an update that changes a key becomes a delete and an insert. Rows flagged
//! replay (or every row, with `safe-mode = "always"`) are written
//! idempotently: an insert replaces any row it conflicts with on a key, an
//! update deletes the old row and replaces the new one.
//!
//! A [`Dialect`] says how statements are spelled for one kind of database:
//! [`Mysql`] (MySQL, MariaDB, TiDB) and [`Postgres`].

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::rc::Rc;

use sluice_sdk::sql::{self, Statement, Value as SqlValue};
use sluice_sdk::{BatchView, Column, Error, Op, TableSchema, Value};
pub use sluice_sdk::{date_text, datetime_text};

mod config;
mod mysql;
mod postgres;

pub use config::{Config, SafeMode};
pub use mysql::Mysql;
pub use postgres::Postgres;

/// Most parameters one statement may carry (both MySQL's and PostgreSQL's
/// wire protocols count them in 16 bits).
pub const MAX_PARAMS: usize = 65_535;

/// The unique keys of a target table: each a list of column positions in
/// the upstream schema. The primary key (the schema's key columns) is not
/// among them.
pub type UniqueKeys = Vec<Vec<usize>>;

/// How statements are spelled for one kind of database.
pub trait Dialect {
    /// `name` as a quoted identifier.
    fn ident(name: &str) -> String;

    /// `schema.table`, quoted.
    fn table_name(schema: &str, table: &str) -> String {
        format!("{}.{}", Self::ident(schema), Self::ident(table))
    }

    /// The placeholder of the `n`-th parameter of a statement (from 1).
    fn placeholder(n: usize) -> String;

    /// `a = b` that is true when both are NULL.
    fn null_safe_eq(column: &str, placeholder: &str) -> String;

    /// The `WHERE` clause picking one row by `condition` (a key condition
    /// when `keyed`, every column otherwise).
    fn one_row(target: &str, condition: &str, keyed: bool) -> String;

    /// A value of a row image as a parameter.
    fn param(value: Value<'_>, column: &Column) -> SqlValue {
        common_param(value, column)
    }

    /// Inserts of `rows` (full images, in schema order). With `replace`,
    /// each row first takes the place of any row it conflicts with on the
    /// primary key or one of `uniques`.
    fn insert(
        target: &str,
        schema: &TableSchema,
        uniques: &UniqueKeys,
        rows: Vec<Vec<SqlValue>>,
        replace: bool,
    ) -> Vec<Statement>;

    /// A statement listing the unique keys of `schema.table` downstream:
    /// rows of (index name, column name), in index then key order; the
    /// primary key may be among them.
    fn unique_keys(schema: &str, table: &str) -> Statement;
}

/// The text and number forms both MySQL and PostgreSQL read: dates as
/// `YYYY-MM-DD`, datetimes as `YYYY-MM-DD HH:MM:SS[.ffffff]`, booleans as
/// 0 / 1.
pub fn common_param(value: Value<'_>, column: &Column) -> SqlValue {
    let _ = column;
    match value {
        Value::Null => SqlValue::Null,
        Value::Int(i) => SqlValue::Int(i),
        Value::UInt(u) => SqlValue::Uint(u),
        Value::Float(f) => SqlValue::Float(f),
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => SqlValue::Text(s.to_string()),
        Value::Blob(b) => SqlValue::Bytes(b.to_vec()),
        Value::Bool(b) => SqlValue::Int(i64::from(b)),
        Value::Date(days) => SqlValue::Text(date_text(days)),
        Value::DateTime(us) => SqlValue::Text(datetime_text(us)),
    }
}

/// One row change, ready to be written.
struct Change {
    /// The quoted target table.
    target: String,
    schema: Rc<TableSchema>,
    uniques: Rc<UniqueKeys>,
    op: Op,
    before: Option<Vec<SqlValue>>,
    after: Option<Vec<SqlValue>>,
    /// Write idempotently.
    safe: bool,
}

/// The changes of one upstream transaction (one commit ts), in order.
struct Txn {
    commit_ts: u64,
    changes: Vec<Change>,
}

/// Buffers row changes and applies them at flush.
pub struct Applier<D> {
    config: Config,
    /// Transactions not applied yet, in commit-ts order.
    pending: Vec<Txn>,
    /// Unique keys per (target, upstream schema version).
    uniques: HashMap<(String, u32), Rc<UniqueKeys>>,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Applier<D> {
    /// An applier with a validated `config`.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            pending: Vec::new(),
            uniques: HashMap::new(),
            dialect: PhantomData,
        }
    }

    /// The options.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The quoted target table of upstream `schema.table`.
    pub fn target(&self, schema: &str, table: &str) -> String {
        let (s, t) = self.config.target(schema, table);
        D::table_name(&s, &t)
    }

    /// Forgets what it knows of the target tables' unique keys (after DDL).
    pub fn forget_keys(&mut self) {
        self.uniques.clear();
    }

    /// Buffers the rows of `batch`.
    pub fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        // A batch holds one or more table batches, each in commit-ts order;
        // the rows of one transaction share its commit ts.
        let mut by_ts: BTreeMap<u64, Vec<Change>> = BTreeMap::new();
        for table in batch.tables() {
            let schema = Rc::new(table.schema().clone());
            let (s, t) = self.config.target(&schema.schema_name, &schema.table_name);
            let target = D::table_name(&s, &t);
            let uniques = self.unique_keys(&target, &s, &t, &schema)?;
            for row in table.rows() {
                let safe = match self.config.safe_mode {
                    SafeMode::Always => true,
                    SafeMode::Never => false,
                    SafeMode::Auto => row.is_replay(),
                };
                let image = |i: sluice_sdk::Image<'_>| -> Vec<SqlValue> {
                    schema
                        .columns
                        .iter()
                        .enumerate()
                        .map(|(at, c)| D::param(i.value(at), c))
                        .collect()
                };
                let change = Change {
                    target: target.clone(),
                    schema: schema.clone(),
                    uniques: uniques.clone(),
                    op: row.op(),
                    before: row.before().map(image),
                    after: row.after().map(image),
                    safe,
                };
                by_ts.entry(row.commit_ts()).or_default().push(change);
            }
        }
        for (commit_ts, changes) in by_ts {
            match self.pending.last_mut() {
                // A transaction split over batches continues.
                Some(last) if last.commit_ts == commit_ts => last.changes.extend(changes),
                _ => self.pending.push(Txn { commit_ts, changes }),
            }
        }
        Ok(())
    }

    /// The unique keys (other than the primary key) of a target table, read
    /// once per upstream schema version.
    fn unique_keys(
        &mut self,
        target: &str,
        schema_name: &str,
        table_name: &str,
        schema: &TableSchema,
    ) -> Result<Rc<UniqueKeys>, Error> {
        let at = (target.to_string(), schema.version);
        if let Some(keys) = self.uniques.get(&at) {
            return Ok(keys.clone());
        }
        let rows = sql::query(
            &self.config.database,
            D::unique_keys(schema_name, table_name),
            10_000,
        )
        .map_err(sql::SqlError::into_error)?;
        let keys = Rc::new(unique_keys_of(schema, rows));
        self.uniques.insert(at, keys.clone());
        Ok(keys)
    }

    /// Applies every buffered change; on success nothing stays buffered.
    /// On failure the buffer is dropped too: the host replays from the
    /// checkpoint, flagged (safe mode).
    pub fn flush(&mut self) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending);
        let max_rows = self.config.max_txn_row;
        for round in rounds(pending, self.config.worker_count) {
            let groups: Vec<Vec<Statement>> = round
                .into_iter()
                .map(|group| statements::<D>(group, max_rows))
                .filter(|g| !g.is_empty())
                .collect();
            if groups.is_empty() {
                continue;
            }
            sql::execute(&self.config.database, groups).map_err(sql::SqlError::into_error)?;
        }
        Ok(())
    }
}

/// Unique keys from (index name, column name) rows: indexes whose columns
/// are all upstream columns, without the primary key's.
fn unique_keys_of(schema: &TableSchema, rows: Vec<Vec<SqlValue>>) -> UniqueKeys {
    let mut by_index: BTreeMap<String, Vec<Option<usize>>> = BTreeMap::new();
    for row in rows {
        let (Some(SqlValue::Text(index)), Some(SqlValue::Text(column))) = (row.first(), row.get(1))
        else {
            continue;
        };
        let at = schema.columns.iter().position(|c| c.name == *column);
        by_index.entry(index.clone()).or_default().push(at);
    }
    let primary = schema.key_indexes();
    let mut out: UniqueKeys = by_index
        .into_values()
        .filter_map(|cols| cols.into_iter().collect::<Option<Vec<usize>>>())
        .filter(|cols| {
            let mut sorted = cols.clone();
            sorted.sort_unstable();
            sorted != primary
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The conflict keys of one image: its primary key (every column for a
/// table without one) and each unique key whose values are all non-NULL.
fn conflict_keys(change: &Change, image: &[SqlValue], out: &mut Vec<String>) {
    let mut key = |name: &str, at: &[usize]| {
        let mut text = format!("{}\u{1}{name}", change.target);
        for &i in at {
            text.push('\u{1}');
            text.push_str(&format!("{:?}", image[i]));
        }
        out.push(text);
    };
    let primary = change.schema.key_indexes();
    if primary.is_empty() {
        key("", &(0..image.len()).collect::<Vec<_>>());
    } else {
        key("", &primary);
    }
    for (n, unique) in change.uniques.iter().enumerate() {
        if unique.iter().all(|&i| image[i] != SqlValue::Null) {
            key(&n.to_string(), unique);
        }
    }
}

/// Splits transactions (in commit-ts order) into rounds of at most `workers`
/// groups: within a round no key is in two groups, so the groups can apply
/// concurrently; a transaction whose keys are already in two groups of the
/// round starts the next round (it must wait for both). Within a group,
/// transactions keep their order.
fn rounds(txns: Vec<Txn>, workers: usize) -> Vec<Vec<Vec<Txn>>> {
    let mut out: Vec<Vec<Vec<Txn>>> = Vec::new();
    let mut round: Vec<Vec<Txn>> = Vec::new();
    let mut rows: Vec<usize> = Vec::new();
    let mut owner: HashMap<String, usize> = HashMap::new();
    for txn in txns {
        let mut keys = Vec::new();
        for c in &txn.changes {
            for image in [c.before.as_ref(), c.after.as_ref()].into_iter().flatten() {
                conflict_keys(c, image, &mut keys);
            }
        }
        let mut groups: Vec<usize> = keys.iter().filter_map(|k| owner.get(k).copied()).collect();
        groups.sort_unstable();
        groups.dedup();
        let at = match groups.as_slice() {
            [one] => *one,
            [] if round.len() < workers => {
                round.push(Vec::new());
                rows.push(0);
                round.len() - 1
            }
            [] => {
                // Every worker has a group: the least loaded takes it.
                (0..round.len()).min_by_key(|&g| rows[g]).unwrap_or(0)
            }
            _ => {
                // Its keys are in two groups: it waits for this round.
                out.push(std::mem::take(&mut round));
                rows.clear();
                owner.clear();
                round.push(Vec::new());
                rows.push(0);
                0
            }
        };
        for k in keys {
            owner.insert(k, at);
        }
        rows[at] += txn.changes.len();
        round[at].push(txn);
    }
    if !round.is_empty() {
        out.push(round);
    }
    out
}

/// `WHERE` on the key columns (every column, NULL-safe, for a table without
/// a key), with placeholders from `first`, and its parameters.
fn by_key<D: Dialect>(
    schema: &TableSchema,
    values: &[SqlValue],
    first: usize,
) -> (String, Vec<SqlValue>, bool) {
    let keys = schema.key_indexes();
    let keyed = !keys.is_empty();
    let at: Vec<usize> = if keyed {
        keys
    } else {
        (0..schema.columns.len()).collect()
    };
    let conditions: Vec<String> = at
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            let column = D::ident(&schema.columns[i].name);
            let p = D::placeholder(first + n);
            if keyed {
                format!("{column} = {p}")
            } else {
                D::null_safe_eq(&column, &p)
            }
        })
        .collect();
    let params = at.iter().map(|&i| values[i].clone()).collect();
    (conditions.join(" AND "), params, keyed)
}

/// `DELETE` of the row whose image is `before`.
pub fn delete<D: Dialect>(target: &str, schema: &TableSchema, before: &[SqlValue]) -> Statement {
    let (condition, params, keyed) = by_key::<D>(schema, before, 1);
    Statement::new(
        format!(
            "DELETE FROM {target} {}",
            D::one_row(target, &condition, keyed)
        ),
        params,
    )
}

/// `UPDATE` of the row whose image was `before` to `after` (same key).
pub fn update<D: Dialect>(
    target: &str,
    schema: &TableSchema,
    before: &[SqlValue],
    after: Vec<SqlValue>,
) -> Statement {
    let sets: Vec<String> = schema
        .columns
        .iter()
        .enumerate()
        .map(|(n, c)| format!("{} = {}", D::ident(&c.name), D::placeholder(n + 1)))
        .collect();
    let (condition, key, keyed) = by_key::<D>(schema, before, schema.columns.len() + 1);
    let mut params = after;
    params.extend(key);
    Statement::new(
        format!(
            "UPDATE {target} SET {} {}",
            sets.join(", "),
            D::one_row(target, &condition, keyed)
        ),
        params,
    )
}

/// `(c1, c2, ...)`.
pub fn column_list<D: Dialect>(schema: &TableSchema) -> String {
    let names: Vec<String> = schema.columns.iter().map(|c| D::ident(&c.name)).collect();
    format!("({})", names.join(", "))
}

/// `(p1, p2, ...), (...)` for `rows` rows of `width` parameters.
pub fn values_list<D: Dialect>(rows: usize, width: usize) -> String {
    let mut out = String::new();
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..width {
            if c > 0 {
                out.push_str(", ");
            }
            out.push_str(&D::placeholder(r * width + c + 1));
        }
        out.push(')');
    }
    out
}

/// Whether the key columns of two images are equal.
fn same_key(schema: &TableSchema, a: &[SqlValue], b: &[SqlValue]) -> bool {
    let keys = schema.key_indexes();
    if keys.is_empty() {
        return a == b;
    }
    keys.iter().all(|&i| a[i] == b[i])
}

/// Inserts into one table waiting to be written as one statement.
struct InsertRun {
    target: String,
    schema: Rc<TableSchema>,
    uniques: Rc<UniqueKeys>,
    replace: bool,
    rows: Vec<Vec<SqlValue>>,
}

/// The statements of one group, in order: runs of inserts into one table
/// become multi-row statements of at most `max_rows` rows (fewer for wide
/// tables: at most [`MAX_PARAMS`] parameters); an update that changes the
/// key is a delete and an insert; idempotent rows replace (an update: its
/// old row deleted, then the new one replaced).
fn statements<D: Dialect>(group: Vec<Txn>, max_rows: usize) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut run: Option<InsertRun> = None;
    let flush_run = |run: &mut Option<InsertRun>, out: &mut Vec<Statement>| {
        if let Some(r) = run.take() {
            out.extend(D::insert(
                &r.target, &r.schema, &r.uniques, r.rows, r.replace,
            ));
        }
    };
    for change in group.into_iter().flat_map(|t| t.changes) {
        let Change {
            target,
            schema,
            uniques,
            op,
            before,
            after,
            safe,
        } = change;
        // The insert part of this change, if any: (replace, image).
        let mut insert: Option<(bool, Vec<SqlValue>)> = None;
        match (op, before, after) {
            (Op::Insert, _, Some(after)) => insert = Some((safe, after)),
            (Op::Delete, Some(before), _) => {
                flush_run(&mut run, &mut out);
                out.push(delete::<D>(&target, &schema, &before));
            }
            (Op::Update, Some(before), Some(after)) => {
                flush_run(&mut run, &mut out);
                if safe || !same_key(&schema, &before, &after) {
                    out.push(delete::<D>(&target, &schema, &before));
                    insert = Some((safe, after));
                } else {
                    out.push(update::<D>(&target, &schema, &before, after));
                }
            }
            _ => {}
        }
        if let Some((replace, image)) = insert {
            let limit = max_rows
                .min(MAX_PARAMS / schema.columns.len().max(1))
                .max(1);
            let same = run.as_ref().is_some_and(|r| {
                r.target == target
                    && r.schema.version == schema.version
                    && r.replace == replace
                    && r.rows.len() < limit
            });
            if !same {
                flush_run(&mut run, &mut out);
                run = Some(InsertRun {
                    target,
                    schema,
                    uniques,
                    replace,
                    rows: Vec::new(),
                });
            }
            if let Some(r) = &mut run {
                r.rows.push(image);
            }
        }
    }
    flush_run(&mut run, &mut out);
    out
}

#[cfg(test)]
mod tests;
