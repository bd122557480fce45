//! `sluice-diff`: whether two MySQL-compatible databases (MySQL, MariaDB,
//! TiDB) hold the same rows, the way sync-diff-inspector checks it.
//!
//! For each table: its columns and primary key come from the source's
//! `information_schema`; the table is cut into chunks of `chunk_rows` rows
//! along the primary key (keyset pagination on the source); each chunk is
//! checksummed on both sides with one query (`COUNT(*)` and a `BIT_XOR` of a
//! `CRC32` per row over every column, NULLs told apart); only a chunk whose
//! checksums differ is read row by row from both sides, and the rows are
//! compared by primary key, column by column. The first `max_reported`
//! differences of a table are kept with their key and columns, all are
//! counted.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row, Value};

/// What to compare.
#[derive(Debug, Clone)]
pub struct DiffOptions {
    /// The source database (`mysql://user:password@host:port/`).
    pub source: String,
    /// The target database.
    pub target: String,
    /// Tables as `schema.table`.
    pub tables: Vec<String>,
    /// Rows per chunk (1 to 1,000,000).
    pub chunk_rows: u64,
    /// Differences kept with their detail per table.
    pub max_reported: usize,
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
    /// Chunks checksummed, and those whose checksums differed.
    pub chunks: u64,
    /// Chunks that were compared row by row.
    pub chunks_differing: u64,
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

/// `name` as a quoted identifier.
fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

async fn connect(side: &'static str, url: &str) -> Result<Conn, DiffError> {
    let opts = Opts::from_url(url).map_err(|_| {
        DiffError::Invalid(format!(
            "--{side} is not a mysql://user:password@host:port/ URL"
        ))
    })?;
    Conn::new(opts).await.map_err(|e| db(side, e))
}

fn db(side: &'static str, e: mysql_async::Error) -> DiffError {
    DiffError::Database {
        side,
        message: match e {
            mysql_async::Error::Url(_) => "the URL is not valid".into(),
            other => other.to_string(),
        },
    }
}

/// Text of a value for comparison and display.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        other => Some(other.as_sql(true).trim_matches('\'').to_string()),
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

/// A table's columns (in order) and primary key columns.
async fn layout(
    conn: &mut Conn,
    side: &'static str,
    schema: &str,
    table: &str,
) -> Result<(Vec<String>, Vec<String>), DiffError> {
    let columns: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        .await
        .map_err(|e| db(side, e))?;
    let key: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        .await
        .map_err(|e| db(side, e))?;
    Ok((columns, key))
}

/// A chunk of the key space: rows with key above `lower` (exclusive) and up
/// to `upper` (inclusive); none means unbounded.
struct Chunk {
    lower: Option<Vec<Value>>,
    upper: Option<Vec<Value>>,
}

impl Chunk {
    /// `WHERE` text and parameters for `key` columns.
    fn condition(&self, key: &[String]) -> (String, Vec<Value>) {
        let tuple = format!(
            "({})",
            key.iter().map(|k| ident(k)).collect::<Vec<_>>().join(", ")
        );
        let marks = format!("({})", vec!["?"; key.len()].join(", "));
        let mut parts = Vec::new();
        let mut params = Vec::new();
        if let Some(l) = &self.lower {
            parts.push(format!("{tuple} > {marks}"));
            params.extend(l.iter().cloned());
        }
        if let Some(u) = &self.upper {
            parts.push(format!("{tuple} <= {marks}"));
            params.extend(u.iter().cloned());
        }
        if parts.is_empty() {
            ("1 = 1".into(), params)
        } else {
            (parts.join(" AND "), params)
        }
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
    let mut source = connect("source", &options.source).await?;
    let mut target = connect("target", &options.target).await?;
    let mut out = Vec::new();
    for name in &options.tables {
        let Some((schema, table)) = name
            .split_once('.')
            .filter(|(s, t)| !s.is_empty() && !t.is_empty())
        else {
            return Err(DiffError::Invalid(format!("`{name}` is not schema.table")));
        };
        out.push(diff_table(&mut source, &mut target, options, schema, table).await?);
    }
    Ok(out)
}

async fn diff_table(
    source: &mut Conn,
    target: &mut Conn,
    options: &DiffOptions,
    schema: &str,
    table: &str,
) -> Result<TableDiff, DiffError> {
    let mut result = TableDiff {
        table: format!("{schema}.{table}"),
        ..TableDiff::default()
    };
    let (columns, key) = layout(source, "source", schema, table).await?;
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
    let (target_columns, _) = layout(target, "target", schema, table).await?;
    if target_columns != columns {
        result.schema = Some(if target_columns.is_empty() {
            "the target has no such table".into()
        } else {
            format!(
                "columns differ: source ({}), target ({})",
                columns.join(", "),
                target_columns.join(", ")
            )
        });
        return Ok(result);
    }
    let from = format!("{}.{}", ident(schema), ident(table));
    let key_list = key.iter().map(|k| ident(k)).collect::<Vec<_>>().join(", ");
    let column_list = columns
        .iter()
        .map(|c| ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    let nulls = columns
        .iter()
        .map(|c| format!("ISNULL({})", ident(c)))
        .collect::<Vec<_>>()
        .join(", ");
    let checksum = format!(
        "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT_WS(0x1f, {column_list}, CONCAT({nulls})))), 0) FROM {from} WHERE "
    );
    // Chunk boundaries along the key, on the source.
    let mut lower: Option<Vec<Value>> = None;
    loop {
        let probe = Chunk {
            lower: lower.clone(),
            upper: None,
        };
        let (condition, params) = probe.condition(&key);
        let boundary: Option<Row> = source
            .exec_first(
                format!(
                    "SELECT {key_list} FROM {from} WHERE {condition} ORDER BY {key_list} LIMIT 1 OFFSET {}",
                    options.chunk_rows - 1
                ),
                params,
            )
            .await
            .map_err(|e| db("source", e))?;
        let upper = boundary.map(Row::unwrap);
        let chunk = Chunk {
            lower: lower.clone(),
            upper: upper.clone(),
        };
        result.chunks += 1;
        let (condition, params) = chunk.condition(&key);
        let sql = format!("{checksum}{condition}");
        let a: Option<(u64, u64)> = source
            .exec_first(sql.as_str(), params.clone())
            .await
            .map_err(|e| db("source", e))?;
        let b: Option<(u64, u64)> = target
            .exec_first(sql.as_str(), params.clone())
            .await
            .map_err(|e| db("target", e))?;
        if a != b {
            result.chunks_differing += 1;
            let rows = format!(
                "SELECT {key_list}, {column_list} FROM {from} WHERE {condition} ORDER BY {key_list}"
            );
            let left: Vec<Row> = source
                .exec(rows.as_str(), params.clone())
                .await
                .map_err(|e| db("source", e))?;
            let right: Vec<Row> = target
                .exec(rows.as_str(), params)
                .await
                .map_err(|e| db("target", e))?;
            compare_rows(
                &key,
                &columns,
                left,
                right,
                options.max_reported,
                &mut result,
            );
        }
        match upper {
            Some(u) => lower = Some(u),
            None => break,
        }
    }
    Ok(result)
}

/// Compares two chunks' rows (key columns first, then every column), both
/// ordered by key.
fn compare_rows(
    key: &[String],
    columns: &[String],
    left: Vec<Row>,
    right: Vec<Row>,
    max_reported: usize,
    into: &mut TableDiff,
) {
    let texts =
        |rows: Vec<Row>| -> std::collections::BTreeMap<Vec<Option<String>>, Vec<Option<String>>> {
            rows.into_iter()
                .map(|r| {
                    let values: Vec<Option<String>> = r.unwrap().iter().map(text).collect();
                    let (k, rest) = values.split_at(key.len());
                    (k.to_vec(), rest.to_vec())
                })
                .collect()
        };
    let (left, mut right) = (texts(left), texts(right));
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
            Some(other) if other != values => {
                let columns = columns
                    .iter()
                    .zip(values.iter().zip(&other))
                    .filter(|(_, (a, b))| a != b)
                    .map(|(c, (a, b))| (c.clone(), shown(a), shown(b)))
                    .collect();
                report(
                    RowDiff::Changed {
                        key: key_text(&k),
                        columns,
                    },
                    into,
                );
            }
            Some(_) => {}
        }
    }
    for k in right.into_keys() {
        report(RowDiff::Extra { key: key_text(&k) }, into);
    }
}
