//! What `sink-mysql` and `sink-postgres` share: row changes buffered by
//! `write` and applied at `flush` through the host's `sql` interface.
//!
//! Each target table is read once per upstream schema version ([`target`]):
//! the columns it has and those it computes itself (generated columns are
//! never written), its unique keys, its foreign keys to other tables and
//! theirs to it, and whether it is a sequence.
//!
//! At flush, transactions (in commit order) go into at most `worker-count`
//! groups so that no two groups touch the same primary or unique key, nor a
//! parent row and a row referencing it: transactions sharing a key, directly
//! or through others, are in one group in commit order (conflicting
//! transactions keep commit order); each group is one downstream transaction
//! on its own connection, and the groups apply concurrently. A transaction
//! whose change makes the target cascade (it deletes a parent row of an `ON
//! DELETE CASCADE` key, say) runs alone between the groups before it and
//! those after it: the rows a cascade changes are not in the binlog (the
//! target makes the same change), so no other transaction may overtake it.
//!
//! Tables tied by foreign keys are written change by change in upstream
//! order (by `row-seq` within a transaction), an update as an `UPDATE`, so
//! that the target's checks pass and its cascades run as they ran upstream.
//! Other tables are, with `batch-dml` (the default), written by their net
//! effect per table: one `DELETE ... WHERE key IN (...)` of the rows the group
//! touches, then multi-row inserts of their last images, each statement at
//! most `max-txn-row` rows; without it, inserts become multi-row statements
//! and every update and delete is its own statement.
//!
//! Every group records what it applied in the progress table ([`progress`])
//! in the same downstream transaction, so rows delivered again are applied
//! exactly once. Where that table is off, rows flagged replay (or every row,
//! with `safe-mode = "always"`) are written idempotently: an insert replaces
//! any row it conflicts with on a key (an upsert for a table other tables
//! reference), an update deletes the old row and replaces the new one.
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
pub mod progress;
pub mod target;
mod write;

pub use config::{Config, SafeMode, UnsupportedDdl};
pub use mysql::Mysql;
pub use postgres::Postgres;
pub use target::{Facts, Target, TargetKind, UniqueKeys, target_of, unique_keys_of};
pub use write::{Write, delete, delete_keys, update};

use progress::{Applied, Progress};

/// Most parameters one statement may carry (both MySQL's and PostgreSQL's
/// wire protocols count them in 16 bits).
pub const MAX_PARAMS: usize = 65_535;

/// Most statements the host takes in one `execute` call.
pub const MAX_CALL_STATEMENTS: usize = 65_536;

/// Most rows one `query` may return.
pub const MAX_QUERY_ROWS: u32 = 100_000;

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
    /// [`Dialect::null_safe_eq`] for a single-precision `FLOAT` column, whose
    /// value arrives as a double: the target compares it at its own
    /// precision.
    fn null_safe_float_eq(column: &str, placeholder: &str) -> String {
        Self::null_safe_eq(column, placeholder)
    }

    /// The `WHERE` clause picking one row by `condition` (a key condition
    /// when `keyed`, every column otherwise).
    fn one_row(target: &str, condition: &str, keyed: bool) -> String;

    /// A value of a row image as a parameter.
    fn param(value: Value<'_>, column: &Column) -> SqlValue {
        common_param(value, column)
    }

    /// Writes of `rows` (full images, in schema order) into `target`: the
    /// columns it writes, `how` as [`Write`] says.
    fn insert(target: &Target, rows: Vec<Vec<SqlValue>>, how: Write) -> Vec<Statement>;

    /// The queries whose rows make a target's [`Facts`], in its field order:
    /// columns, unique indexes, foreign keys to parents, foreign keys of
    /// children, kind.
    fn facts(schema: &str, table: &str) -> [Statement; 5];

    /// The statements that create the progress table `schema.table` if
    /// missing (see [`progress`]).
    fn progress_table(schema: &str, table: &str) -> Vec<Statement>;

    /// Sets the row that keeps the largest bound deleted from the progress
    /// table `table` (quoted) to `bound`.
    fn upsert_pruned(table: &str, changefeed: &str, bound: i64) -> Statement;

    /// The statement that turns foreign key checks off (or on again) for
    /// the rest of the downstream transaction, if the database has one.
    fn foreign_key_checks(on: bool) -> Option<Statement>;

    /// A statement every group of row changes starts with (the session's
    /// settings for applying rows), if any.
    fn row_session() -> Option<Statement> {
        None
    }

    /// Queries that tell whether the sink's user may run
    /// [`Dialect::foreign_key_checks`], tried in order until one runs: its
    /// first value true or 1 says it may. None: anyone may.
    fn foreign_key_checks_probes() -> Vec<Statement> {
        Vec::new()
    }
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
pub(crate) struct Change {
    /// The target table.
    target: Rc<Target>,
    op: Op,
    before: Option<Vec<SqlValue>>,
    after: Option<Vec<SqlValue>>,
    /// Delivered again (flagged replay).
    replayed: bool,
    /// Write idempotently (decided at flush).
    safe: bool,
    /// Its place in its transaction.
    seq: u32,
    /// Its transaction's id (the same each time it is delivered).
    txn_id: u64,
    /// Ran upstream with foreign key checks off.
    no_fk_checks: bool,
}

/// The changes of one upstream transaction (one commit ts), in order.
pub(crate) struct Txn {
    commit_ts: u64,
    changes: Vec<Change>,
}

impl Txn {
    /// Whether a change of it makes the target cascade to other rows.
    fn cascades(&self) -> bool {
        self.changes.iter().any(|c| {
            !c.no_fk_checks
                && c.op != Op::Insert
                && c.target.cascades(c.before.as_deref(), c.after.as_deref())
        })
    }

    /// What it applies, for the progress table: its id and each run of
    /// consecutive seqs it has. Only the rows it has are claimed: the
    /// others of its upstream transaction may be another instance's (the
    /// tables of a changefeed split across captures, each capture's sink
    /// recording in the same table), or not delivered yet.
    fn applied(&self) -> Vec<Applied> {
        let Some(first) = self.changes.first() else {
            return Vec::new();
        };
        let mut seqs: Vec<u32> = self.changes.iter().map(|c| c.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let mut runs: Vec<Applied> = Vec::new();
        for seq in seqs {
            match runs.last_mut() {
                Some(run) if run.hi.checked_add(1) == Some(seq) => run.hi = seq,
                _ => runs.push(Applied {
                    txn: first.txn_id,
                    lo: seq,
                    hi: seq,
                }),
            }
        }
        runs
    }
}

/// Buffers row changes and applies them at flush.
pub struct Applier<D> {
    config: Config,
    /// Transactions not applied yet, in commit-ts order.
    pending: Vec<Txn>,
    /// Some pending row is delivered again (after a restart, a failed
    /// flush or a swap).
    replay: bool,
    /// What the target holds of each table, per (target, upstream table id,
    /// schema version).
    targets: HashMap<(String, u32, u32), Rc<Target>>,
    /// Where applied transactions are recorded.
    progress: Progress,
    /// Whether rows written upstream with foreign key checks off can be
    /// applied so (asked the first time there is one).
    checks_toggle: Option<bool>,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Applier<D> {
    /// An applier with a validated `config`, for the changefeed the host
    /// names.
    pub fn new(config: Config) -> Self {
        let progress = Progress::new(&config.progress_table, sluice_sdk::host::changefeed());
        Self {
            config,
            pending: Vec::new(),
            replay: false,
            targets: HashMap::new(),
            progress,
            checks_toggle: None,
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

    /// Forgets what it read of the target tables (after DDL).
    pub fn forget_keys(&mut self) {
        self.targets.clear();
    }

    /// Buffers the rows of `batch`.
    pub fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        // A batch holds one or more table batches, each in commit-ts order;
        // the rows of one transaction share its commit ts.
        let mut by_ts: BTreeMap<u64, Vec<Change>> = BTreeMap::new();
        for table in batch.tables() {
            let schema = table.schema();
            let target = self.target_table(schema)?;
            let schema = &target.schema;
            for row in table.rows() {
                let replayed = row.is_replay();
                self.replay |= replayed;
                let image = |i: sluice_sdk::Image<'_>| -> Vec<SqlValue> {
                    schema
                        .columns
                        .iter()
                        .enumerate()
                        .map(|(at, c)| D::param(i.value(at), c))
                        .collect()
                };
                let Some((op, before, after)) = target.current_change(
                    row.op(),
                    row.before().map(image),
                    row.after().map(image),
                ) else {
                    continue;
                };
                let change = Change {
                    target: target.clone(),
                    op,
                    before,
                    after,
                    replayed,
                    safe: false,
                    seq: row.seq(),
                    txn_id: row.txn_id(),
                    no_fk_checks: row.no_fk_checks(),
                };
                by_ts.entry(row.commit_ts()).or_default().push(change);
            }
        }
        // Batches of different tables come in any order (each table's in
        // commit-ts order): keep the transactions in commit-ts order, a
        // transaction written in several batches (a table each, or split)
        // one.
        for (commit_ts, changes) in by_ts {
            let at = self.pending.partition_point(|t| t.commit_ts < commit_ts);
            match self.pending.get_mut(at) {
                Some(txn) if txn.commit_ts == commit_ts => txn.changes.extend(changes),
                _ => self.pending.insert(at, Txn { commit_ts, changes }),
            }
        }
        Ok(())
    }

    /// Whether the sink may turn foreign key checks off (asked once; a
    /// warning when it may not).
    fn checks_toggle(&mut self) -> Result<bool, Error> {
        if let Some(known) = self.checks_toggle {
            return Ok(known);
        }
        let probes = D::foreign_key_checks_probes();
        let mut allowed = probes.is_empty();
        for probe in probes {
            match sql::query(&self.config.database, probe, 1) {
                Ok(rows) => {
                    allowed = match rows.first().and_then(|r| r.first()) {
                        Some(SqlValue::Int(1) | SqlValue::Uint(1)) => true,
                        Some(SqlValue::Text(t)) => ["t", "true", "1"].contains(&t.as_str()),
                        _ => false,
                    };
                    break;
                }
                Err(e) if e.kind == sql::ErrorKind::Retryable => return Err(e.into_error()),
                Err(_) => {}
            }
        }
        if !allowed {
            sluice_sdk::host::log(
                sluice_sdk::host::Level::Warn,
                "rows written upstream with foreign key checks off are applied with them on: \
                 the sink's user may not turn them off (PostgreSQL: a superuser, or \
                 GRANT SET ON PARAMETER session_replication_role TO the user); \
                 one whose parent is missing stops the changefeed",
            );
        }
        self.checks_toggle = Some(allowed);
        Ok(allowed)
    }

    /// What the target holds of `schema`'s table, read once per version.
    fn target_table(&mut self, schema: &TableSchema) -> Result<Rc<Target>, Error> {
        let (s, t) = self.config.target(&schema.schema_name, &schema.table_name);
        let name = D::table_name(&s, &t);
        let at = (name.clone(), schema.table_id, schema.version);
        if let Some(target) = self.targets.get(&at) {
            return Ok(target.clone());
        }
        let [columns, uniques, parents, children, kind] = D::facts(&s, &t);
        let read = |statement: Statement| {
            sql::query(&self.config.database, statement, MAX_QUERY_ROWS)
                .map_err(sql::SqlError::into_error)
        };
        let facts = Facts {
            columns: read(columns)?,
            uniques: read(uniques)?,
            parents: read(parents)?,
            children: read(children)?,
            kind: read(kind)?,
        };
        let target = target_of(name, Rc::new(schema.clone()), facts, D::table_name);
        let missing: Vec<&str> = (0..target.schema.columns.len())
            .filter(|i| !target.present.contains(i))
            .map(|i| target.schema.columns[i].name.as_str())
            .collect();
        // A sequence's columns are its state, not columns of the target.
        if !missing.is_empty() && target.kind != TargetKind::Sequence {
            sluice_sdk::host::warn(&format!(
                "{} has no column {}: its values are not written",
                target.name,
                missing.join(", ")
            ));
        }
        let target = Rc::new(target);
        self.targets.insert(at, target.clone());
        Ok(target)
    }

    /// Whether the DDL `event` was applied already (recorded in the
    /// progress table).
    pub fn ddl_applied(&mut self, event: &sluice_sdk::DdlEvent) -> Result<bool, Error> {
        if !self.progress.enabled::<D>(&self.config.database)? {
            return Ok(false);
        }
        self.progress
            .ddl_applied::<D>(&self.config.database, event.txn_id)
    }

    /// Records that the DDL `event` ran (no-op when the progress table is
    /// off).
    pub fn ddl_done(&mut self, event: &sluice_sdk::DdlEvent) -> Result<(), Error> {
        if !self.progress.enabled::<D>(&self.config.database)? {
            return Ok(());
        }
        let record = self.progress.ddl_done::<D>(event.txn_id, event.commit_ts);
        sql::execute(&self.config.database, vec![vec![record]])
            .map(|_| ())
            .map_err(sql::SqlError::into_error)
    }

    /// Applies every buffered change; on success nothing stays buffered.
    /// On failure the buffer is dropped too: the host replays from the
    /// checkpoint, flagged.
    pub fn flush(&mut self) -> Result<(), Error> {
        let mut pending = std::mem::take(&mut self.pending);
        let replay = std::mem::take(&mut self.replay);
        let database = self.config.database.clone();
        let recorded = self.progress.enabled::<D>(&database)?;
        if replay && recorded {
            // Leave out what the progress table shows as applied; the rest
            // was not, and is written as the first time (below the bound of
            // what was deleted from the table, idempotently).
            // Transactions are told by their id: one delivered again may have
            // another commit ts.
            if pending.iter().any(|t| t.changes.iter().any(|c| c.replayed)) {
                let saved = sluice_sdk::host::saved_checkpoint();
                let applied = self.progress.applied::<D>(&database, saved)?;
                let before: usize = pending.iter().map(|t| t.changes.len()).sum();
                for txn in &mut pending {
                    let ts = txn.commit_ts;
                    txn.changes
                        .retain(|c| !(c.replayed && applied.contains(c.txn_id, c.seq)));
                    for c in &mut txn.changes {
                        c.replayed &= ts <= applied.pruned_through;
                    }
                }
                pending.retain(|t| !t.changes.is_empty());
                let after: usize = pending.iter().map(|t| t.changes.len()).sum();
                sluice_sdk::host::log(
                    sluice_sdk::host::Level::Info,
                    &format!(
                        "rows delivered again above checkpoint {saved}: {} of {before} left out as applied already ({} transactions recorded, none below {} kept)",
                        before - after,
                        applied.transactions(),
                        applied.pruned_through
                    ),
                );
            }
        }
        // Idempotent writes where a row may be downstream already without a
        // record of it (no progress table, or below what was deleted from it).
        for txn in &mut pending {
            for c in &mut txn.changes {
                c.safe = match self.config.safe_mode {
                    SafeMode::Always => true,
                    SafeMode::Never => false,
                    SafeMode::Auto => c.replayed,
                };
            }
        }
        let max_rows = self.config.max_txn_row;
        let batch = self.config.batch_dml;
        let toggle = if pending
            .iter()
            .any(|t| t.changes.iter().any(|c| c.no_fk_checks))
        {
            self.checks_toggle()?
        } else {
            false
        };
        // What is replayed applies on one connection: a flush that failed
        // (a deadlock between groups, say) is not tried the same way again,
        // so a replay always gets through.
        let workers = if replay { 1 } else { self.config.worker_count };
        let mut housekeeping = if recorded {
            self.progress
                .prune::<D>(sluice_sdk::host::saved_checkpoint())
        } else {
            Vec::new()
        };
        let first_ts = pending.first().map_or(0, |t| t.commit_ts);
        let last_ts = pending.last().map_or(0, |t| t.commit_ts);
        for phase in phases(pending) {
            let groups: Vec<Vec<Statement>> = groups(phase, workers)
                .into_iter()
                .map(|group| {
                    let applied: Vec<Applied> = group.iter().flat_map(Txn::applied).collect();
                    let first = group.iter().map(|t| t.commit_ts).min().unwrap_or(0);
                    let last = group.iter().map(|t| t.commit_ts).max().unwrap_or(0);
                    let mut statements = statements::<D>(group, max_rows, batch, toggle);
                    if !statements.is_empty()
                        && let Some(session) = D::row_session()
                    {
                        statements.insert(0, session);
                    }
                    if recorded
                        && let Some(record) = self.progress.record::<D>(first, last, &applied)
                    {
                        statements.push(record);
                    }
                    statements
                })
                .filter(|g| !g.is_empty())
                .collect();
            let mut groups = groups;
            if !housekeeping.is_empty() {
                groups.push(std::mem::take(&mut housekeeping));
            }
            for call in calls::<D>(groups, MAX_CALL_STATEMENTS) {
                sql::execute(&database, call).map_err(|e| {
                    let retryable = e.kind == sql::ErrorKind::Retryable;
                    let message = format!(
                        "{} (applying the transactions at commit ts {first_ts} to {last_ts})",
                        e.into_error().message()
                    );
                    if retryable {
                        Error::retryable(message)
                    } else {
                        Error::fatal(message)
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// Groups packed into calls of at most `max` statements in all. The groups
/// share no key, so calls may follow one another in any order; a group
/// longer than `max` is cut into pieces applied one after another (each its
/// own downstream transaction, which starts with foreign key checks off if
/// the piece before it ended so).
fn calls<D: Dialect>(groups: Vec<Vec<Statement>>, max: usize) -> Vec<Vec<Vec<Statement>>> {
    let off = D::foreign_key_checks(false).map(|s| s.sql);
    let mut out: Vec<Vec<Vec<Statement>>> = Vec::new();
    let mut size = 0;
    for group in groups {
        if group.len() > max {
            let mut rest = group;
            let mut checks_off = false;
            let mut first = true;
            while !rest.is_empty() {
                let mut piece = Vec::with_capacity(max);
                if !first && let Some(session) = D::row_session() {
                    piece.push(session);
                }
                first = false;
                if checks_off && let Some(toggle) = D::foreign_key_checks(false) {
                    piece.push(toggle);
                }
                let tail = rest.split_off(rest.len().min((max - piece.len()).max(1)));
                for s in &rest {
                    if D::foreign_key_checks(true).is_some_and(|on| on.sql == s.sql) {
                        checks_off = false;
                    } else if off.as_deref() == Some(s.sql.as_str()) {
                        checks_off = true;
                    }
                }
                piece.extend(rest);
                out.push(vec![piece]);
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

/// Transactions cut where one makes the target cascade: it applies alone,
/// after everything before it and before everything after it.
fn phases(txns: Vec<Txn>) -> Vec<Vec<Txn>> {
    let mut out: Vec<Vec<Txn>> = vec![Vec::new()];
    for txn in txns {
        if txn.cascades() {
            if out.last().is_some_and(|p| !p.is_empty()) {
                out.push(Vec::new());
            }
            if let Some(p) = out.last_mut() {
                p.push(txn);
            }
            out.push(Vec::new());
        } else if let Some(p) = out.last_mut() {
            p.push(txn);
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// A key value as conflict detection compares it: text case-folded and
/// without trailing spaces, as the target's collation may compare it (two
/// values that might be equal there share a key here; over-matching only
/// costs parallelism).
fn key_text(value: &SqlValue, out: &mut String) {
    use std::fmt::Write as _;
    match value {
        SqlValue::Text(t) => {
            out.push('t');
            out.push_str(&t.trim_end_matches(' ').to_lowercase());
        }
        other => {
            let _ = write!(out, "{other:?}");
        }
    }
}

/// The conflict keys of one image: its primary key (every column for a
/// table without one), each unique key whose values are all non-NULL, each
/// foreign key's parent row, and each of its column sets other tables
/// reference.
fn conflict_keys(change: &Change, image: &[SqlValue], out: &mut Vec<String>) {
    let target = &change.target;
    let mut key = |table: &str, name: &str, at: &[usize]| {
        let mut text = format!("{table}\u{1}{name}");
        for &i in at {
            text.push('\u{1}');
            key_text(&image[i], &mut text);
        }
        out.push(text);
    };
    if target.kind == TargetKind::Sequence {
        // Its one row is its state: every change of it in commit order.
        key(&target.name, "", &[]);
        return;
    }
    let primary = target.schema.key_indexes();
    if primary.is_empty() {
        key(&target.name, "", &(0..image.len()).collect::<Vec<_>>());
    } else {
        key(&target.name, "", &primary);
    }
    for (n, unique) in target.uniques.iter().enumerate() {
        if unique.iter().all(|&i| image[i] != SqlValue::Null) {
            key(&target.name, &n.to_string(), unique);
        }
    }
    for fk in &target.parents {
        if fk.columns.iter().all(|&i| image[i] != SqlValue::Null) {
            key(
                &fk.parent,
                &format!("ref({})", fk.parent_columns.join(",")),
                &fk.columns,
            );
        }
    }
    for r in &target.referenced {
        if r.columns.iter().all(|&i| image[i] != SqlValue::Null) {
            key(
                &target.name,
                &format!("ref({})", r.names.join(",")),
                &r.columns,
            );
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

/// The statements of one group. Changes of tables tied by foreign keys are
/// written one by one in upstream order ([`write::faithful_statements`]).
/// With `batch` (`batch-dml`), other tables' changes are reduced to their
/// net effect ([`write::net_statements`]); tables without a key, and every
/// table without `batch`, get a statement per row change
/// ([`write::row_statements`]).
fn statements<D: Dialect>(
    group: Vec<Txn>,
    max_rows: usize,
    batch: bool,
    toggle: bool,
) -> Vec<Statement> {
    let mut linked: Vec<Change> = Vec::new();
    let mut others: Vec<Change> = Vec::new();
    for txn in group {
        let mut changes = txn.changes;
        if changes.iter().any(|c| c.target.fk_linked()) {
            // A transaction's rows of different tables in the order they
            // were made upstream.
            changes.sort_by_key(|c| c.seq);
        }
        for change in changes {
            if change.target.fk_linked() {
                linked.push(change);
            } else {
                others.push(change);
            }
        }
    }
    let mut out = write::faithful_statements::<D>(linked, max_rows, toggle);
    if !batch {
        out.extend(write::row_statements::<D>(others.into_iter(), max_rows));
        return out;
    }
    // Per target table (in order of first change), runs of changes from one
    // upstream table and schema version. Two upstream tables routed to one
    // target alternate runs, which apply in turn; different targets share
    // no key (the group's conflict keys are per target), so their order
    // does not matter.
    let mut targets: Vec<Vec<Vec<Change>>> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for change in others {
        let n = *at.entry(change.target.name.clone()).or_insert_with(|| {
            targets.push(Vec::new());
            targets.len() - 1
        });
        let runs = &mut targets[n];
        let same = runs
            .last()
            .and_then(|r| r.first())
            .is_some_and(|first| first.target.same(&change.target));
        if same {
            if let Some(run) = runs.last_mut() {
                run.push(change);
            }
        } else {
            runs.push(vec![change]);
        }
    }
    for run in targets.into_iter().flatten() {
        if run[0].target.key().is_empty() {
            out.extend(write::row_statements::<D>(run.into_iter(), max_rows));
        } else {
            out.extend(write::net_statements::<D>(run, max_rows));
        }
    }
    out
}

#[cfg(test)]
mod tests;
