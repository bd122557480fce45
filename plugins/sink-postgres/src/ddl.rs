//! What an upstream (MySQL) DDL statement means for PostgreSQL.
//!
//! Only statements whose meaning does not depend on MySQL's type system are
//! replayed as statements: creating and dropping a database (a PostgreSQL
//! schema), dropping and truncating tables, renaming a table within its
//! schema, foreign keys (created once both tables exist, so that PostgreSQL
//! cascades what the upstream cascaded), sequences. A statement that changes
//! a table's columns marks the table; its next rows reshape it from the
//! upstream schema (see `PostgresSink::shape`).
//!
//! Partitioned tables are plain tables in PostgreSQL: partition operations
//! that keep every row (add, reorganize, coalesce, remove partitioning) are
//! noted and done; those that remove or move rows without row events (drop,
//! truncate, exchange a partition) cannot be replayed on a plain table and
//! are refused (`unsupported-ddl = "fail"`, the default) or skipped with a
//! warning (`"skip"`). Views, triggers, routines and events are MySQL SQL and
//! are not created (noted).

use sluice_sdk::DdlEvent;
use sluice_sdk::sql::Statement;
use sql_apply::{Config, Dialect, Postgres};

/// Statements to run, target tables to reshape, foreign keys to add or
/// drop, and what to log.
#[derive(Debug, Default)]
pub struct Plan {
    pub statements: Vec<Statement>,
    pub altered: Vec<String>,
    pub notes: Vec<String>,
    /// Said as warnings: something the target does not get.
    pub warnings: Vec<String>,
    /// Foreign keys the statement adds.
    pub foreign_keys: Vec<KeySpec>,
    /// Foreign keys it drops: (child, name).
    pub dropped_keys: Vec<(String, String)>,
    /// Tables it renames, in order: (from, to), quoted.
    pub renamed: Vec<(String, String)>,
    /// Why the statement cannot be replayed (the changefeed fails with it).
    pub refusal: Option<String>,
}

/// A foreign key a statement adds: `name` is `None` for an unnamed one
/// (named as InnoDB names it when it is added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    pub name: Option<String>,
    /// The child table, quoted, and its bare name.
    pub child: String,
    pub child_name: String,
    pub columns: Vec<String>,
    pub parent: String,
    pub parent_columns: Vec<String>,
    pub on_delete: String,
    pub on_update: String,
}

/// One token of a statement: a word (upper-cased), a name (quoted, as
/// written), or one punctuation character.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    /// A string literal's value.
    Str(String),
    Punct(char),
}

/// The tokens of `sql`, comments and strings skipped.
fn tokens(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '#' || (c == '-' && chars.get(i + 1) == Some(&'-')) {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '`' || c == '"' {
            let mut name = String::new();
            i += 1;
            while i < chars.len() {
                if chars[i] == c {
                    if chars.get(i + 1) == Some(&c) {
                        name.push(c);
                        i += 2;
                        continue;
                    }
                    break;
                }
                name.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Token::Quoted(name));
        } else if c == '\'' {
            let mut text = String::new();
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\'' if chars.get(i + 1) == Some(&'\'') => {
                        text.push('\'');
                        i += 2;
                    }
                    '\'' => break,
                    '\\' => {
                        text.push(match chars.get(i + 1) {
                            Some('n') => '\n',
                            Some('t') => '\t',
                            Some('r') => '\r',
                            Some(other) => *other,
                            None => '\\',
                        });
                        i += 2;
                    }
                    other => {
                        text.push(other);
                        i += 1;
                    }
                }
            }
            i += 1;
            out.push(Token::Str(text));
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// A cursor over tokens.
struct Cursor {
    tokens: Vec<Token>,
    at: usize,
}

impl Cursor {
    fn new(tokens: Vec<Token>) -> Self {
        Self { tokens, at: 0 }
    }

    /// Takes the next token if it is the keyword `word`.
    fn keyword(&mut self, word: &str) -> bool {
        match self.tokens.get(self.at) {
            Some(Token::Word(w)) if w.eq_ignore_ascii_case(word) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    /// Takes the keywords `words` if they come next, all of them.
    fn keywords(&mut self, words: &[&str]) -> bool {
        let start = self.at;
        if words.iter().all(|w| self.keyword(w)) {
            true
        } else {
            self.at = start;
            false
        }
    }

    fn punct(&mut self, c: char) -> bool {
        if self.tokens.get(self.at) == Some(&Token::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// A name, quoted or not, as written.
    fn name(&mut self) -> Option<String> {
        let name = match self.tokens.get(self.at)? {
            Token::Word(w) | Token::Quoted(w) => w.clone(),
            Token::Str(_) | Token::Punct(_) => return None,
        };
        self.at += 1;
        Some(name)
    }

    /// `[schema.]table`, the schema defaulting to `default`.
    fn table(&mut self, default: &str) -> Option<(String, String)> {
        let first = self.name()?;
        if self.punct('.') {
            let second = self.name()?;
            Some((first, second))
        } else {
            Some((default.to_string(), first))
        }
    }
}

/// What `event` means downstream under `config`.
pub fn plan(event: &DdlEvent, config: &Config) -> Plan {
    let mut plan = Plan::default();
    let mut c = Cursor {
        tokens: tokens(&event.query),
        at: 0,
    };
    let default = if event.default_schema.is_empty() {
        event.schema_name.as_str()
    } else {
        event.default_schema.as_str()
    };
    let target = |(s, t): (String, String)| {
        let (s, t) = config.target(&s, &t);
        Postgres::table_name(&s, &t)
    };
    let statement = |sql: String| Statement::new(sql, Vec::new());
    let skip = |plan: &mut Plan, why: &str| {
        plan.notes.push(format!(
            "DDL at {} not replayed on PostgreSQL ({why}): {}",
            event.commit_ts,
            event.query.chars().take(512).collect::<String>()
        ));
    };
    match event.kind.as_str() {
        "drop table partition" | "truncate table partition" | "exchange table partition" => {
            let what = format!(
                "DDL at {} ({}) removes or moves rows the binlog has no row events for, and \
                 sink-postgres keeps partitioned tables as plain tables",
                event.commit_ts, event.kind
            );
            match config.unsupported_ddl {
                sql_apply::UnsupportedDdl::Skip => plan.warnings.push(format!(
                    "{what}: skipped (unsupported-ddl = \"skip\"); the target keeps the rows the upstream removed or moved"
                )),
                sql_apply::UnsupportedDdl::Fail => {
                    plan.refusal = Some(format!(
                        "{what}: change the target's rows by hand as the statement did upstream ({}), then \
                         let the changefeed go on past it: set [sink.config] unsupported-ddl = \"skip\", or \
                         add {} to [filter] ignore-txn-start-ts, update the changefeed and resume it",
                        event.query.chars().take(300).collect::<String>(),
                        event.commit_ts
                    ));
                }
            }
            return plan;
        }
        "add table partition"
        | "reorganize table partition"
        | "coalesce table partition"
        | "remove table partitioning" => {
            plan.notes.push(format!(
                "DDL at {} ({}) keeps every row; partitioned tables are plain tables in PostgreSQL",
                event.commit_ts, event.kind
            ));
            return plan;
        }
        "create view" | "alter view" | "drop view" => {
            plan.warnings.push(format!(
                "DDL at {} ({}) not replayed: a view's query is MySQL SQL; create it on PostgreSQL by hand: {}",
                event.commit_ts,
                event.kind,
                event.query.chars().take(300).collect::<String>()
            ));
            return plan;
        }
        "create sequence" | "alter sequence" | "drop sequence" => {
            plan.statements = crate::sequence::statements(event, default, config);
            return plan;
        }
        kind if kind.contains("trigger")
            || kind.contains("procedure")
            || kind.contains("function")
            || kind.contains("event") =>
        {
            skip(
                &mut plan,
                "MySQL routines, triggers and events are not created in PostgreSQL",
            );
            return plan;
        }
        _ => {}
    }
    if c.keyword("CREATE") && (c.keyword("DATABASE") || c.keyword("SCHEMA")) {
        c.keywords(&["IF", "NOT", "EXISTS"]);
        if let Some(name) = c.name() {
            let (schema, _) = config.target(&name, "");
            plan.statements.push(statement(format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                Postgres::ident(&schema)
            )));
        }
        return plan;
    }
    c.at = 0;
    if c.keyword("DROP") && (c.keyword("DATABASE") || c.keyword("SCHEMA")) {
        c.keywords(&["IF", "EXISTS"]);
        if config.target_schema.is_some() || !config.route.is_empty() {
            skip(&mut plan, "tables are routed; their schema may hold others");
        } else if let Some(name) = c.name() {
            plan.statements.push(statement(format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                Postgres::ident(&name)
            )));
        }
        return plan;
    }
    c.at = 0;
    if c.keyword("DROP") {
        c.keyword("TEMPORARY");
        if c.keyword("TABLE") {
            c.keywords(&["IF", "EXISTS"]);
            let mut names = Vec::new();
            while let Some(table) = c.table(default) {
                names.push(target(table));
                if !c.punct(',') {
                    break;
                }
            }
            if !names.is_empty() {
                plan.statements.push(statement(format!(
                    "DROP TABLE IF EXISTS {}",
                    names.join(", ")
                )));
            }
            return plan;
        }
    }
    c.at = 0;
    if c.keyword("TRUNCATE") {
        c.keyword("TABLE");
        if let Some(table) = c.table(default) {
            // No TRUNCATE IF EXISTS: the table may not have been created
            // downstream (it had no rows yet).
            let name = target(table);
            plan.statements.push(statement(if_table_exists(
                &name,
                &format!("TRUNCATE TABLE {name}"),
            )));
        }
        return plan;
    }
    c.at = 0;
    if c.keywords(&["RENAME", "TABLE"]) {
        // In order, as MySQL renames them (`a TO tmp, b TO a, tmp TO b`
        // swaps two tables).
        while let (Some(from), true, Some(to)) =
            (c.table(default), c.keyword("TO"), c.table(default))
        {
            let from = config.target(&from.0, &from.1);
            let to = config.target(&to.0, &to.1);
            plan.rename(&from, &to);
            if !c.punct(',') {
                break;
            }
        }
        return plan;
    }
    c.at = 0;
    if c.keyword("ALTER") {
        c.keywords(&["ONLINE"]);
        c.keywords(&["IGNORE"]);
        if c.keyword("TABLE")
            && let Some(table) = c.table(default)
        {
            let child_name = config.target(&table.0, &table.1).1;
            let from_table = table.clone();
            let table = target(table);
            let rest = &c.tokens[c.at..];
            for key in added_keys(rest, &table, &child_name, default, &target) {
                plan.foreign_keys.push(key);
            }
            for name in dropped_keys(rest) {
                plan.dropped_keys.push((table.clone(), name));
            }
            let renamed_to = clauses(rest).into_iter().find_map(|mut c| {
                if !c.keyword("RENAME") {
                    return None;
                }
                if !c.keyword("TO") {
                    c.keyword("AS");
                }
                let to = c.table(default)?;
                // `RENAME COLUMN|INDEX|KEY a TO b` names no table.
                (c.at == c.tokens.len()).then_some(to)
            });
            for change in column_changes(rest) {
                let sql = match change {
                    ColumnChange::Add {
                        column,
                        ty,
                        default,
                        computed,
                    } => {
                        plan.statements.push(statement(format!(
                            "ALTER TABLE IF EXISTS {table} ADD COLUMN IF NOT EXISTS {} {ty}{}",
                            Postgres::ident(&column),
                            default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default()
                        )));
                        let Some(expr) = computed else { continue };
                        // The column stays plain (rows bring their values);
                        // the rows already there get theirs computed (a
                        // table not created yet has none).
                        if_table_exists(
                            &table,
                            &format!(
                                "UPDATE {table} SET {} = ({expr})::{ty}",
                                Postgres::ident(&column)
                            ),
                        )
                    }
                    ColumnChange::Drop { column } => format!(
                        "ALTER TABLE IF EXISTS {table} DROP COLUMN IF EXISTS {}",
                        Postgres::ident(&column)
                    ),
                    ColumnChange::Rename { column, to } => format!(
                        "ALTER TABLE IF EXISTS {table} RENAME COLUMN {} TO {}",
                        Postgres::ident(&column),
                        Postgres::ident(&to)
                    ),
                    ColumnChange::Retype {
                        column,
                        renamed,
                        ty,
                    } => {
                        let name = Postgres::ident(renamed.as_deref().unwrap_or(&column));
                        if renamed.is_some() {
                            plan.statements.push(statement(format!(
                                "ALTER TABLE IF EXISTS {table} RENAME COLUMN {} TO {name}",
                                Postgres::ident(&column)
                            )));
                        }
                        // Every cast to a shorter varchar cuts the value.
                        format!(
                            "ALTER TABLE IF EXISTS {table} ALTER COLUMN {name} TYPE {ty} USING {name}::{ty}"
                        )
                    }
                };
                plan.statements.push(statement(sql));
            }
            plan.altered.push(table);
            if let Some(to) = renamed_to {
                let from = config.target(&from_table.0, &from_table.1);
                plan.rename(&from, &config.target(&to.0, &to.1));
            }
            plan.notes.push(format!(
                "DDL at {}: the table's next rows reshape it",
                event.commit_ts
            ));
            return plan;
        }
    }
    c.at = 0;
    if c.keyword("CREATE") {
        c.keywords(&["OR", "REPLACE"]);
        c.keyword("TEMPORARY");
        if c.keyword("TABLE") {
            // Created with the first rows, from the upstream schema; its
            // foreign keys once both tables exist.
            c.keywords(&["IF", "NOT", "EXISTS"]);
            if let Some(table) = c.table(default) {
                let child_name = config.target(&table.0, &table.1).1;
                let child = target(table);
                let body = &c.tokens[c.at..];
                let mut n = 0;
                for mut key in table_keys(body, &child, &child_name, default, &target) {
                    if key.name.is_none() {
                        n += 1;
                        key.name = Some(format!("{child_name}_ibfk_{n}"));
                    }
                    plan.foreign_keys.push(key);
                }
                if body
                    .iter()
                    .any(|t| matches!(t, Token::Word(w) if w.eq_ignore_ascii_case("PARTITION")))
                {
                    plan.notes.push(format!(
                        "DDL at {}: {child} is partitioned upstream; it is a plain table in PostgreSQL",
                        event.commit_ts
                    ));
                }
            }
            return plan;
        }
    }
    skip(&mut plan, "no PostgreSQL equivalent is derived for it");
    plan
}

/// A column an `ALTER TABLE` adds or drops.
#[derive(Debug, PartialEq)]
enum ColumnChange {
    /// Added (nullable: the table may hold rows), with its PostgreSQL type
    /// and default (a literal or `CURRENT_TIMESTAMP`), which the rows
    /// already in the table take, as upstream; a generated column's
    /// expression in PostgreSQL's spelling, which computes it for them.
    Add {
        column: String,
        ty: String,
        default: Option<String>,
        computed: Option<String>,
    },
    Drop {
        column: String,
    },
    /// `RENAME COLUMN a TO b`: the column keeps its values.
    Rename {
        column: String,
        to: String,
    },
    /// A column's type changed (`MODIFY`, `CHANGE`): `ALTER COLUMN ... TYPE
    /// ... USING` a cast, which cuts text to a shorter length as MySQL's
    /// non-strict `sql_mode` did upstream; renamed first when `CHANGE` gives
    /// it another name.
    Retype {
        column: String,
        renamed: Option<String>,
        ty: String,
    },
}

impl Plan {
    /// Renames table `from` to `to` (target schema and name each).
    fn rename(&mut self, from: &(String, String), to: &(String, String)) {
        let quoted = |t: &(String, String)| Postgres::table_name(&t.0, &t.1);
        self.altered.push(quoted(to));
        self.renamed.push((quoted(from), quoted(to)));
        self.statements.extend(
            rename(from, to)
                .into_iter()
                .map(|sql| Statement::new(sql, Vec::new())),
        );
    }
}

/// The statements that rename table `from` to `to` (target schema and
/// name each), its rows, keys and indexes with it: into another schema
/// through a name no table has (the target schema may hold a table with the
/// old name), each step a no-op if the table was never created downstream.
fn rename(from: &(String, String), to: &(String, String)) -> Vec<String> {
    let table = |s: &str, t: &str| Postgres::table_name(s, t);
    if from.0 == to.0 {
        if from.1 == to.1 {
            return Vec::new();
        }
        return vec![format!(
            "ALTER TABLE IF EXISTS {} RENAME TO {}",
            table(&from.0, &from.1),
            Postgres::ident(&to.1)
        )];
    }
    let moving = format!("sluice_moving_{:016x}", fnv(&format!("{from:?}{to:?}")));
    vec![
        format!("CREATE SCHEMA IF NOT EXISTS {}", Postgres::ident(&to.0)),
        format!(
            "ALTER TABLE IF EXISTS {} RENAME TO {}",
            table(&from.0, &from.1),
            Postgres::ident(&moving)
        ),
        format!(
            "ALTER TABLE IF EXISTS {} SET SCHEMA {}",
            table(&from.0, &moving),
            Postgres::ident(&to.0)
        ),
        format!(
            "ALTER TABLE IF EXISTS {} RENAME TO {}",
            table(&to.0, &moving),
            Postgres::ident(&to.1)
        ),
    ]
}

/// FNV-1a of `text`: a name that no upstream table is likely to have.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The `ADD [COLUMN] name type ...` and `DROP [COLUMN] name` clauses of an
/// `ALTER TABLE` (the tokens after the table name).
fn column_changes(tokens: &[Token]) -> Vec<ColumnChange> {
    let mut out = Vec::new();
    for mut c in clauses(tokens) {
        if c.keyword("MODIFY") || c.keyword("CHANGE") {
            let change = matches!(c.tokens.get(c.at - 1), Some(Token::Word(w)) if w.eq_ignore_ascii_case("CHANGE"));
            c.keyword("COLUMN");
            c.keywords(&["IF", "EXISTS"]);
            let Some(column) = c.name() else { continue };
            let renamed = if change { c.name() } else { None };
            if let Some(ty) = mapped_type(&mut c, renamed.as_deref().unwrap_or(&column)) {
                out.push(ColumnChange::Retype {
                    renamed: renamed.filter(|r| *r != column),
                    column,
                    ty,
                });
            }
            continue;
        }
        if c.keywords(&["RENAME", "COLUMN"]) {
            if let (Some(column), true, Some(to)) = (c.name(), c.keyword("TO"), c.name()) {
                out.push(ColumnChange::Rename { column, to });
            }
            continue;
        }
        let add = c.keyword("ADD");
        if !add && !c.keyword("DROP") {
            continue;
        }
        let not_a_column = [
            "INDEX",
            "KEY",
            "CONSTRAINT",
            "PRIMARY",
            "UNIQUE",
            "FULLTEXT",
            "SPATIAL",
            "FOREIGN",
            "PARTITION",
            "CHECK",
            "PERIOD",
            "SYSTEM",
        ];
        if not_a_column.iter().any(
            |w| matches!(c.tokens.get(c.at), Some(Token::Word(x)) if x.eq_ignore_ascii_case(w)),
        ) {
            continue;
        }
        c.keyword("COLUMN");
        if !add {
            c.keywords(&["IF", "EXISTS"]);
            if let Some(column) = c.name() {
                out.push(ColumnChange::Drop { column });
            }
            continue;
        }
        c.keywords(&["IF", "NOT", "EXISTS"]);
        let Some(column) = c.name() else { continue };
        // An ENUM NOT NULL without a default gives the rows there its first value.
        let first_enum = match &c.tokens[c.at..] {
            [Token::Word(w), Token::Punct('('), Token::Str(first), ..]
                if w.eq_ignore_ascii_case("ENUM") =>
            {
                Some(first.clone())
            }
            _ => None,
        };
        // BINARY(n) pads its values (and defaults) with zero bytes to n.
        let fixed = match &c.tokens[c.at..] {
            [
                Token::Word(w),
                Token::Punct('('),
                Token::Word(n),
                Token::Punct(')'),
                ..,
            ] if w.eq_ignore_ascii_case("BINARY") => n.parse::<usize>().ok(),
            _ => None,
        };
        let Some(ty) = mapped_type(&mut c, &column) else {
            continue;
        };
        let (default, computed) = added_fill(&c.tokens[c.at..], &ty, first_enum, fixed);
        out.push(ColumnChange::Add {
            column,
            ty,
            default,
            computed,
        });
    }
    out
}

/// `statement` run only if `table` (quoted) exists: a `DO` block, quoted
/// with a dollar tag the block does not contain (a table's name may hold
/// `$sluice$`, which would end a fixed tag and run the rest as SQL).
fn if_table_exists(table: &str, statement: &str) -> String {
    let body = format!(
        "BEGIN IF to_regclass('{}') IS NOT NULL THEN {statement}; END IF; END",
        table.replace('\'', "''")
    );
    let mut tag = String::from("sluice");
    while body.contains(&format!("${tag}$")) {
        tag.push('_');
    }
    format!("DO ${tag}$ {body} ${tag}$")
}

/// What the rows already in a table get in a column an `ALTER TABLE ... ADD`
/// adds, as MySQL gives it to them, from the tokens after the column's type
/// (`ty` its PostgreSQL type): its default, or the implicit default of a `NOT
/// NULL` column without one (`first_enum`: an ENUM's first value; `fixed`:
/// a BINARY's length), as a PostgreSQL literal; or, for a generated column,
/// its expression where PostgreSQL computes it the same (integer arithmetic
/// over columns).
fn added_fill(
    tokens: &[Token],
    ty: &str,
    first_enum: Option<String>,
    fixed: Option<usize>,
) -> (Option<String>, Option<String>) {
    let word_at = |w: &str| {
        tokens
            .iter()
            .position(|t| matches!(t, Token::Word(x) if x.eq_ignore_ascii_case(w)))
    };
    if let Some(at) = word_at("AS") {
        // `[GENERATED ALWAYS] AS (expr) [VIRTUAL | STORED | PERSISTENT]`.
        return (None, generated_expression(&tokens[at + 1..]));
    }
    if let Some(at) = word_at("DEFAULT") {
        return (default_literal(&tokens[at + 1..], ty, fixed), None);
    }
    let not_null = tokens.windows(2).any(|w| {
        matches!(w, [Token::Word(a), Token::Word(b)]
            if a.eq_ignore_ascii_case("NOT") && b.eq_ignore_ascii_case("NULL"))
    });
    if !not_null {
        return (None, None);
    }
    // MySQL's implicit defaults; a zero date has no PostgreSQL value (NULL).
    let implicit = if let Some(first) = first_enum {
        Some(quoted(&first))
    } else if is_numeric_type(ty) {
        Some("0".into())
    } else if ty == "bytea" {
        Some(format!("'\\x{}'", "00".repeat(fixed.unwrap_or(0))))
    } else if ty == "text" || ty.starts_with("varchar") || ty.starts_with("char") {
        Some("''".into())
    } else if ty == "interval" {
        Some("'00:00:00'".into())
    } else {
        None
    };
    (implicit, None)
}

/// Whether PostgreSQL type `ty` (as [`crate::types::pg_type`] gives it) is a number.
fn is_numeric_type(ty: &str) -> bool {
    ["smallint", "integer", "bigint", "numeric", "real", "double"]
        .iter()
        .any(|n| ty.starts_with(n))
}

/// A string as a PostgreSQL literal.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A MySQL column default (the tokens after `DEFAULT`) as a PostgreSQL
/// literal of type `ty`: strings, numbers (signed, with a fraction or an
/// exponent), hex (`X'0a'`, `0x0a`) and bit (`b'101'`) literals,
/// `TRUE`/`FALSE`, `CURRENT_TIMESTAMP` and its synonyms; `None` for `NULL`
/// and expressions. A BINARY(`fixed`) default is padded with zero bytes.
fn default_literal(tokens: &[Token], ty: &str, fixed: Option<usize>) -> Option<String> {
    let numeric = is_numeric_type(ty);
    let bytes_literal = |mut bytes: Vec<u8>| -> Option<String> {
        if ty == "bytea" {
            if let Some(n) = fixed {
                bytes.resize(bytes.len().max(n), 0);
            }
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            Some(format!("'\\x{hex}'"))
        } else if numeric {
            let mut n: u128 = 0;
            for b in &bytes {
                n = n.checked_mul(256)?.checked_add(u128::from(*b))?;
            }
            Some(n.to_string())
        } else {
            String::from_utf8(bytes).ok().map(|s| quoted(&s))
        }
    };
    let hex = |h: &str| -> Option<Vec<u8>> {
        let h = if h.len() % 2 == 1 {
            format!("0{h}")
        } else {
            h.to_string()
        };
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
            .collect()
    };
    let bits = |b: &str| -> Option<String> {
        let n = u128::from_str_radix(b, 2).ok()?;
        if numeric {
            Some(n.to_string())
        } else {
            let len = b.len().div_ceil(8).max(1);
            bytes_literal(n.to_be_bytes()[16 - len..].to_vec())
        }
    };
    match tokens {
        [Token::Word(x), Token::Str(h), ..] if x.eq_ignore_ascii_case("x") => {
            bytes_literal(hex(h)?)
        }
        [Token::Word(b), Token::Str(v), ..] if b.eq_ignore_ascii_case("b") => bits(v),
        [Token::Word(w), ..] if w.len() > 2 && w[..2].eq_ignore_ascii_case("0x") => {
            bytes_literal(hex(&w[2..])?)
        }
        [Token::Word(w), ..]
            if w.len() > 2 && w[..2].eq_ignore_ascii_case("0b") && !w[2..].contains(['e', 'E']) =>
        {
            bits(&w[2..])
        }
        [Token::Str(s), ..] if ty == "bytea" => bytes_literal(s.as_bytes().to_vec()),
        [Token::Str(s), ..] => Some(quoted(s)),
        [Token::Word(w), ..] if w.eq_ignore_ascii_case("NULL") => None,
        [Token::Word(w), ..]
            if w.eq_ignore_ascii_case("TRUE") || w.eq_ignore_ascii_case("FALSE") =>
        {
            let on = w.eq_ignore_ascii_case("TRUE");
            Some(match (numeric, on) {
                (true, true) => "1".into(),
                (true, false) => "0".into(),
                (false, _) => w.to_ascii_uppercase(),
            })
        }
        [Token::Word(w), ..]
            if ["CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"]
                .iter()
                .any(|k| w.eq_ignore_ascii_case(k)) =>
        {
            Some("CURRENT_TIMESTAMP".into())
        }
        _ => number_literal(tokens),
    }
}

/// A signed number at the start of `tokens` (`-1.5`, `+2`, `1e3`,
/// `1.5e-3`, `.5`), which the tokenizer cut at `.`, `+` and `-`.
fn number_literal(tokens: &[Token]) -> Option<String> {
    let mut text = String::new();
    for t in tokens {
        match t {
            Token::Punct(c @ ('-' | '+')) if text.is_empty() || text.ends_with(['e', 'E']) => {
                text.push(*c);
            }
            Token::Punct('.') => text.push('.'),
            Token::Word(w)
                if w.bytes()
                    .all(|b| b.is_ascii_digit() || b == b'e' || b == b'E') =>
            {
                text.push_str(w);
            }
            _ => break,
        }
    }
    let parsed: f64 = text.parse().ok()?;
    parsed
        .is_finite()
        .then_some(text.trim_start_matches('+').to_string())
}

/// A generated column's expression (the tokens after `AS`) in PostgreSQL's
/// spelling, when it means the same there: integer literals, columns,
/// `+ - *` and parentheses. Anything else (functions, strings, `/` and
/// `DIV`, whose results differ in type) gives `None`.
fn generated_expression(tokens: &[Token]) -> Option<String> {
    if !matches!(tokens.first(), Some(Token::Punct('('))) {
        return None;
    }
    let mut depth = 0usize;
    let mut out = String::new();
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::Punct('(') => {
                depth += 1;
                if depth > 1 {
                    out.push('(');
                }
            }
            Token::Punct(')') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return (!out.trim().is_empty()).then(|| out.trim().to_string());
                }
                out.push(')');
            }
            Token::Punct(c @ ('+' | '-' | '*')) => {
                let _ = std::fmt::Write::write_fmt(&mut out, format_args!(" {c} "));
            }
            Token::Word(w) if is_number(w) => out.push_str(w),
            Token::Quoted(name) => out.push_str(&Postgres::ident(name)),
            // A column; operators spelled as words (`DIV`, `MOD`, `AND` ...)
            // and functions are not translated.
            Token::Word(name)
                if !matches!(tokens.get(i + 1), Some(Token::Punct('(')))
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                    && ![
                        "DIV", "MOD", "AND", "OR", "XOR", "NOT", "IS", "NULL", "LIKE", "IN",
                        "BETWEEN", "CASE", "WHEN", "THEN", "ELSE", "END", "TRUE", "FALSE",
                        "BINARY", "COLLATE", "INTERVAL", "REGEXP", "RLIKE", "SOUNDS",
                    ]
                    .iter()
                    .any(|k| name.eq_ignore_ascii_case(k)) =>
            {
                out.push_str(&Postgres::ident(name));
            }
            _ => return None,
        }
    }
    None
}

/// The MySQL type at `c` (`name(args) unsigned`, as the source spells it) as
/// the PostgreSQL type of column `column`.
fn mapped_type(c: &mut Cursor, column: &str) -> Option<String> {
    let Some(Token::Word(name)) = c.tokens.get(c.at).cloned() else {
        return None;
    };
    c.at += 1;
    let mut sql_type = name.to_ascii_lowercase();
    if c.punct('(') {
        let mut args = Vec::new();
        while let Some(t) = c.tokens.get(c.at).cloned() {
            c.at += 1;
            match t {
                Token::Punct(')') => break,
                Token::Word(w) => args.push(w),
                Token::Str(s) => args.push(format!("'{s}'")),
                _ => {}
            }
        }
        sql_type = format!("{sql_type}({})", args.join(","));
    }
    if c.keyword("UNSIGNED") {
        sql_type.push_str(" unsigned");
    }
    Some(crate::types::pg_type(&sluice_sdk::Column {
        name: column.to_string(),
        ty: sluice_sdk::ColumnType::Text,
        sql_type,
        nullable: true,
        key: false,
    }))
}

/// `[CONSTRAINT [name]] FOREIGN KEY [index] (cols) REFERENCES [s.]t (cols)
/// [ON DELETE action] [ON UPDATE action]` starting at `c`, if it is one.
fn foreign_key(
    c: &mut Cursor,
    child: &str,
    child_name: &str,
    default: &str,
    target: &dyn Fn((String, String)) -> String,
) -> Option<KeySpec> {
    let mut name = None;
    if c.keyword("CONSTRAINT")
        && !matches!(c.tokens.get(c.at), Some(Token::Word(w)) if w.eq_ignore_ascii_case("FOREIGN"))
    {
        name = c.name();
    }
    if !c.keywords(&["FOREIGN", "KEY"]) {
        return None;
    }
    c.keywords(&["IF", "NOT", "EXISTS"]);
    if !matches!(c.tokens.get(c.at), Some(Token::Punct('('))) {
        // The index's name; MySQL names the key by it when no CONSTRAINT
        // name is given.
        let index = c.name();
        name = name.or(index);
    }
    let list = |c: &mut Cursor| -> Option<Vec<String>> {
        if !c.punct('(') {
            return None;
        }
        let mut out = Vec::new();
        loop {
            out.push(c.name()?);
            // A prefix length or an order: skipped.
            if c.punct('(') {
                while !c.punct(')') {
                    c.at += 1;
                    if c.at >= c.tokens.len() {
                        return None;
                    }
                }
            }
            c.keyword("ASC");
            c.keyword("DESC");
            if c.punct(')') {
                return Some(out);
            }
            if !c.punct(',') {
                return None;
            }
        }
    };
    let columns = list(c)?;
    if !c.keyword("REFERENCES") {
        return None;
    }
    let parent = target(c.table(default)?);
    let parent_columns = list(c)?;
    let (mut on_delete, mut on_update) = ("RESTRICT".to_string(), "RESTRICT".to_string());
    loop {
        if c.keyword("MATCH") {
            c.name();
            continue;
        }
        if !c.keyword("ON") {
            break;
        }
        let delete = c.keyword("DELETE");
        if !delete && !c.keyword("UPDATE") {
            break;
        }
        let action = if c.keyword("CASCADE") {
            "CASCADE"
        } else if c.keywords(&["SET", "NULL"]) {
            "SET NULL"
        } else if c.keywords(&["SET", "DEFAULT"]) {
            "SET DEFAULT"
        } else if c.keywords(&["NO", "ACTION"]) {
            "NO ACTION"
        } else if c.keyword("RESTRICT") {
            "RESTRICT"
        } else {
            break;
        };
        if delete {
            on_delete = action.into();
        } else {
            on_update = action.into();
        }
    }
    Some(KeySpec {
        name,
        child: child.to_string(),
        child_name: child_name.to_string(),
        columns,
        parent,
        parent_columns,
        on_delete,
        on_update,
    })
}

/// The items of a parenthesised list at the top of `tokens`, split at its
/// commas.
fn items(tokens: &[Token]) -> Vec<Vec<Token>> {
    let mut out = Vec::new();
    let (mut depth, mut current) = (0usize, Vec::new());
    for t in tokens {
        match t {
            Token::Punct('(') => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            Token::Punct(')') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    out.push(std::mem::take(&mut current));
                    break;
                }
            }
            Token::Punct(',') if depth == 1 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        if depth >= 1 {
            current.push(t.clone());
        }
    }
    out
}

/// The foreign keys of a `CREATE TABLE`'s column list.
fn table_keys(
    body: &[Token],
    child: &str,
    child_name: &str,
    default: &str,
    target: &dyn Fn((String, String)) -> String,
) -> Vec<KeySpec> {
    items(body)
        .into_iter()
        .filter_map(|item| foreign_key(&mut Cursor::new(item), child, child_name, default, target))
        .collect()
}

/// The clauses of an `ALTER TABLE` (after the table name), split at
/// top-level commas, each with a cursor at its start.
fn clauses(tokens: &[Token]) -> Vec<Cursor> {
    let mut out = Vec::new();
    let (mut depth, mut current) = (0usize, Vec::new());
    for t in tokens {
        match t {
            Token::Punct('(') => depth += 1,
            Token::Punct(')') => depth = depth.saturating_sub(1),
            Token::Punct(',') if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(t.clone());
    }
    out.push(current);
    out.into_iter().map(Cursor::new).collect()
}

/// The foreign keys an `ALTER TABLE ... ADD` adds.
fn added_keys(
    tokens: &[Token],
    child: &str,
    child_name: &str,
    default: &str,
    target: &dyn Fn((String, String)) -> String,
) -> Vec<KeySpec> {
    clauses(tokens)
        .into_iter()
        .filter_map(|mut c| {
            if !c.keyword("ADD") {
                return None;
            }
            foreign_key(&mut c, child, child_name, default, target)
        })
        .collect()
}

/// The foreign keys an `ALTER TABLE ... DROP FOREIGN KEY name` drops.
fn dropped_keys(tokens: &[Token]) -> Vec<String> {
    clauses(tokens)
        .into_iter()
        .filter_map(|mut c| {
            if !c.keywords(&["DROP", "FOREIGN", "KEY"]) {
                return None;
            }
            c.keywords(&["IF", "EXISTS"]);
            c.name()
        })
        .collect()
}

fn is_number(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        serde_json::from_str(&format!(r#"{{"database": "pg"{extra}}}"#)).unwrap()
    }

    fn run(query: &str, extra: &str) -> Plan {
        plan(&DdlEvent::new(7, "shop", "", query), &config(extra))
    }

    fn sql(plan: &Plan) -> Vec<&str> {
        plan.statements.iter().map(|s| s.sql.as_str()).collect()
    }

    #[test]
    fn statements_with_a_postgres_meaning_are_replayed() {
        assert_eq!(
            sql(&run(
                "DROP TABLE IF EXISTS `a`, shop2.`b` /* generated by server */",
                ""
            )),
            ["DROP TABLE IF EXISTS \"shop\".\"a\", \"shop2\".\"b\""]
        );
        assert_eq!(
            sql(&run("truncate table `it's`", "")),
            [
                "DO $sluice$ BEGIN IF to_regclass('\"shop\".\"it''s\"') IS NOT NULL THEN \
                 TRUNCATE TABLE \"shop\".\"it's\"; END IF; END $sluice$"
            ]
        );
        assert_eq!(
            sql(&run("CREATE DATABASE IF NOT EXISTS `new`", "")),
            ["CREATE SCHEMA IF NOT EXISTS \"new\""]
        );
        assert_eq!(
            sql(&run("RENAME TABLE a TO b", "")),
            ["ALTER TABLE IF EXISTS \"shop\".\"a\" RENAME TO \"b\""]
        );
        // Into another schema, in order, through a name no table has.
        let moved = run("RENAME TABLE a TO other.b, other.b TO other.c", "");
        let moved = sql(&moved);
        assert_eq!(moved.len(), 5, "{moved:?}");
        assert_eq!(moved[0], "CREATE SCHEMA IF NOT EXISTS \"other\"");
        assert!(
            moved[1].starts_with("ALTER TABLE IF EXISTS \"shop\".\"a\" RENAME TO \"sluice_moving_")
                && moved[2].ends_with("SET SCHEMA \"other\"")
                && moved[3].ends_with("RENAME TO \"b\""),
            "{moved:?}"
        );
        assert_eq!(
            moved[4],
            "ALTER TABLE IF EXISTS \"other\".\"b\" RENAME TO \"c\""
        );
        // ALTER TABLE ... RENAME: the other clauses first, on the old name.
        let p = run(
            "ALTER TABLE a RENAME COLUMN x TO y, RENAME INDEX i TO j, RENAME TO b",
            "",
        );
        assert_eq!(
            sql(&p),
            [
                "ALTER TABLE IF EXISTS \"shop\".\"a\" RENAME COLUMN \"x\" TO \"y\"",
                "ALTER TABLE IF EXISTS \"shop\".\"a\" RENAME TO \"b\"",
            ]
        );
        assert_eq!(p.altered, ["\"shop\".\"a\"", "\"shop\".\"b\""]);
        assert_eq!(
            sql(&run("DROP DATABASE shop", "")),
            ["DROP SCHEMA IF EXISTS \"shop\" CASCADE"]
        );
    }

    #[test]
    fn added_and_dropped_columns_are_replayed_with_mapped_types_and_defaults() {
        let p = run(
            "ALTER TABLE t ADD COLUMN a VARCHAR(8) NOT NULL DEFAULT 'it''s', ADD b INT UNSIGNED DEFAULT 5, \
             ADD INDEX i (a), ADD COLUMN c DECIMAL(5,2) DEFAULT -1, ADD d DATETIME(3) DEFAULT NOW(), \
             ADD e ENUM('x','y'), DROP COLUMN f, MODIFY g BIGINT",
            "",
        );
        let t = "ALTER TABLE IF EXISTS \"shop\".\"t\"";
        assert_eq!(
            sql(&p),
            [
                format!("{t} ADD COLUMN IF NOT EXISTS \"a\" varchar(8) DEFAULT 'it''s'"),
                format!("{t} ADD COLUMN IF NOT EXISTS \"b\" bigint DEFAULT 5"),
                format!("{t} ADD COLUMN IF NOT EXISTS \"c\" numeric(5,2) DEFAULT -1"),
                format!(
                    "{t} ADD COLUMN IF NOT EXISTS \"d\" timestamp(3) DEFAULT CURRENT_TIMESTAMP"
                ),
                format!("{t} ADD COLUMN IF NOT EXISTS \"e\" text"),
                format!("{t} DROP COLUMN IF EXISTS \"f\""),
                format!("{t} ALTER COLUMN \"g\" TYPE bigint USING \"g\"::bigint"),
            ]
        );
        assert_eq!(p.altered, ["\"shop\".\"t\""]);
    }

    #[test]
    fn a_table_name_cannot_end_the_dollar_quote_of_its_do_block() {
        let p = run("TRUNCATE TABLE `x$sluice$; DROP TABLE y; --`", "");
        assert_eq!(
            sql(&p),
            [
                "DO $sluice_$ BEGIN IF to_regclass('\"shop\".\"x$sluice$; DROP TABLE y; --\"') IS NOT NULL \
                 THEN TRUNCATE TABLE \"shop\".\"x$sluice$; DROP TABLE y; --\"; END IF; END $sluice_$"
            ]
        );
    }

    #[test]
    fn rows_already_there_get_what_mysql_gives_them_in_an_added_column() {
        let p = run(
            "ALTER TABLE t ADD b VARBINARY(8) NOT NULL DEFAULT X'0102', ADD c BIT(3) DEFAULT b'101', \
             ADD d DOUBLE DEFAULT 1e3, ADD e DECIMAL(8,2) DEFAULT -1.5, ADD f FLOAT DEFAULT 1.5e-3, \
             ADD g INT NOT NULL, ADD h VARCHAR(4) NOT NULL, ADD i ENUM('x','y') NOT NULL, \
             ADD j BLOB NOT NULL, ADD k TINYINT(1) DEFAULT TRUE, ADD l INT DEFAULT 0x10, \
             ADD m DATE NOT NULL, ADD n INT NULL DEFAULT NULL, \
             ADD COLUMN o BIGINT GENERATED ALWAYS AS (`id` * 3 + (`a` - 1)) STORED, \
             ADD r BINARY(3) NOT NULL, ADD s BINARY(4) DEFAULT 'ab', \
             ADD p VARCHAR(9) AS (CONCAT('g', `id`)) VIRTUAL, ADD q INT AS (a DIV 3)",
            "",
        );
        let t = "ALTER TABLE IF EXISTS \"shop\".\"t\"";
        let add =
            |c: &str, ty: &str, d: &str| format!("{t} ADD COLUMN IF NOT EXISTS \"{c}\" {ty}{d}");
        assert_eq!(
            sql(&p),
            [
                add("b", "bytea", " DEFAULT '\\x0102'"),
                add("c", "numeric(20,0)", " DEFAULT 5"),
                add("d", "double precision", " DEFAULT 1e3"),
                add("e", "numeric(8,2)", " DEFAULT -1.5"),
                add("f", "real", " DEFAULT 1.5e-3"),
                add("g", "integer", " DEFAULT 0"),
                add("h", "varchar(4)", " DEFAULT ''"),
                add("i", "text", " DEFAULT 'x'"),
                add("j", "bytea", " DEFAULT '\\x'"),
                add("k", "smallint", " DEFAULT 1"),
                add("l", "integer", " DEFAULT 16"),
                add("m", "date", ""),
                add("n", "integer", ""),
                add("o", "bigint", ""),
                "DO $sluice$ BEGIN IF to_regclass('\"shop\".\"t\"') IS NOT NULL THEN \
                 UPDATE \"shop\".\"t\" SET \"o\" = (\"id\" * 3 + (\"a\" - 1))::bigint; END IF; END $sluice$"
                    .to_string(),
                add("r", "bytea", " DEFAULT '\\x000000'"),
                add("s", "bytea", " DEFAULT '\\x61620000'"),
                add("p", "varchar(9)", ""),
                add("q", "integer", ""),
            ]
        );
    }

    #[test]
    fn foreign_keys_are_read_with_their_actions_and_names() {
        let p = run(
            "CREATE TABLE c (id INT PRIMARY KEY, pid INT, u INT, \
             FOREIGN KEY (pid) REFERENCES p(id) ON DELETE CASCADE ON UPDATE CASCADE, \
             CONSTRAINT `fk_u` FOREIGN KEY `i` (u) REFERENCES other.q (a) ON UPDATE SET NULL, \
             KEY (u)) ENGINE=InnoDB",
            "",
        );
        let keys: Vec<(Option<&str>, &str, &str, &str)> = p
            .foreign_keys
            .iter()
            .map(|k| {
                (
                    k.name.as_deref(),
                    k.parent.as_str(),
                    k.on_delete.as_str(),
                    k.on_update.as_str(),
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                (Some("c_ibfk_1"), "\"shop\".\"p\"", "CASCADE", "CASCADE"),
                (Some("fk_u"), "\"other\".\"q\"", "RESTRICT", "SET NULL"),
            ]
        );
        assert_eq!(p.foreign_keys[0].columns, ["pid"]);
        assert_eq!(p.foreign_keys[1].parent_columns, ["a"]);
        let p = run(
            "ALTER TABLE c ADD CONSTRAINT FOREIGN KEY (pid) REFERENCES p (id) ON DELETE SET NULL, DROP FOREIGN KEY fk_u",
            "",
        );
        assert_eq!(p.foreign_keys.len(), 1);
        assert_eq!(p.foreign_keys[0].name, None);
        assert_eq!(p.foreign_keys[0].on_delete, "SET NULL");
        assert_eq!(
            p.dropped_keys,
            [("\"shop\".\"c\"".to_string(), "fk_u".to_string())]
        );
    }

    #[test]
    fn partition_operations_that_drop_rows_are_refused_or_skipped_and_views_are_warned() {
        let event = |kind: &str, query: &str| DdlEvent::new(9, "shop", "t", query).with_kind(kind);
        let refused = plan(
            &event(
                "truncate table partition",
                "ALTER TABLE t TRUNCATE PARTITION p0",
            ),
            &config(""),
        );
        let why = refused.refusal.unwrap();
        assert!(
            why.contains("unsupported-ddl = \"skip\"") && why.contains("ignore-txn-start-ts"),
            "{why}"
        );
        let skipped = plan(
            &event("drop table partition", "ALTER TABLE t DROP PARTITION p0"),
            &config(r#", "unsupported-ddl": "skip""#),
        );
        assert!(skipped.refusal.is_none() && skipped.warnings.len() == 1);
        let kept = plan(
            &event(
                "add table partition",
                "ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN (9))",
            ),
            &config(""),
        );
        assert!(kept.refusal.is_none() && kept.statements.is_empty() && kept.notes.len() == 1);
        let view = plan(
            &event("create view", "CREATE VIEW v AS SELECT 1"),
            &config(""),
        );
        assert!(view.statements.is_empty() && view.warnings.len() == 1);
    }

    #[test]
    fn column_changes_reshape_and_the_rest_is_noted() {
        let p = run(
            "ALTER TABLE `orders` MODIFY note varchar(2), CHANGE COLUMN `n` `m` BIGINT",
            "",
        );
        assert_eq!(
            sql(&p),
            [
                "ALTER TABLE IF EXISTS \"shop\".\"orders\" ALTER COLUMN \"note\" TYPE varchar(2) USING \"note\"::varchar(2)",
                "ALTER TABLE IF EXISTS \"shop\".\"orders\" RENAME COLUMN \"n\" TO \"m\"",
                "ALTER TABLE IF EXISTS \"shop\".\"orders\" ALTER COLUMN \"m\" TYPE bigint USING \"m\"::bigint",
            ]
        );
        assert_eq!(p.altered, ["\"shop\".\"orders\""]);
        assert!(
            run("CREATE TABLE t (id int primary key)", "")
                .notes
                .is_empty()
        );
        let p = run("CREATE PROCEDURE p() BEGIN END", "");
        assert!(p.statements.is_empty() && p.notes.len() == 1, "{p:?}");
        // Routed tables: a schema drop upstream is not a drop of the target.
        let p = run("DROP DATABASE shop", r#", "target-schema": "replica""#);
        assert!(p.statements.is_empty() && p.notes.len() == 1, "{p:?}");
        assert_eq!(
            sql(&run("DROP TABLE a", r#", "target-schema": "replica""#)),
            ["DROP TABLE IF EXISTS \"replica\".\"a\""]
        );
    }
}
