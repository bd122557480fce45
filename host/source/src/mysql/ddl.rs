//! What a statement of the binlog's query events is, and which tables it
//! names, read with `sqlparser`'s MySQL tokenizer (so quoted names, comments
//! and MariaDB-only clauses are handled alike; `/*! ... */` and `/*M! ... */`
//! comments are read as the server runs them).
//!
//! Rows need no DDL replay: each table map carries the table's columns at
//! that point of the binlog (`binlog_row_metadata=FULL`), so the schema of
//! every row is exact. A statement is classified to hold the right tables at
//! its barrier, to apply the event filters and to tell sinks what it is:
//!
//! - [`Statement::Ddl`]: a change of a database, table, view, sequence,
//!   trigger, routine or event, delivered to the sink;
//! - [`Statement::Other`]: a statement that changes no schema object and no
//!   row (accounts and grants, `FLUSH`, `ANALYZE`, temporary tables, ...),
//!   left out on purpose;
//! - [`Statement::Unknown`]: anything else; the source counts and reports it,
//!   so nothing is lost without a word.

use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

macro_rules! kinds {
    ($($variant:ident => $name:literal,)*) => {
        /// What a DDL statement is, as event filters name it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DdlKind {
            $(
                #[doc = concat!("`", $name, "`.")]
                $variant,
            )*
        }

        impl DdlKind {
            /// The name event filters use (`ignore-event`) and sinks see.
            pub const fn name(self) -> &'static str {
                match self {
                    $(DdlKind::$variant => $name,)*
                }
            }

            /// Every kind, in the order of `sluice_config::DDL_EVENTS`.
            pub const ALL: [DdlKind; [$($name),*].len()] = [$(DdlKind::$variant),*];
        }
    };
}

kinds! {
    CreateDatabase => "create database",
    DropDatabase => "drop database",
    AlterDatabase => "alter database",
    CreateTable => "create table",
    DropTable => "drop table",
    AlterTable => "alter table",
    RenameTable => "rename table",
    TruncateTable => "truncate table",
    CreateIndex => "create index",
    DropIndex => "drop index",
    CreateView => "create view",
    DropView => "drop view",
    AlterView => "alter view",
    AddPartition => "add table partition",
    DropPartition => "drop table partition",
    TruncatePartition => "truncate table partition",
    ExchangePartition => "exchange table partition",
    ReorganizePartition => "reorganize table partition",
    CoalescePartition => "coalesce table partition",
    CreateSequence => "create sequence",
    DropSequence => "drop sequence",
    AlterSequence => "alter sequence",
    CreateTrigger => "create trigger",
    DropTrigger => "drop trigger",
    CreateProcedure => "create procedure",
    DropProcedure => "drop procedure",
    AlterProcedure => "alter procedure",
    CreateFunction => "create function",
    DropFunction => "drop function",
    AlterFunction => "alter function",
    CreateEvent => "create event",
    DropEvent => "drop event",
    AlterEvent => "alter event",
    RemovePartitioning => "remove table partitioning",
}

impl DdlKind {
    /// A statement about a database as a whole (it affects all its tables).
    pub const fn is_database(self) -> bool {
        matches!(
            self,
            DdlKind::CreateDatabase | DdlKind::DropDatabase | DdlKind::AlterDatabase
        )
    }
}

/// A classified DDL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ddl {
    /// Its kind.
    pub kind: DdlKind,
    /// The database it changes: its first table's (or routine's), or the
    /// database a database statement names.
    pub schema: String,
    /// The tables (views, sequences) it names, as (schema, name): every table a
    /// rename or an exchange names, a `CREATE TABLE ... LIKE`'s source, a
    /// trigger's table; empty for database DDL and for routines and events.
    pub tables: Vec<(String, String)>,
}

/// What a query event's statement is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// A schema change.
    Ddl(Ddl),
    /// Changes no schema object and no replicated row: left out.
    Other,
    /// Not recognised.
    Unknown,
}

/// Classifies `query`, run with `default_db` as the current database.
pub fn classify_statement(query: &str, default_db: &str) -> Statement {
    let Some(mut t) = Tokens::of(query) else {
        return Statement::Unknown;
    };
    match statement(&mut t, default_db) {
        Some(s) => s,
        None => Statement::Unknown,
    }
}

/// Classifies `query` as DDL (see [`classify_statement`]); `None` for any
/// other statement.
pub fn classify(query: &str, default_db: &str) -> Option<Ddl> {
    match classify_statement(query, default_db) {
        Statement::Ddl(d) => Some(d),
        _ => None,
    }
}

/// Statements that change no schema object and no replicated row.
const OTHER_FIRST_WORDS: &[&str] = &[
    "GRANT",
    "REVOKE",
    "FLUSH",
    "ANALYZE",
    "OPTIMIZE",
    "REPAIR",
    "CHECK",
    "CHECKSUM",
    "INSTALL",
    "UNINSTALL",
    "SAVEPOINT",
    "RELEASE",
    "XA",
    "DO",
    "SET",
    "RESET",
    "PURGE",
    "KILL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "START",
    "SHOW",
    "SELECT",
    "USE",
    "HANDLER",
    "BACKUP",
    "SHUTDOWN",
];

/// Objects of CREATE / ALTER / DROP that are not replicated schema: accounts,
/// servers, tablespaces, logfile groups.
const OTHER_OBJECTS: &[&str] = &[
    "USER",
    "ROLE",
    "SERVER",
    "TABLESPACE",
    "LOGFILE",
    "RESOURCE",
    "SPATIAL_REFERENCE_SYSTEM",
    "UNDO",
    "INSTANCE",
];

fn statement(t: &mut Tokens, default_db: &str) -> Option<Statement> {
    let first = t.keyword()?;
    let qualify =
        |(db, name): (Option<String>, String)| (db.unwrap_or_else(|| default_db.to_string()), name);
    let (kind, mut tables, schema) = match first.as_str() {
        "CREATE" | "ALTER" | "DROP" => {
            let object = t.object_word()?;
            if OTHER_OBJECTS.contains(&object.as_str()) || object == "TEMPORARY" {
                return Some(Statement::Other);
            }
            let kind = kind_of(&first, &object)?;
            t.skip_if_exists();
            if kind.is_database() {
                let name = match t.name() {
                    Some((_, name)) => name,
                    // ALTER DATABASE without a name: the current one.
                    None => default_db.to_string(),
                };
                (kind, Vec::new(), name)
            } else {
                match kind {
                    DdlKind::CreateIndex | DdlKind::DropIndex => {
                        t.name()?;
                        t.skip_until_keyword("ON")?;
                        let table = qualify(t.name()?);
                        let schema = table.0.clone();
                        (kind, vec![table], schema)
                    }
                    DdlKind::CreateTrigger => {
                        let (db, _) = t.name()?;
                        t.skip_until_keyword("ON")?;
                        let (tdb, table) = t.name()?;
                        // A trigger lives in its table's database.
                        let db = tdb.or(db).unwrap_or_else(|| default_db.to_string());
                        (kind, vec![(db.clone(), table)], db)
                    }
                    DdlKind::DropTrigger
                    | DdlKind::CreateProcedure
                    | DdlKind::DropProcedure
                    | DdlKind::AlterProcedure
                    | DdlKind::CreateFunction
                    | DdlKind::DropFunction
                    | DdlKind::AlterFunction
                    | DdlKind::CreateEvent
                    | DdlKind::DropEvent
                    | DdlKind::AlterEvent => {
                        let (db, _) = qualify(t.name()?);
                        (kind, Vec::new(), db)
                    }
                    DdlKind::DropTable | DdlKind::DropView | DdlKind::DropSequence => {
                        let mut tables = vec![qualify(t.name()?)];
                        while t.eat(&Token::Comma) {
                            tables.push(qualify(t.name()?));
                        }
                        let schema = tables[0].0.clone();
                        (kind, tables, schema)
                    }
                    DdlKind::CreateTable => {
                        let table = qualify(t.name()?);
                        let schema = table.0.clone();
                        let mut tables = vec![table];
                        // CREATE TABLE t LIKE s, or (LIKE s).
                        t.eat(&Token::LParen);
                        if t.peek_keyword().as_deref() == Some("LIKE") {
                            t.at += 1;
                            tables.push(qualify(t.name()?));
                        }
                        (kind, tables, schema)
                    }
                    DdlKind::AlterTable => {
                        let table = qualify(t.name()?);
                        let schema = table.0.clone();
                        let (kind, more) = alter_table(t);
                        let mut tables = vec![table];
                        tables.extend(more.into_iter().map(qualify));
                        (kind, tables, schema)
                    }
                    _ => {
                        let table = qualify(t.name()?);
                        let schema = table.0.clone();
                        (kind, vec![table], schema)
                    }
                }
            }
        }
        "RENAME" => {
            let w = t.keyword()?;
            if w == "USER" {
                return Some(Statement::Other);
            }
            if w != "TABLE" && w != "TABLES" {
                return None;
            }
            t.skip_if_exists();
            let mut tables = Vec::new();
            loop {
                tables.push(qualify(t.name()?));
                t.skip_if_exists();
                if t.keyword()? != "TO" {
                    return None;
                }
                tables.push(qualify(t.name()?));
                if !t.eat(&Token::Comma) {
                    break;
                }
            }
            let schema = tables[0].0.clone();
            (DdlKind::RenameTable, tables, schema)
        }
        "TRUNCATE" => {
            if t.peek_keyword().as_deref() == Some("TABLE") {
                t.at += 1;
            }
            let table = qualify(t.name()?);
            let schema = table.0.clone();
            (DdlKind::TruncateTable, vec![table], schema)
        }
        // MariaDB's `SET STATEMENT var = value [, ...] FOR statement`.
        "SET" if t.peek_keyword().as_deref() == Some("STATEMENT") => {
            t.skip_until_keyword("FOR")?;
            return statement(t, default_db);
        }
        w if OTHER_FIRST_WORDS.contains(&w) => return Some(Statement::Other),
        _ => return None,
    };
    tables.dedup();
    Some(Statement::Ddl(Ddl {
        kind,
        schema,
        tables,
    }))
}

/// The kind of `CREATE`/`ALTER`/`DROP` of `object`.
fn kind_of(verb: &str, object: &str) -> Option<DdlKind> {
    use DdlKind as K;
    Some(match (verb, object) {
        ("CREATE", "DATABASE" | "SCHEMA") => K::CreateDatabase,
        ("DROP", "DATABASE" | "SCHEMA") => K::DropDatabase,
        ("ALTER", "DATABASE" | "SCHEMA") => K::AlterDatabase,
        ("CREATE", "TABLE") => K::CreateTable,
        ("DROP", "TABLE" | "TABLES") => K::DropTable,
        ("ALTER", "TABLE") => K::AlterTable,
        ("CREATE", "INDEX") => K::CreateIndex,
        ("DROP", "INDEX") => K::DropIndex,
        ("CREATE", "VIEW") => K::CreateView,
        ("DROP", "VIEW") => K::DropView,
        ("ALTER", "VIEW") => K::AlterView,
        ("CREATE", "SEQUENCE") => K::CreateSequence,
        ("DROP", "SEQUENCE") => K::DropSequence,
        ("ALTER", "SEQUENCE") => K::AlterSequence,
        ("CREATE", "TRIGGER") => K::CreateTrigger,
        ("DROP", "TRIGGER") => K::DropTrigger,
        ("CREATE", "PROCEDURE") => K::CreateProcedure,
        ("DROP", "PROCEDURE") => K::DropProcedure,
        ("ALTER", "PROCEDURE") => K::AlterProcedure,
        ("CREATE", "FUNCTION" | "AGGREGATE") => K::CreateFunction,
        ("DROP", "FUNCTION") => K::DropFunction,
        ("ALTER", "FUNCTION") => K::AlterFunction,
        ("CREATE", "EVENT") => K::CreateEvent,
        ("DROP", "EVENT") => K::DropEvent,
        ("ALTER", "EVENT") => K::AlterEvent,
        _ => return None,
    })
}

/// What an `ALTER TABLE` does, from its clauses: a rename, a partition
/// operation, or another change; and the other tables it names (the new name,
/// an exchanged table).
fn alter_table(t: &mut Tokens) -> (DdlKind, Vec<(Option<String>, String)>) {
    let mut kind = DdlKind::AlterTable;
    let mut more = Vec::new();
    let mut depth = 0usize;
    while let Some(token) = t.tokens.get(t.at).cloned() {
        t.at += 1;
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Word(w) if w.quote_style.is_none() && depth == 0 => {
                let word = w.value.to_ascii_uppercase();
                let next = t.peek_keyword();
                match (word.as_str(), next.as_deref()) {
                    ("RENAME", Some("TO" | "AS")) | ("RENAME", None) => {
                        if next.is_some() {
                            t.at += 1;
                        }
                        if let Some(name) = t.name() {
                            more.push(name);
                        }
                        kind = DdlKind::RenameTable;
                    }
                    ("RENAME", Some("COLUMN" | "INDEX" | "KEY")) => {}
                    ("ADD", Some("PARTITION")) => kind = DdlKind::AddPartition,
                    ("DROP", Some("PARTITION")) => kind = DdlKind::DropPartition,
                    ("TRUNCATE", Some("PARTITION")) => kind = DdlKind::TruncatePartition,
                    ("REORGANIZE", Some("PARTITION")) => kind = DdlKind::ReorganizePartition,
                    ("COALESCE", Some("PARTITION")) => kind = DdlKind::CoalescePartition,
                    ("REMOVE", Some("PARTITIONING")) => kind = DdlKind::RemovePartitioning,
                    ("EXCHANGE", Some("PARTITION")) => {
                        kind = DdlKind::ExchangePartition;
                        if t.skip_until_keyword("TABLE").is_some()
                            && let Some(name) = t.name()
                        {
                            more.push(name);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    (kind, more)
}

struct Tokens {
    tokens: Vec<Token>,
    at: usize,
}

impl Tokens {
    /// The statement's tokens without whitespace and comments; executable
    /// comments (`/*!50100 ... */`, `/*M!100100 ... */`) count as their text.
    fn of(query: &str) -> Option<Tokens> {
        let dialect = MySqlDialect {};
        let mut tokens = Vec::new();
        push_tokens(&dialect, query, &mut tokens, 0)?;
        Some(Tokens { tokens, at: 0 })
    }

    fn next(&mut self) -> Option<&Token> {
        let t = self.tokens.get(self.at)?;
        self.at += 1;
        Some(t)
    }

    /// The next token as an upper-case unquoted word, if it is one.
    fn keyword(&mut self) -> Option<String> {
        match self.next()? {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }

    fn peek_keyword(&self) -> Option<String> {
        match self.tokens.get(self.at)? {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }

    /// The object word of `CREATE`/`ALTER`/`DROP`, past the options before it
    /// (`OR REPLACE`, `ALGORITHM = ...`, `DEFINER = user@host`, `SQL SECURITY
    /// ...`, `UNIQUE`, `ONLINE`, `IGNORE`, `AGGREGATE`, ...): the first unquoted
    /// word naming an object.
    fn object_word(&mut self) -> Option<String> {
        const OBJECTS: &[&str] = &[
            "DATABASE",
            "SCHEMA",
            "TABLE",
            "TABLES",
            "INDEX",
            "VIEW",
            "SEQUENCE",
            "TRIGGER",
            "PROCEDURE",
            "FUNCTION",
            "EVENT",
            "TEMPORARY",
        ];
        // Bounded: options are a few tokens; a statement that names no object
        // within this many is not one of these.
        for _ in 0..64 {
            let token = self.next()?.clone();
            if let Token::Word(w) = token
                && w.quote_style.is_none()
            {
                let word = w.value.to_ascii_uppercase();
                if OBJECTS.contains(&word.as_str()) || OTHER_OBJECTS.contains(&word.as_str()) {
                    return Some(word);
                }
            }
        }
        None
    }

    /// Moves past the next unquoted `word`; `None` if there is none.
    fn skip_until_keyword(&mut self, word: &str) -> Option<()> {
        while self.at < self.tokens.len() {
            let hit = matches!(&self.tokens[self.at], Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word));
            self.at += 1;
            if hit {
                return Some(());
            }
        }
        None
    }

    fn eat(&mut self, token: &Token) -> bool {
        if self.tokens.get(self.at) == Some(token) {
            self.at += 1;
            true
        } else {
            false
        }
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

/// Tokenizes `text` into `out` without whitespace and plain comments; the
/// text of executable comments is tokenized in their place.
fn push_tokens(dialect: &MySqlDialect, text: &str, out: &mut Vec<Token>, depth: u8) -> Option<()> {
    let tokens = Tokenizer::new(dialect, text).tokenize().ok()?;
    for token in tokens {
        match token {
            Token::Whitespace(Whitespace::MultiLineComment(c)) if depth < 2 => {
                let inner = c
                    .strip_prefix("M!")
                    .or_else(|| c.strip_prefix('!'))
                    .map(|rest| rest.trim_start_matches(|ch: char| ch.is_ascii_digit()));
                if let Some(inner) = inner {
                    push_tokens(dialect, inner, out, depth + 1)?;
                }
            }
            Token::Whitespace(_) => {}
            other => out.push(other),
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Classified = (DdlKind, String, Vec<(String, String)>);

    fn c(q: &str) -> Option<Classified> {
        classify(q, "app").map(|d| (d.kind, d.schema, d.tables))
    }

    fn kind(q: &str) -> Option<DdlKind> {
        classify(q, "app").map(|d| d.kind)
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
            kind("ALTER TABLE t RENAME COLUMN a TO b"),
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
        assert_eq!(kind("TRUNCATE t"), Some(DdlKind::TruncateTable));
        assert_eq!(
            c("CREATE DATABASE IF NOT EXISTS d2"),
            Some((DdlKind::CreateDatabase, "d2".into(), vec![]))
        );
        assert_eq!(
            c("CREATE UNIQUE INDEX i ON s.t (a)"),
            Some((DdlKind::CreateIndex, "s".into(), vec![t("s", "t")]))
        );
        assert_eq!(
            c("DROP INDEX i ON t").map(|x| x.2),
            Some(vec![t("app", "t")])
        );
        assert_eq!(
            c("DROP TABLE `t` /* generated by server */").map(|x| x.2),
            Some(vec![t("app", "t")])
        );
    }

    #[test]
    fn views_with_their_definer_and_options_are_ddl() {
        // As MariaDB writes them to the binlog.
        assert_eq!(
            c(
                "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select `id` from `t`"
            ),
            Some((DdlKind::CreateView, "app".into(), vec![t("app", "v")]))
        );
        assert_eq!(
            c(
                "CREATE OR REPLACE ALGORITHM=MERGE DEFINER=`a b`@`%` SQL SECURITY INVOKER VIEW s.v AS SELECT 1"
            ),
            Some((DdlKind::CreateView, "s".into(), vec![t("s", "v")]))
        );
        assert_eq!(
            kind(
                "ALTER ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select 2"
            ),
            Some(DdlKind::AlterView)
        );
        assert_eq!(
            c("DROP VIEW IF EXISTS v1, s.v2").map(|x| x.2),
            Some(vec![t("app", "v1"), t("s", "v2")])
        );
        assert_eq!(
            kind("CREATE DEFINER=CURRENT_USER VIEW v AS SELECT 1"),
            Some(DdlKind::CreateView)
        );
    }

    #[test]
    fn partition_operations_have_their_kinds_and_an_exchange_names_both_tables() {
        for (q, k) in [
            (
                "ALTER TABLE p ADD PARTITION (PARTITION p3 VALUES LESS THAN (300))",
                DdlKind::AddPartition,
            ),
            ("ALTER TABLE p DROP PARTITION p0", DdlKind::DropPartition),
            (
                "ALTER TABLE p TRUNCATE PARTITION p1",
                DdlKind::TruncatePartition,
            ),
            (
                "ALTER TABLE p REORGANIZE PARTITION p1 INTO (PARTITION a VALUES LESS THAN (150), PARTITION b VALUES LESS THAN (200))",
                DdlKind::ReorganizePartition,
            ),
            (
                "ALTER TABLE h COALESCE PARTITION 2",
                DdlKind::CoalescePartition,
            ),
            (
                "ALTER TABLE p REMOVE PARTITIONING",
                DdlKind::RemovePartitioning,
            ),
            (
                "ALTER TABLE p PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10))",
                DdlKind::AlterTable,
            ),
        ] {
            assert_eq!(kind(q), Some(k), "{q}");
        }
        assert_eq!(
            c("ALTER TABLE `p` EXCHANGE PARTITION p0 WITH TABLE other.t2 WITHOUT VALIDATION"),
            Some((
                DdlKind::ExchangePartition,
                "app".into(),
                vec![t("app", "p"), t("other", "t2")]
            ))
        );
    }

    #[test]
    fn sequences_triggers_routines_and_events_are_ddl() {
        assert_eq!(
            c("CREATE SEQUENCE s START WITH 100 INCREMENT BY 10 CACHE 5"),
            Some((DdlKind::CreateSequence, "app".into(), vec![t("app", "s")]))
        );
        assert_eq!(
            c("DROP SEQUENCE `s` /* generated by server */").map(|x| x.2),
            Some(vec![t("app", "s")])
        );
        assert_eq!(
            kind("ALTER SEQUENCE s RESTART WITH 5"),
            Some(DdlKind::AlterSequence)
        );
        assert_eq!(
            c(
                "CREATE DEFINER=`root`@`localhost` TRIGGER trg BEFORE INSERT ON shop.t FOR EACH ROW SET NEW.a = 1"
            ),
            Some((DdlKind::CreateTrigger, "shop".into(), vec![t("shop", "t")]))
        );
        assert_eq!(
            c("DROP TRIGGER IF EXISTS trg"),
            Some((DdlKind::DropTrigger, "app".into(), vec![]))
        );
        assert_eq!(
            c("CREATE DEFINER=`root`@`localhost` PROCEDURE `p`(IN x INT)\nBEGIN SELECT x; END"),
            Some((DdlKind::CreateProcedure, "app".into(), vec![]))
        );
        assert_eq!(
            kind(
                "CREATE DEFINER=`root`@`localhost` FUNCTION `f`(x INT) RETURNS int(11)\nRETURN x + 1"
            ),
            Some(DdlKind::CreateFunction)
        );
        assert_eq!(
            kind(
                "CREATE DEFINER=`root`@`localhost` EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM t"
            ),
            Some(DdlKind::CreateEvent)
        );
        assert_eq!(
            kind("DROP PROCEDURE IF EXISTS p"),
            Some(DdlKind::DropProcedure)
        );
        assert_eq!(kind("DROP FUNCTION f"), Some(DdlKind::DropFunction));
        assert_eq!(kind("DROP EVENT IF EXISTS e"), Some(DdlKind::DropEvent));
    }

    #[test]
    fn like_names_its_source_and_executable_comments_count() {
        assert_eq!(
            c("CREATE TABLE other.t2 LIKE t1"),
            Some((
                DdlKind::CreateTable,
                "other".into(),
                vec![t("other", "t2"), t("app", "t1")]
            ))
        );
        assert_eq!(
            c("CREATE TABLE t3 (LIKE `s`.`t1`)").map(|x| x.2),
            Some(vec![t("app", "t3"), t("s", "t1")])
        );
        assert_eq!(
            classify_statement("DROP /*!40005 TEMPORARY */ TABLE IF EXISTS `t`", "app"),
            Statement::Other
        );
        assert_eq!(
            kind("/*!40000 ALTER TABLE `t` DISABLE KEYS */"),
            Some(DdlKind::AlterTable)
        );
        assert_eq!(
            kind("CREATE TABLE t (id INT) /*!50100 PARTITION BY HASH (id) PARTITIONS 4 */"),
            Some(DdlKind::CreateTable)
        );
        assert_eq!(
            c("SET STATEMENT max_statement_time = 60 FOR ALTER TABLE t ADD c INT"),
            Some((DdlKind::AlterTable, "app".into(), vec![t("app", "t")]))
        );
    }

    #[test]
    fn other_statements_are_told_apart_from_unknown_ones() {
        for q in [
            "GRANT SELECT ON *.* TO x",
            "FLUSH TABLES",
            "CREATE USER x IDENTIFIED BY 'secret'",
            "ALTER USER x IDENTIFIED BY 'secret'",
            "DROP USER IF EXISTS x",
            "RENAME USER a TO b",
            "CREATE ROLE r",
            "ANALYZE TABLE t",
            "OPTIMIZE TABLE t",
            "CREATE TEMPORARY TABLE tmp (a int)",
            "DROP TEMPORARY TABLE IF EXISTS tmp",
            "CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (HOST 'h')",
            "SAVEPOINT a",
            "XA END 'x'",
            "SET PASSWORD FOR x = PASSWORD('y')",
        ] {
            assert_eq!(classify_statement(q, "app"), Statement::Other, "{q}");
        }
        for q in [
            "INSERT INTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "DELETE FROM t",
            "LOAD DATA INFILE 'x' INTO TABLE t",
            "CREATE FROBNICATOR f",
            "",
        ] {
            assert_eq!(classify_statement(q, "app"), Statement::Unknown, "{q:?}");
        }
    }
}
