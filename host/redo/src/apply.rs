//! Reading a redo log back for `sluice redo apply`: the events of (checkpoint,
//! resolved] in commit-ts order, each DDL in its place among the rows.
//!
//! A log written across restarts may hold records above the resolved ts of
//! the moment a writer opened again (appended, never made durable in the
//! meta, and appended again after [`Record::Resumed`]): a record before a
//! resumed marker counts only up to the marker's ts. Markers open a file, so
//! a first pass reads the first record of every file; GC removes files only
//! from the oldest on, so a marker is never gone while a file before it is
//! there.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use sluice_core::{Batch, CommitTs, DdlEvent, TableBatch, TableSchema};

use crate::format::{Damage, LogKind, Record, Records};
use crate::log::{FileName, LogError, LogReader, Schemas};
use crate::meta::Meta;
use crate::replay::table_batch;
use crate::storage::Storage;

/// One step of a replay.
#[derive(Debug)]
pub enum ReplayEvent {
    /// Rows of consecutive transactions (their tables' schemas first), in
    /// commit-ts order; none above `max_ts`.
    Rows {
        /// The schemas of the batch's tables.
        schemas: Vec<Arc<TableSchema>>,
        /// The rows.
        batch: Batch,
        /// The highest commit ts in it.
        max_ts: CommitTs,
    },
    /// A schema change, after every row below it and before every row above.
    Ddl(DdlEvent),
}

/// Damage a replay stepped over (it lay past the resolved ts).
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The file.
    pub file: String,
    /// What was wrong, and where.
    pub damage: Damage,
}

/// The events of a log's (checkpoint, resolved], in order.
pub struct Replay {
    reader: LogReader,
    meta: Meta,
    /// Rows files to read, each with the ts its records count up to (the
    /// lowest resumed marker after it).
    files: VecDeque<(FileName, u64)>,
    ddls: VecDeque<DdlEvent>,
    ready: VecDeque<ReplayEvent>,
    schemas: Schemas,
    skipped: Vec<Skipped>,
    /// Every schema the replay gave out, by (table id, version).
    given: std::collections::HashMap<(u32, u32), Arc<TableSchema>>,
    /// Each schema read (by its address; the schema is kept so that the
    /// address is not reused) and the one given out for it: a schema is
    /// compared once, not at every record.
    as_given: std::collections::HashMap<usize, (Arc<TableSchema>, Arc<TableSchema>)>,
    /// Schemas given out under an id of the replay's own (see
    /// [`Replay::distinct`]), and the next such id (counting down).
    renamed: Vec<Arc<TableSchema>>,
    next_id: u32,
}

/// For each file (in order), the lowest resumed ts of the markers in the
/// files after it (`u64::MAX`: none).
async fn valid_through(
    reader: &LogReader,
    storage: &Storage,
    kind: LogKind,
) -> Result<Vec<(FileName, u64)>, LogError> {
    let files: Vec<FileName> = reader
        .listing()
        .files
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| f.kind == kind)
        .collect();
    let mut markers = Vec::with_capacity(files.len());
    for f in &files {
        let bytes = storage.get(&f.name()).await?;
        let first = Records::new(&bytes)
            .ok()
            .and_then(|(_, mut records)| records.next())
            .and_then(Result::ok);
        markers.push(match first {
            Some((_, Record::Resumed { resolved_ts })) => Some(resolved_ts),
            _ => None,
        });
    }
    let mut out = Vec::with_capacity(files.len());
    let mut lowest = u64::MAX;
    for (file, marker) in files.iter().zip(&markers).rev() {
        out.push((*file, lowest));
        if let Some(r) = marker {
            lowest = lowest.min(*r);
        }
    }
    out.reverse();
    Ok(out)
}

/// Most rows of one table in one replayed event.
pub const MAX_EVENT_ROWS: usize = 8_192;

impl Replay {
    /// A replay of the log in `storage`; `Err` if it has no meta (nothing was
    /// ever made durable) or a file the replay needs is damaged. With
    /// `from_start`, everything the log still has up to the resolved ts (a
    /// downstream that has nothing yet; files below the checkpoint may have
    /// been removed, see [`Replay::collected`]), else (checkpoint, resolved].
    pub async fn open(storage: Storage, from_start: bool) -> Result<Self, LogError> {
        let reader = LogReader::open(storage.clone()).await?;
        let Some(mut meta) = reader.listing().meta else {
            return Err(LogError::Inconsistent {
                file: crate::meta::META_FILE.into(),
                reason: format!(
                    "there is no meta in {}: nothing of this log was made durable",
                    storage.location()
                ),
            });
        };
        if from_start {
            meta.checkpoint_ts = 0;
        }
        let in_range = |f: &FileName| f.max > meta.checkpoint_ts;
        let files: VecDeque<(FileName, u64)> = valid_through(&reader, &storage, LogKind::Rows)
            .await?
            .into_iter()
            .filter(|(f, _)| in_range(f))
            .collect();
        let mut skipped = Vec::new();
        let mut ddls = BTreeMap::new();
        for (file, through) in valid_through(&reader, &storage, LogKind::Ddl).await? {
            if !in_range(&file) {
                continue;
            }
            let read = reader.read(file, meta.resolved_ts).await?;
            if let Some(damage) = read.skipped {
                skipped.push(Skipped {
                    file: file.name(),
                    damage,
                });
            }
            for record in read.records {
                if let Record::Ddl(ddl) = record {
                    let ts = ddl.commit_ts.get();
                    if ts > meta.checkpoint_ts && ts <= meta.resolved_ts.min(through) {
                        ddls.insert(ts, ddl);
                    }
                }
            }
        }
        Ok(Self {
            reader,
            meta,
            files,
            ddls: ddls.into_values().collect(),
            ready: VecDeque::new(),
            schemas: Schemas::default(),
            skipped,
            given: std::collections::HashMap::new(),
            as_given: std::collections::HashMap::new(),
            renamed: Vec::new(),
            next_id: u32::MAX,
        })
    }

    /// What the replay covers: (checkpoint, resolved] (checkpoint 0 when
    /// from the start).
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// The log's own meta, as stored.
    pub fn stored_meta(&self) -> Option<Meta> {
        self.reader.listing().meta
    }

    /// Whether files of the log were removed (below the checkpoint): a
    /// replay from the start then lacks what they held.
    pub fn collected(&self) -> bool {
        self.reader
            .listing()
            .files
            .iter()
            .map(|(f, _)| f.seq)
            .min()
            .is_some_and(|seq| seq > 0)
    }

    /// Damage stepped over so far (past the resolved ts).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The next event; `None` at the end.
    pub async fn next(&mut self) -> Result<Option<ReplayEvent>, LogError> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(Some(event));
            }
            let Some((file, through)) = self.files.pop_front() else {
                // Past the last row: the DDLs left.
                return Ok(self.ddls.pop_front().map(ReplayEvent::Ddl));
            };
            self.load(file, through).await?;
        }
    }

    /// Reads `file` into `ready`.
    async fn load(&mut self, file: FileName, through: u64) -> Result<(), LogError> {
        let read = self.reader.read(file, self.meta.resolved_ts).await?;
        if let Some(damage) = read.skipped {
            self.skipped.push(Skipped {
                file: file.name(),
                damage,
            });
        }
        let (low, high) = (self.meta.checkpoint_ts, self.meta.resolved_ts.min(through));
        let inconsistent = |reason: String| LogError::Inconsistent {
            file: file.name(),
            reason,
        };
        for record in read.records {
            let (txns, tables) = match record {
                Record::Schema(schema) => {
                    self.schemas.add(schema);
                    continue;
                }
                Record::Rows { txns, tables } => (txns, tables),
                Record::Ddl(_) | Record::Resumed { .. } => continue,
            };
            if !txns
                .iter()
                .any(|t| t.commit_ts > low && t.commit_ts <= high)
            {
                continue;
            }
            let mut parts: Vec<(Arc<TableSchema>, TableBatch)> = Vec::new();
            for rows in tables {
                let (schema, batch) =
                    table_batch(rows, &txns, &self.schemas).map_err(inconsistent)?;
                parts.push((schema, batch));
            }
            // Rows outside (checkpoint, resolved], and each DDL in its place.
            let mut from = low;
            loop {
                let next_ddl = self
                    .ddls
                    .front()
                    .map(|d| d.commit_ts.get())
                    .filter(|&d| d <= high);
                let upto = next_ddl.unwrap_or(high).min(high);
                self.push_rows(&parts, from, upto, next_ddl.is_some());
                match next_ddl {
                    Some(ts)
                        if parts
                            .iter()
                            .any(|(_, b)| b.commit_ts.iter().any(|&r| r > ts)) =>
                    {
                        let ddl = self.ddls.pop_front().expect("checked");
                        self.ready.push_back(ReplayEvent::Ddl(ddl));
                        from = ts;
                    }
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// `schema` under an id that no other schema of this replay is given:
    /// the writers of different runs may give different tables one (table
    /// id, version) (a source numbers tables as it meets them), and a sink
    /// knows a schema by it, once told. A schema that clashes with one given
    /// before gets an id of the replay's own, counting down from the top
    /// (far from any a source gives).
    fn distinct(&mut self, schema: &Arc<TableSchema>) -> Arc<TableSchema> {
        let at = Arc::as_ptr(schema) as usize;
        if let Some((_, given)) = self.as_given.get(&at) {
            return given.clone();
        }
        let given = self.give(schema);
        self.as_given.insert(at, (schema.clone(), given.clone()));
        given
    }

    /// [`Replay::distinct`] for a schema not seen before.
    fn give(&mut self, schema: &Arc<TableSchema>) -> Arc<TableSchema> {
        let key = (schema.table_id, schema.version);
        match self.given.get(&key) {
            None => {
                self.given.insert(key, schema.clone());
                return schema.clone();
            }
            Some(given) if **given == **schema => return given.clone(),
            Some(_) => {}
        }
        let mut probe = (**schema).clone();
        for renamed in &self.renamed {
            probe.table_id = renamed.table_id;
            if **renamed == probe {
                return renamed.clone();
            }
        }
        probe.table_id = self.next_id;
        self.next_id -= 1;
        let renamed = Arc::new(probe);
        self.renamed.push(renamed.clone());
        self.given
            .insert((renamed.table_id, renamed.version), renamed.clone());
        renamed
    }

    /// The rows of `parts` with commit ts in (`from`, `upto`] (below `upto`
    /// when a DDL stands there) as one event.
    fn push_rows(
        &mut self,
        parts: &[(Arc<TableSchema>, TableBatch)],
        from: u64,
        upto: u64,
        ddl_at_upto: bool,
    ) {
        let keep = |ts: u64| ts > from && (ts < upto || (!ddl_at_upto && ts == upto));
        let (mut schemas, mut batch, mut max) = (Vec::new(), Batch::default(), 0);
        for (schema, table) in parts {
            let all = table.commit_ts.iter().all(|&ts| keep(ts));
            let mut table = if all {
                table.clone()
            } else {
                table.select(schema, |row| keep(table.commit_ts[row.index]))
            };
            if table.is_empty() {
                continue;
            }
            let schema = &self.distinct(schema);
            table.table_id = schema.table_id;
            if table.len() > MAX_EVENT_ROWS {
                // A large transaction goes in slices a sink can take (its
                // memory quota bounds one write).
                for start in (0..table.len()).step_by(MAX_EVENT_ROWS) {
                    let slice =
                        table.slice(schema, start..(start + MAX_EVENT_ROWS).min(table.len()));
                    let max_ts = slice.commit_ts.iter().copied().max().unwrap_or(0);
                    self.ready.push_back(ReplayEvent::Rows {
                        schemas: vec![schema.clone()],
                        batch: Batch {
                            tables: vec![slice],
                        },
                        max_ts: CommitTs::new(max_ts),
                    });
                }
                continue;
            }
            max = max.max(table.commit_ts.iter().copied().max().unwrap_or(0));
            schemas.push(schema.clone());
            batch.tables.push(table);
        }
        if !batch.tables.is_empty() {
            self.ready.push_back(ReplayEvent::Rows {
                schemas,
                batch,
                max_ts: CommitTs::new(max),
            });
        }
    }
}
