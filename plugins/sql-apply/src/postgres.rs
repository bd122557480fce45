//! PostgreSQL's spelling of row changes: double-quoted names, `$n`
//! placeholders, `INSERT ... ON CONFLICT (key) DO UPDATE` for idempotent
//! inserts (after deleting rows that hold one of the new row's other unique
//! values, as MySQL's `REPLACE` does), and `ctid` to pick one row of a table
//! without a key.

use crate::{Dialect, UniqueKeys, column_list, common_param, values_list};
use sluice_sdk::sql::{Statement, Value as SqlValue};
use sluice_sdk::{Column, TableSchema, Value};

/// PostgreSQL.
pub struct Postgres;

impl Dialect for Postgres {
    fn ident(name: &str) -> String {
        format!("\"{}\"", name.replace('"', "\"\""))
    }

    fn placeholder(n: usize) -> String {
        format!("${n}")
    }

    fn null_safe_eq(column: &str, placeholder: &str) -> String {
        format!("{column} IS NOT DISTINCT FROM {placeholder}")
    }

    fn one_row(target: &str, condition: &str, keyed: bool) -> String {
        if keyed {
            format!("WHERE {condition}")
        } else {
            format!("WHERE ctid = (SELECT ctid FROM {target} WHERE {condition} LIMIT 1)")
        }
    }

    /// A MySQL `TIMESTAMP` is an instant: it goes to `timestamptz` as UTC.
    fn param(value: Value<'_>, column: &Column) -> SqlValue {
        match (value, column.sql_type.starts_with("timestamp")) {
            (Value::DateTime(us), true) => {
                SqlValue::Text(format!("{}+00", crate::datetime_text(us)))
            }
            (value, _) => common_param(value, column),
        }
    }

    fn insert(
        target: &str,
        schema: &TableSchema,
        uniques: &UniqueKeys,
        rows: Vec<Vec<SqlValue>>,
        replace: bool,
    ) -> Vec<Statement> {
        let width = schema.columns.len();
        let mut out = Vec::new();
        let keys = schema.key_indexes();
        if replace {
            // Rows holding one of the new rows' values of another unique
            // key give way, as with MySQL's REPLACE.
            for unique in uniques {
                let params: Vec<SqlValue> = rows
                    .iter()
                    .filter(|row| unique.iter().all(|&i| row[i] != SqlValue::Null))
                    .flat_map(|row| unique.iter().map(|&i| row[i].clone()))
                    .collect();
                if params.is_empty() {
                    continue;
                }
                let columns: Vec<String> = unique
                    .iter()
                    .map(|&i| Self::ident(&schema.columns[i].name))
                    .collect();
                out.push(Statement::new(
                    format!(
                        "DELETE FROM {target} WHERE ({}) IN ({})",
                        columns.join(", "),
                        values_list::<Self>(params.len() / unique.len(), unique.len())
                    ),
                    params,
                ));
            }
        }
        let mut sql = format!(
            "INSERT INTO {target} {} VALUES {}",
            column_list::<Self>(schema),
            values_list::<Self>(rows.len(), width)
        );
        if replace && !keys.is_empty() {
            let key: Vec<String> = keys
                .iter()
                .map(|&i| Self::ident(&schema.columns[i].name))
                .collect();
            let sets: Vec<String> = schema
                .columns
                .iter()
                .enumerate()
                .filter(|(i, _)| !keys.contains(i))
                .map(|(_, c)| format!("{0} = EXCLUDED.{0}", Self::ident(&c.name)))
                .collect();
            if sets.is_empty() {
                sql.push_str(&format!(" ON CONFLICT ({}) DO NOTHING", key.join(", ")));
            } else {
                sql.push_str(&format!(
                    " ON CONFLICT ({}) DO UPDATE SET {}",
                    key.join(", "),
                    sets.join(", ")
                ));
            }
        }
        out.push(Statement::new(sql, rows.into_iter().flatten().collect()));
        out
    }

    fn unique_keys(schema: &str, table: &str) -> Statement {
        Statement::new(
            "SELECT c.relname::text, a.attname::text FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL \
             ORDER BY c.relname, array_position(i.indkey::int2[], a.attnum)",
            vec![SqlValue::Text(Self::table_name(schema, table))],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sdk::ColumnType;

    fn schema() -> TableSchema {
        let col = |name: &str, key: bool| Column {
            name: name.into(),
            ty: ColumnType::Int,
            sql_type: "int".into(),
            nullable: !key,
            key,
        };
        TableSchema {
            table_id: 1,
            version: 1,
            schema_name: "s".into(),
            table_name: "t".into(),
            columns: vec![col("id", true), col("u", false), col("v", false)],
        }
    }

    #[test]
    fn replacing_inserts_clear_other_unique_values_then_upsert() {
        let rows = vec![
            vec![SqlValue::Int(1), SqlValue::Int(10), SqlValue::Int(100)],
            vec![SqlValue::Int(2), SqlValue::Null, SqlValue::Int(200)],
        ];
        let out = Postgres::insert("\"s\".\"t\"", &schema(), &vec![vec![1]], rows.clone(), true);
        let sql: Vec<&str> = out.iter().map(|s| s.sql.as_str()).collect();
        assert_eq!(
            sql,
            [
                "DELETE FROM \"s\".\"t\" WHERE (\"u\") IN (($1))",
                "INSERT INTO \"s\".\"t\" (\"id\", \"u\", \"v\") VALUES ($1, $2, $3), ($4, $5, $6) \
                 ON CONFLICT (\"id\") DO UPDATE SET \"u\" = EXCLUDED.\"u\", \"v\" = EXCLUDED.\"v\"",
            ]
        );
        assert_eq!(out[0].params, [SqlValue::Int(10)]);
        let plain = Postgres::insert("\"s\".\"t\"", &schema(), &vec![vec![1]], rows, false);
        assert_eq!(plain.len(), 1);
        assert!(!plain[0].sql.contains("ON CONFLICT"));
    }

    #[test]
    fn names_are_double_quoted_and_keyless_rows_are_picked_by_ctid() {
        assert_eq!(Postgres::ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(
            Postgres::one_row("t", "a IS NOT DISTINCT FROM $1", false),
            "WHERE ctid = (SELECT ctid FROM t WHERE a IS NOT DISTINCT FROM $1 LIMIT 1)"
        );
        let ts = Column {
            name: "at".into(),
            ty: ColumnType::Datetime,
            sql_type: "timestamp(3)".into(),
            nullable: true,
            key: false,
        };
        assert_eq!(
            Postgres::param(Value::DateTime(1_500), &ts),
            SqlValue::Text("1970-01-01 00:00:00.001500+00".into())
        );
    }
}
