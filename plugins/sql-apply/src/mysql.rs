//! MySQL's spelling of row changes: backquoted names, `?` placeholders,
//! `REPLACE` for idempotent inserts (it removes every row the new one
//! conflicts with on any unique key), `ON DUPLICATE KEY UPDATE` where
//! removing a row would cascade, `LIMIT 1` on single-row statements; the
//! target's facts from `information_schema`.

use crate::Dialect;
use crate::target::Target;
use crate::write::{Write, column_list, values_list, written_values};
use sluice_sdk::sql::{Statement, Value as SqlValue};

/// MySQL, MariaDB and TiDB.
pub struct Mysql;

fn by_table(sql: &str, schema: &str, table: &str) -> Statement {
    Statement::new(
        sql,
        vec![SqlValue::Text(schema.into()), SqlValue::Text(table.into())],
    )
}

impl Dialect for Mysql {
    fn ident(name: &str) -> String {
        format!("`{}`", name.replace('`', "``"))
    }

    fn placeholder(_n: usize) -> String {
        "?".into()
    }

    fn null_safe_eq(column: &str, placeholder: &str) -> String {
        format!("{column} <=> {placeholder}")
    }

    /// Rows carry the values upstream stored, so they are written as they
    /// are: not strict (what the target computes itself, a generated
    /// column, is then what a non-strict upstream session made of it, and
    /// a strict one would have failed upstream), and a 0 in an
    /// `AUTO_INCREMENT` column stays 0. A replica applies row events under
    /// the upstream transaction's `sql_mode`, which row events do not carry.
    fn row_session() -> Option<Statement> {
        Some(Statement::new(
            "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'",
            Vec::new(),
        ))
    }

    /// `3.14` read from a `FLOAT` is not equal to the column's value (a
    /// double comparison): cast it to the column's precision first.
    fn null_safe_float_eq(column: &str, placeholder: &str) -> String {
        format!("{column} <=> CAST({placeholder} AS FLOAT)")
    }

    fn one_row(_target: &str, condition: &str, _keyed: bool) -> String {
        format!("WHERE {condition} LIMIT 1")
    }

    fn insert(target: &Target, rows: Vec<Vec<SqlValue>>, how: Write) -> Vec<Statement> {
        let verb = if how == Write::Replace {
            "REPLACE"
        } else {
            "INSERT"
        };
        let mut sql = format!(
            "{verb} INTO {} {} VALUES {}",
            target.name,
            column_list::<Self>(target),
            values_list::<Self>(rows.len(), target.written.len())
        );
        let keys = target.key();
        if how == Write::Upsert && !keys.is_empty() {
            let sets: Vec<String> = target
                .written
                .iter()
                .filter(|i| !keys.contains(i))
                .map(|&i| {
                    let c = Self::ident(&target.schema.columns[i].name);
                    format!("{c} = VALUES({c})")
                })
                .collect();
            if sets.is_empty() {
                let c = Self::ident(&target.schema.columns[keys[0]].name);
                sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {c} = {c}"));
            } else {
                sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {}", sets.join(", ")));
            }
        }
        let params = rows
            .iter()
            .flat_map(|row| written_values(target, row))
            .collect();
        vec![Statement::new(sql, params)]
    }

    fn facts(schema: &str, table: &str) -> [Statement; 5] {
        [
            by_table(
                "SELECT COLUMN_NAME, \
                 CASE WHEN EXTRA LIKE '%VIRTUAL GENERATED%' OR EXTRA LIKE '%STORED GENERATED%' \
                 OR EXTRA LIKE '%PERSISTENT%' THEN 1 ELSE 0 END \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
                 ORDER BY ORDINAL_POSITION",
                schema,
                table,
            ),
            by_table(
                "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
                 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                schema,
                table,
            ),
            by_table(
                "SELECT CONSTRAINT_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA, \
                 REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME \
                 FROM information_schema.KEY_COLUMN_USAGE \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND REFERENCED_TABLE_NAME IS NOT NULL \
                 ORDER BY CONSTRAINT_NAME, ORDINAL_POSITION",
                schema,
                table,
            ),
            by_table(
                "SELECT CONCAT(k.TABLE_SCHEMA, '.', k.TABLE_NAME, '.', k.CONSTRAINT_NAME), \
                 k.REFERENCED_COLUMN_NAME, r.UPDATE_RULE, r.DELETE_RULE \
                 FROM information_schema.KEY_COLUMN_USAGE k \
                 JOIN information_schema.REFERENTIAL_CONSTRAINTS r \
                 ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME \
                 AND r.TABLE_NAME = k.TABLE_NAME \
                 WHERE k.REFERENCED_TABLE_SCHEMA = ? AND k.REFERENCED_TABLE_NAME = ? \
                 ORDER BY 1, k.ORDINAL_POSITION",
                schema,
                table,
            ),
            by_table(
                "SELECT TABLE_TYPE FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                schema,
                table,
            ),
        ]
    }

    fn progress_table(schema: &str, table: &str) -> Vec<Statement> {
        vec![
            Statement::new(
                format!("CREATE DATABASE IF NOT EXISTS {}", Self::ident(schema)),
                Vec::new(),
            ),
            Statement::new(
                format!(
                    "CREATE TABLE IF NOT EXISTS {} (\
                     changefeed VARBINARY(255) NOT NULL, \
                     first_txn BIGINT NOT NULL, \
                     first_seq BIGINT NOT NULL, \
                     first_ts BIGINT NOT NULL, \
                     last_ts BIGINT NOT NULL, \
                     txns LONGBLOB NOT NULL, \
                     PRIMARY KEY (changefeed, first_txn, first_seq), \
                     KEY (changefeed, last_ts)) ENGINE = InnoDB \
                     COMMENT 'Sluice: what each changefeed applied here (exactly-once apply)'",
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
                 VALUES (?, 0, 0, 0, ?, '') ON DUPLICATE KEY UPDATE last_ts = GREATEST(last_ts, VALUES(last_ts))"
            ),
            vec![SqlValue::Text(changefeed.into()), SqlValue::Int(bound)],
        )
    }

    fn foreign_key_checks(on: bool) -> Option<Statement> {
        Some(Statement::new(
            format!("SET SESSION foreign_key_checks = {}", u8::from(on)),
            Vec::new(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(Mysql::ident("we`ird"), "`we``ird`");
        assert_eq!(Mysql::table_name("s", "t"), "`s`.`t`");
    }
}
