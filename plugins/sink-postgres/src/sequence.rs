//! MariaDB sequences as PostgreSQL sequences: `CREATE SEQUENCE` with the
//! options PostgreSQL shares (`START`, `INCREMENT`, `MINVALUE`, `MAXVALUE`,
//! `CACHE`, `CYCLE`), `ALTER SEQUENCE`, `DROP SEQUENCE`. A sequence's state
//! travels as rows of its table (each time MariaDB reserves values past its
//! cache, or `SETVAL` moves it); those set the PostgreSQL sequence's options
//! and next value (`sql_apply::Postgres`).

use sluice_sdk::DdlEvent;
use sluice_sdk::sql::Statement;
use sql_apply::{Config, Dialect, Postgres};

/// The options of a MariaDB sequence statement PostgreSQL takes, in its
/// spelling; the rest (`ENGINE`, `NOCACHE` ...) is left out.
fn options(words: &[String]) -> Vec<String> {
    let upper = |i: usize| words.get(i).map(|w| w.to_ascii_uppercase());
    let is_number = |i: usize| {
        words.get(i).is_some_and(|w| {
            let digits = w.strip_prefix('-').unwrap_or(w);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        })
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = upper(i).unwrap_or_default();
        match word.as_str() {
            "START" | "INCREMENT" | "MINVALUE" | "MAXVALUE" | "CACHE" | "RESTART" => {
                // `START [WITH] n`, `INCREMENT [BY] n`, `MINVALUE [=] n`, ...
                let mut j = i + 1;
                if matches!(upper(j).as_deref(), Some("WITH" | "BY" | "=")) {
                    j += 1;
                }
                if is_number(j) {
                    let n = &words[j];
                    match word.as_str() {
                        "START" => out.push(format!("START WITH {n}")),
                        "INCREMENT" => out.push(format!("INCREMENT BY {n}")),
                        "RESTART" => out.push(format!("RESTART WITH {n}")),
                        "CACHE" if n == "0" => {}
                        other => out.push(format!("{other} {n}")),
                    }
                    i = j + 1;
                } else {
                    if word == "RESTART" {
                        out.push("RESTART".into());
                    }
                    i = j;
                }
            }
            "NOMINVALUE" => {
                out.push("NO MINVALUE".into());
                i += 1;
            }
            "NOMAXVALUE" => {
                out.push("NO MAXVALUE".into());
                i += 1;
            }
            "CYCLE" => {
                out.push("CYCLE".into());
                i += 1;
            }
            "NOCYCLE" => {
                out.push("NO CYCLE".into());
                i += 1;
            }
            "NO" => {
                if let Some(w @ ("MINVALUE" | "MAXVALUE" | "CYCLE")) = upper(i + 1).as_deref() {
                    out.push(format!("NO {w}"));
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    out
}

/// The words of a statement: names unquoted, numbers with their sign.
fn words(query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in query.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '`' || c == '"' => quote = Some(c),
            None if c.is_whitespace() || c == ',' || c == '(' || c == ')' || c == ';' => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            None if c == '=' => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                out.push("=".into());
            }
            None => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The PostgreSQL statements of a sequence DDL of `event`.
pub fn statements(event: &DdlEvent, default: &str, config: &Config) -> Vec<Statement> {
    let target = |schema: &str, name: &str| {
        let (s, t) = config.target(schema, name);
        Postgres::table_name(&s, &t)
    };
    let names: Vec<String> = if event.tables.is_empty() {
        Vec::new()
    } else {
        event
            .tables
            .iter()
            .map(|q| target(&q.schema_name, &q.table_name))
            .collect()
    };
    let Some(first) = names.first() else {
        return Vec::new();
    };
    let w = words(&event.query);
    // The words after the name: skip up to and past it.
    let after_name = w
        .iter()
        .position(|x| {
            let bare = x.rsplit('.').next().unwrap_or(x);
            event.tables.first().is_some_and(|q| bare == q.table_name)
        })
        .map_or(w.len(), |p| p + 1);
    let rest = &w[after_name.min(w.len())..];
    let _ = default;
    match event.kind.as_str() {
        "create sequence" => {
            // The target schema, quoted (a name may hold a dot).
            let schema = event.tables.first().map_or_else(String::new, |q| {
                Postgres::ident(&config.target(&q.schema_name, &q.table_name).0)
            });
            let mut sql = format!("CREATE SEQUENCE IF NOT EXISTS {first}");
            for o in options(rest) {
                sql.push(' ');
                sql.push_str(&o);
            }
            vec![
                Statement::new(format!("CREATE SCHEMA IF NOT EXISTS {schema}"), Vec::new()),
                Statement::new(sql, Vec::new()),
            ]
        }
        "alter sequence" => {
            let opts = options(rest);
            if opts.is_empty() {
                return Vec::new();
            }
            vec![Statement::new(
                format!("ALTER SEQUENCE IF EXISTS {first} {}", opts.join(" ")),
                Vec::new(),
            )]
        }
        "drop sequence" => vec![Statement::new(
            format!("DROP SEQUENCE IF EXISTS {}", names.join(", ")),
            Vec::new(),
        )],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        serde_json::from_str(r#"{"database": "pg"}"#).unwrap()
    }

    fn sql(kind: &str, query: &str, name: &str) -> Vec<String> {
        let e = DdlEvent::new(1, "shop", name, query).with_kind(kind);
        statements(&e, "shop", &config())
            .into_iter()
            .map(|s| s.sql)
            .collect()
    }

    #[test]
    fn sequence_statements_keep_the_options_postgres_has() {
        assert_eq!(
            sql(
                "create sequence",
                "CREATE SEQUENCE `s` START WITH 100 INCREMENT BY 10 MINVALUE=-5 MAXVALUE 1000 CACHE 5 CYCLE ENGINE=InnoDB",
                "s"
            ),
            [
                "CREATE SCHEMA IF NOT EXISTS \"shop\"",
                "CREATE SEQUENCE IF NOT EXISTS \"shop\".\"s\" START WITH 100 INCREMENT BY 10 MINVALUE -5 MAXVALUE 1000 CACHE 5 CYCLE",
            ]
        );
        assert_eq!(
            sql("alter sequence", "ALTER SEQUENCE s RESTART WITH 5", "s"),
            ["ALTER SEQUENCE IF EXISTS \"shop\".\"s\" RESTART WITH 5"]
        );
        assert_eq!(
            sql(
                "drop sequence",
                "DROP SEQUENCE `s` /* generated by server */",
                "s"
            ),
            ["DROP SEQUENCE IF EXISTS \"shop\".\"s\""]
        );
    }
}
