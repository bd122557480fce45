//! What the target database says about a table it receives rows for, read
//! once per upstream schema version: which upstream columns it has and which
//! of them it computes itself (generated columns are never written, but may
//! be used to find rows), its unique keys, its foreign keys to other tables
//! and the foreign keys of other tables to it, and whether it is a sequence.
//!
//! The target, not the upstream, decides: it is where a write is refused (a
//! generated column), where cascades run, and where conflicts between
//! concurrent groups would show. Its schema follows the upstream's through
//! replayed DDL.

use std::rc::Rc;

use sluice_sdk::TableSchema;
use sluice_sdk::sql::Value as SqlValue;

/// The unique keys of a target table: each a list of column positions in
/// the upstream schema. The primary key (the schema's key columns) is not
/// among them.
pub type UniqueKeys = Vec<Vec<usize>>;

/// A row change as (op, before image, after image).
pub type RowChange = (sluice_sdk::Op, Option<Vec<SqlValue>>, Option<Vec<SqlValue>>);

/// What kind of object the target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A table.
    Table,
    /// A sequence (MariaDB's `CREATE SEQUENCE`, PostgreSQL's): its one row
    /// is its state.
    Sequence,
}

/// A foreign key of a target table to a parent table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    /// The child's columns (upstream positions), in key order.
    pub columns: Vec<usize>,
    /// The parent table, quoted.
    pub parent: String,
    /// The parent's columns the key references, in key order.
    pub parent_columns: Vec<String>,
}

/// A set of a target table's columns that other tables' foreign keys
/// reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referenced {
    /// The columns (upstream positions), in key order.
    pub columns: Vec<usize>,
    /// Their names, in key order.
    pub names: Vec<String>,
    /// Deleting a row changes rows of other tables (`ON DELETE CASCADE`,
    /// `SET NULL`, `SET DEFAULT`).
    pub cascades_delete: bool,
    /// Changing these columns changes rows of other tables (`ON UPDATE
    /// CASCADE`, `SET NULL`, `SET DEFAULT`).
    pub cascades_update: bool,
}

/// One target table at one upstream schema version.
#[derive(Debug, Clone)]
pub struct Target {
    /// The quoted target name.
    pub name: String,
    /// The upstream schema of the rows.
    pub schema: Rc<TableSchema>,
    /// Unique keys besides the primary key.
    pub uniques: UniqueKeys,
    /// Upstream columns the target has and does not compute itself: the
    /// columns written, in schema order.
    pub written: Vec<usize>,
    /// Upstream columns the target has (written or generated): what a
    /// `WHERE` may name.
    pub present: Vec<usize>,
    /// Foreign keys of this table.
    pub parents: Vec<ForeignKey>,
    /// Column sets other tables' foreign keys reference.
    pub referenced: Vec<Referenced>,
    /// Table or sequence.
    pub kind: TargetKind,
    /// A MariaDB system-versioned table keeps its own history: the position of
    /// the upstream's `row_end`, whose rows past their end are history.
    pub history_end: Option<usize>,
}

impl Target {
    /// A target of which nothing is known (it does not exist yet, or is read
    /// by no query): every column is written, no foreign key.
    pub fn plain(name: String, schema: Rc<TableSchema>, uniques: UniqueKeys) -> Self {
        let all: Vec<usize> = (0..schema.columns.len()).collect();
        Self {
            name,
            schema,
            uniques,
            written: all.clone(),
            present: all,
            parents: Vec::new(),
            referenced: Vec::new(),
            kind: TargetKind::Table,
            history_end: None,
        }
    }

    /// What a change of a system-versioned table means for the target, which
    /// keeps its own history: a history row written is left out, a current row
    /// turned into history is a delete (`None`: nothing to do).
    pub fn current_change(
        &self,
        op: sluice_sdk::Op,
        before: Option<Vec<SqlValue>>,
        after: Option<Vec<SqlValue>>,
    ) -> Option<RowChange> {
        use sluice_sdk::Op;
        let Some(end) = self.history_end else {
            return Some((op, before, after));
        };
        // The largest TIMESTAMP marks a current row ('2038-01-19 03:14:07.999999',
        // '2106-02-07 06:28:15.999999' from MariaDB 11.5).
        let current = |image: &Option<Vec<SqlValue>>| match image.as_ref().map(|i| &i[end]) {
            Some(SqlValue::Text(t)) => t.as_str() >= "2038-01-19 03:14:07",
            _ => true,
        };
        match op {
            Op::Insert if !current(&after) => None,
            Op::Delete if !current(&before) => None,
            Op::Update if !current(&before) => None,
            Op::Update if !current(&after) => Some((Op::Delete, before, None)),
            _ => Some((op, before, after)),
        }
    }

    /// Whether `other` is the same target table at the same upstream table
    /// and schema version.
    pub fn same(&self, other: &Target) -> bool {
        self.name == other.name
            && self.schema.table_id == other.schema.table_id
            && self.schema.version == other.schema.version
            && self.schema.schema_name == other.schema.schema_name
            && self.schema.table_name == other.schema.table_name
    }

    /// Whether foreign keys tie this table to others (or to itself): its
    /// changes are applied one by one in upstream order, updates as updates,
    /// so that the target's checks pass and its cascades run as upstream.
    pub fn fk_linked(&self) -> bool {
        !self.parents.is_empty() || !self.referenced.is_empty()
    }

    /// The key a row is found by: the primary key's columns the target has.
    /// Empty for a table without one (rows are found by every column).
    pub fn key(&self) -> Vec<usize> {
        self.schema
            .key_indexes()
            .into_iter()
            .filter(|i| self.present.contains(i))
            .collect()
    }

    /// Whether a change of this row from `before` to `after` (either may be
    /// missing: an insert, a delete) makes the target change rows of other
    /// tables by itself (a cascading foreign key).
    pub fn cascades(&self, before: Option<&[SqlValue]>, after: Option<&[SqlValue]>) -> bool {
        let Some(before) = before else {
            return false;
        };
        self.referenced.iter().any(|r| match after {
            None => r.cascades_delete,
            Some(after) => r.cascades_update && r.columns.iter().any(|&i| before[i] != after[i]),
        })
    }
}

/// The facts a dialect's queries returned for one table, in the order of
/// [`crate::Dialect::facts`].
pub struct Facts {
    /// (column name, generated by the target) rows.
    pub columns: Vec<Vec<SqlValue>>,
    /// (index name, column name) rows of unique indexes.
    pub uniques: Vec<Vec<SqlValue>>,
    /// (constraint, column, parent schema, parent table, parent column)
    /// rows, in constraint then key order.
    pub parents: Vec<Vec<SqlValue>>,
    /// (constraint, referenced column, update rule, delete rule) rows of
    /// foreign keys of other tables to this one, in constraint then key
    /// order; rules as `CASCADE`, `SET NULL`, `SET DEFAULT`, `RESTRICT`,
    /// `NO ACTION`.
    pub children: Vec<Vec<SqlValue>>,
    /// One row: the kind (`SEQUENCE` or anything else).
    pub kind: Vec<Vec<SqlValue>>,
}

fn text(row: &[SqlValue], at: usize) -> Option<&str> {
    match row.get(at) {
        Some(SqlValue::Text(t)) => Some(t.as_str()),
        _ => None,
    }
}

fn truthy(row: &[SqlValue], at: usize) -> bool {
    match row.get(at) {
        Some(SqlValue::Int(i)) => *i != 0,
        Some(SqlValue::Uint(u)) => *u != 0,
        Some(SqlValue::Text(t)) => t == "1" || t.eq_ignore_ascii_case("true") || t == "t",
        _ => false,
    }
}

/// Reads `facts` of the target `name` (quoted) of `schema`; `quote` quotes
/// a parent's `schema.table` as the dialect does.
pub fn target_of(
    name: String,
    schema: Rc<TableSchema>,
    facts: Facts,
    quote: impl Fn(&str, &str) -> String,
) -> Target {
    let position = |column: &str| schema.columns.iter().position(|c| c.name == column);
    let uniques = unique_keys_of(&schema, facts.uniques);
    let mut target = Target::plain(name, schema.clone(), uniques);
    if !facts.columns.is_empty() {
        let mut written = Vec::new();
        let mut present = Vec::new();
        for row in &facts.columns {
            let Some(at) = text(row, 0).and_then(position) else {
                continue;
            };
            present.push(at);
            if !truthy(row, 1) {
                written.push(at);
            }
        }
        written.sort_unstable();
        present.sort_unstable();
        target.written = written;
        target.present = present;
    }
    // Foreign keys, one per constraint name.
    let mut parents: Vec<(String, ForeignKey)> = Vec::new();
    for row in &facts.parents {
        let (Some(constraint), Some(column), Some(ps), Some(pt), Some(pc)) = (
            text(row, 0),
            text(row, 1),
            text(row, 2),
            text(row, 3),
            text(row, 4),
        ) else {
            continue;
        };
        let Some(at) = position(column) else {
            continue;
        };
        match parents.last_mut() {
            Some((name, fk)) if name == constraint => {
                fk.columns.push(at);
                fk.parent_columns.push(pc.to_string());
            }
            _ => parents.push((
                constraint.to_string(),
                ForeignKey {
                    columns: vec![at],
                    parent: quote(ps, pt),
                    parent_columns: vec![pc.to_string()],
                },
            )),
        }
    }
    target.parents = parents.into_iter().map(|(_, fk)| fk).collect();
    let cascading = |rule: Option<&str>| {
        rule.is_some_and(|r| {
            let r = r.to_ascii_uppercase();
            r == "CASCADE" || r == "SET NULL" || r == "SET DEFAULT"
        })
    };
    let mut referenced: Vec<(String, Referenced)> = Vec::new();
    for row in &facts.children {
        let (Some(constraint), Some(column)) = (text(row, 0), text(row, 1)) else {
            continue;
        };
        let Some(at) = position(column) else {
            continue;
        };
        let (update, delete) = (cascading(text(row, 2)), cascading(text(row, 3)));
        match referenced.last_mut() {
            Some((name, r)) if name == constraint => {
                r.columns.push(at);
                r.names.push(column.to_string());
            }
            _ => referenced.push((
                constraint.to_string(),
                Referenced {
                    columns: vec![at],
                    names: vec![column.to_string()],
                    cascades_delete: delete,
                    cascades_update: update,
                },
            )),
        }
    }
    // One entry per referenced column set; it cascades if any key on it does.
    let mut merged: Vec<Referenced> = Vec::new();
    for (_, r) in referenced {
        match merged.iter_mut().find(|m| m.columns == r.columns) {
            Some(m) => {
                m.cascades_delete |= r.cascades_delete;
                m.cascades_update |= r.cascades_update;
            }
            None => merged.push(r),
        }
    }
    target.referenced = merged;
    let kind = facts.kind.first().and_then(|row| text(row, 0));
    if kind.is_some_and(|k| k.eq_ignore_ascii_case("SEQUENCE")) {
        target.kind = TargetKind::Sequence;
    }
    if kind.is_some_and(|k| k.eq_ignore_ascii_case("SYSTEM VERSIONED"))
        && let Some(end) = position("row_end")
        && !target.present.contains(&end)
    {
        target.history_end = Some(end);
    }
    target
}

/// Unique keys from (index name, column name) rows: indexes whose columns
/// are all upstream columns, without the primary key's.
pub fn unique_keys_of(schema: &TableSchema, rows: Vec<Vec<SqlValue>>) -> UniqueKeys {
    let mut by_index: std::collections::BTreeMap<String, Vec<Option<usize>>> =
        std::collections::BTreeMap::new();
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
