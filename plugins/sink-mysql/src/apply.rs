//! Buffering, grouping and applying row changes.

use std::collections::HashMap;

use sluice_sdk::sql::{self, Statement, Value as SqlValue};
use sluice_sdk::{BatchView, DdlEvent, Error, Op, Sink, TableSchema};

use crate::config::{Config, SafeMode};
use crate::encode;

/// One row change, ready to be written.
struct Change {
    /// `schema`.`table` downstream.
    target: String,
    schema: std::rc::Rc<TableSchema>,
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

/// The sink: buffers what `write` gets and applies it at `flush`.
pub struct MysqlSink {
    config: Config,
    /// Transactions not applied yet, in commit-ts order.
    pending: Vec<Txn>,
}

impl Sink for MysqlSink {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            config,
            pending: Vec::new(),
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        // A batch holds one or more table batches, each in commit-ts order;
        // the rows of one transaction share its commit ts.
        let mut by_ts: std::collections::BTreeMap<u64, Vec<Change>> = Default::default();
        for table in batch.tables() {
            let schema = std::rc::Rc::new(table.schema().clone());
            let (s, t) = self.config.target(&schema.schema_name, &schema.table_name);
            let target = encode::table_name(&s, &t);
            for row in table.rows() {
                let safe = match self.config.safe_mode {
                    SafeMode::Always => true,
                    SafeMode::Never => false,
                    SafeMode::Auto => row.is_replay(),
                };
                let change = Change {
                    target: target.clone(),
                    schema: schema.clone(),
                    op: row.op(),
                    before: row.before().map(|i| encode::params(&schema, &i)),
                    after: row.after().map(|i| encode::params(&schema, &i)),
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

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending);
        for round in rounds(pending, self.config.worker_count) {
            let groups: Vec<Vec<Statement>> = round
                .into_iter()
                .map(|group| statements(group, self.config.max_txn_row))
                .filter(|g| !g.is_empty())
                .collect();
            if groups.is_empty() {
                continue;
            }
            sql::execute(&self.config.database, groups).map_err(sql::SqlError::into_error)?;
        }
        Ok(())
    }

    fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        // Everything before the DDL was flushed by the host already.
        if !self.config.apply_ddl {
            return Ok(());
        }
        let mut group = Vec::new();
        if !ddl.schema_name.is_empty() {
            let (schema, _) = self.config.target(&ddl.schema_name, &ddl.table_name);
            group.push(Statement::new(
                format!("CREATE DATABASE IF NOT EXISTS {}", encode::ident(&schema)),
                Vec::new(),
            ));
            group.push(Statement::new(
                format!("USE {}", encode::ident(&schema)),
                Vec::new(),
            ));
        }
        group.push(Statement::new(ddl.query.clone(), Vec::new()));
        match sql::execute(&self.config.database, vec![group]) {
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

/// Server errors of a DDL that was applied before: database or table exists,
/// duplicate column or key name, unknown table or key on a drop.
const ALREADY_APPLIED: &[u32] = &[1007, 1008, 1050, 1051, 1060, 1061, 1091];

/// Splits transactions (in commit-ts order) into rounds of at most `workers`
/// groups: within a round no key is in two groups, so the groups can apply
/// concurrently; a transaction whose keys are already in two groups of the
/// round starts the next round (it must wait for both). Within a group,
/// transactions keep their order.
fn rounds(txns: Vec<Txn>, workers: usize) -> Vec<Vec<Vec<Txn>>> {
    let mut out: Vec<Vec<Vec<Txn>>> = Vec::new();
    let mut round: Vec<Vec<Txn>> = Vec::new();
    let mut rows: Vec<usize> = Vec::new();
    let mut owner: HashMap<(String, String), usize> = HashMap::new();
    for txn in txns {
        let keys: Vec<(String, String)> = txn
            .changes
            .iter()
            .flat_map(|c| {
                [c.before.as_ref(), c.after.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|image| (c.target.clone(), encode::key_text(&c.schema, image)))
            })
            .collect();
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

/// The statements of one group, in order: runs of inserts into one table
/// become multi-row statements of at most `max_rows` rows; an update that
/// changes the key is a delete and an insert; idempotent rows are `REPLACE`d
/// (an update: its old row deleted, then the new one replaced).
/// Inserts into one table waiting to be written as one statement.
struct InsertRun {
    target: String,
    schema: std::rc::Rc<TableSchema>,
    replace: bool,
    rows: Vec<Vec<SqlValue>>,
}

fn statements(group: Vec<Txn>, max_rows: usize) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut run: Option<InsertRun> = None;
    let flush_run = |run: &mut Option<InsertRun>, out: &mut Vec<Statement>| {
        if let Some(r) = run.take() {
            out.push(encode::insert(&r.target, &r.schema, r.rows, r.replace));
        }
    };
    for change in group.into_iter().flat_map(|t| t.changes) {
        let Change {
            target,
            schema,
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
                out.push(encode::delete(&target, &schema, &before));
            }
            (Op::Update, Some(before), Some(after)) => {
                flush_run(&mut run, &mut out);
                if safe || !encode::same_key(&schema, &before, &after) {
                    out.push(encode::delete(&target, &schema, &before));
                    insert = Some((safe, after));
                } else {
                    out.push(encode::update(&target, &schema, &before, after));
                }
            }
            _ => {}
        }
        if let Some((replace, image)) = insert {
            let same = run.as_ref().is_some_and(|r| {
                r.target == target
                    && r.schema.version == schema.version
                    && r.replace == replace
                    && r.rows.len() < max_rows
            });
            if !same {
                flush_run(&mut run, &mut out);
                run = Some(InsertRun {
                    target,
                    schema,
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
mod tests {
    use super::*;
    use sluice_sdk::{Column, ColumnType};

    fn schema() -> std::rc::Rc<TableSchema> {
        let col = |name: &str, key: bool| Column {
            name: name.into(),
            ty: ColumnType::Int,
            sql_type: "int".into(),
            nullable: !key,
            key,
        };
        std::rc::Rc::new(TableSchema {
            table_id: 1,
            version: 1,
            schema_name: "s".into(),
            table_name: "t".into(),
            columns: vec![col("id", true), col("v", false)],
        })
    }

    fn change(op: Op, before: Option<(i64, i64)>, after: Option<(i64, i64)>, safe: bool) -> Change {
        let image = |(id, v): (i64, i64)| vec![SqlValue::Int(id), SqlValue::Int(v)];
        Change {
            target: "`s`.`t`".into(),
            schema: schema(),
            op,
            before: before.map(image),
            after: after.map(image),
            safe,
        }
    }

    fn txn(ts: u64, changes: Vec<Change>) -> Txn {
        Txn {
            commit_ts: ts,
            changes,
        }
    }

    #[test]
    fn inserts_batch_updates_split_on_key_change_and_safe_rows_replace() {
        let group = vec![
            txn(
                1,
                vec![
                    change(Op::Insert, None, Some((1, 10)), false),
                    change(Op::Insert, None, Some((2, 20)), false),
                    change(Op::Insert, None, Some((3, 30)), false),
                ],
            ),
            txn(
                2,
                vec![change(Op::Update, Some((1, 10)), Some((1, 11)), false)],
            ),
            txn(
                3,
                vec![change(Op::Update, Some((2, 20)), Some((9, 20)), false)],
            ),
            txn(
                4,
                vec![change(Op::Update, Some((3, 30)), Some((3, 31)), true)],
            ),
            txn(5, vec![change(Op::Delete, Some((9, 20)), None, false)]),
        ];
        let sql: Vec<String> = statements(group, 2).into_iter().map(|s| s.sql).collect();
        assert_eq!(
            sql,
            [
                "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?), (?, ?)",
                "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?)",
                "UPDATE `s`.`t` SET `id` = ?, `v` = ? WHERE `id` = ? LIMIT 1",
                "DELETE FROM `s`.`t` WHERE `id` = ? LIMIT 1",
                "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?)",
                "DELETE FROM `s`.`t` WHERE `id` = ? LIMIT 1",
                "REPLACE INTO `s`.`t` (`id`, `v`) VALUES (?, ?)",
                "DELETE FROM `s`.`t` WHERE `id` = ? LIMIT 1",
            ]
        );
    }

    #[test]
    fn transactions_on_different_keys_spread_and_conflicting_ones_keep_their_order() {
        let txns = vec![
            txn(1, vec![change(Op::Insert, None, Some((1, 1)), false)]),
            txn(2, vec![change(Op::Insert, None, Some((2, 1)), false)]),
            // Same key as txn 1: its group, after it.
            txn(
                3,
                vec![change(Op::Update, Some((1, 1)), Some((1, 2)), false)],
            ),
            // Keys of both groups: the next round.
            txn(
                4,
                vec![
                    change(Op::Delete, Some((1, 2)), None, false),
                    change(Op::Delete, Some((2, 1)), None, false),
                ],
            ),
            txn(5, vec![change(Op::Insert, None, Some((7, 1)), false)]),
        ];
        let rounds = rounds(txns, 4);
        let shape: Vec<Vec<Vec<u64>>> = rounds
            .iter()
            .map(|r| {
                r.iter()
                    .map(|g| g.iter().map(|t| t.commit_ts).collect())
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            vec![vec![vec![1, 3], vec![2]], vec![vec![4], vec![5]]]
        );
    }
}
