//! The statements a group's changes become: by net effect per table
//! ([`net_statements`]), one per row change ([`row_statements`]), or one per
//! row change in upstream order with updates kept as updates, for tables tied
//! by foreign keys ([`faithful_statements`]).

use std::collections::HashMap;
use std::rc::Rc;

use sluice_sdk::Op;
use sluice_sdk::sql::{Statement, Value as SqlValue};

use crate::target::Target;
use crate::{Change, Dialect, MAX_PARAMS};

/// How rows are inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// A plain insert: a row with the same key is an error.
    Insert,
    /// The row takes the place of every row it conflicts with on the
    /// primary key or a unique key (MySQL's `REPLACE`): rows delivered again.
    Replace,
    /// A row with the same primary key is updated in place (MySQL's `ON
    /// DUPLICATE KEY UPDATE`, PostgreSQL's `ON CONFLICT DO UPDATE`): rows
    /// delivered again into a table other tables reference, where deleting
    /// the old row would cascade.
    Upsert,
}

/// The values of `row` (a full image) that `target` writes, in order.
pub fn written_values(target: &Target, row: &[SqlValue]) -> Vec<SqlValue> {
    target.written.iter().map(|&i| row[i].clone()).collect()
}

/// `(c1, c2, ...)` of the columns `target` writes.
pub fn column_list<D: Dialect>(target: &Target) -> String {
    let names: Vec<String> = target
        .written
        .iter()
        .map(|&i| D::ident(&target.schema.columns[i].name))
        .collect();
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

/// `WHERE` on the key columns (every column the target has, NULL-safe, for a
/// table without a key), with placeholders from `first`, and its
/// parameters.
fn by_key<D: Dialect>(
    target: &Target,
    values: &[SqlValue],
    first: usize,
) -> (String, Vec<SqlValue>, bool) {
    let keys = target.key();
    let keyed = !keys.is_empty();
    let at: Vec<usize> = if keyed { keys } else { target.present.clone() };
    let conditions: Vec<String> = at
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            let c = &target.schema.columns[i];
            let column = D::ident(&c.name);
            let p = D::placeholder(first + n);
            if keyed {
                format!("{column} = {p}")
            } else if c.sql_type.starts_with("float") {
                D::null_safe_float_eq(&column, &p)
            } else {
                D::null_safe_eq(&column, &p)
            }
        })
        .collect();
    let params = at.iter().map(|&i| values[i].clone()).collect();
    (conditions.join(" AND "), params, keyed)
}

/// `DELETE` of the row whose image is `before`.
pub fn delete<D: Dialect>(target: &Target, before: &[SqlValue]) -> Statement {
    let (condition, params, keyed) = by_key::<D>(target, before, 1);
    Statement::new(
        format!(
            "DELETE FROM {} {}",
            target.name,
            D::one_row(&target.name, &condition, keyed)
        ),
        params,
    )
}

/// `UPDATE` of the row whose image was `before` to `after`.
pub fn update<D: Dialect>(target: &Target, before: &[SqlValue], after: &[SqlValue]) -> Statement {
    let sets: Vec<String> = target
        .written
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            format!(
                "{} = {}",
                D::ident(&target.schema.columns[i].name),
                D::placeholder(n + 1)
            )
        })
        .collect();
    let (condition, key, keyed) = by_key::<D>(target, before, target.written.len() + 1);
    let mut params = written_values(target, after);
    params.extend(key);
    Statement::new(
        format!(
            "UPDATE {} SET {} {}",
            target.name,
            sets.join(", "),
            D::one_row(&target.name, &condition, keyed)
        ),
        params,
    )
}

/// `DELETE` of the rows with the given `keys` (values of the key columns, in
/// order).
pub fn delete_keys<D: Dialect>(target: &Target, keys: Vec<Vec<SqlValue>>) -> Statement {
    let columns: Vec<String> = target
        .key()
        .iter()
        .map(|&i| D::ident(&target.schema.columns[i].name))
        .collect();
    let width = columns.len();
    let sql = if width == 1 {
        let list: Vec<String> = (1..=keys.len()).map(D::placeholder).collect();
        format!(
            "DELETE FROM {} WHERE {} IN ({})",
            target.name,
            columns[0],
            list.join(", ")
        )
    } else {
        format!(
            "DELETE FROM {} WHERE ({}) IN ({})",
            target.name,
            columns.join(", "),
            values_list::<D>(keys.len(), width)
        )
    };
    Statement::new(sql, keys.into_iter().flatten().collect())
}

/// Whether the key columns of two images are equal.
fn same_key(target: &Target, a: &[SqlValue], b: &[SqlValue]) -> bool {
    let keys = target.key();
    if keys.is_empty() {
        return target.present.iter().all(|&i| a[i] == b[i]);
    }
    keys.iter().all(|&i| a[i] == b[i])
}

/// Most rows of `target` one insert may carry.
fn row_limit(target: &Target, max_rows: usize) -> usize {
    max_rows
        .min(MAX_PARAMS / target.written.len().max(1))
        .max(1)
}

/// Inserts into one table waiting to be written as one statement.
struct InsertRun {
    target: Rc<Target>,
    how: Write,
    rows: Vec<Vec<SqlValue>>,
}

/// Appends inserts to `run`, flushing it into `out` when the next row does
/// not belong to it.
struct Inserts<'a> {
    run: Option<InsertRun>,
    out: &'a mut Vec<Statement>,
    max_rows: usize,
}

impl Inserts<'_> {
    fn flush<D: Dialect>(&mut self) {
        if let Some(r) = self.run.take() {
            self.out.extend(D::insert(&r.target, r.rows, r.how));
        }
    }

    fn push<D: Dialect>(&mut self, target: &Rc<Target>, how: Write, row: Vec<SqlValue>) {
        let limit = row_limit(target, self.max_rows);
        let same = self
            .run
            .as_ref()
            .is_some_and(|r| r.target.same(target) && r.how == how && r.rows.len() < limit);
        if !same {
            self.flush::<D>();
            self.run = Some(InsertRun {
                target: target.clone(),
                how,
                rows: Vec::new(),
            });
        }
        if let Some(r) = &mut self.run {
            r.rows.push(row);
        }
    }

    fn statement<D: Dialect>(&mut self, statement: Statement) {
        self.flush::<D>();
        self.out.push(statement);
    }
}

/// The statements of `changes`, one per row change, in order: runs of
/// inserts into one table become multi-row statements of at most
/// `max_rows` rows (fewer for wide tables: at most [`MAX_PARAMS`]
/// parameters); an update that changes the key is a delete and an insert;
/// idempotent rows replace (an update: its old row deleted, then the new
/// one replaced).
pub(crate) fn row_statements<D: Dialect>(
    changes: impl Iterator<Item = Change>,
    max_rows: usize,
) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut inserts = Inserts {
        run: None,
        out: &mut out,
        max_rows,
    };
    for change in changes {
        let Change {
            target,
            op,
            before,
            after,
            safe,
            ..
        } = change;
        let how = if safe { Write::Replace } else { Write::Insert };
        match (op, before, after) {
            (Op::Insert, _, Some(after)) => inserts.push::<D>(&target, how, after),
            (Op::Delete, Some(before), _) => inserts.statement::<D>(delete::<D>(&target, &before)),
            (Op::Update, Some(before), Some(after)) => {
                if safe || !same_key(&target, &before, &after) {
                    inserts.statement::<D>(delete::<D>(&target, &before));
                    inserts.push::<D>(&target, how, after);
                } else {
                    inserts.statement::<D>(update::<D>(&target, &before, &after));
                }
            }
            _ => {}
        }
    }
    inserts.flush::<D>();
    out
}

/// The statements of changes to tables tied by foreign keys, one per row
/// change in upstream order (transactions in commit order, a transaction's
/// rows in `row-seq` order): runs of inserts into one table become multi-row
/// statements; an update is an `UPDATE`, even when it changes the key (so
/// that `ON UPDATE CASCADE` runs as upstream); idempotent rows upsert (never
/// delete-and-insert, which would cascade to child rows). Rows that ran
/// upstream with foreign key checks off run so downstream too, with
/// `toggle` (the sink may turn them off).
pub(crate) fn faithful_statements<D: Dialect>(
    changes: Vec<Change>,
    max_rows: usize,
    toggle: bool,
) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut inserts = Inserts {
        run: None,
        out: &mut out,
        max_rows,
    };
    let mut checks_off = false;
    for change in changes {
        if toggle
            && change.no_fk_checks != checks_off
            && let Some(toggle) = D::foreign_key_checks(!change.no_fk_checks)
        {
            inserts.statement::<D>(toggle);
            checks_off = change.no_fk_checks;
        }
        let Change {
            target,
            op,
            before,
            after,
            safe,
            ..
        } = change;
        let how = if safe { Write::Upsert } else { Write::Insert };
        match (op, before, after) {
            (Op::Insert, _, Some(after)) => inserts.push::<D>(&target, how, after),
            (Op::Delete, Some(before), _) => inserts.statement::<D>(delete::<D>(&target, &before)),
            (Op::Update, Some(before), Some(after)) => {
                inserts.statement::<D>(update::<D>(&target, &before, &after));
                if safe {
                    // Delivered again: the row may have moved on already.
                    inserts.push::<D>(&target, Write::Upsert, after);
                }
            }
            _ => {}
        }
    }
    if checks_off && let Some(toggle) = D::foreign_key_checks(true) {
        inserts.statement::<D>(toggle);
    }
    inserts.flush::<D>();
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
pub(crate) fn net_statements<D: Dialect>(run: Vec<Change>, max_rows: usize) -> Vec<Statement> {
    let Some(first) = run.first() else {
        return Vec::new();
    };
    let target = first.target.clone();
    let keys = target.key();
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
        out.push(delete_keys::<D>(&target, chunk));
    }
    let images: Vec<Vec<SqlValue>> = nets.into_iter().filter_map(|n| n.image).collect();
    let how = if replace {
        Write::Replace
    } else {
        Write::Insert
    };
    for chunk in chunks(images, row_limit(&target, max_rows)) {
        out.extend(D::insert(&target, chunk, how));
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
