use serde::Deserialize;
use sluice_sdk::{Error, Op};

/// `filter-events` options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// The rules; a row is dropped when any rule matches its table and ignores its
    /// kind. Required, at least one.
    pub rules: Vec<Rule>,
}

/// Which events to drop for which tables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Rule {
    /// Glob patterns (`*` any run, `?` one character) on `schema.table`, e.g.
    /// `"app.audit_*"` or `"*.tmp"`. Required, at least one.
    pub matcher: Vec<String>,
    /// The kinds of row change to drop for matching tables: `insert`, `update`,
    /// `delete`, or `all-dml` for all three. Required, at least one.
    pub ignore_event: Vec<Event>,
}

/// A kind of row change a rule can drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// Inserted rows.
    Insert,
    /// Updated rows.
    Update,
    /// Deleted rows.
    Delete,
    /// Inserts, updates and deletes.
    AllDml,
}

impl Event {
    /// Whether a row change of kind `op` is this event.
    pub fn covers(self, op: Op) -> bool {
        match self {
            Event::Insert => op == Op::Insert,
            Event::Update => op == Op::Update,
            Event::Delete => op == Op::Delete,
            Event::AllDml => true,
        }
    }
}

impl Config {
    /// Check the options.
    pub fn validate(&self) -> Result<(), Error> {
        if self.rules.is_empty() {
            return Err(Error::config(
                "rules is empty, so nothing would be dropped; add a rule, e.g. [[filters.config.rules]] matcher = [\"app.audit_*\"] ignore-event = [\"delete\"]",
            ));
        }
        for (n, rule) in self.rules.iter().enumerate() {
            if rule.matcher.is_empty() || rule.matcher.iter().any(|m| m.is_empty()) {
                return Err(Error::config(format!(
                    "rules[{n}].matcher has no patterns or an empty one; give \"schema.table\" globs such as \"app.orders\" or \"app.tmp_*\""
                )));
            }
            if rule.ignore_event.is_empty() {
                return Err(Error::config(format!(
                    "rules[{n}].ignore-event is empty, so the rule drops nothing; list \"insert\", \"update\", \"delete\" or \"all-dml\""
                )));
            }
        }
        Ok(())
    }
}
