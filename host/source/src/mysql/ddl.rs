//! Which tables a DDL statement changes, and what kind of DDL it is, read with
//! `sqlparser`'s MySQL tokenizer (so quoted names, comments and MariaDB-only
//! clauses are handled alike). Rows need no DDL replay: each table map carries
//! the table's columns at that point of the binlog (`binlog_row_metadata=FULL`),
//! so the schema of every row is exact; the DDL is classified to hold the right
//! tables at its barrier and to apply the event filters.

use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

/// What a DDL statement is, as event filters name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdlKind {
    /// `CREATE DATABASE` / `CREATE SCHEMA`.
    CreateDatabase,
    /// `DROP DATABASE` / `DROP SCHEMA`.
    DropDatabase,
    /// `ALTER DATABASE`.
    AlterDatabase,
    /// `CREATE TABLE`.
    CreateTable,
    /// `DROP TABLE`.
    DropTable,
    /// `ALTER TABLE`.
    AlterTable,
    /// `RENAME TABLE` (or `ALTER TABLE .. RENAME`).
    RenameTable,
    /// `TRUNCATE TABLE`.
    TruncateTable,
    /// `CREATE INDEX`.
    CreateIndex,
    /// `DROP INDEX`.
    DropIndex,
    /// `CREATE VIEW`.
    CreateView,
    /// `DROP VIEW`.
    DropView,
}

impl DdlKind {
    /// The name event filters use (`ignore-event`).
    pub const fn name(self) -> &'static str {
        match self {
            DdlKind::CreateDatabase => "create database",
            DdlKind::DropDatabase => "drop database",
            DdlKind::AlterDatabase => "alter database",
            DdlKind::CreateTable => "create table",
            DdlKind::DropTable => "drop table",
            DdlKind::AlterTable => "alter table",
            DdlKind::RenameTable => "rename table",
            DdlKind::TruncateTable => "truncate table",
            DdlKind::CreateIndex => "create index",
            DdlKind::DropIndex => "drop index",
            DdlKind::CreateView => "create view",
            DdlKind::DropView => "drop view",
        }
    }

    /// Every kind, for checking filter names.
    pub const ALL: [DdlKind; 12] = [
        DdlKind::CreateDatabase,
        DdlKind::DropDatabase,
        DdlKind::AlterDatabase,
        DdlKind::CreateTable,
        DdlKind::DropTable,
        DdlKind::AlterTable,
        DdlKind::RenameTable,
        DdlKind::TruncateTable,
        DdlKind::CreateIndex,
        DdlKind::DropIndex,
        DdlKind::CreateView,
        DdlKind::DropView,
    ];
}

/// A classified DDL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ddl {
    /// Its kind.
    pub kind: DdlKind,
    /// The database it changes.
    pub schema: String,
    /// The tables it names (`schema`, `table`); empty for database DDL.
    pub tables: Vec<(String, String)>,
}

/// Classifies `query`, run with `default_db` as the current database. `None`:
/// not a schema change of a table or database (a GRANT, a FLUSH, a CREATE USER..).
pub fn classify(query: &str, default_db: &str) -> Option<Ddl> {
    let dialect = MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, query).tokenize().ok()?;
    let mut t = Tokens {
        tokens: tokens
            .into_iter()
            .filter(|t| {
                !matches!(
                    t,
                    Token::Whitespace(
                        Whitespace::Space
                            | Whitespace::Newline
                            | Whitespace::Tab
                            | Whitespace::SingleLineComment { .. }
                            | Whitespace::MultiLineComment(_)
                    )
                )
            })
            .collect(),
        at: 0,
    };
    let first = t.keyword()?;
    let kind_word = |t: &mut Tokens| -> Option<String> {
        // Skip modifiers up to the object word.
        loop {
            let w = t.keyword()?;
            match w.as_str() {
                "TEMPORARY" | "OR" | "REPLACE" | "UNIQUE" | "FULLTEXT" | "SPATIAL" | "ONLINE"
                | "OFFLINE" | "IGNORE" | "ALGORITHM" | "DEFINER" | "SQL" | "SECURITY" | "=" => {}
                _ => return Some(w),
            }
        }
    };
    let (kind, object) = match first.as_str() {
        "CREATE" => {
            let w = kind_word(&mut t)?;
            match w.as_str() {
                "DATABASE" | "SCHEMA" => (DdlKind::CreateDatabase, Object::Database),
                "TABLE" => (DdlKind::CreateTable, Object::Tables),
                "INDEX" => (DdlKind::CreateIndex, Object::IndexOn),
                "VIEW" => (DdlKind::CreateView, Object::Tables),
                _ => return None,
            }
        }
        "DROP" => {
            let w = kind_word(&mut t)?;
            match w.as_str() {
                "DATABASE" | "SCHEMA" => (DdlKind::DropDatabase, Object::Database),
                "TABLE" | "TABLES" => (DdlKind::DropTable, Object::Tables),
                "INDEX" => (DdlKind::DropIndex, Object::IndexOn),
                "VIEW" => (DdlKind::DropView, Object::Tables),
                _ => return None,
            }
        }
        "ALTER" => {
            let w = kind_word(&mut t)?;
            match w.as_str() {
                "DATABASE" | "SCHEMA" => (DdlKind::AlterDatabase, Object::Database),
                "TABLE" => {
                    let rename = t.rest_has("RENAME")
                        && !t.rest_has("COLUMN")
                        && !t.rest_has("INDEX")
                        && !t.rest_has("KEY");
                    (
                        if rename {
                            DdlKind::RenameTable
                        } else {
                            DdlKind::AlterTable
                        },
                        Object::Tables,
                    )
                }
                _ => return None,
            }
        }
        "RENAME" => {
            let w = t.keyword()?;
            if w != "TABLE" && w != "TABLES" {
                return None;
            }
            (DdlKind::RenameTable, Object::Renames)
        }
        "TRUNCATE" => {
            if t.peek_keyword().as_deref() == Some("TABLE") {
                t.at += 1;
            }
            (DdlKind::TruncateTable, Object::Tables)
        }
        _ => return None,
    };
    t.skip_if_exists();
    let mut tables = Vec::new();
    let schema = match object {
        Object::Database => t.name()?.1,
        Object::Tables => {
            loop {
                let (db, name) = t.name()?;
                tables.push((db.unwrap_or_else(|| default_db.to_string()), name));
                // DROP TABLE a, b; other statements name one table.
                if kind == DdlKind::DropTable && t.eat(&Token::Comma) {
                    continue;
                }
                break;
            }
            tables[0].0.clone()
        }
        Object::IndexOn => {
            t.name()?;
            if t.keyword()? != "ON" {
                return None;
            }
            let (db, name) = t.name()?;
            tables.push((db.unwrap_or_else(|| default_db.to_string()), name));
            tables[0].0.clone()
        }
        Object::Renames => {
            loop {
                let (db, name) = t.name()?;
                tables.push((db.unwrap_or_else(|| default_db.to_string()), name));
                if t.keyword()? != "TO" {
                    return None;
                }
                let (db, name) = t.name()?;
                tables.push((db.unwrap_or_else(|| default_db.to_string()), name));
                if !t.eat(&Token::Comma) {
                    break;
                }
            }
            tables[0].0.clone()
        }
    };
    if kind == DdlKind::RenameTable && object == Object::Tables {
        // ALTER TABLE a RENAME [TO|AS] b: the new name too.
        while let Some(w) = t.keyword() {
            if w == "RENAME" {
                if matches!(t.peek_keyword().as_deref(), Some("TO" | "AS")) {
                    t.at += 1;
                }
                if let Some((db, name)) = t.name() {
                    tables.push((db.unwrap_or_else(|| default_db.to_string()), name));
                }
                break;
            }
        }
    }
    Some(Ddl {
        kind,
        schema,
        tables,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    Database,
    Tables,
    IndexOn,
    Renames,
}

struct Tokens {
    tokens: Vec<Token>,
    at: usize,
}

impl Tokens {
    fn next(&mut self) -> Option<&Token> {
        let t = self.tokens.get(self.at)?;
        self.at += 1;
        Some(t)
    }

    /// The next token as an upper-case unquoted word, if it is one.
    fn keyword(&mut self) -> Option<String> {
        match self.next()? {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            Token::Eq => Some("=".into()),
            Token::SingleQuotedString(_) | Token::AtSign => Some("=".into()),
            _ => None,
        }
    }

    fn peek_keyword(&self) -> Option<String> {
        match self.tokens.get(self.at)? {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }

    fn eat(&mut self, token: &Token) -> bool {
        if self.tokens.get(self.at) == Some(token) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn rest_has(&self, word: &str) -> bool {
        self.tokens[self.at..].iter().any(|t| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word)))
    }

    fn skip_if_exists(&mut self) {
        if self.peek_keyword().as_deref() == Some("IF") {
            self.at += 1;
            if self.peek_keyword().as_deref() == Some("NOT") {
                self.at += 1;
            }
            if self.peek_keyword().as_deref() == Some("EXISTS") {
                self.at += 1;
            }
        }
    }

    /// `name` or `db.name` (quoted or not).
    fn name(&mut self) -> Option<(Option<String>, String)> {
        let first = match self.next()? {
            Token::Word(w) => w.value.clone(),
            _ => return None,
        };
        if self.eat(&Token::Period) {
            let second = match self.next()? {
                Token::Word(w) => w.value.clone(),
                _ => return None,
            };
            return Some((Some(first), second));
        }
        Some((None, first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Classified = (DdlKind, String, Vec<(String, String)>);

    fn c(q: &str) -> Option<Classified> {
        classify(q, "app").map(|d| (d.kind, d.schema, d.tables))
    }

    fn t(db: &str, name: &str) -> (String, String) {
        (db.into(), name.into())
    }

    #[test]
    fn statements_are_classified_with_their_tables() {
        assert_eq!(
            c("CREATE TABLE IF NOT EXISTS `shop`.`my table` (id int primary key)"),
            Some((
                DdlKind::CreateTable,
                "shop".into(),
                vec![t("shop", "my table")]
            ))
        );
        assert_eq!(
            c("alter table t add column c int /* a comment */"),
            Some((DdlKind::AlterTable, "app".into(), vec![t("app", "t")]))
        );
        assert_eq!(
            c("ALTER TABLE t RENAME TO u"),
            Some((
                DdlKind::RenameTable,
                "app".into(),
                vec![t("app", "t"), t("app", "u")]
            ))
        );
        assert_eq!(
            c("ALTER TABLE t RENAME COLUMN a TO b").map(|x| x.0),
            Some(DdlKind::AlterTable)
        );
        assert_eq!(
            c("RENAME TABLE a TO b, x.c TO x.d"),
            Some((
                DdlKind::RenameTable,
                "app".into(),
                vec![t("app", "a"), t("app", "b"), t("x", "c"), t("x", "d")]
            ))
        );
        assert_eq!(
            c("DROP TABLE IF EXISTS a, `b`"),
            Some((
                DdlKind::DropTable,
                "app".into(),
                vec![t("app", "a"), t("app", "b")]
            ))
        );
        assert_eq!(c("TRUNCATE t").map(|x| x.0), Some(DdlKind::TruncateTable));
        assert_eq!(
            c("CREATE DATABASE IF NOT EXISTS d2"),
            Some((DdlKind::CreateDatabase, "d2".into(), vec![]))
        );
        assert_eq!(
            c("CREATE UNIQUE INDEX i ON s.t (a)"),
            Some((DdlKind::CreateIndex, "s".into(), vec![t("s", "t")]))
        );
        assert_eq!(
            c("DROP TABLE `t` /* generated by server */").map(|x| x.2),
            Some(vec![t("app", "t")])
        );
        assert_eq!(c("GRANT SELECT ON *.* TO x"), None);
        assert_eq!(c("FLUSH TABLES"), None);
        assert_eq!(c("CREATE USER x"), None);
    }
}
