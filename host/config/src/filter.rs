//! `[filter]`: which tables a changefeed replicates and which of their events it
//! skips, in TiCDC's syntax. `rules` are TiDB table-filter patterns
//! (`shop.*`, `!*.tmp_*`, `` `my.db`.t ``), `[[filter.event-filters]]` skip
//! events by kind for the tables their `matcher` names, and
//! `ignore-txn-start-ts` skips whole transactions by commit ts.
//!
//! This module holds the config as written, its checks, and the pattern syntax
//! ([`TablePattern::parse`]), so a pattern that does not parse is refused when
//! the config is validated. Matching tables against the patterns is
//! `sluice_source::filter`'s work.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bounds::{
    MAX_EVENT_FILTERS, MAX_EVENT_MATCHERS, MAX_FILTER_RULES, MAX_IGNORE_EVENTS, MAX_IGNORE_TXNS,
    MAX_PATTERN_CHARS,
};
use crate::error::{ConfigError, invalid};

/// `[filter]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FilterConfig {
    /// Table-filter rules (`schema.table`, each side a wildcard pattern; a
    /// leading `!` excludes). Checked from the last to the first: the first
    /// rule from the bottom that matches a table decides, and a table no rule
    /// matches is not replicated. An empty list means `['*.*']`.
    #[serde(default = "default_rules")]
    pub rules: Vec<String>,
    /// Commit ts of transactions to skip whole (TiCDC's key name; a Sluice
    /// source has no start ts, so the values are commit ts).
    #[serde(default)]
    pub ignore_txn_start_ts: Vec<u64>,
    /// `[[filter.event-filters]]`: events to skip by kind, per table.
    #[serde(default)]
    pub event_filters: Vec<EventFilterRule>,
}

/// One `[[filter.event-filters]]` entry: the events named in `ignore-event`
/// are skipped for the tables `matcher` matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct EventFilterRule {
    /// Table-filter rules, with the same syntax and order as `filter.rules`,
    /// naming the tables this entry applies to.
    pub matcher: Vec<String>,
    /// Events to skip: `all dml`, `insert`, `update`, `delete`, `all ddl` or
    /// one DDL kind ([`DDL_EVENTS`]).
    pub ignore_event: Vec<String>,
}

fn default_rules() -> Vec<String> {
    vec!["*.*".to_string()]
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            rules: default_rules(),
            ignore_txn_start_ts: Vec::new(),
            event_filters: Vec::new(),
        }
    }
}

/// `ignore-event`: every row change.
pub const ALL_DML: &str = "all dml";
/// `ignore-event`: every DDL statement.
pub const ALL_DDL: &str = "all ddl";
/// `ignore-event`: the row changes by kind.
pub const DML_EVENTS: [&str; 3] = ["insert", "update", "delete"];
/// `ignore-event`: the DDL kinds, as `sluice_source::mysql::DdlKind::name`
/// gives them (a test there checks that the two lists agree).
pub const DDL_EVENTS: [&str; 34] = [
    "create database",
    "drop database",
    "alter database",
    "create table",
    "drop table",
    "alter table",
    "rename table",
    "truncate table",
    "create index",
    "drop index",
    "create view",
    "drop view",
    "alter view",
    "add table partition",
    "drop table partition",
    "truncate table partition",
    "exchange table partition",
    "reorganize table partition",
    "coalesce table partition",
    "create sequence",
    "drop sequence",
    "alter sequence",
    "create trigger",
    "drop trigger",
    "create procedure",
    "drop procedure",
    "alter procedure",
    "create function",
    "drop function",
    "alter function",
    "create event",
    "drop event",
    "alter event",
    "remove table partitioning",
];

/// Whether `name` is an event name `ignore-event` accepts.
pub fn is_event_name(name: &str) -> bool {
    name == ALL_DML || name == ALL_DDL || DML_EVENTS.contains(&name) || DDL_EVENTS.contains(&name)
}

/// Every accepted event name, quoted, for error messages.
fn event_names_list() -> String {
    let mut out = String::new();
    let names = [ALL_DML]
        .into_iter()
        .chain(DML_EVENTS)
        .chain([ALL_DDL])
        .chain(DDL_EVENTS);
    for (i, name) in names.enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(out, "{sep}\"{name}\"");
    }
    out
}

impl FilterConfig {
    /// Every pattern parses, every event name is known, every list is within
    /// its bound (pure, no I/O); errors name the key, e.g. `filter.rules[2]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_patterns("filter.rules", &self.rules, MAX_FILTER_RULES)?;
        if self.ignore_txn_start_ts.len() > MAX_IGNORE_TXNS {
            return invalid!(
                "filter.ignore-txn-start-ts lists {} values; at most {MAX_IGNORE_TXNS}",
                self.ignore_txn_start_ts.len()
            );
        }
        if self.event_filters.len() > MAX_EVENT_FILTERS {
            return invalid!(
                "filter.event-filters lists {} entries; at most {MAX_EVENT_FILTERS}",
                self.event_filters.len()
            );
        }
        for (i, rule) in self.event_filters.iter().enumerate() {
            let at = format!("filter.event-filters[{i}]");
            if rule.matcher.is_empty() {
                return invalid!(
                    "{at}.matcher is empty; name the tables this entry applies to, e.g. \
                     matcher = [\"shop.orders\"]"
                );
            }
            check_patterns(&format!("{at}.matcher"), &rule.matcher, MAX_EVENT_MATCHERS)?;
            if rule.ignore_event.is_empty() {
                return invalid!(
                    "{at}.ignore-event is empty; name the events to skip, from {}",
                    event_names_list()
                );
            }
            if rule.ignore_event.len() > MAX_IGNORE_EVENTS {
                return invalid!(
                    "{at}.ignore-event lists {} events; at most {MAX_IGNORE_EVENTS}",
                    rule.ignore_event.len()
                );
            }
            for (j, name) in rule.ignore_event.iter().enumerate() {
                if !is_event_name(name) {
                    return invalid!(
                        "{at}.ignore-event[{j}]: unknown event `{name}`; choose from {}",
                        event_names_list()
                    );
                }
            }
        }
        Ok(())
    }
}

/// The patterns of one list (`filter.rules` or one `matcher`) at `key`: how
/// many, how long, and that each parses.
fn check_patterns(key: &str, patterns: &[String], max: usize) -> Result<(), ConfigError> {
    if patterns.len() > max {
        return invalid!("{key} lists {} patterns; at most {max}", patterns.len());
    }
    for (i, text) in patterns.iter().enumerate() {
        let chars = text.chars().count();
        if chars > MAX_PATTERN_CHARS {
            return invalid!("{key}[{i}] is {chars} characters long; at most {MAX_PATTERN_CHARS}");
        }
        if let Err(e) = TablePattern::parse(text) {
            return invalid!("{key}[{i}]: `{text}` is not a table pattern: {e}");
        }
    }
    Ok(())
}

/// One table-filter rule, parsed: `schema.table`, or `!schema.table` to exclude.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePattern {
    /// Written with a leading `!`: a table it matches is excluded.
    pub exclude: bool,
    /// The schema (database) side.
    pub schema: Wildcard,
    /// The table side.
    pub table: Wildcard,
}

/// One side of a [`TablePattern`]: what a name must look like, piece by piece.
/// A plain or quoted name is all [`Piece::Char`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    /// The pieces, in order; never empty.
    pub pieces: Vec<Piece>,
}

/// One piece of a [`Wildcard`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// This character (written plain, escaped with `\`, or inside quotes).
    Char(char),
    /// `?`: any one character.
    AnyOne,
    /// `*`: any run of characters, the empty one too.
    AnyRun,
    /// `[a-z_]` or `[!0-9]`: one character in (or, negated, not in) the ranges.
    Class {
        /// Written `[!...]`.
        negated: bool,
        /// Inclusive ranges; a single character `c` is `(c, c)`.
        ranges: Vec<(char, char)>,
    },
}

impl Wildcard {
    /// Whether it matches every name: it is made of `*` only.
    pub fn matches_everything(&self) -> bool {
        self.pieces.iter().all(|p| *p == Piece::AnyRun)
    }
}

impl TablePattern {
    /// Parses TiDB's table-filter syntax: `schema.table`, each side either a
    /// wildcard pattern or a quoted name (`` `my.db` `` or `"my.db"`, the quote
    /// doubled inside), with an optional leading `!`. In a wildcard pattern,
    /// `*` is any run of characters, `?` any one, `[a-z]` / `[!a-z]` a class;
    /// letters, digits, `$`, `_` and non-ASCII characters stand for themselves,
    /// and other ASCII punctuation must be escaped with `\` (`db\.x`). Blanks
    /// around the rule are ignored. TiDB's regular expressions (`/.../`), file
    /// imports (`@file`) and comments (`#`) are refused. The error says what is
    /// wrong, without the pattern.
    pub fn parse(text: &str) -> Result<TablePattern, String> {
        let text = text.trim_matches([' ', '\t']);
        let (exclude, rest) = match text.chars().next() {
            None => {
                return Err("it is empty; write schema.table, e.g. shop.orders or shop.*".into());
            }
            Some('#') => {
                return Err(
                    "`#` starts a comment in TiDB's filter files; remove the entry (TOML \
                     comments go outside the string)"
                        .into(),
                );
            }
            Some('@') => {
                return Err(
                    "importing rules from a file (`@file`) is not supported; list the rules here"
                        .into(),
                );
            }
            Some('!') => (true, &text[1..]),
            Some(_) => (false, text),
        };
        let mut at = Cursor { text: rest, at: 0 };
        let schema = parse_side(&mut at, "schema")?;
        match at.bump() {
            Some('.') => {}
            None => {
                return Err("the `.` and the table pattern are missing: write schema.table".into());
            }
            Some(c) => {
                return Err(format!(
                    "expected `.` between the schema and table patterns, found `{c}`"
                ));
            }
        }
        let table = parse_side(&mut at, "table")?;
        if !at.rest().is_empty() {
            return Err(format!(
                "`{}` follows the table pattern; escape a `.` in a name as `\\.` or quote the name in backquotes",
                at.rest()
            ));
        }
        Ok(TablePattern {
            exclude,
            schema,
            table,
        })
    }
}

/// A position in the text being parsed.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }
}

/// Characters that stand for themselves unescaped (MySQL's unquoted identifier
/// characters, as TiDB's table filter takes them).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '$' || c == '_' || !c.is_ascii()
}

/// One side of a rule, up to the `.` or the end.
fn parse_side(at: &mut Cursor<'_>, side: &str) -> Result<Wildcard, String> {
    match at.peek() {
        None | Some('.') => return Err(format!("the {side} pattern is missing")),
        Some('/') => {
            return Err(
                "regular expressions (`/.../`) are not supported; use the wildcards `*`, `?` and \
                 `[a-z]`"
                    .into(),
            );
        }
        Some(q @ ('`' | '"')) => {
            at.bump();
            return parse_quoted(at, q);
        }
        Some(_) => {}
    }
    let mut pieces = Vec::new();
    while let Some(c) = at.peek() {
        if c == '.' {
            break;
        }
        at.bump();
        pieces.push(match c {
            '*' => Piece::AnyRun,
            '?' => Piece::AnyOne,
            '[' => parse_class(at)?,
            '\\' => Piece::Char(escaped(at)?),
            c if is_name_char(c) => Piece::Char(c),
            c => {
                return Err(format!(
                    "`{}` is a special character; escape it with `\\` or quote the name in \
                     backquotes",
                    c.escape_debug()
                ));
            }
        });
    }
    Ok(Wildcard { pieces })
}

/// The character after a `\`: punctuation only (a letter or digit is reserved,
/// as in TiDB).
fn escaped(at: &mut Cursor<'_>) -> Result<char, String> {
    match at.bump() {
        None => Err("`\\` at the end escapes nothing".into()),
        Some(c) if c.is_ascii_alphanumeric() => Err(format!(
            "`\\{c}` is reserved: only punctuation can be escaped"
        )),
        Some(c) => Ok(c),
    }
}

/// A quoted name after its opening quote `q`; `qq` inside is one `q`.
fn parse_quoted(at: &mut Cursor<'_>, q: char) -> Result<Wildcard, String> {
    let mut pieces = Vec::new();
    loop {
        match at.bump() {
            None => return Err(format!("the quoted name has no closing {q}")),
            Some(c) if c == q => {
                if at.peek() == Some(q) {
                    at.bump();
                    pieces.push(Piece::Char(q));
                } else {
                    break;
                }
            }
            Some(c) => pieces.push(Piece::Char(c)),
        }
    }
    if pieces.is_empty() {
        return Err(format!("the quoted name {q}{q} is empty"));
    }
    Ok(Wildcard { pieces })
}

/// A character class after its `[`: `!` first negates; `a-z` is a range; `\`
/// escapes punctuation (`\]`, `\-`); a `-` first or last is itself.
fn parse_class(at: &mut Cursor<'_>) -> Result<Piece, String> {
    let negated = at.peek() == Some('!');
    if negated {
        at.bump();
    }
    let mut ranges = Vec::new();
    loop {
        let lo = match at.bump() {
            None => return Err("the character class `[` has no closing `]`".into()),
            Some(']') if ranges.is_empty() => {
                return Err("the character class is empty; escape a `]` in it as `\\]`".into());
            }
            Some(']') => break,
            Some('\\') => escaped(at)?,
            Some(c) => c,
        };
        let mut ahead = at.rest().chars();
        let hi = match (ahead.next(), ahead.next()) {
            (Some('-'), Some(next)) if next != ']' => {
                at.bump();
                at.bump();
                if next == '\\' { escaped(at)? } else { next }
            }
            _ => lo,
        };
        if lo > hi {
            return Err(format!(
                "the range `{lo}-{hi}` in a character class is reversed; write `{hi}-{lo}`"
            ));
        }
        ranges.push((lo, hi));
    }
    Ok(Piece::Class { negated, ranges })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Wildcard {
        Wildcard {
            pieces: s.chars().map(Piece::Char).collect(),
        }
    }

    #[test]
    fn parses_plain_wildcard_and_quoted_sides() {
        let p = TablePattern::parse("shop.order_?").unwrap();
        assert!(!p.exclude);
        assert_eq!(p.schema, chars("shop"));
        let mut want = chars("order_");
        want.pieces.push(Piece::AnyOne);
        assert_eq!(p.table, want);

        let p = TablePattern::parse("  !*.*\t").unwrap();
        assert!(p.exclude);
        assert!(p.schema.matches_everything() && p.table.matches_everything());

        let p = TablePattern::parse("`my.db`.\"t\"\"x\"").unwrap();
        assert_eq!((p.schema, p.table), (chars("my.db"), chars("t\"x")));
        let p = TablePattern::parse("`a``b`.c").unwrap();
        assert_eq!(p.schema, chars("a`b"));

        let p = TablePattern::parse(r"db\.x.t\-1").unwrap();
        assert_eq!((p.schema, p.table), (chars("db.x"), chars("t-1")));

        let p = TablePattern::parse("dé$_1.表").unwrap();
        assert_eq!((p.schema, p.table), (chars("dé$_1"), chars("表")));
    }

    #[test]
    fn parses_character_classes() {
        let p = TablePattern::parse("db[0-9].t[!a-cx][-.][a-]").unwrap();
        assert_eq!(
            p.schema.pieces[2],
            Piece::Class {
                negated: false,
                ranges: vec![('0', '9')]
            }
        );
        assert_eq!(
            p.table.pieces,
            vec![
                Piece::Char('t'),
                Piece::Class {
                    negated: true,
                    ranges: vec![('a', 'c'), ('x', 'x')]
                },
                Piece::Class {
                    negated: false,
                    ranges: vec![('-', '-'), ('.', '.')]
                },
                Piece::Class {
                    negated: false,
                    ranges: vec![('a', 'a'), ('-', '-')]
                },
            ]
        );
        let p = TablePattern::parse(r"d.[\]\\^]").unwrap();
        assert_eq!(
            p.table.pieces,
            vec![Piece::Class {
                negated: false,
                ranges: vec![(']', ']'), ('\\', '\\'), ('^', '^')]
            }]
        );
    }

    #[test]
    fn refuses_what_is_not_a_pattern_saying_why() {
        for (text, want) in [
            ("", "it is empty"),
            ("   ", "it is empty"),
            ("#shop.*", "`#` starts a comment"),
            ("@rules.txt", "`@file`"),
            ("/^db$/.t", "regular expressions"),
            ("db./t/", "regular expressions"),
            ("shop", "the `.` and the table pattern are missing"),
            ("shop.", "the table pattern is missing"),
            (".t", "the schema pattern is missing"),
            ("!", "the schema pattern is missing"),
            ("a.b.c", "`.c` follows the table pattern"),
            (
                "`a`b.c",
                "expected `.` between the schema and table patterns, found `b`",
            ),
            ("`a.b", "the quoted name has no closing `"),
            ("``.b", "the quoted name `` is empty"),
            ("my-db.t", "`-` is a special character"),
            ("db.t x", "` ` is a special character"),
            ("db.t\\", "`\\` at the end escapes nothing"),
            ("db.\\n", "`\\n` is reserved"),
            ("db.t[0-9", "has no closing `]`"),
            ("db.t[]", "the character class is empty"),
            ("db.t[!]", "the character class is empty"),
            (
                "db.t[z-a]",
                "the range `z-a` in a character class is reversed",
            ),
        ] {
            let err = TablePattern::parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: want `{want}` in: {err}");
        }
    }

    #[test]
    fn the_default_replicates_every_table_and_skips_nothing() {
        let f: FilterConfig = toml::from_str("").unwrap();
        assert_eq!(f, FilterConfig::default());
        assert_eq!(f.rules, ["*.*"]);
        assert!(f.ignore_txn_start_ts.is_empty() && f.event_filters.is_empty());
        f.validate().unwrap();
    }

    #[test]
    fn reads_ticdc_syntax() {
        let f: FilterConfig = toml::from_str(
            r#"
            rules = ['*.*', '!test.*', 'shop.order_?', 'db[0-9].t', '`my.db`.`t`']
            ignore-txn-start-ts = [1, 2]
            [[event-filters]]
            matcher = ["shop.orders", "log.*"]
            ignore-event = ["insert", "delete", "truncate table"]
            [[event-filters]]
            matcher = ["!a.b"]
            ignore-event = ["all dml", "all ddl"]
            "#,
        )
        .unwrap();
        f.validate().unwrap();
        assert_eq!(f.rules.len(), 5);
        assert_eq!(f.ignore_txn_start_ts, [1, 2]);
        assert_eq!(f.event_filters[0].matcher, ["shop.orders", "log.*"]);
        assert_eq!(
            f.event_filters[0].ignore_event,
            ["insert", "delete", "truncate table"]
        );
        let err =
            toml::from_str::<FilterConfig>("[[event-filters]]\nmatcher = []\nignore-sql = []")
                .unwrap_err()
                .to_string();
        assert!(err.contains("unknown field `ignore-sql`"), "{err}");
    }

    #[test]
    fn every_error_names_its_key() {
        let rule = |matcher: &[&str], events: &[&str]| EventFilterRule {
            matcher: matcher.iter().map(|s| s.to_string()).collect(),
            ignore_event: events.iter().map(|s| s.to_string()).collect(),
        };
        let with = |f: &dyn Fn(&mut FilterConfig)| {
            let mut c = FilterConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        let cases = [
            (
                with(&|c| c.rules = vec!["*.*".into(), "!x.*".into(), "a.b.c".into()]),
                "filter.rules[2]: `a.b.c` is not a table pattern: `.c` follows the table pattern",
            ),
            (
                with(&|c| c.rules = vec!["a.*".into(); 257]),
                "filter.rules lists 257 patterns; at most 256",
            ),
            (
                with(&|c| c.rules = vec![format!("a.{}", "b".repeat(255))]),
                "filter.rules[0] is 257 characters long; at most 256",
            ),
            (
                with(&|c| c.ignore_txn_start_ts = vec![7; 10_001]),
                "filter.ignore-txn-start-ts lists 10001 values; at most 10000",
            ),
            (
                with(&|c| c.event_filters = vec![rule(&["a.b"], &["insert"]); 257]),
                "filter.event-filters lists 257 entries; at most 256",
            ),
            (
                with(&|c| {
                    c.event_filters = vec![rule(&["a.b"], &["insert"]), rule(&[], &["insert"])]
                }),
                "filter.event-filters[1].matcher is empty",
            ),
            (
                with(&|c| c.event_filters = vec![rule(&["a.b"; 65], &["insert"])]),
                "filter.event-filters[0].matcher lists 65 patterns; at most 64",
            ),
            (
                with(&|c| c.event_filters = vec![rule(&["a.b", "a-b.c"], &["insert"])]),
                "filter.event-filters[0].matcher[1]: `a-b.c` is not a table pattern: `-` is a \
                 special character",
            ),
            (
                with(&|c| c.event_filters = vec![rule(&["a.b"], &[])]),
                "filter.event-filters[0].ignore-event is empty; name the events to skip, from \
                 \"all dml\", \"insert\"",
            ),
            (
                with(&|c| c.event_filters = vec![rule(&["a.b"], &["insert"; 33])]),
                "filter.event-filters[0].ignore-event lists 33 events; at most 32",
            ),
            (
                with(&|c| c.event_filters = vec![rule(&["a.b"], &["insert", "Upsert"])]),
                "filter.event-filters[0].ignore-event[1]: unknown event `Upsert`; choose from \
                 \"all dml\", \"insert\", \"update\", \"delete\", \"all ddl\", \
                 \"create database\", \"drop database\", \"alter database\", \"create table\", \
                 \"drop table\", \"alter table\", \"rename table\", \"truncate table\", \
                 \"create index\", \"drop index\", \"create view\", \"drop view\", \
                 \"alter view\", \"add table partition\"",
            ),
        ];
        for (err, want) in cases {
            assert!(
                err.starts_with(want),
                "want `{want}` at the start of: {err}"
            );
        }
        // At the bounds, everything passes.
        let mut c = FilterConfig {
            rules: vec![format!("a.{}", "b".repeat(254)); 256],
            ignore_txn_start_ts: vec![1; 10_000],
            event_filters: vec![rule(&["a.b"; 64], &["insert"; 32]); 256],
        };
        c.validate().unwrap();
        c.event_filters[255].ignore_event[31] = "drop view".into();
        c.validate().unwrap();
    }

    proptest::proptest! {
        #[test]
        fn the_parser_never_panics(text in "[!`\"\\\\.*?\\[\\]a-c0-9_-]{0,24}|\\PC{0,40}") {
            let _ = TablePattern::parse(&text);
        }
    }

    #[test]
    fn every_event_name_is_accepted_and_no_other() {
        for name in [ALL_DML, ALL_DDL]
            .into_iter()
            .chain(DML_EVENTS)
            .chain(DDL_EVENTS)
        {
            assert!(is_event_name(name), "{name}");
        }
        for name in [
            "",
            "INSERT",
            "all",
            "alter  table",
            "create schema",
            "all-dml",
        ] {
            assert!(!is_event_name(name), "{name}");
        }
    }
}
