//! The table filter: `[filter]` compiled once into what a source asks per
//! table, per row kind, per DDL and per transaction. TiDB's table-filter
//! semantics: names match case-insensitively; rules are checked from the last
//! to the first and the first match decides (`!` excludes); a table no rule
//! matches is not replicated. The syntax is parsed by
//! [`sluice_config::filter::TablePattern`]; matching is here.

use std::collections::HashSet;

use sluice_config::FilterConfig;
use sluice_config::filter::{ALL_DDL, ALL_DML, DDL_EVENTS, DML_EVENTS, Piece, TablePattern};
use sluice_core::{CommitTs, Op};

/// `[filter]`, compiled: which tables a source replicates and which events it
/// skips. Cheap to ask; building it parses every pattern once.
#[derive(Debug, Clone)]
pub struct TableFilter {
    rules: Rules,
    events: Vec<EventRule>,
    txns: HashSet<u64>,
    /// Every table is replicated, whatever `rules` says below it.
    all_tables: bool,
}

impl TableFilter {
    /// Compiles `config`, which should have passed [`FilterConfig::validate`]
    /// (every stored or parsed config has). If it does not, the filter fails
    /// closed, replicating no table, and says so in the log.
    pub fn new(config: &FilterConfig) -> TableFilter {
        match compile(config) {
            Ok(filter) => filter,
            Err(error) => {
                tracing::error!(
                    %error,
                    "The [filter] section does not validate; no table is replicated."
                );
                TableFilter {
                    rules: Rules(Vec::new()),
                    events: Vec::new(),
                    txns: HashSet::new(),
                    all_tables: false,
                }
            }
        }
    }

    /// Whether the filter lets everything through (every table, no event
    /// filter, no skipped transaction), so a source can skip asking.
    pub fn is_default(&self) -> bool {
        self.all_tables && self.events.is_empty() && self.txns.is_empty()
    }

    /// Whether `schema.table` is replicated by `rules`. With `table` empty,
    /// whether DDL of the database `schema` itself is (TiDB's rule for a
    /// schema: `!` rules whose table side is not `*` are passed over).
    pub fn allows_table(&self, schema: &str, table: &str) -> bool {
        self.all_tables || self.rules.matches(schema, table)
    }

    /// Whether a row change of kind `op` in `schema.table` is skipped by an
    /// event filter.
    pub fn ignores_dml(&self, schema: &str, table: &str, op: Op) -> bool {
        let bit = match op {
            Op::Insert => 1 << 0,
            Op::Update => 1 << 1,
            Op::Delete => 1 << 2,
        };
        self.ignores(schema, table, bit)
    }

    /// Whether a DDL statement of kind `kind_name` (`DdlKind::name`, e.g.
    /// `"truncate table"`) on `schema.table` is skipped by an event filter.
    /// For database DDL `table` is empty (a matcher `db.*` matches it). A kind
    /// name not in [`DDL_EVENTS`] is skipped only by `all ddl`.
    pub fn ignores_ddl(&self, schema: &str, table: &str, kind_name: &str) -> bool {
        let bit = match DDL_EVENTS.iter().position(|n| *n == kind_name) {
            Some(i) => 1 << (DML_EVENTS.len() + i),
            None => OTHER_DDL,
        };
        self.ignores(schema, table, bit)
    }

    /// Whether the transaction committed at `commit_ts` is skipped whole
    /// (`ignore-txn-start-ts`).
    pub fn ignores_txn(&self, commit_ts: CommitTs) -> bool {
        !self.txns.is_empty() && self.txns.contains(&commit_ts.get())
    }

    fn ignores(&self, schema: &str, table: &str, bit: u64) -> bool {
        self.events
            .iter()
            .any(|e| e.ignored & bit != 0 && e.matcher.matches(schema, table))
    }
}

/// One `[[filter.event-filters]]` entry: a bit per event kind (the row kinds
/// in [`DML_EVENTS`] order, then the DDL kinds in [`DDL_EVENTS`] order, then
/// [`OTHER_DDL`]).
#[derive(Debug, Clone)]
struct EventRule {
    matcher: Rules,
    ignored: u64,
}

/// The bit of a DDL kind the event filters do not name; only `all ddl` sets it.
const OTHER_DDL: u64 = 1 << 63;
const _: () = assert!(DML_EVENTS.len() + DDL_EVENTS.len() < 63);

fn event_bits(name: &str) -> Option<u64> {
    let dml = (1 << DML_EVENTS.len()) - 1;
    let ddl = ((1 << DDL_EVENTS.len()) - 1) << DML_EVENTS.len();
    if name == ALL_DML {
        return Some(dml);
    }
    if name == ALL_DDL {
        return Some(ddl | OTHER_DDL);
    }
    DML_EVENTS
        .iter()
        .chain(&DDL_EVENTS)
        .position(|n| *n == name)
        .map(|i| 1 << i)
}

fn compile(config: &FilterConfig) -> Result<TableFilter, sluice_config::ConfigError> {
    config.validate()?;
    let invalid = |e: String| sluice_config::ConfigError::Invalid(e);
    let rules = if config.rules.is_empty() {
        Rules::parse(&["*.*".to_string()]).map_err(invalid)?
    } else {
        Rules::parse(&config.rules).map_err(invalid)?
    };
    let all_tables = rules
        .0
        .last()
        .is_some_and(|r| !r.exclude && r.schema.any && r.table.any);
    let mut events = Vec::with_capacity(config.event_filters.len());
    for entry in &config.event_filters {
        let mut ignored = 0;
        for name in &entry.ignore_event {
            ignored |= event_bits(name)
                .ok_or_else(|| invalid(format!("unknown event `{name}` in [filter]")))?;
        }
        events.push(EventRule {
            matcher: Rules::parse(&entry.matcher).map_err(invalid)?,
            ignored,
        });
    }
    Ok(TableFilter {
        rules,
        events,
        txns: config.ignore_txn_start_ts.iter().copied().collect(),
        all_tables,
    })
}

/// A list of compiled rules, in the order written.
#[derive(Debug, Clone)]
struct Rules(Vec<Rule>);

#[derive(Debug, Clone)]
struct Rule {
    exclude: bool,
    schema: Matcher,
    table: Matcher,
}

impl Rules {
    fn parse(patterns: &[String]) -> Result<Rules, String> {
        patterns
            .iter()
            .map(|text| {
                let p = TablePattern::parse(text)?;
                Ok(Rule {
                    exclude: p.exclude,
                    schema: Matcher::new(p.schema.pieces),
                    table: Matcher::new(p.table.pieces),
                })
            })
            .collect::<Result<_, String>>()
            .map(Rules)
    }

    /// TiDB's `MatchTable` (or, with `table` empty, `MatchSchema`): the first
    /// rule from the bottom that matches decides; none matching excludes.
    fn matches(&self, schema: &str, table: &str) -> bool {
        for rule in self.0.iter().rev() {
            if !rule.schema.matches(schema) {
                continue;
            }
            let decides = if table.is_empty() {
                !rule.exclude || rule.table.any
            } else {
                rule.table.matches(table)
            };
            if decides {
                return !rule.exclude;
            }
        }
        false
    }
}

/// One side of a rule, case-folded: literal characters lower-cased once here,
/// names one character at a time as they are matched.
#[derive(Debug, Clone)]
struct Matcher {
    pieces: Vec<Piece>,
    /// Only `*`: matches every name.
    any: bool,
}

impl Matcher {
    fn new(pieces: Vec<Piece>) -> Matcher {
        let pieces: Vec<Piece> = pieces
            .into_iter()
            .map(|p| match p {
                Piece::Char(c) => Piece::Char(fold(c)),
                other => other,
            })
            .collect();
        let any = pieces.iter().all(|p| *p == Piece::AnyRun);
        Matcher { pieces, any }
    }

    /// A wildcard match with one backtracking point (the last `*`), linear in
    /// practice and never recursive.
    fn matches(&self, name: &str) -> bool {
        if self.any {
            return true;
        }
        let pieces = &self.pieces;
        let (mut p, mut n) = (0, 0);
        // After the last `*` seen: the piece following it, and where in the
        // name that piece was tried last.
        let mut star: Option<(usize, usize)> = None;
        loop {
            if let Some(piece) = pieces.get(p) {
                if *piece == Piece::AnyRun {
                    star = Some((p + 1, n));
                    p += 1;
                    continue;
                }
                if let Some(c) = name[n..].chars().next()
                    && one(piece, fold(c))
                {
                    p += 1;
                    n += c.len_utf8();
                    continue;
                }
            } else if n == name.len() {
                return true;
            }
            // A mismatch: let the last `*` take one more character.
            let Some((after, from)) = star else {
                return false;
            };
            let Some(c) = name[from..].chars().next() else {
                return false;
            };
            let from = from + c.len_utf8();
            star = Some((after, from));
            (p, n) = (after, from);
        }
    }
}

/// Whether the one-character `piece` matches `c` (already folded).
fn one(piece: &Piece, c: char) -> bool {
    match piece {
        Piece::Char(want) => *want == c,
        Piece::AnyOne => true,
        Piece::AnyRun => false,
        Piece::Class { negated, ranges } => {
            let has = |c: char| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
            let upper = single(c.to_uppercase()).unwrap_or(c);
            (has(c) || has(upper)) != *negated
        }
    }
}

/// `c` lower-cased when that is one character (Unicode's simple case mapping,
/// as Go's `unicode.ToLower`, which TiDB's filter uses), else `c`.
fn fold(c: char) -> char {
    if c.is_ascii() {
        c.to_ascii_lowercase()
    } else {
        single(c.to_lowercase()).unwrap_or(c)
    }
}

fn single(mut chars: impl Iterator<Item = char>) -> Option<char> {
    match (chars.next(), chars.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use sluice_config::EventFilterRule;

    use super::*;
    use crate::mysql::DdlKind;

    fn filter(rules: &[&str]) -> TableFilter {
        TableFilter::new(&FilterConfig {
            rules: rules.iter().map(|s| s.to_string()).collect(),
            ..FilterConfig::default()
        })
    }

    fn with_events(entries: &[(&[&str], &[&str])]) -> TableFilter {
        TableFilter::new(&FilterConfig {
            event_filters: entries
                .iter()
                .map(|(matcher, events)| EventFilterRule {
                    matcher: matcher.iter().map(|s| s.to_string()).collect(),
                    ignore_event: events.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
            ..FilterConfig::default()
        })
    }

    /// Which of `tables` (`schema.table`) `f` replicates.
    fn allowed<'a>(f: &TableFilter, tables: &[&'a str]) -> Vec<&'a str> {
        tables
            .iter()
            .copied()
            .filter(|t| {
                let (s, t) = t.split_once('.').unwrap();
                f.allows_table(s, t)
            })
            .collect()
    }

    #[test]
    fn the_event_names_are_the_ddl_kinds_names() {
        assert_eq!(DdlKind::ALL.map(DdlKind::name), DDL_EVENTS);
        // And each kind reaches its own bit: ignoring one skips that one only.
        for kind in DdlKind::ALL {
            let f = with_events(&[(&["*.*"], &[kind.name()])]);
            for other in DdlKind::ALL {
                assert_eq!(f.ignores_ddl("d", "t", other.name()), other == kind);
            }
            assert!(!f.ignores_dml("d", "t", Op::Insert));
        }
    }

    #[test]
    fn the_default_replicates_every_table_and_skips_nothing() {
        for f in [TableFilter::new(&FilterConfig::default()), filter(&[])] {
            assert!(f.is_default());
            assert!(f.allows_table("any", "thing"));
            assert!(f.allows_table("Any", ""));
            assert!(!f.ignores_dml("a", "b", Op::Delete));
            assert!(!f.ignores_ddl("a", "", "drop database"));
            assert!(!f.ignores_txn(CommitTs::new(1)));
        }
        // `*.*` last decides for every table, whatever comes before it.
        assert!(filter(&["!a.*", "*.*"]).is_default());
        for f in [
            filter(&["*.*", "!a.*"]),
            filter(&["a.*"]),
            with_events(&[(&["a.b"], &["insert"])]),
            TableFilter::new(&FilterConfig {
                ignore_txn_start_ts: vec![9],
                ..FilterConfig::default()
            }),
        ] {
            assert!(!f.is_default());
        }
    }

    #[test]
    fn the_last_matching_rule_decides_and_no_match_excludes() {
        // TiDB's example: rule 1 accepts, rule 2 rejects, rule 3 accepts again.
        let f = filter(&["employees.*", "!*.dep*", "*.departments"]);
        assert_eq!(
            allowed(
                &f,
                &[
                    "irrelevant.table",
                    "employees.employees",
                    "employees.dept_emp",
                    "employees.departments",
                    "else.departments",
                ]
            ),
            [
                "employees.employees",
                "employees.departments",
                "else.departments"
            ]
        );
        // Reversed, the exclusion comes last and wins.
        let f = filter(&["*.departments", "!*.dep*", "employees.*"]);
        assert_eq!(
            allowed(&f, &["employees.dept_emp", "else.departments", "x.y"]),
            ["employees.dept_emp"]
        );
    }

    #[test]
    fn exclusions_need_an_inclusion_before_them() {
        let f = filter(&["!test.*"]);
        assert_eq!(allowed(&f, &["test.a", "shop.orders"]), Vec::<&str>::new());
        let f = filter(&["*.*", "!test.*", "!*.tmp_?"]);
        assert_eq!(
            allowed(
                &f,
                &[
                    "test.a",
                    "shop.orders",
                    "shop.tmp_1",
                    "shop.tmp_10",
                    "shop.tmp_"
                ]
            ),
            ["shop.orders", "shop.tmp_10", "shop.tmp_"]
        );
    }

    #[test]
    fn wildcards_and_classes_match_whole_names() {
        let f = filter(&[
            "shop.order_?",
            "db[0-9].t",
            "x.[!a-c]*",
            "y.*_log",
            "z.a*b*c",
        ]);
        assert_eq!(
            allowed(
                &f,
                &[
                    "shop.order_1",
                    "shop.order_",
                    "shop.order_12",
                    "shop.orders",
                    "db7.t",
                    "db.t",
                    "db10.t",
                    "db7.tt",
                    "x.dog",
                    "x.cat",
                    "y._log",
                    "y.app_log",
                    "y.app_log2",
                    "z.abc",
                    "z.aXbYc",
                    "z.abcbc",
                    "z.acb",
                ]
            ),
            [
                "shop.order_1",
                "db7.t",
                "x.dog",
                "y._log",
                "y.app_log",
                "z.abc",
                "z.aXbYc",
                "z.abcbc"
            ]
        );
        // A `.` in a name: escaped, quoted, or in a class.
        let f = filter(&[r"a\.b.c", "`my.db`.`t*`", "q.x[.]y"]);
        for (schema, table, allowed) in [
            ("a.b", "c", true),
            ("a", "b.c", false),
            ("axb", "c", false),
            ("my.db", "t*", true),
            ("my.db", "tt", false),
            ("q", "x.y", true),
            ("q", "xzy", false),
        ] {
            assert_eq!(f.allows_table(schema, table), allowed, "{schema} {table}");
        }
    }

    #[test]
    fn names_match_whatever_their_case() {
        let f = filter(&["Shop.ORDERS", "logs.[A-C]x", "ÉTÉ.*"]);
        assert_eq!(
            allowed(
                &f,
                &[
                    "shop.orders",
                    "SHOP.Orders",
                    "logs.bx",
                    "logs.BX",
                    "logs.dx",
                    "été.t",
                    "ÉtÉ.T"
                ]
            ),
            [
                "shop.orders",
                "SHOP.Orders",
                "logs.bx",
                "logs.BX",
                "été.t",
                "ÉtÉ.T"
            ]
        );
        let f = filter(&["*.*", "![!a-z].*"]);
        assert_eq!(allowed(&f, &["A.t", "1.t"]), ["A.t"]);
    }

    #[test]
    fn database_ddl_follows_tidbs_schema_rule() {
        let f = filter(&["shop.orders"]);
        assert!(f.allows_table("shop", ""));
        assert!(!f.allows_table("other", ""));
        let f = filter(&["shop.orders", "!shop.tmp"]);
        assert!(
            f.allows_table("shop", ""),
            "a `!` rule naming one table passes over"
        );
        let f = filter(&["shop.orders", "!shop.*"]);
        assert!(!f.allows_table("shop", ""));
        assert!(!f.allows_table("shop", "orders"));
    }

    #[test]
    fn event_filters_skip_row_kinds_for_their_tables() {
        let f = with_events(&[
            (&["shop.orders", "log.*"], &["insert", "delete"]),
            (&["audit.*", "!audit.keep"], &["all dml"]),
        ]);
        assert!(!f.is_default());
        let skipped = |s, t| {
            [Op::Insert, Op::Update, Op::Delete]
                .into_iter()
                .filter(|op| f.ignores_dml(s, t, *op))
                .collect::<Vec<_>>()
        };
        assert_eq!(skipped("shop", "orders"), [Op::Insert, Op::Delete]);
        assert_eq!(skipped("SHOP", "Orders"), [Op::Insert, Op::Delete]);
        assert_eq!(skipped("log", "x"), [Op::Insert, Op::Delete]);
        assert_eq!(skipped("shop", "users"), Vec::<Op>::new());
        assert_eq!(skipped("audit", "a"), [Op::Insert, Op::Update, Op::Delete]);
        assert_eq!(skipped("audit", "keep"), Vec::<Op>::new());
        // Event filters skip events; they do not change which tables are replicated.
        assert!(f.allows_table("shop", "orders"));
        assert!(!f.ignores_ddl("shop", "orders", "truncate table"));
    }

    #[test]
    fn event_filters_skip_ddl_kinds_for_their_tables_and_databases() {
        let f = with_events(&[
            (&["shop.orders"], &["truncate table", "drop table"]),
            (&["log.*"], &["all ddl"]),
            (&["tmp.*"], &["drop database"]),
        ]);
        assert!(f.ignores_ddl("shop", "orders", "truncate table"));
        assert!(f.ignores_ddl("shop", "orders", "drop table"));
        assert!(!f.ignores_ddl("shop", "orders", "alter table"));
        assert!(!f.ignores_ddl("shop", "users", "truncate table"));
        for kind in DdlKind::ALL {
            assert!(f.ignores_ddl("log", "t", kind.name()));
        }
        assert!(f.ignores_ddl("log", "t", "a kind from later"));
        assert!(!f.ignores_ddl("shop", "orders", "a kind from later"));
        // Database DDL: the table is empty, and `db.*` names the database.
        assert!(f.ignores_ddl("tmp", "", "drop database"));
        assert!(f.ignores_ddl("log", "", "create database"));
        assert!(!f.ignores_ddl("tmp", "", "create database"));
        assert!(!f.ignores_ddl("other", "", "drop database"));
        assert!(!f.ignores_dml("log", "t", Op::Insert));
    }

    #[test]
    fn transactions_are_skipped_by_commit_ts() {
        let f = TableFilter::new(&FilterConfig {
            ignore_txn_start_ts: vec![5, 7, 1 << 40],
            ..FilterConfig::default()
        });
        let skipped: Vec<u64> = [4, 5, 6, 7, 1 << 40]
            .into_iter()
            .filter(|ts| f.ignores_txn(CommitTs::new(*ts)))
            .collect();
        assert_eq!(skipped, [5, 7, 1 << 40]);
        assert!(f.allows_table("a", "b"));
    }

    #[test]
    fn a_config_that_does_not_validate_replicates_nothing() {
        for f in [
            filter(&["*.*", "not a pattern"]),
            with_events(&[(&["a.b"], &["upsert"])]),
        ] {
            assert!(!f.is_default());
            assert!(!f.allows_table("a", "b"));
        }
    }

    /// The obvious recursive matcher, to check the backtracking one against.
    fn reference(pieces: &[Piece], name: &[char]) -> bool {
        match pieces.split_first() {
            None => name.is_empty(),
            Some((Piece::AnyRun, rest)) => {
                (0..=name.len()).any(|skip| reference(rest, &name[skip..]))
            }
            Some((piece, rest)) => {
                !name.is_empty() && one(piece, fold(name[0])) && reference(rest, &name[1..])
            }
        }
    }

    proptest::proptest! {
        /// The backtracking matcher agrees with the recursive one.
        #[test]
        fn wildcards_match_as_the_reference_does(
            pattern in "[abAB*?]{1,8}|[ab*]{0,3}\\[!?[a-b]{1,2}\\][ab*?]{0,3}",
            name in "[abcAB]{0,10}",
        ) {
            let p = TablePattern::parse(&format!("s.{pattern}")).unwrap();
            let m = Matcher::new(p.table.pieces);
            let chars: Vec<char> = name.chars().collect();
            proptest::prop_assert_eq!(m.matches(&name), reference(&m.pieces, &chars));
        }

        /// A plain name matches itself in any case, and `*`-patterns built
        /// from its pieces match it.
        #[test]
        fn names_match_themselves(name in "[a-zA-Z0-9_$é]{1,12}", cut in 0usize..12) {
            let lower = name.to_lowercase();
            let f = filter(&[&format!("{lower}.{name}")]);
            proptest::prop_assert!(f.allows_table(&name.to_uppercase(), &name));
            let chars: Vec<char> = name.chars().collect();
            let cut = cut.min(chars.len());
            let head: String = chars[..cut].iter().collect();
            let tail: String = chars[cut..].iter().collect();
            let f = filter(&[&format!("*.{head}*"), &format!("!x.*{tail}")]);
            proptest::prop_assert!(f.allows_table("s", &name));
            proptest::prop_assert!(!f.allows_table("x", &name));
        }
    }
}
