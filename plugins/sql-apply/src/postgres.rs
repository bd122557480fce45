//! PostgreSQL's spelling of row changes: double-quoted names, `$n`
//! placeholders, `INSERT ... ON CONFLICT (key) DO UPDATE` for idempotent
//! inserts (after deleting rows that hold one of the new row's other unique
//! values, as MySQL's `REPLACE` does, unless other tables reference the
//! table), `ctid` to pick one row of a table without a key, `setval` for a
//! sequence's state; the target's facts from the catalog.

use crate::target::{Target, TargetKind};
use crate::write::{Write, column_list, values_list, written_values};
use crate::{Dialect, common_param};
use sluice_sdk::sql::{Statement, Value as SqlValue};
use sluice_sdk::{Column, Value};

/// PostgreSQL.
pub struct Postgres;

impl Postgres {
    /// The state a MariaDB sequence's row says: the next value is the first
    /// one it had not cached.
    fn sequence_state(target: &Target, rows: Vec<Vec<SqlValue>>) -> Vec<Statement> {
        let at = target
            .schema
            .columns
            .iter()
            .position(|c| c.name == "next_not_cached_value");
        let Some(at) = at else {
            return Vec::new();
        };
        rows.into_iter()
            .filter(|row| row[at] != SqlValue::Null)
            .map(|row| {
                Statement::new(
                    "SELECT setval($1::regclass, $2::bigint, false)",
                    vec![SqlValue::Text(target.name.clone()), row[at].clone()],
                )
            })
            .collect()
    }
}

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

    fn insert(target: &Target, rows: Vec<Vec<SqlValue>>, how: Write) -> Vec<Statement> {
        if target.kind == TargetKind::Sequence {
            return Self::sequence_state(target, rows);
        }
        let schema = &target.schema;
        let width = target.written.len();
        let mut out = Vec::new();
        let keys = target.key();
        if how == Write::Replace {
            // Rows holding one of the new rows' values of another unique
            // key give way, as with MySQL's REPLACE.
            for unique in &target.uniques {
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
                        "DELETE FROM {} WHERE ({}) IN ({})",
                        target.name,
                        columns.join(", "),
                        values_list::<Self>(params.len() / unique.len(), unique.len())
                    ),
                    params,
                ));
            }
        }
        let mut sql = format!(
            "INSERT INTO {} {} VALUES {}",
            target.name,
            column_list::<Self>(target),
            values_list::<Self>(rows.len(), width)
        );
        if how != Write::Insert && !keys.is_empty() {
            let key: Vec<String> = keys
                .iter()
                .map(|&i| Self::ident(&schema.columns[i].name))
                .collect();
            let sets: Vec<String> = target
                .written
                .iter()
                .filter(|i| !keys.contains(i))
                .map(|&i| format!("{0} = EXCLUDED.{0}", Self::ident(&schema.columns[i].name)))
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
        let params = rows
            .iter()
            .flat_map(|row| written_values(target, row))
            .collect();
        out.push(Statement::new(sql, params));
        out
    }

    fn facts(schema: &str, table: &str) -> [Statement; 5] {
        let name = || vec![SqlValue::Text(Self::table_name(schema, table))];
        [
            Statement::new(
                "SELECT a.attname::text, CASE WHEN a.attgenerated <> '' THEN 1 ELSE 0 END \
                 FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
                 AND NOT a.attisdropped ORDER BY a.attnum",
                name(),
            ),
            Statement::new(
                "SELECT c.relname::text, a.attname::text FROM pg_index i \
                 JOIN pg_class c ON c.oid = i.indexrelid \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL \
                 ORDER BY c.relname, array_position(i.indkey::int2[], a.attnum)",
                name(),
            ),
            Statement::new(
                "SELECT c.conname::text, a.attname::text, n.nspname::text, p.relname::text, \
                 pa.attname::text \
                 FROM pg_constraint c \
                 JOIN pg_class p ON p.oid = c.confrelid \
                 JOIN pg_namespace n ON n.oid = p.relnamespace \
                 CROSS JOIN LATERAL unnest(c.conkey, c.confkey) WITH ORDINALITY AS k(col, pcol, n) \
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.col \
                 JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = k.pcol \
                 WHERE c.contype = 'f' AND c.conrelid = to_regclass($1) \
                 ORDER BY c.conname, k.n",
                name(),
            ),
            Statement::new(
                "SELECT c.oid::text, pa.attname::text, \
                 CASE c.confupdtype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' \
                 WHEN 'd' THEN 'SET DEFAULT' WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END, \
                 CASE c.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' \
                 WHEN 'd' THEN 'SET DEFAULT' WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END \
                 FROM pg_constraint c \
                 CROSS JOIN LATERAL unnest(c.confkey) WITH ORDINALITY AS k(pcol, n) \
                 JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = k.pcol \
                 WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) \
                 ORDER BY c.oid, k.n",
                name(),
            ),
            Statement::new(
                "SELECT CASE relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END \
                 FROM pg_class WHERE oid = to_regclass($1)",
                name(),
            ),
        ]
    }

    fn progress_table(schema: &str, table: &str) -> Vec<Statement> {
        vec![
            Statement::new(
                format!("CREATE SCHEMA IF NOT EXISTS {}", Self::ident(schema)),
                Vec::new(),
            ),
            Statement::new(
                format!(
                    "CREATE TABLE IF NOT EXISTS {} (\
                     changefeed text NOT NULL, \
                     first_txn bigint NOT NULL, \
                     first_seq bigint NOT NULL, \
                     first_ts bigint NOT NULL, \
                     last_ts bigint NOT NULL, \
                     txns bytea NOT NULL, \
                     PRIMARY KEY (changefeed, first_txn, first_seq))",
                    Self::table_name(schema, table)
                ),
                Vec::new(),
            ),
            Statement::new(
                format!(
                    "CREATE INDEX IF NOT EXISTS {} ON {} (changefeed, last_ts)",
                    Self::ident(&format!("{table}_last_ts")),
                    Self::table_name(schema, table)
                ),
                Vec::new(),
            ),
        ]
    }

    fn upsert_pruned(table: &str, changefeed: &str, bound: i64) -> Statement {
        Statement::new(
            format!(
                "INSERT INTO {table} (changefeed, first_txn, first_seq, first_ts, last_ts, txns) \
                 VALUES ($1, 0, 0, 0, $2, '') ON CONFLICT (changefeed, first_txn, first_seq) \
                 DO UPDATE SET last_ts = GREATEST({table}.last_ts, EXCLUDED.last_ts)"
            ),
            vec![SqlValue::Text(changefeed.into()), SqlValue::Int(bound)],
        )
    }

    /// `session_replication_role = replica` skips the triggers that check
    /// foreign keys and run their actions, as MySQL's `foreign_key_checks =
    /// 0` does; to the end of the transaction.
    fn foreign_key_checks(on: bool) -> Option<Statement> {
        Some(Statement::new(
            format!(
                "SET LOCAL session_replication_role = {}",
                if on { "origin" } else { "replica" }
            ),
            Vec::new(),
        ))
    }

    /// It takes a superuser, or (PostgreSQL 15 and later) a grant of `SET`
    /// on the parameter.
    fn foreign_key_checks_probes() -> Vec<Statement> {
        vec![
            Statement::new(
                "SELECT has_parameter_privilege('session_replication_role', 'SET')",
                Vec::new(),
            ),
            Statement::new(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
                Vec::new(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sdk::{ColumnType, TableSchema};

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
        let target = Target::plain(
            "\"s\".\"t\"".into(),
            std::rc::Rc::new(schema()),
            vec![vec![1]],
        );
        let out = Postgres::insert(&target, rows.clone(), Write::Replace);
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
        let plain = Postgres::insert(&target, rows, Write::Insert);
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
