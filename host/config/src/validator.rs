//! `[validator]`: the continuous validator (DM's validator). After the sink
//! acknowledges a flush, it re-reads the downstream rows of the changed keys
//! and compares them with the upstream images; a row that differs is checked
//! again a few times (it may be changing) before it is reported.

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, invalid};
use crate::plugin::PluginConfig;

/// What the validator compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValidatorMode {
    /// No validation.
    #[default]
    None,
    /// Whether each changed row is present (or, deleted, absent) downstream.
    Fast,
    /// Every column of each changed row.
    Full,
}

/// `[validator]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ValidatorConfig {
    /// `none` (default), `fast` or `full`.
    #[serde(default)]
    pub mode: ValidatorMode,
    /// Most rows the validator holds (waiting or re-checked); beyond it new
    /// rows are skipped and counted, never waited for: 1 to 1,000,000.
    #[serde(default = "default_cache")]
    pub event_cache_count: usize,
    /// Checks of a differing row before it is reported: 1 to 100.
    #[serde(default = "default_retries")]
    pub retry_count: u32,
    /// Time between checks, in milliseconds: 100 to 600,000.
    #[serde(default = "default_interval")]
    pub interval_ms: u64,
}

fn default_cache() -> usize {
    10_000
}
fn default_retries() -> u32 {
    3
}
fn default_interval() -> u64 {
    1_000
}

impl Default for ValidatorConfig {
    fn default() -> Self {
        Self {
            mode: ValidatorMode::None,
            event_cache_count: default_cache(),
            retry_count: default_retries(),
            interval_ms: default_interval(),
        }
    }
}

impl ValidatorConfig {
    /// Whether it is the default (not written back out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Every number against its range; a validator needs a sink that writes
    /// to a granted database (`sink.config.database` naming a
    /// `sink.capabilities.sql` grant, as sink-mysql and sink-postgres have).
    pub fn validate<P>(&self, sink: &PluginConfig<P>) -> Result<(), ConfigError> {
        if !(1..=1_000_000).contains(&self.event_cache_count) {
            return invalid!(
                "validator.event-cache-count is {}; it must be between 1 and 1000000",
                self.event_cache_count
            );
        }
        if !(1..=100).contains(&self.retry_count) {
            return invalid!(
                "validator.retry-count is {}; it must be between 1 and 100",
                self.retry_count
            );
        }
        if !(100..=600_000).contains(&self.interval_ms) {
            return invalid!(
                "validator.interval-ms is {}; it must be between 100 and 600000",
                self.interval_ms
            );
        }
        if self.mode != ValidatorMode::None && self.database(sink).is_none() {
            return invalid!(
                "validator.mode is set, but the sink writes to no granted database: the validator \
                 reads the database that sink.config.database names in sink.capabilities.sql \
                 (sink-mysql, sink-postgres)"
            );
        }
        Ok(())
    }

    /// The DSN the validator reads: the grant the sink's `database` names.
    pub fn database<'a, P>(&self, sink: &'a PluginConfig<P>) -> Option<&'a str> {
        let name = sink.config.get("database")?.as_str()?;
        sink.capabilities.sql.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChangefeedFile, Mode};

    fn file(sink_config: &str, validator: &str) -> Result<ChangefeedFile, ConfigError> {
        ChangefeedFile::parse(
            &format!(
                "[changefeed]\nid = \"v\"\n[source]\ntype = \"datagen\"\n\
                 [sink]\nplugin = \"sink-mysql\"\n[sink.config]\n{sink_config}\n\
                 [sink.capabilities.sql]\ntarget = \"mysql://u:pw@127.0.0.1:3306/\"\n\
                 [validator]\n{validator}"
            ),
            Mode::Run,
        )
    }

    #[test]
    fn a_validator_needs_a_granted_database_and_numbers_in_range() {
        let ok = file("database = \"target\"", "mode = \"full\"").unwrap();
        assert_eq!(
            ok.validator.database(&ok.sink),
            Some("mysql://u:pw@127.0.0.1:3306/")
        );
        for (sink, validator, says) in [
            (
                "database = \"other\"",
                "mode = \"fast\"",
                "no granted database",
            ),
            ("", "mode = \"full\"", "no granted database"),
            (
                "database = \"target\"",
                "mode = \"slow\"",
                "unknown variant",
            ),
            (
                "database = \"target\"",
                "event-cache-count = 0",
                "event-cache-count is 0",
            ),
            (
                "database = \"target\"",
                "retry-count = 1000",
                "retry-count is 1000",
            ),
            (
                "database = \"target\"",
                "interval-ms = 5",
                "interval-ms is 5",
            ),
            (
                "database = \"target\"",
                "mode = \"full\"\nextra = 1",
                "unknown field",
            ),
        ] {
            let e = file(sink, validator).unwrap_err().to_string();
            assert!(e.contains(says), "{validator}: {e}");
            assert!(!e.contains("pw@"), "{e}");
        }
        // PostgreSQL DSNs are checked at validation too, never repeated.
        for (dsn, says) in [
            ("postgres://u:pw@127.0.0.1:99999/x", "not a port"),
            (
                "postgres://u:pw@127.0.0.1:5432/x?sslmode=strict",
                "sslmode `strict` is not one of",
            ),
            ("postgresql://u:pw@/x", "names no host"),
        ] {
            let text = format!(
                "[changefeed]\nid = \"v\"\n[source]\ntype = \"datagen\"\n[sink]\nplugin = \"sink-postgres\"\n\
                 [sink.capabilities.sql]\ntarget = \"{dsn}\"\n"
            );
            let e = ChangefeedFile::parse(&text, Mode::Run)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && !e.contains("pw@"), "{dsn}: {e}");
        }
        // Off, nothing is required of the sink.
        assert!(file("database = \"other\"", "mode = \"none\"").is_ok());
    }
}
