//! What `sink-mysql` and `sink-postgres` share: row changes buffered by
//! `write` and applied at `flush` through the host's `sql` interface.
//!
//! At flush, transactions (in commit order) go into at most `worker-count`
//! groups so that no two groups touch the same primary or unique key:
//! transactions sharing a key, directly or through others, are in one group
//! in commit order (conflicting transactions keep commit order); each group
//! is one downstream transaction on its own connection, and the groups apply
//! concurrently. With `batch-dml` (the default) a group is written by its net
//! effect per table: one `DELETE ... WHERE key IN (...)` of the rows it
//! touches, then multi-row inserts of their last images, each statement at
//! most `max-txn-row` rows. Without it, inserts become multi-row statements
//! and every update and delete is its own statement; an update that changes
//! a key becomes a delete and an insert. Rows flagged
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

/// Most statements the host takes in one `execute` call.
pub const MAX_CALL_STATEMENTS: usize = 65_536;

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
    /// Some pending row is delivered again (after a restart, a failed
    /// flush or a swap).
    replay: bool,
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
            replay: false,
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
                self.replay |= row.is_replay();
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
        let batch = self.config.batch_dml;
        // What is replayed applies on one connection: a flush that failed
        // (a deadlock between groups, say) is not tried the same way again,
        // so a replay always gets through.
        let workers = if std::mem::take(&mut self.replay) {
            1
        } else {
            self.config.worker_count
        };
        let groups: Vec<Vec<Statement>> = groups(pending, workers)
            .into_iter()
            .map(|group| statements::<D>(group, max_rows, batch))
            .filter(|g| !g.is_empty())
            .collect();
        for call in calls(groups, MAX_CALL_STATEMENTS) {
            sql::execute(&self.config.database, call).map_err(sql::SqlError::into_error)?;
        }
        Ok(())
    }
}

/// Groups packed into calls of at most `max` statements in all. The groups
/// share no key, so calls may follow one another in any order; a group
/// longer than `max` is cut into pieces applied one after another (each its
/// own downstream transaction).
fn calls(groups: Vec<Vec<Statement>>, max: usize) -> Vec<Vec<Vec<Statement>>> {
    let mut out: Vec<Vec<Vec<Statement>>> = Vec::new();
    let mut size = 0;
    for group in groups {
        if group.len() > max {
            let mut rest = group;
            while !rest.is_empty() {
                let tail = rest.split_off(rest.len().min(max));
                out.push(vec![rest]);
                rest = tail;
            }
            continue;
        }
        if out.is_empty() || size + group.len() > max {
            out.push(Vec::new());
            size = 0;
        }
        size += group.len();
        if let Some(call) = out.last_mut() {
            call.push(group);
        }
    }
    out
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

/// Splits transactions (in commit-ts order) into at most `workers` groups
/// that share no key, so that the groups can apply concurrently:
/// transactions that share a key, directly or through others, are in one
/// group, in commit order. Such sets go to the least loaded group, largest
/// first (by row changes).
fn groups(txns: Vec<Txn>, workers: usize) -> Vec<Vec<Txn>> {
    fn root(parent: &mut [usize], mut at: usize) -> usize {
        while parent[at] != at {
            parent[at] = parent[parent[at]];
            at = parent[at];
        }
        at
    }
    let mut parent: Vec<usize> = (0..txns.len()).collect();
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut keys = Vec::new();
    for (at, txn) in txns.iter().enumerate() {
        keys.clear();
        for c in &txn.changes {
            for image in [c.before.as_ref(), c.after.as_ref()].into_iter().flatten() {
                conflict_keys(c, image, &mut keys);
            }
        }
        for key in keys.drain(..) {
            match owner.entry(key) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    let (a, b) = (root(&mut parent, at), root(&mut parent, *first.get()));
                    // The older transaction's root stays the root.
                    parent[a.max(b)] = a.min(b);
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(at);
                }
            }
        }
    }
    // Connected sets in order of their first transaction, with their size.
    let mut sets: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut set_of: HashMap<usize, usize> = HashMap::new();
    for (at, txn) in txns.iter().enumerate() {
        let r = root(&mut parent, at);
        let n = *set_of.entry(r).or_insert_with(|| {
            sets.push((0, Vec::new()));
            sets.len() - 1
        });
        sets[n].0 += txn.changes.len().max(1);
        sets[n].1.push(at);
    }
    sets.sort_by(|a, b| b.0.cmp(&a.0).then(a.1[0].cmp(&b.1[0])));
    let workers = workers.max(1);
    let mut load = vec![0usize; workers];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); workers];
    for (size, txns_of_set) in sets {
        let g = (0..workers).min_by_key(|&g| (load[g], g)).unwrap_or(0);
        load[g] += size;
        members[g].extend(txns_of_set);
    }
    let mut slots: Vec<Option<Txn>> = txns.into_iter().map(Some).collect();
    members
        .into_iter()
        .filter(|m| !m.is_empty())
        .map(|mut m| {
            m.sort_unstable();
            m.into_iter().filter_map(|at| slots[at].take()).collect()
        })
        .collect()
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

/// The statements of one group. With `batch` (`batch-dml`), each table's
/// changes are reduced to their net effect ([`net_statements`]); tables
/// without a key, and every table without `batch`, get a statement per row
/// change ([`row_statements`]).
fn statements<D: Dialect>(group: Vec<Txn>, max_rows: usize, batch: bool) -> Vec<Statement> {
    let changes = group.into_iter().flat_map(|t| t.changes);
    if !batch {
        return row_statements::<D>(changes, max_rows);
    }
    // Per target table (in order of first change), runs of changes from one
    // upstream table and schema version. Two upstream tables routed to one
    // target alternate runs, which apply in turn; different targets share
    // no key (the group's conflict keys are per target), so their order
    // does not matter.
    let mut targets: Vec<Vec<Vec<Change>>> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for change in changes {
        let n = *at.entry(change.target.clone()).or_insert_with(|| {
            targets.push(Vec::new());
            targets.len() - 1
        });
        let runs = &mut targets[n];
        let same = runs.last().and_then(|r| r.first()).is_some_and(|first| {
            first.schema.version == change.schema.version
                && first.schema.schema_name == change.schema.schema_name
                && first.schema.table_name == change.schema.table_name
        });
        if same {
            if let Some(run) = runs.last_mut() {
                run.push(change);
            }
        } else {
            runs.push(vec![change]);
        }
    }
    let mut out = Vec::new();
    for run in targets.into_iter().flatten() {
        if run[0].schema.key_indexes().is_empty() {
            out.extend(row_statements::<D>(run.into_iter(), max_rows));
        } else {
            out.extend(net_statements::<D>(run, max_rows));
        }
    }
    out
}

/// What a run of changes leaves of one key.
struct Net {
    /// The key's values.
    key: Vec<SqlValue>,
    /// A row with this key may exist before the run (the first change on
    /// it had a before image, or a change on it is replayed): it is deleted
    /// first.
    existed: bool,
    /// The row the key holds after the run, if any.
    image: Option<Vec<SqlValue>>,
}

/// The statements of a run of changes to one keyed table (one upstream
/// table and schema version), by net effect: one `DELETE ... WHERE (key)
/// IN (...)` of every key that held a row before the run, then multi-row
/// inserts of every key's last image, each at most `max_rows` rows (and
/// [`MAX_PARAMS`] parameters). The run is one downstream transaction, so
/// only its end state is seen. Since every row the run touches is removed
/// before any is inserted, the inserted rows are a part of the upstream
/// state after the run and cannot collide on a unique key with each other
/// or with rows the run did not touch. With an idempotent (replayed) change
/// in the run, the inserts replace.
fn net_statements<D: Dialect>(run: Vec<Change>, max_rows: usize) -> Vec<Statement> {
    let Some(first) = run.first() else {
        return Vec::new();
    };
    let target = first.target.clone();
    let schema = first.schema.clone();
    let uniques = first.uniques.clone();
    let keys = schema.key_indexes();
    let mut nets: Vec<Net> = Vec::new();
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    // `before`: the change finds a row with this key (which existed before
    // the run if this is the key's first change); `safe`: the change is
    // replayed. Deleting a key first is always right (its last image, if
    // any, is inserted after); it is only needed where a row may be.
    let mut touch = |image: &[SqlValue], before: bool, safe: bool| -> usize {
        let n = *index.entry(key_bytes(image, &keys)).or_insert_with(|| {
            nets.push(Net {
                key: keys.iter().map(|&i| image[i].clone()).collect(),
                existed: before,
                image: None,
            });
            nets.len() - 1
        });
        nets[n].existed |= safe;
        n
    };
    let mut replace = false;
    let mut last: Vec<(usize, Option<Vec<SqlValue>>)> = Vec::new();
    for change in run {
        // A replayed row may be downstream already, whatever its first
        // change here says: an earlier attempt may have committed part of
        // what is replayed, cut at other flush boundaries (a row inserted
        // then, deleted in this run, must go).
        let safe = change.safe;
        replace |= safe;
        match (change.op, change.before, change.after) {
            (Op::Insert, _, Some(after)) => last.push((touch(&after, false, safe), Some(after))),
            (Op::Delete, Some(before), _) => last.push((touch(&before, true, safe), None)),
            (Op::Update, Some(before), Some(after)) => {
                let old = touch(&before, true, safe);
                let new = touch(&after, false, safe);
                if old != new {
                    last.push((old, None));
                }
                last.push((new, Some(after)));
            }
            _ => {}
        }
    }
    for (n, image) in last {
        nets[n].image = image;
    }
    let mut out = Vec::new();
    let deleted: Vec<Vec<SqlValue>> = nets
        .iter_mut()
        .filter(|n| n.existed)
        .map(|n| std::mem::take(&mut n.key))
        .collect();
    let limit = max_rows.min(MAX_PARAMS / keys.len().max(1)).max(1);
    for chunk in chunks(deleted, limit) {
        out.push(delete_keys::<D>(&target, &schema, chunk));
    }
    let images: Vec<Vec<SqlValue>> = nets.into_iter().filter_map(|n| n.image).collect();
    let limit = max_rows
        .min(MAX_PARAMS / schema.columns.len().max(1))
        .max(1);
    for chunk in chunks(images, limit) {
        out.extend(D::insert(&target, &schema, &uniques, chunk, replace));
    }
    out
}

/// `items` in pieces of at most `size`.
fn chunks<T>(items: Vec<T>, size: usize) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    for item in items {
        match out.last_mut() {
            Some(chunk) if chunk.len() < size => chunk.push(item),
            _ => out.push(vec![item]),
        }
    }
    out
}

/// The values at `at` of `image`, as bytes that are equal exactly when the
/// values are.
fn key_bytes(image: &[SqlValue], at: &[usize]) -> Vec<u8> {
    let mut out = Vec::with_capacity(at.len() * 9);
    for &i in at {
        match &image[i] {
            SqlValue::Null => out.push(0),
            SqlValue::Int(v) => {
                out.push(1);
                out.extend(v.to_le_bytes());
            }
            SqlValue::Uint(v) => {
                out.push(2);
                out.extend(v.to_le_bytes());
            }
            SqlValue::Float(v) => {
                out.push(3);
                out.extend(v.to_bits().to_le_bytes());
            }
            SqlValue::Text(t) => {
                out.push(4);
                out.extend((t.len() as u64).to_le_bytes());
                out.extend(t.as_bytes());
            }
            SqlValue::Bytes(b) => {
                out.push(5);
                out.extend((b.len() as u64).to_le_bytes());
                out.extend(b);
            }
        }
    }
    out
}

/// `DELETE` of the rows with the given `keys` (values of the schema's key
/// columns, in order).
pub fn delete_keys<D: Dialect>(
    target: &str,
    schema: &TableSchema,
    keys: Vec<Vec<SqlValue>>,
) -> Statement {
    let columns: Vec<String> = schema
        .key_indexes()
        .iter()
        .map(|&i| D::ident(&schema.columns[i].name))
        .collect();
    let width = columns.len();
    let sql = if width == 1 {
        let list: Vec<String> = (1..=keys.len()).map(D::placeholder).collect();
        format!(
            "DELETE FROM {target} WHERE {} IN ({})",
            columns[0],
            list.join(", ")
        )
    } else {
        format!(
            "DELETE FROM {target} WHERE ({}) IN ({})",
            columns.join(", "),
            values_list::<D>(keys.len(), width)
        )
    };
    Statement::new(sql, keys.into_iter().flatten().collect())
}

/// The statements of `changes`, one per row change, in order: runs of
/// inserts into one table become multi-row statements of at most
/// `max_rows` rows (fewer for wide tables: at most [`MAX_PARAMS`]
/// parameters); an update that changes the key is a delete and an insert;
/// idempotent rows replace (an update: its old row deleted, then the new
/// one replaced).
fn row_statements<D: Dialect>(
    changes: impl Iterator<Item = Change>,
    max_rows: usize,
) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut run: Option<InsertRun> = None;
    let flush_run = |run: &mut Option<InsertRun>, out: &mut Vec<Statement>| {
        if let Some(r) = run.take() {
            out.extend(D::insert(
                &r.target, &r.schema, &r.uniques, r.rows, r.replace,
            ));
        }
    };
    for change in changes {
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
