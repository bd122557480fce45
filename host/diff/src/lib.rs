//! `sluice-diff`: whether two databases hold the same rows, the way
//! sync-diff-inspector checks it. Either side may be MySQL-compatible
//! (MySQL, MariaDB, TiDB) or PostgreSQL.
//!
//! For each table: its columns and primary key come from the source's
//! catalog; the target must have the same columns (by name; order aside).
//! The table is cut into chunks of `chunk_rows` rows along the primary key
//! (keyset pagination on the source). When both sides are the same engine,
//! each chunk is checksummed on both sides with one query (`COUNT(*)` and an
//! XOR of a per-row hash over every column, NULLs told apart) and only a
//! chunk whose checksums differ is read row by row. Across engines every
//! chunk is read row by row, each value as text in a form both share
//! (instants in UTC, bytes as hex, booleans as 0/1), compared by the meaning
//! of its type (JSON documents as documents, floating point with a relative
//! tolerance of 1e-6, fractional seconds without trailing zeros). The first
//! `max_reported` differences of a table are kept with their key and
//! columns, all are counted.

mod side;
pub mod validator;
mod values;

use std::time::{Duration, Instant};

use side::{Chunk, Column, Kind, Side};

/// What to compare.
#[derive(Debug, Clone)]
pub struct DiffOptions {
    /// The source database (`mysql://user:password@host:port/` or
    /// `postgres://user:password@host:port/database`).
    pub source: String,
    /// The target database.
    pub target: String,
    /// Tables as `schema.table`, or `schema.table=schema.table` for a
    /// table the target holds under another name (a sink's
    /// `target-schema` or `route`).
    pub tables: Vec<String>,
    /// Rows per chunk (1 to 1,000,000).
    pub chunk_rows: u64,
    /// Differences kept with their detail per table.
    pub max_reported: usize,
    /// Print progress to stderr every few seconds on long tables.
    pub progress: bool,
}

/// Why a comparison could not be made (not: the tables differ).
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// An option is out of range or malformed.
    #[error("{0}")]
    Invalid(String),
    /// A database refused or failed a query.
    #[error("{side}: {message}")]
    Database {
        /// `source` or `target`.
        side: &'static str,
        /// What went wrong (never the URL).
        message: String,
    },
}

/// One row that differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowDiff {
    /// In the source, not in the target.
    Missing {
        /// The primary key (`id=5`).
        key: String,
    },
    /// In the target, not in the source.
    Extra {
        /// The primary key.
        key: String,
    },
    /// In both, with other values.
    Changed {
        /// The primary key.
        key: String,
        /// (column, source value, target value) of each differing column.
        columns: Vec<(String, String, String)>,
    },
}

/// How one table compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableDiff {
    /// `schema.table`.
    pub table: String,
    /// Chunks compared.
    pub chunks: u64,
    /// Chunks with a difference.
    pub chunks_differing: u64,
    /// Whether chunks were compared by checksum first (the same engine on
    /// both sides) or always row by row.
    pub by_checksum: bool,
    /// Rows that differ (missing, extra or changed).
    pub rows_differing: u64,
    /// The first of them.
    pub differences: Vec<RowDiff>,
    /// A difference of the columns themselves (names or order), if any.
    pub schema: Option<String>,
}

impl TableDiff {
    /// Whether the table is the same on both sides.
    pub fn is_equal(&self) -> bool {
        self.rows_differing == 0 && self.schema.is_none()
    }
}

/// Compares the tables of `options` and returns how each compared.
pub async fn diff(options: &DiffOptions) -> Result<Vec<TableDiff>, DiffError> {
    if !(1..=1_000_000).contains(&options.chunk_rows) {
        return Err(DiffError::Invalid(format!(
            "chunk rows is {}; it must be between 1 and 1000000",
            options.chunk_rows
        )));
    }
    if options.tables.is_empty() {
        return Err(DiffError::Invalid(
            "name at least one table (schema.table)".into(),
        ));
    }
    let tables = options
        .tables
        .iter()
        .map(|spec| TablePair::parse(spec))
        .collect::<Result<Vec<_>, _>>()?;
    let mut source = Side::connect("source", &options.source).await?;
    let mut target = Side::connect("target", &options.target).await?;
    let mut out = Vec::new();
    for pair in &tables {
        out.push(diff_table(&mut source, &mut target, options, pair).await?);
    }
    Ok(out)
}

/// A table to compare: its `schema.table` on the source and on the target.
#[derive(Debug, PartialEq, Eq)]
struct TablePair<'a> {
    source: (&'a str, &'a str),
    target: (&'a str, &'a str),
}

impl<'a> TablePair<'a> {
    /// `schema.table`, or `schema.table=schema.table` (source = target).
    fn parse(spec: &'a str) -> Result<Self, DiffError> {
        let name = |n: &'a str| {
            n.trim()
                .split_once('.')
                .filter(|(s, t)| !s.is_empty() && !t.is_empty())
                .ok_or_else(|| {
                    DiffError::Invalid(format!(
                        "`{n}` is not schema.table (in `{spec}`; a table with another name \
                         on the target is schema.table=schema.table)"
                    ))
                })
        };
        let (source, target) = match spec.split_once('=') {
            Some((s, t)) => (name(s)?, name(t)?),
            None => {
                let both = name(spec)?;
                (both, both)
            }
        };
        Ok(Self { source, target })
    }

    /// How the comparison names it.
    fn label(&self) -> String {
        let (s, t) = self.source;
        if self.source == self.target {
            format!("{s}.{t}")
        } else {
            format!("{s}.{t}={}.{}", self.target.0, self.target.1)
        }
    }
}

async fn diff_table(
    source: &mut Side,
    target: &mut Side,
    options: &DiffOptions,
    pair: &TablePair<'_>,
) -> Result<TableDiff, DiffError> {
    let (schema, table) = pair.source;
    let mut result = TableDiff {
        table: pair.label(),
        by_checksum: source.engine() == target.engine(),
        ..TableDiff::default()
    };
    let (columns, key) = source.layout(schema, table).await?;
    if columns.is_empty() {
        return Err(DiffError::Invalid(format!(
            "the source has no table {schema}.{table}"
        )));
    }
    if key.is_empty() {
        return Err(DiffError::Invalid(format!(
            "{schema}.{table} has no primary key; diff compares rows by it"
        )));
    }
    let (target_columns, _) = target.layout(pair.target.0, pair.target.1).await?;
    let sorted_names = |c: &[Column]| {
        let mut n: Vec<String> = c.iter().map(|c| c.name.clone()).collect();
        n.sort();
        n
    };
    if sorted_names(&target_columns) != sorted_names(&columns) {
        let list = |c: &[Column]| {
            c.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        result.schema = Some(if target_columns.is_empty() {
            "the target has no such table".into()
        } else {
            format!(
                "columns differ: source ({}), target ({})",
                list(&columns),
                list(&target_columns)
            )
        });
        return Ok(result);
    }
    // The target's columns in the source's order.
    let target_columns: Vec<Column> = columns
        .iter()
        .filter_map(|c| target_columns.iter().find(|t| t.name == c.name).cloned())
        .collect();
    let key_kinds = |cols: &[Column]| -> Vec<Kind> {
        key.iter()
            .map(|k| {
                cols.iter()
                    .find(|c| c.name == *k)
                    .map_or(Kind::Text, |c| c.kind)
            })
            .collect()
    };
    let (source_keys, target_keys) = (key_kinds(&columns), key_kinds(&target_columns));
    // A column compares as floating point if either side stores it so.
    let float: Vec<bool> = columns
        .iter()
        .zip(&target_columns)
        .map(|(a, b)| a.kind == Kind::Float || b.kind == Kind::Float)
        .collect();
    let from_source = source.table(schema, table);
    let from_target = target.table(pair.target.0, pair.target.1);
    let started = Instant::now();
    let mut shown_at = Instant::now();
    let mut lower = None;
    loop {
        let upper = source
            .boundary(
                &from_source,
                &key,
                &source_keys,
                &lower,
                options.chunk_rows - 1,
            )
            .await?;
        let chunk = Chunk {
            lower: lower.clone(),
            upper: upper.clone(),
        };
        result.chunks += 1;
        let same = result.by_checksum && {
            let a = source
                .checksum(&from_source, &columns, &key, &source_keys, &chunk)
                .await?;
            let b = target
                .checksum(&from_target, &target_columns, &key, &target_keys, &chunk)
                .await?;
            a == b
        };
        if !same {
            let left = source
                .rows(&from_source, &columns, &key, &source_keys, &chunk)
                .await?;
            let right = target
                .rows(&from_target, &target_columns, &key, &target_keys, &chunk)
                .await?;
            let before = result.rows_differing;
            compare_rows(
                &key,
                &columns,
                &float,
                (left, right),
                options.max_reported,
                &mut result,
            );
            if result.rows_differing > before {
                result.chunks_differing += 1;
            }
        }
        if options.progress && shown_at.elapsed() >= Duration::from_secs(2) {
            shown_at = Instant::now();
            eprintln!(
                "{}: {} chunks of {} rows compared in {:.0?}; {} rows differ so far",
                result.table,
                result.chunks,
                options.chunk_rows,
                started.elapsed(),
                result.rows_differing
            );
        }
        match upper {
            Some(u) => lower = Some(u),
            None => break,
        }
    }
    Ok(result)
}

/// Rows as text, key columns first.
type Rows = Vec<Vec<Option<String>>>;

/// Compares two chunks' rows (key columns first, then every column).
fn compare_rows(
    key: &[String],
    columns: &[Column],
    float: &[bool],
    (left, right): (Rows, Rows),
    max_reported: usize,
    into: &mut TableDiff,
) {
    type Keyed = std::collections::BTreeMap<Vec<Option<String>>, Vec<Option<String>>>;
    let keyed = |rows: Rows| -> Keyed {
        rows.into_iter()
            .map(|mut values| {
                let rest = values.split_off(key.len().min(values.len()));
                let k = values
                    .into_iter()
                    .map(|v| v.map(|t| values::normal(&t)))
                    .collect();
                (k, rest)
            })
            .collect()
    };
    let (left, mut right) = (keyed(left), keyed(right));
    let key_text = |k: &[Option<String>]| {
        key.iter()
            .zip(k)
            .map(|(name, v)| format!("{name}={}", shown(v)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let report = |d: RowDiff, into: &mut TableDiff| {
        into.rows_differing += 1;
        if into.differences.len() < max_reported {
            into.differences.push(d);
        }
    };
    for (k, values) in left {
        match right.remove(&k) {
            None => report(RowDiff::Missing { key: key_text(&k) }, into),
            Some(other) => {
                let differing: Vec<(String, String, String)> = columns
                    .iter()
                    .zip(float)
                    .zip(values.iter().zip(&other))
                    .filter(|((_, float), (a, b))| !values::same(a, b, **float))
                    .map(|((c, _), (a, b))| (c.name.clone(), shown(a), shown(b)))
                    .collect();
                if !differing.is_empty() {
                    report(
                        RowDiff::Changed {
                            key: key_text(&k),
                            columns: differing,
                        },
                        into,
                    );
                }
            }
        }
    }
    for k in right.into_keys() {
        report(RowDiff::Extra { key: key_text(&k) }, into);
    }
}

fn shown(v: &Option<String>) -> String {
    match v {
        None => "NULL".into(),
        Some(t) => {
            let mut s: String = t.chars().take(64).flat_map(char::escape_default).collect();
            if t.chars().count() > 64 {
                s.push('…');
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_named_once_or_as_source_equals_target() {
        let same = TablePair::parse("shop.orders").unwrap();
        assert_eq!(same.source, ("shop", "orders"));
        assert_eq!(same.target, ("shop", "orders"));
        assert_eq!(same.label(), "shop.orders");
        let moved = TablePair::parse("shop.orders = target.orders_v2").unwrap();
        assert_eq!(moved.source, ("shop", "orders"));
        assert_eq!(moved.target, ("target", "orders_v2"));
        assert_eq!(moved.label(), "shop.orders=target.orders_v2");
        for bad in [
            "orders",
            "shop.",
            ".orders",
            "shop.orders=",
            "=t.o",
            "shop.orders=target",
        ] {
            let err = TablePair::parse(bad).unwrap_err().to_string();
            assert!(err.contains("is not schema.table"), "{bad}: {err}");
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
