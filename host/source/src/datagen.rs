//! A deterministic data generator: the same seed and settings always produce the
//! same transactions, rows, values and commit timestamps.

use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::Deserialize;
use sluice_core::{
    Column, ColumnType, CommitTs, Op, ResolvedTs, RowChange, Source, SourceEvent, TableSchema,
    Transaction, Value,
};

/// Weights of the operation mix (they need not sum to anything in particular);
/// each is at most 1,000,000.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Mix {
    pub insert: u32,
    pub update: u32,
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
#[derive(Debug, Clone, Deserialize, PartialEq)]
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
        }
    }
}

/// Bad datagen settings.
#[derive(Debug, thiserror::Error)]
pub enum DatagenError {
    #[error("datagen: unknown table `{0}`; choose from users, orders, events")]
    UnknownTable(String),
    #[error("datagen: {0}")]
    Invalid(String),
    #[error(
        "datagen ran out of commit timestamps (their physical part reached the year 4199); \
         lower start-millis or set total-rows"
    )]
    Exhausted,
}

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
/// Live rows a table keeps for updates and deletes; at this many, the generator
/// deletes instead of inserting, so that an endless run has bounded memory.
pub const MAX_LIVE_ROWS: usize = 100_000;
/// The largest physical part a commit ts can hold (46 bits of milliseconds).
const MAX_PHYSICAL_MILLIS: u64 = (1 << 46) - 1;
/// Transactions skipped (on a resume) between two yields to the async runtime, so
/// that a long skip can be cancelled and does not hold a worker.
const SKIP_YIELD_EVERY: u32 = 256;

impl DatagenConfig {
    /// Check the settings (no I/O). Every number has a range; the error names the
    /// key and the range.
    pub fn validate(&self) -> Result<(), DatagenError> {
        let invalid = |m: String| Err(DatagenError::Invalid(m));
        for t in &self.tables {
            if !TABLES.contains(&t.as_str()) {
                return Err(DatagenError::UnknownTable(t.clone()));
            }
        }
        if self.tables.len() > TABLES.len() {
            return invalid(format!(
                "tables lists {} names; name each of users, orders, events at most once",
                self.tables.len()
            ));
        }
        if !(1..=MAX_TXN_ROWS).contains(&self.max_txn_rows) {
            return invalid(format!(
                "max-txn-rows is {}; it must be between 1 and {MAX_TXN_ROWS}",
                self.max_txn_rows
            ));
        }
        if self.mix.insert == 0 {
            return invalid(
                "mix.insert must be above 0 (nothing to update or delete otherwise)".into(),
            );
        }
        for (key, weight) in [
            ("insert", self.mix.insert),
            ("update", self.mix.update),
            ("delete", self.mix.delete),
        ] {
            if weight > MAX_MIX_WEIGHT {
                return invalid(format!(
                    "mix.{key} is {weight}; weights are at most {MAX_MIX_WEIGHT}"
                ));
            }
        }
        if self.rate > MAX_RATE {
            return invalid(format!(
                "rate is {} rows/s; at most {MAX_RATE} (0 means as fast as the sink takes them)",
                self.rate
            ));
        }
        if self.start_millis > MAX_START_MILLIS {
            return invalid(format!(
                "start-millis is {}; at most {MAX_START_MILLIS} (3000-01-01)",
                self.start_millis
            ));
        }
        if self.schema.is_empty()
            || self.schema.chars().count() > MAX_SCHEMA_CHARS
            || self.schema.chars().any(char::is_control)
        {
            return invalid(format!(
                "schema must be 1 to {MAX_SCHEMA_CHARS} characters without control characters"
            ));
        }
        Ok(())
    }
}

const TABLES: [&str; 3] = ["users", "orders", "events"];

fn col(name: &str, ty: ColumnType, sql_type: &str, key: bool) -> Column {
    Column {
        name: name.into(),
        ty,
        sql_type: sql_type.into(),
        nullable: !key,
        key,
    }
}

/// The schemas datagen produces, with table ids 1, 2, 3.
pub fn schemas(schema_name: &str) -> Vec<Arc<TableSchema>> {
    use ColumnType::*;
    let t = |id: u32, name: &str, columns: Vec<Column>| {
        Arc::new(TableSchema {
            table_id: id,
            version: 1,
            schema_name: schema_name.into(),
            table_name: name.into(),
            columns,
        })
    };
    vec![
        t(
            1,
            "users",
            vec![
                col("id", Int, "bigint", true),
                col("name", Text, "varchar(64)", false),
                col("email", Text, "varchar(128)", false),
                col("balance", Decimal, "decimal(12,2)", false),
                col("created_at", Datetime, "datetime(6)", false),
                col("profile", Json, "json", false),
                col("avatar", Blob, "blob", false),
                col("version", Int, "int", false),
            ],
        ),
        t(
            2,
            "orders",
            vec![
                col("id", Uint, "bigint unsigned", true),
                col("user_id", Int, "bigint", false),
                col("amount", Float, "double", false),
                col("status", Text, "varchar(16)", false),
                col("note", Text, "text", false),
                col("ordered_on", Date, "date", false),
                col("version", Int, "int", false),
            ],
        ),
        t(
            3,
            "events",
            vec![
                col("id", Int, "bigint", true),
                col("kind", Uint, "tinyint unsigned", false),
                col("payload", Json, "json", false),
                col("happened_at", Datetime, "datetime(6)", false),
                col("flagged", Boolean, "tinyint(1)", false),
                col("version", Int, "int", false),
            ],
        ),
    ]
}

struct TableState {
    schema: Arc<TableSchema>,
    next_id: i64,
    /// Live rows (key -> current image), in insertion order for deterministic picks.
    live: Vec<Vec<Value>>,
}

/// Generates transactions from a seed. Implements [`Source`].
pub struct DatagenSource {
    config: DatagenConfig,
    rng: ChaCha8Rng,
    tables: Vec<TableState>,
    emitted_rows: u64,
    next_ts: CommitTs,
    skip_until: CommitTs,
    pending_resolved: Option<ResolvedTs>,
    /// When the first row was emitted, and how many were generated before it.
    started: Option<(tokio::time::Instant, u64)>,
    ended: bool,
    /// Commit ts ran out (46 bits of milliseconds): the next event is an error.
    exhausted: bool,
    /// [`MAX_LIVE_ROWS`], lower in tests.
    max_live_rows: usize,
}

const FIRST: [&str; 8] = [
    "ada", "grace", "alan", "edsger", "barbara", "ken", "linus", "margaret",
];
const LAST: [&str; 6] = [
    "lovelace", "hopper", "turing", "dijkstra", "liskov", "o'neil",
];
const STATUS: [&str; 4] = ["new", "paid", "shipped", "cancelled"];

impl DatagenSource {
    /// A generator for `config` (validated).
    pub fn new(config: DatagenConfig) -> Result<Self, DatagenError> {
        config.validate()?;
        let tables = schemas(&config.schema)
            .into_iter()
            .filter(|s| {
                config.tables.is_empty() || config.tables.iter().any(|t| *t == s.table_name)
            })
            .map(|schema| TableState {
                schema,
                next_id: 1,
                live: Vec::new(),
            })
            .collect();
        Ok(Self {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            next_ts: CommitTs::compose(config.start_millis, 0),
            tables,
            config,
            emitted_rows: 0,
            skip_until: CommitTs::ZERO,
            pending_resolved: None,
            started: None,
            ended: false,
            exhausted: false,
            max_live_rows: MAX_LIVE_ROWS,
        })
    }

    /// Starts generated time after `ts` if `ts` is later than `start-millis`: a
    /// changefeed created with a start ts beyond the generator's first commit
    /// gets rows committed after it at once, instead of a generator that first
    /// produces (and skips) every transaction up to it. Call it with the
    /// changefeed's start ts, which never changes, so that a resume regenerates
    /// exactly the same workload.
    pub fn begin_after(mut self, ts: CommitTs) -> Self {
        if ts.physical_millis() >= self.next_ts.physical_millis() {
            let millis = ts.physical_millis().saturating_add(1);
            if millis > MAX_PHYSICAL_MILLIS {
                self.exhausted = true;
            } else {
                self.next_ts = CommitTs::compose(millis, 0);
            }
        }
        self
    }

    /// The schemas of the generated tables.
    pub fn schemas(&self) -> Vec<Arc<TableSchema>> {
        self.tables.iter().map(|t| t.schema.clone()).collect()
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.rng.next_u64() % n }
    }

    fn text(&mut self, from: &[&str]) -> String {
        from[self.below(from.len() as u64) as usize].to_string()
    }

    fn image(&mut self, table: usize, id: i64, version: i64) -> Vec<Value> {
        let ms = self.next_ts.physical_millis() as i64;
        match self.tables[table].schema.table_name.as_str() {
            "users" => {
                let first = self.text(&FIRST);
                let last = self.text(&LAST);
                let cents = self.below(10_000_000) as i64;
                let with_profile = self.below(5) != 0;
                let avatar_len = self.below(48) as usize;
                let avatar: Vec<u8> = (0..avatar_len).map(|_| self.rng.next_u64() as u8).collect();
                vec![
                    Value::Int(id),
                    Value::Bytes(format!("{first} {last}").into_bytes()),
                    Value::Bytes(format!("{first}.{last}{id}@example.com").into_bytes()),
                    Value::Bytes(format!("{}.{:02}", cents / 100, cents % 100).into_bytes()),
                    Value::Int(ms * 1000 + self.below(1000) as i64),
                    if with_profile {
                        Value::Bytes(
                            format!(
                                r#"{{"tier":{},"tags":["{}","{}"]}}"#,
                                self.below(4),
                                first,
                                last
                            )
                            .into_bytes(),
                        )
                    } else {
                        Value::Null
                    },
                    Value::Bytes(avatar),
                    Value::Int(version),
                ]
            }
            "orders" => {
                let user = 1 + self.below(1000) as i64;
                let amount = self.below(1_000_000) as f64 / 100.0;
                let status = self.text(&STATUS);
                let note = if self.below(3) == 0 {
                    Value::Null
                } else {
                    Value::Bytes(
                        format!("deliver \"fast\", line {}\nthanks", self.below(100)).into_bytes(),
                    )
                };
                vec![
                    Value::UInt(id as u64),
                    Value::Int(user),
                    Value::Float(amount),
                    Value::Bytes(status.into_bytes()),
                    note,
                    Value::Int(ms / 86_400_000 - self.below(30) as i64),
                    Value::Int(version),
                ]
            }
            _ => {
                let kind = self.below(256);
                vec![
                    Value::Int(id),
                    Value::UInt(kind),
                    Value::Bytes(
                        format!(r#"{{"kind":{kind},"seq":{id},"msg":"ev\u00e9nement {id}"}}"#)
                            .into_bytes(),
                    ),
                    Value::Int(ms * 1000),
                    Value::Int((self.below(2)) as i64),
                    Value::Int(version),
                ]
            }
        }
    }

    fn row(&mut self) -> RowChange {
        let table = self.below(self.tables.len() as u64) as usize;
        let (insert, update, delete) = (
            u64::from(self.config.mix.insert),
            u64::from(self.config.mix.update),
            u64::from(self.config.mix.delete),
        );
        let live = self.tables[table].live.len() as u64;
        let total = insert + if live > 0 { update + delete } else { 0 };
        let mut pick = self.below(total);
        // A full table deletes instead of inserting: memory stays bounded.
        if pick < insert && live as usize >= self.max_live_rows {
            pick = insert + update;
        }
        let schema = self.tables[table].schema.clone();
        if pick < insert {
            let id = self.tables[table].next_id;
            self.tables[table].next_id += 1;
            let after = self.image(table, id, 1);
            self.tables[table].live.push(after.clone());
            RowChange {
                table: schema,
                op: Op::Insert,
                before: None,
                after: Some(after),
            }
        } else if pick < insert + update {
            let pos = self.below(live) as usize;
            let before = self.tables[table].live[pos].clone();
            let id = match before[0] {
                Value::Int(x) => x,
                Value::UInt(x) => x as i64,
                _ => unreachable!("keys are integers"),
            };
            let version = match before.last() {
                Some(Value::Int(v)) => *v + 1,
                _ => 1,
            };
            let after = self.image(table, id, version);
            self.tables[table].live[pos] = after.clone();
            RowChange {
                table: schema,
                op: Op::Update,
                before: Some(before),
                after: Some(after),
            }
        } else {
            let pos = self.below(live) as usize;
            let before = self.tables[table].live.swap_remove(pos);
            RowChange {
                table: schema,
                op: Op::Delete,
                before: Some(before),
                after: None,
            }
        }
    }

    /// The next transaction, or `None` when the total is reached (or commit ts
    /// ran out: see [`Source::next_event`]).
    pub fn next_transaction(&mut self) -> Option<Transaction> {
        if self.exhausted
            || (self.config.total_rows > 0 && self.emitted_rows >= self.config.total_rows)
        {
            return None;
        }
        let mut n = 1 + self.below(self.config.max_txn_rows as u64);
        if self.config.total_rows > 0 {
            n = n.min(self.config.total_rows - self.emitted_rows);
        }
        let commit_ts = self.next_ts;
        let rows = (0..n).map(|_| self.row()).collect();
        self.emitted_rows += n;
        // Advance 1..=3 ms per transaction, logical part for a little variety.
        let step = 1 + self.below(3);
        let logical = self.below(4);
        let millis = commit_ts.physical_millis() + step;
        if millis > MAX_PHYSICAL_MILLIS {
            self.exhausted = true;
        } else {
            self.next_ts = CommitTs::compose(millis, logical);
        }
        Some(Transaction { commit_ts, rows })
    }
}

impl Source for DatagenSource {
    type Error = DatagenError;

    async fn next_event(&mut self) -> Result<SourceEvent, DatagenError> {
        if let Some(r) = self.pending_resolved.take() {
            return Ok(SourceEvent::Resolved(r));
        }
        if self.ended {
            return Ok(SourceEvent::End);
        }
        let mut skipped = 0u32;
        loop {
            if self.exhausted {
                self.ended = true;
                return Err(DatagenError::Exhausted);
            }
            let Some(txn) = self.next_transaction() else {
                if self.exhausted {
                    continue;
                }
                self.ended = true;
                return Ok(SourceEvent::End);
            };
            if txn.commit_ts <= self.skip_until {
                skipped += 1;
                if skipped.is_multiple_of(SKIP_YIELD_EVERY) {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            if self.config.rate > 0 {
                // Pace the rows emitted since the first one, not those skipped on resume.
                let first = self.emitted_rows - txn.rows.len() as u64;
                let (started, base) = *self
                    .started
                    .get_or_insert_with(|| (tokio::time::Instant::now(), first));
                let paced = (self.emitted_rows - base) as f64 / self.config.rate as f64;
                tokio::time::sleep_until(started + Duration::from_secs_f64(paced)).await;
            }
            // The next transaction has a larger ts, so this one is resolved.
            self.pending_resolved = Some(ResolvedTs::from(txn.commit_ts));
            return Ok(SourceEvent::Transaction(txn));
        }
    }

    fn start_after(&mut self, ts: CommitTs) {
        self.skip_until = ts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(config: DatagenConfig) -> Vec<Transaction> {
        let mut g = DatagenSource::new(config).unwrap();
        std::iter::from_fn(|| g.next_transaction()).collect()
    }

    #[test]
    fn same_seed_same_workload() {
        let a = drain(DatagenConfig {
            total_rows: 500,
            ..Default::default()
        });
        let b = drain(DatagenConfig {
            total_rows: 500,
            ..Default::default()
        });
        assert_eq!(a, b);
        assert_eq!(a.iter().map(|t| t.rows.len()).sum::<usize>(), 500);
        let c = drain(DatagenConfig {
            total_rows: 500,
            seed: 7,
            ..Default::default()
        });
        assert_ne!(a, c);
    }

    #[test]
    fn commit_ts_strictly_increases_and_ops_are_consistent() {
        let txns = drain(DatagenConfig {
            total_rows: 2000,
            ..Default::default()
        });
        assert!(txns.windows(2).all(|w| w[0].commit_ts < w[1].commit_ts));
        let mut live = std::collections::HashSet::new();
        let mut ops = [0usize; 3];
        for row in txns.iter().flat_map(|t| &t.rows) {
            let key =
                |img: &Option<Vec<Value>>| (row.table.table_id, img.as_ref().unwrap()[0].clone());
            match row.op {
                Op::Insert => assert!(live.insert(format!("{:?}", key(&row.after)))),
                Op::Update => assert!(live.contains(&format!("{:?}", key(&row.before)))),
                Op::Delete => assert!(live.remove(&format!("{:?}", key(&row.before)))),
            }
            ops[row.op.code() as usize] += 1;
            for image in [&row.before, &row.after].into_iter().flatten() {
                assert_eq!(image.len(), row.table.columns.len());
            }
        }
        assert!(ops.iter().all(|&n| n > 100), "{ops:?}");
    }

    #[test]
    fn every_number_has_a_range() {
        let bad = [
            (
                DatagenConfig {
                    max_txn_rows: u32::MAX,
                    total_rows: 0,
                    ..Default::default()
                },
                "max-txn-rows is 4294967295; it must be between 1 and 10000",
            ),
            (
                DatagenConfig {
                    mix: Mix {
                        insert: u32::MAX,
                        update: u32::MAX,
                        delete: 1,
                    },
                    ..Default::default()
                },
                "mix.insert is 4294967295; weights are at most 1000000",
            ),
            (
                DatagenConfig {
                    start_millis: 1 << 46,
                    ..Default::default()
                },
                "start-millis is 70368744177664; at most",
            ),
            (
                DatagenConfig {
                    rate: u64::MAX,
                    ..Default::default()
                },
                "rate is 18446744073709551615 rows/s",
            ),
            (
                DatagenConfig {
                    schema: String::new(),
                    ..Default::default()
                },
                "schema must be 1 to 64 characters",
            ),
        ];
        for (config, want) in bad {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(want), "want `{want}` in `{err}`");
        }
        // The largest accepted values work: the weights do not overflow.
        let txns = drain(DatagenConfig {
            total_rows: 300,
            max_txn_rows: MAX_TXN_ROWS,
            mix: Mix {
                insert: MAX_MIX_WEIGHT,
                update: MAX_MIX_WEIGHT,
                delete: MAX_MIX_WEIGHT,
            },
            start_millis: MAX_START_MILLIS,
            ..Default::default()
        });
        assert_eq!(txns.iter().map(|t| t.rows.len()).sum::<usize>(), 300);
        assert!(txns.windows(2).all(|w| w[0].commit_ts < w[1].commit_ts));
    }

    #[test]
    fn commit_ts_never_wraps_it_ends_with_an_error() {
        let mut g = DatagenSource::new(DatagenConfig {
            total_rows: 0,
            ..Default::default()
        })
        .unwrap();
        g.next_ts = CommitTs::compose(MAX_PHYSICAL_MILLIS - 5, 0);
        let txns: Vec<_> = std::iter::from_fn(|| g.next_transaction()).collect();
        assert!(!txns.is_empty() && txns.len() <= 6, "{}", txns.len());
        assert!(txns.windows(2).all(|w| w[0].commit_ts < w[1].commit_ts));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut events = Vec::new();
        let mut g = DatagenSource::new(DatagenConfig {
            total_rows: 0,
            ..Default::default()
        })
        .unwrap();
        g.next_ts = CommitTs::compose(MAX_PHYSICAL_MILLIS - 5, 0);
        let err = rt.block_on(async {
            loop {
                match g.next_event().await {
                    Ok(e) => events.push(e),
                    Err(e) => break e,
                }
            }
        });
        assert!(matches!(err, DatagenError::Exhausted), "{err}");
        assert!(events.len() >= 2);
    }

    #[test]
    fn an_endless_run_keeps_a_bounded_live_set() {
        let mut g = DatagenSource::new(DatagenConfig {
            total_rows: 0,
            mix: Mix {
                insert: 1,
                update: 0,
                delete: 0,
            },
            ..Default::default()
        })
        .unwrap();
        g.max_live_rows = 50;
        let mut ops = [0usize; 3];
        for _ in 0..2_000 {
            let txn = g.next_transaction().unwrap();
            for row in &txn.rows {
                ops[row.op.code() as usize] += 1;
            }
        }
        assert!(g.tables.iter().all(|t| t.live.len() <= 50));
        assert!(ops[Op::Delete.code() as usize] > 1_000, "{ops:?}");
    }

    #[test]
    fn a_start_ts_past_the_generator_starts_generated_time_after_it() {
        let start = CommitTs::compose(default_start_ms() + 86_400_000 * 365, 7);
        let mut g = DatagenSource::new(DatagenConfig {
            total_rows: 10,
            ..Default::default()
        })
        .unwrap()
        .begin_after(start);
        let first = g.next_transaction().unwrap();
        assert!(first.commit_ts > start);
        // An earlier start ts changes nothing.
        let a = drain(DatagenConfig {
            total_rows: 50,
            ..Default::default()
        });
        let mut g = DatagenSource::new(DatagenConfig {
            total_rows: 50,
            ..Default::default()
        })
        .unwrap()
        .begin_after(CommitTs::new(5));
        let b: Vec<_> = std::iter::from_fn(|| g.next_transaction()).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn a_long_skip_yields_and_can_be_cancelled() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut g = DatagenSource::new(DatagenConfig {
                total_rows: 0,
                ..Default::default()
            })
            .unwrap();
            // Far ahead: the skip would take very long.
            g.start_after(CommitTs::compose(MAX_START_MILLIS, 0));
            let task = tokio::spawn(async move {
                let _ = g.next_event().await;
            });
            // On a current-thread runtime this sleep only ends if the skip yields.
            tokio::time::sleep(Duration::from_millis(50)).await;
            task.abort();
            let joined = task.await;
            assert!(joined.unwrap_err().is_cancelled());
        });
    }

    #[test]
    fn rejects_unknown_tables() {
        let err = DatagenSource::new(DatagenConfig {
            tables: vec!["nope".into()],
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("unknown table `nope`"));
    }
}
