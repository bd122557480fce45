//! Row changes as MySQL statements: quoting, values, and the statement shapes
//! (multi-row `INSERT`/`REPLACE`, `UPDATE` and `DELETE` by key).

use sluice_sdk::sql::{Statement, Value as SqlValue};
use sluice_sdk::{ColumnType, TableSchema, Value};

/// `name` as a quoted identifier.
pub fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// `schema`.`table`.
pub fn table_name(schema: &str, table: &str) -> String {
    format!("{}.{}", ident(schema), ident(table))
}

use sluice_sdk::civil_from_days as civil;

/// A value of a row image as a statement parameter.
pub fn param(value: Value<'_>, ty: ColumnType) -> SqlValue {
    match value {
        Value::Null => SqlValue::Null,
        Value::Int(i) => SqlValue::Int(i),
        Value::UInt(u) => SqlValue::Uint(u),
        Value::Float(f) => SqlValue::Float(f),
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => SqlValue::Text(s.to_string()),
        Value::Blob(b) => SqlValue::Bytes(b.to_vec()),
        Value::Bool(b) => SqlValue::Int(i64::from(b)),
        Value::Date(days) => {
            let (y, m, d) = civil(days);
            SqlValue::Text(format!("{y:04}-{m:02}-{d:02}"))
        }
        Value::DateTime(us) => {
            let _ = ty;
            let days = us.div_euclid(86_400_000_000);
            let rest = us.rem_euclid(86_400_000_000);
            let (y, m, d) = civil(days);
            let (secs, micros) = (rest / 1_000_000, rest % 1_000_000);
            let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
            SqlValue::Text(if micros == 0 {
                format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}")
            } else {
                format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{micros:06}")
            })
        }
    }
}

/// The values of one image, as parameters in schema order.
pub fn params(schema: &TableSchema, image: &sluice_sdk::Image<'_>) -> Vec<SqlValue> {
    schema
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| param(image.value(i), c.ty))
        .collect()
}

/// `(c1, c2, ...)`.
fn column_list(schema: &TableSchema) -> String {
    let names: Vec<String> = schema.columns.iter().map(|c| ident(&c.name)).collect();
    format!("({})", names.join(", "))
}

/// `(?, ?, ...)` for one row.
fn placeholders(n: usize) -> String {
    format!("({})", vec!["?"; n].join(", "))
}

/// A multi-row `INSERT` (or `REPLACE`, idempotent) of `rows` (each a full
/// image's parameters).
pub fn insert(
    target: &str,
    schema: &TableSchema,
    rows: Vec<Vec<SqlValue>>,
    replace: bool,
) -> Statement {
    let verb = if replace { "REPLACE" } else { "INSERT" };
    let one = placeholders(schema.columns.len());
    let values = vec![one; rows.len()].join(", ");
    Statement::new(
        format!(
            "{verb} INTO {target} {} VALUES {values}",
            column_list(schema)
        ),
        rows.into_iter().flatten().collect(),
    )
}

/// `WHERE` on the key columns (every column, NULL-safe, for a table without
/// a key) and its parameters.
fn by_key(schema: &TableSchema, values: &[SqlValue]) -> (String, Vec<SqlValue>) {
    let keys = schema.key_indexes();
    let (at, null_safe): (Vec<usize>, bool) = if keys.is_empty() {
        ((0..schema.columns.len()).collect(), true)
    } else {
        (keys, false)
    };
    let op = if null_safe { "<=>" } else { "=" };
    let conditions: Vec<String> = at
        .iter()
        .map(|&i| format!("{} {op} ?", ident(&schema.columns[i].name)))
        .collect();
    let params = at.iter().map(|&i| values[i].clone()).collect();
    (conditions.join(" AND "), params)
}

/// `DELETE` of the row whose image is `before`.
pub fn delete(target: &str, schema: &TableSchema, before: &[SqlValue]) -> Statement {
    let (condition, params) = by_key(schema, before);
    Statement::new(
        format!("DELETE FROM {target} WHERE {condition} LIMIT 1"),
        params,
    )
}

/// `UPDATE` of the row whose image was `before` to `after` (same key).
pub fn update(
    target: &str,
    schema: &TableSchema,
    before: &[SqlValue],
    after: Vec<SqlValue>,
) -> Statement {
    let sets: Vec<String> = schema
        .columns
        .iter()
        .map(|c| format!("{} = ?", ident(&c.name)))
        .collect();
    let (condition, key) = by_key(schema, before);
    let mut params = after;
    params.extend(key);
    Statement::new(
        format!(
            "UPDATE {target} SET {} WHERE {condition} LIMIT 1",
            sets.join(", ")
        ),
        params,
    )
}

/// Whether the key columns of two images are equal.
pub fn same_key(schema: &TableSchema, a: &[SqlValue], b: &[SqlValue]) -> bool {
    let keys = schema.key_indexes();
    if keys.is_empty() {
        return a == b;
    }
    keys.iter().all(|&i| a[i] == b[i])
}

/// The key of an image as text, for conflict detection.
pub fn key_text(schema: &TableSchema, values: &[SqlValue]) -> String {
    let keys = schema.key_indexes();
    let at: Vec<usize> = if keys.is_empty() {
        (0..values.len()).collect()
    } else {
        keys
    };
    let mut out = String::new();
    for i in at {
        out.push_str(&format!("{:?}\u{1}", values[i]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_datetimes_are_mysql_text() {
        assert_eq!(ident("we`ird"), "`we``ird`");
        assert_eq!(table_name("s", "t"), "`s`.`t`");
        let SqlValue::Text(t) = param(Value::DateTime(1_700_000_000_123_456), ColumnType::Datetime)
        else {
            panic!("text")
        };
        assert_eq!(t, "2023-11-14 22:13:20.123456");
        let SqlValue::Text(t) = param(Value::DateTime(-1_000_000), ColumnType::Datetime) else {
            panic!("text")
        };
        assert_eq!(t, "1969-12-31 23:59:59");
    }
}
