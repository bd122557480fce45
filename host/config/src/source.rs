//! `[source]`: which upstream to read, chosen by `type`. Each kind has its
//! settings here (pure data, checked without I/O); the reader that uses them is
//! built in one place, `sluice_source::build`. Adding a kind adds a variant here
//! and an arm there.

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, invalid};
pub use crate::mysql::{MysqlConfig, StartPosition, redact_secrets, redact_url};

/// `[source]`, chosen by `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SourceConfig {
    /// The built-in deterministic data generator.
    Datagen(DatagenConfig),
    /// A MySQL or MariaDB server's binlog.
    Mysql(MysqlConfig),
}

impl<'de> Deserialize<'de> for SourceConfig {
    /// Read by `type`, then as that kind's settings, so that an error names the
    /// key (`source.heartbeat-ms: invalid value: ...`): serde's tagged enums
    /// buffer the table and lose which key a wrong value was under.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let kind = match table.remove("type") {
            Some(serde_json::Value::String(kind)) => kind,
            Some(_) => return Err(D::Error::custom("source.type must be a string")),
            None => {
                return Err(D::Error::custom(
                    "source.type is missing: write type = \"mysql\" or type = \"datagen\"",
                ));
            }
        };
        fn settings<T: serde::de::DeserializeOwned, E: Error>(
            table: serde_json::Map<String, serde_json::Value>,
        ) -> Result<T, E> {
            serde_path_to_error::deserialize(serde_json::Value::Object(table))
                .map_err(|e| E::custom(format!("source.{}: {}", e.path(), e.inner())))
        }
        match kind.as_str() {
            "datagen" => settings(table).map(SourceConfig::Datagen),
            "mysql" => settings(table).map(SourceConfig::Mysql),
            other => Err(D::Error::custom(format!(
                "source.type `{other}` is not a source: write \"mysql\" or \"datagen\""
            ))),
        }
    }
}

impl SourceConfig {
    /// Every number against its range (no I/O); errors name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            SourceConfig::Datagen(d) => d.validate(),
            SourceConfig::Mysql(m) => m.validate(),
        }
    }

    /// How many row changes the source produces before it ends, if it ends.
    pub fn total_rows(&self) -> Option<u64> {
        match self {
            SourceConfig::Datagen(d) => (d.total_rows > 0).then_some(d.total_rows),
            SourceConfig::Mysql(_) => None,
        }
    }
}

/// Weights of the operation mix (they need not sum to anything in particular);
/// each is at most [`MAX_MIX_WEIGHT`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Mix {
    /// Weight of inserts (a new row with the next id of its table).
    pub insert: u32,
    /// Weight of updates of a live row (a new version of its values).
    pub update: u32,
    /// Weight of deletes of a live row.
    pub delete: u32,
}

impl Default for Mix {
    fn default() -> Self {
        Self {
            insert: 6,
            update: 3,
            delete: 1,
        }
    }
}

/// `[source]` with `type = "datagen"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DatagenConfig {
    /// Seed of the generator: same seed, same workload.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Row changes to generate in all; 0 means no end.
    #[serde(default = "default_total")]
    pub total_rows: u64,
    /// Row changes per second; 0 means as fast as the pipeline takes them.
    #[serde(default)]
    pub rate: u64,
    /// Largest number of rows in one transaction (each has 1..=this).
    #[serde(default = "default_txn_rows")]
    pub max_txn_rows: u32,
    /// Which tables to generate (`users`, `orders`, `events`); empty means all.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Operation mix.
    #[serde(default)]
    pub mix: Mix,
    /// Physical time (ms since the Unix epoch) of the first commit ts; fixed so
    /// that output is reproducible.
    #[serde(default = "default_start_ms")]
    pub start_millis: u64,
    /// Database name the tables live in.
    #[serde(default = "default_schema")]
    pub schema: String,
    /// After `total-rows`, stay open with nothing more (an upstream gone
    /// quiet) instead of ending.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_open: bool,
}

fn default_seed() -> u64 {
    42
}
fn default_total() -> u64 {
    10_000
}
fn default_txn_rows() -> u32 {
    4
}
fn default_start_ms() -> u64 {
    1_767_225_600_000 // 2026-01-01T00:00:00Z
}
fn default_schema() -> String {
    "shop".into()
}

impl Default for DatagenConfig {
    fn default() -> Self {
        Self {
            seed: default_seed(),
            total_rows: default_total(),
            rate: 0,
            max_txn_rows: default_txn_rows(),
            tables: Vec::new(),
            mix: Mix::default(),
            start_millis: default_start_ms(),
            schema: default_schema(),
            keep_open: false,
        }
    }
}

/// The tables datagen generates, in table-id order.
pub const DATAGEN_TABLES: [&str; 3] = ["users", "orders", "events"];
/// Largest `max-txn-rows`: one transaction's rows are built in memory at once.
pub const MAX_TXN_ROWS: u32 = 10_000;
/// Largest weight in `[source.mix]`.
pub const MAX_MIX_WEIGHT: u32 = 1_000_000;
/// Largest `rate` (row changes per second).
pub const MAX_RATE: u64 = 100_000_000;
/// Largest `start-millis`: 3000-01-01T00:00:00Z. Commit ts keep their physical part
/// in 46 bits (until the year 4199), so a generator starting here can run for
/// more than a millennium of generated time before it runs out of timestamps.
pub const MAX_START_MILLIS: u64 = 32_503_680_000_000;
/// Longest `schema` name (MySQL's identifier limit).
pub const MAX_SCHEMA_CHARS: usize = 64;

impl DatagenConfig {
    /// Check the settings (no I/O). Every number has a range; the error names the
    /// key (`source.<key>`) and the range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for t in &self.tables {
            if !DATAGEN_TABLES.contains(&t.as_str()) {
                return invalid!(
                    "source.tables: unknown table `{t}`; choose from users, orders, events"
                );
            }
        }
        if self.tables.len() > DATAGEN_TABLES.len() {
            return invalid!(
                "source.tables lists {} names; name each of users, orders, events at most once",
                self.tables.len()
            );
        }
        if !(1..=MAX_TXN_ROWS).contains(&self.max_txn_rows) {
            return invalid!(
                "source.max-txn-rows is {}; it must be between 1 and {MAX_TXN_ROWS}",
                self.max_txn_rows
            );
        }
        if self.mix.insert == 0 {
            return invalid!(
                "source.mix.insert must be above 0 (nothing to update or delete otherwise)"
            );
        }
        for (key, weight) in [
            ("insert", self.mix.insert),
            ("update", self.mix.update),
            ("delete", self.mix.delete),
        ] {
            if weight > MAX_MIX_WEIGHT {
                return invalid!(
                    "source.mix.{key} is {weight}; weights are at most {MAX_MIX_WEIGHT}"
                );
            }
        }
        if self.rate > MAX_RATE {
            return invalid!(
                "source.rate is {} rows/s; at most {MAX_RATE} (0 means as fast as the sink takes them)",
                self.rate
            );
        }
        if self.start_millis > MAX_START_MILLIS {
            return invalid!(
                "source.start-millis is {}; at most {MAX_START_MILLIS} (3000-01-01)",
                self.start_millis
            );
        }
        if self.schema.is_empty()
            || self.schema.chars().count() > MAX_SCHEMA_CHARS
            || self.schema.chars().any(char::is_control)
        {
            return invalid!(
                "source.schema must be 1 to {MAX_SCHEMA_CHARS} characters without control characters"
            );
        }
        Ok(())
    }
}
