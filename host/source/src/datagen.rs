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

/// Weights of the operation mix (they need not sum to anything in particular).
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
}

impl DatagenConfig {
    /// Check the settings (no I/O).
    pub fn validate(&self) -> Result<(), DatagenError> {
        for t in &self.tables {
            if !TABLES.contains(&t.as_str()) {
                return Err(DatagenError::UnknownTable(t.clone()));
            }
        }
        if self.max_txn_rows == 0 {
            return Err(DatagenError::Invalid(
                "max-txn-rows must be at least 1".into(),
            ));
        }
        if self.mix.insert == 0 {
            return Err(DatagenError::Invalid(
                "mix.insert must be above 0 (nothing to update or delete otherwise)".into(),
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
        })
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
        let mix = self.config.mix.clone();
        let live = self.tables[table].live.len() as u64;
        let total = mix.insert as u64
            + if live > 0 {
                (mix.update + mix.delete) as u64
            } else {
                0
            };
        let pick = self.below(total);
        let schema = self.tables[table].schema.clone();
        if pick < mix.insert as u64 {
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
        } else if pick < (mix.insert + mix.update) as u64 {
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

    /// The next transaction, or `None` when the total is reached.
    pub fn next_transaction(&mut self) -> Option<Transaction> {
        if self.config.total_rows > 0 && self.emitted_rows >= self.config.total_rows {
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
        self.next_ts = CommitTs::compose(commit_ts.physical_millis() + step, self.below(4));
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
        loop {
            let Some(txn) = self.next_transaction() else {
                self.ended = true;
                return Ok(SourceEvent::End);
            };
            if txn.commit_ts <= self.skip_until {
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
