//! The continuous validator (DM's validator): after the sink acknowledged a
//! flush, the rows it changed are read back from the downstream database by
//! key and compared with the upstream images (`fast`: present or absent;
//! `full`: every column, by the same rules as `sluice diff`). A row that
//! differs is checked again on the next rounds (it may be changing, or a
//! later change of it may not be acknowledged yet); after `retry-count`
//! checks it is a persistent mismatch: counted, and named in the report.
//!
//! It never holds the sink up: acknowledged batches reach it through a
//! bounded queue the pipeline only ever `try_send`s to, and it holds at most
//! `event-cache-count` rows (the latest image per key); what does not fit is
//! skipped and counted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{
    Batch, Column as UpColumn, ColumnType, MAX_REPORTED_MISMATCHES, Op, TableSchema,
    ValidatorReport, Value,
};
use tokio::sync::{mpsc, watch};

use crate::side::{Column, KeyValue, Kind, Side};
use crate::values;
use sluice_sdk::{date_text, datetime_text};

/// Most keys read back in one query.
const KEYS_PER_QUERY: usize = 500;

/// How a validator runs.
#[derive(Debug, Clone)]
pub struct ValidatorSettings {
    /// Compare every column (`full`), or presence only (`fast`).
    pub full: bool,
    /// Most rows held.
    pub cache: usize,
    /// Checks of a differing row before it is reported.
    pub retries: u32,
    /// Time between rounds.
    pub interval: Duration,
    /// The downstream database (`mysql://` or `postgres://`).
    pub dsn: String,
    /// The sink's `target-schema`, if any.
    pub target_schema: Option<String>,
    /// The sink's `route` (`schema.table` = `schema.table`).
    pub route: BTreeMap<String, String>,
}

impl ValidatorSettings {
    /// Where rows of upstream `schema.table` are downstream (the sink's
    /// routing rules).
    fn target(&self, schema: &str, table: &str) -> (String, String) {
        if let Some(to) = self.route.get(&format!("{schema}.{table}"))
            && let Some((s, t)) = to.split_once('.')
        {
            return (s.to_string(), t.to_string());
        }
        let schema = self.target_schema.as_deref().unwrap_or(schema);
        (schema.to_string(), table.to_string())
    }
}

/// Where a pending row is: its table id and its key as text.
type At = (u32, Vec<String>);

/// What is expected downstream for one key.
struct Expected {
    schema: Arc<TableSchema>,
    /// The key, bound as parameters.
    key: Vec<KeyValue>,
    /// The row's values as text (none: deleted).
    image: Option<Vec<Option<String>>>,
    /// Checks that found it different.
    misses: u32,
}

/// A downstream table as the validator reads it.
struct Target {
    from: String,
    columns: Vec<Column>,
}

/// Batches acknowledged by the sink, sent to a running validator.
pub type Acked = (Vec<Arc<TableSchema>>, Batch);

/// The validator of one run.
pub struct Validator {
    settings: ValidatorSettings,
    /// (table id, key text) → what is expected.
    pending: BTreeMap<At, Expected>,
    /// Downstream tables by (table id, schema version).
    targets: HashMap<(u32, u32), Target>,
    side: Option<Side>,
    report: ValidatorReport,
}

impl Validator {
    /// A validator with `settings`; it connects when it first checks.
    pub fn new(settings: ValidatorSettings) -> Self {
        let report = ValidatorReport {
            mode: if settings.full { "full" } else { "fast" }.into(),
            ..ValidatorReport::default()
        };
        Self {
            settings,
            pending: BTreeMap::new(),
            targets: HashMap::new(),
            side: None,
            report,
        }
    }

    /// Counts rows that were never taken in (a full queue upstream of it).
    pub fn skip(&mut self, rows: u64) {
        self.report.skipped += rows;
    }

    /// Takes in the rows of an acknowledged batch: the latest image of each
    /// key replaces what was expected of it.
    pub fn ingest(&mut self, schemas: &[Arc<TableSchema>], batch: &Batch) {
        for table in &batch.tables {
            let Some(schema) = schemas
                .iter()
                .find(|s| s.table_id == table.table_id && s.version == table.schema_version)
            else {
                self.report.skipped += table.len() as u64;
                continue;
            };
            let keys: Vec<usize> = match schema
                .columns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.key)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
            {
                k if k.is_empty() => {
                    // No key to read a row back by.
                    self.report.skipped += table.len() as u64;
                    continue;
                }
                k => k,
            };
            for row in table.rows() {
                let image = match row.op {
                    Op::Delete => None,
                    _ => row.after(),
                };
                // An update that changed the key removed the old one.
                if row.op == Op::Update
                    && let (Some(before), Some(after)) = (row.before(), &image)
                    && keys.iter().any(|&i| before[i] != after[i])
                {
                    self.expect(schema, &keys, &before, None);
                }
                let values = image.clone().or_else(|| row.before()).unwrap_or_default();
                self.expect(schema, &keys, &values, image.as_deref());
            }
        }
        self.report.pending = self.pending.len() as u64;
    }

    fn expect(
        &mut self,
        schema: &Arc<TableSchema>,
        keys: &[usize],
        values: &[Value],
        image: Option<&[Value]>,
    ) {
        let key_text: Vec<String> = keys
            .iter()
            .map(|&i| values::normal(&text_of(&values[i], &schema.columns[i]).unwrap_or_default()))
            .collect();
        let at = (schema.table_id, key_text);
        if !self.pending.contains_key(&at) && self.pending.len() >= self.settings.cache {
            self.report.skipped += 1;
            return;
        }
        let expected = Expected {
            schema: schema.clone(),
            key: keys
                .iter()
                .map(|&i| key_of(&values[i], &schema.columns[i]))
                .collect(),
            image: image.map(|image| {
                image
                    .iter()
                    .zip(&schema.columns)
                    .map(|(v, c)| text_of(v, c))
                    .collect()
            }),
            misses: 0,
        };
        self.pending.insert(at, expected);
    }

    /// The report as it stands.
    pub fn report(&self) -> &ValidatorReport {
        &self.report
    }

    /// One round: reads back every pending row, by table, and settles what
    /// it can. A failed read leaves the rows pending (counted in `errors`).
    pub async fn check(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if let Err(e) = self.check_all().await {
            self.report.errors += 1;
            self.report.last_error = Some(sluice_core::bounded_text(&e.to_string(), 1024));
            // Connect again next round.
            self.side = None;
        }
        self.report.pending = self.pending.len() as u64;
    }

    async fn check_all(&mut self) -> Result<(), crate::DiffError> {
        if self.side.is_none() {
            self.side = Some(Side::connect("target", &self.settings.dsn).await?);
        }
        // Pending keys by (table id, schema version), in key order.
        let mut groups: BTreeMap<(u32, u32), Vec<At>> = BTreeMap::new();
        for (at, e) in &self.pending {
            groups
                .entry((e.schema.table_id, e.schema.version))
                .or_default()
                .push(at.clone());
        }
        for (version, keys) in groups {
            for chunk in keys.chunks(KEYS_PER_QUERY) {
                self.check_chunk(version, chunk).await?;
            }
        }
        Ok(())
    }

    async fn check_chunk(
        &mut self,
        version: (u32, u32),
        chunk: &[At],
    ) -> Result<(), crate::DiffError> {
        let schema = self.pending[&chunk[0]].schema.clone();
        let side = self.side.as_mut().expect("connected");
        if !self.targets.contains_key(&version) {
            let (s, t) = self
                .settings
                .target(&schema.schema_name, &schema.table_name);
            let (columns, _) = side.layout(&s, &t).await?;
            self.targets.insert(
                version,
                Target {
                    from: side.table(&s, &t),
                    columns,
                },
            );
        }
        let target = &self.targets[&version];
        let key_names: Vec<String> = schema
            .columns
            .iter()
            .filter(|c| c.key)
            .map(|c| c.name.clone())
            .collect();
        let kinds: Vec<Kind> = key_names
            .iter()
            .map(|k| {
                target
                    .columns
                    .iter()
                    .find(|c| c.name == *k)
                    .map_or(Kind::Text, |c| c.kind)
            })
            .collect();
        // The upstream columns the target has, and where they are upstream.
        let shared: Vec<(usize, Column)> = schema
            .columns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                target
                    .columns
                    .iter()
                    .find(|t| t.name == c.name)
                    .map(|t| (i, t.clone()))
            })
            .collect();
        let found = if target.columns.is_empty() {
            // No such table downstream (yet): every row is absent.
            Vec::new()
        } else {
            let keys: Vec<Vec<KeyValue>> = chunk
                .iter()
                .map(|at| self.pending[at].key.clone())
                .collect();
            let columns: Vec<Column> = shared.iter().map(|(_, c)| c.clone()).collect();
            side.rows_by_keys(&target.from, &columns, &key_names, &kinds, &keys)
                .await?
        };
        let mut rows: HashMap<Vec<String>, Vec<Option<String>>> = HashMap::new();
        for mut values in found {
            let rest = values.split_off(key_names.len().min(values.len()));
            let key = values
                .into_iter()
                .map(|v| values::normal(&v.unwrap_or_default()))
                .collect();
            rows.insert(key, rest);
        }
        for at in chunk {
            let e = &self.pending[at];
            let row = rows.get(&at.1);
            let difference = match (&e.image, row) {
                (None, None) => None,
                (None, Some(_)) => Some("deleted upstream, present downstream".to_string()),
                (Some(_), None) => Some("missing downstream".to_string()),
                (Some(_), Some(_)) if !self.settings.full => None,
                (Some(image), Some(row)) => {
                    let differing: Vec<String> = shared
                        .iter()
                        .zip(row)
                        .filter(|((i, c), got)| {
                            let float = c.kind == Kind::Float
                                || e.schema.columns[*i].ty == ColumnType::Float;
                            !values::same(&image[*i], got, float)
                        })
                        .map(|((i, c), got)| {
                            format!(
                                "{}: upstream {}, downstream {}",
                                c.name,
                                crate::shown(&image[*i]),
                                crate::shown(got)
                            )
                        })
                        .collect();
                    (!differing.is_empty()).then(|| differing.join("; "))
                }
            };
            match difference {
                None => {
                    self.pending.remove(at);
                    self.report.matched += 1;
                }
                Some(what) => {
                    let e = self.pending.get_mut(at).expect("pending");
                    e.misses += 1;
                    if e.misses >= self.settings.retries {
                        let key = key_names
                            .iter()
                            .zip(&at.1)
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",");
                        let line = format!(
                            "{}.{} {key}: {what}",
                            e.schema.schema_name, e.schema.table_name
                        );
                        tracing::warn!(mismatch = %line, "The validator found a row that differs downstream.");
                        self.report.mismatched += 1;
                        if self.report.mismatches.len() >= MAX_REPORTED_MISMATCHES {
                            self.report.mismatches.remove(0);
                        }
                        self.report
                            .mismatches
                            .push(sluice_core::bounded_text(&line, 512));
                        self.pending.remove(at);
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes in batches as they come and checks every `interval`, publishing
    /// the report after each round. After `batches` closes it checks until
    /// nothing is pending, then returns (rows whose reads keep failing stay
    /// pending: the caller bounds the wait).
    pub async fn run(
        mut self,
        mut batches: mpsc::Receiver<Acked>,
        skipped: Arc<std::sync::atomic::AtomicU64>,
        report: watch::Sender<ValidatorReport>,
    ) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Once no batch can come (the run is over), what is pending is
        // checked until it is settled (matched, or counted mismatched after
        // its retries), then the validator ends.
        let mut closed = false;
        loop {
            tokio::select! {
                next = batches.recv(), if !closed => match next {
                    Some((schemas, batch)) => self.ingest(&schemas, &batch),
                    None => closed = true,
                },
                _ = tick.tick() => {
                    self.skip(skipped.swap(0, std::sync::atomic::Ordering::Relaxed));
                    self.check().await;
                    let now = &self.report;
                    report.send_if_modified(|r| {
                        let changed = r != now;
                        if changed {
                            *r = now.clone();
                        }
                        changed
                    });
                    if closed && now.pending == 0 {
                        break;
                    }
                }
            }
        }
    }
}

/// A value as the text `sluice diff` reads downstream for it.
fn text_of(v: &Value, column: &UpColumn) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Int(i) => match column.ty {
            ColumnType::Datetime => datetime_text(*i),
            ColumnType::Date => date_text(*i),
            _ => i.to_string(),
        },
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bytes(b) => match column.ty {
            ColumnType::Blob => b.iter().map(|x| format!("{x:02x}")).collect(),
            _ => String::from_utf8_lossy(b).into_owned(),
        },
    })
}

/// A key value, bound as a parameter.
fn key_of(v: &Value, column: &UpColumn) -> KeyValue {
    match (v, column.ty) {
        (Value::Int(i), ColumnType::Int | ColumnType::Boolean) => KeyValue::Int(*i),
        (Value::UInt(u), _) => KeyValue::UInt(*u),
        (Value::Bytes(b), ColumnType::Blob) => KeyValue::Bytes(b.clone()),
        (v, _) => KeyValue::Text(text_of(v, column).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_values_read_as_the_downstream_text() {
        let col = |ty| UpColumn {
            name: "c".into(),
            ty,
            sql_type: String::new(),
            nullable: true,
            key: false,
        };
        assert_eq!(
            text_of(
                &Value::Int(1_700_000_000_123_456),
                &col(ColumnType::Datetime)
            )
            .map(|t| values::normal(&t)),
            Some("2023-11-14 22:13:20.123456".into())
        );
        assert_eq!(
            text_of(&Value::Int(0), &col(ColumnType::Datetime)).map(|t| values::normal(&t)),
            Some("1970-01-01 00:00:00".into())
        );
        assert_eq!(
            text_of(&Value::Bytes(vec![0xab, 1]), &col(ColumnType::Blob)),
            Some("ab01".into())
        );
        assert_eq!(text_of(&Value::Null, &col(ColumnType::Text)), None);
        assert_eq!(
            key_of(&Value::Int(5), &col(ColumnType::Int)),
            KeyValue::Int(5)
        );
    }

    #[test]
    fn routing_follows_the_sinks_rules() {
        let mut s = ValidatorSettings {
            full: true,
            cache: 10,
            retries: 3,
            interval: Duration::from_secs(1),
            dsn: String::new(),
            target_schema: Some("replica".into()),
            route: BTreeMap::new(),
        };
        assert_eq!(s.target("shop", "t"), ("replica".into(), "t".into()));
        s.route.insert("shop.t".into(), "arch.t2".into());
        assert_eq!(s.target("shop", "t"), ("arch".into(), "t2".into()));
    }
}
