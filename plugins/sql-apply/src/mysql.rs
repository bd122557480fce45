//! MySQL's spelling of row changes: backquoted names, `?` placeholders,
//! `REPLACE` for idempotent inserts (it removes every row the new one
//! conflicts with on any unique key), `LIMIT 1` on single-row statements.

use crate::{Dialect, UniqueKeys, column_list, values_list};
use sluice_sdk::TableSchema;
use sluice_sdk::sql::{Statement, Value as SqlValue};

/// MySQL, MariaDB and TiDB.
pub struct Mysql;

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

    fn one_row(_target: &str, condition: &str, _keyed: bool) -> String {
        format!("WHERE {condition} LIMIT 1")
    }

    fn insert(
        target: &str,
        schema: &TableSchema,
        _uniques: &UniqueKeys,
        rows: Vec<Vec<SqlValue>>,
        replace: bool,
    ) -> Vec<Statement> {
        let verb = if replace { "REPLACE" } else { "INSERT" };
        vec![Statement::new(
            format!(
                "{verb} INTO {target} {} VALUES {}",
                column_list::<Self>(schema),
                values_list::<Self>(rows.len(), schema.columns.len())
            ),
            rows.into_iter().flatten().collect(),
        )]
    }

    fn unique_keys(schema: &str, table: &str) -> Statement {
        Statement::new(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
             ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            vec![SqlValue::Text(schema.into()), SqlValue::Text(table.into())],
        )
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
