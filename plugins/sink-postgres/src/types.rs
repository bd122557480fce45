//! The PostgreSQL type a MySQL column becomes when `sink-postgres` creates or
//! widens a table (the table in the README).

use sluice_sdk::{Column, ColumnType};

/// The PostgreSQL type for an upstream column, from its MySQL type as the
/// binlog source writes it (`int unsigned`, `decimal(12,2)`, `varchar(64)`,
/// `datetime(6)`, ...), falling back to its carried type.
pub fn pg_type(column: &Column) -> String {
    let sql = column.sql_type.to_ascii_lowercase();
    let unsigned = sql.ends_with(" unsigned");
    let base = sql.trim_end_matches(" unsigned");
    let (name, args) = match base.split_once('(') {
        Some((name, rest)) => (name.trim(), rest.trim_end_matches(')')),
        None => (base.trim(), ""),
    };
    // Lengths, precisions and scales are numbers (`12` or `12,2`); anything
    // else (an ENUM's values) never reaches the PostgreSQL type.
    let args = if args
        .split(',')
        .all(|a| !a.trim().is_empty() && a.trim().bytes().all(|b| b.is_ascii_digit()))
        && args.split(',').count() <= 2
    {
        args
    } else {
        ""
    };
    let with_fsp = |pg: &str| {
        if args.is_empty() {
            pg.to_string()
        } else {
            format!("{pg}({args})")
        }
    };
    match (name, unsigned) {
        // BOOL is MySQL's TINYINT(1) (a DDL may spell it so).
        ("tinyint" | "smallint" | "bool" | "boolean", false) | ("tinyint", true) | ("year", _) => {
            "smallint".into()
        }
        ("smallint" | "mediumint", true) | ("mediumint" | "int" | "integer", false) => {
            "integer".into()
        }
        ("int" | "integer", true) | ("bigint", false) => "bigint".into(),
        ("bigint", true) => "numeric(20,0)".into(),
        ("bit", _) => "numeric(20,0)".into(),
        ("float", _) => "real".into(),
        ("double" | "real", _) => "double precision".into(),
        ("decimal" | "numeric" | "dec" | "fixed", _) if args.is_empty() => "numeric".into(),
        ("decimal" | "numeric" | "dec" | "fixed", _) => format!("numeric({args})"),
        ("char", _) if !args.is_empty() => format!("char({args})"),
        ("varchar", _) if !args.is_empty() => format!("varchar({args})"),
        ("tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set", _) => "text".into(),
        ("binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob", _) => {
            "bytea".into()
        }
        (
            "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
            | "multipolygon" | "geometrycollection",
            _,
        ) => "bytea".into(),
        ("json", _) => "jsonb".into(),
        ("date", _) => "date".into(),
        ("datetime", _) => with_fsp("timestamp"),
        ("timestamp", _) => with_fsp("timestamptz"),
        // MySQL's TIME is a duration (-838:59:59 to 838:59:59).
        ("time", _) => "interval".into(),
        _ => match column.ty {
            ColumnType::Int => "bigint".into(),
            ColumnType::Uint => "numeric(20,0)".into(),
            ColumnType::Float => "double precision".into(),
            ColumnType::Decimal => "numeric".into(),
            ColumnType::Text => "text".into(),
            ColumnType::Blob => "bytea".into(),
            ColumnType::Datetime => "timestamp(6)".into(),
            ColumnType::Date => "date".into(),
            ColumnType::Json => "jsonb".into(),
            ColumnType::Boolean => "boolean".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(sql_type: &str, ty: ColumnType) -> Column {
        Column {
            name: "c".into(),
            ty,
            sql_type: sql_type.into(),
            nullable: true,
            key: false,
        }
    }

    #[test]
    fn mysql_types_map_to_postgres_types_that_hold_every_value() {
        let cases = [
            ("tinyint", ColumnType::Int, "smallint"),
            ("tinyint unsigned", ColumnType::Uint, "smallint"),
            ("smallint unsigned", ColumnType::Uint, "integer"),
            ("mediumint", ColumnType::Int, "integer"),
            ("int", ColumnType::Int, "integer"),
            ("int unsigned", ColumnType::Uint, "bigint"),
            ("bigint", ColumnType::Int, "bigint"),
            ("bigint unsigned", ColumnType::Uint, "numeric(20,0)"),
            ("year", ColumnType::Int, "smallint"),
            ("bit(5)", ColumnType::Uint, "numeric(20,0)"),
            ("float", ColumnType::Float, "real"),
            ("double", ColumnType::Float, "double precision"),
            ("decimal(12,2)", ColumnType::Decimal, "numeric(12,2)"),
            (
                "decimal(12,2) unsigned",
                ColumnType::Decimal,
                "numeric(12,2)",
            ),
            ("char(3)", ColumnType::Text, "char(3)"),
            ("varchar(64)", ColumnType::Text, "varchar(64)"),
            ("mediumtext", ColumnType::Text, "text"),
            ("enum('a','b')", ColumnType::Text, "text"),
            ("set('x','y')", ColumnType::Text, "text"),
            ("varbinary(16)", ColumnType::Blob, "bytea"),
            ("longblob", ColumnType::Blob, "bytea"),
            ("json", ColumnType::Json, "jsonb"),
            ("date", ColumnType::Date, "date"),
            ("datetime", ColumnType::Datetime, "timestamp"),
            ("datetime(6)", ColumnType::Datetime, "timestamp(6)"),
            ("timestamp(3)", ColumnType::Datetime, "timestamptz(3)"),
            ("time(2)", ColumnType::Text, "interval"),
            ("something new", ColumnType::Boolean, "boolean"),
            ("point", ColumnType::Text, "bytea"),
            ("bool", ColumnType::Text, "smallint"),
            ("dec(6,2)", ColumnType::Text, "numeric(6,2)"),
            // Not numbers: no arguments reach PostgreSQL.
            ("varchar(1); drop table x", ColumnType::Text, "text"),
            ("decimal(5,2,1)", ColumnType::Decimal, "numeric"),
        ];
        for (mysql, ty, pg) in cases {
            assert_eq!(pg_type(&column(mysql, ty)), pg, "{mysql}");
        }
    }
}
