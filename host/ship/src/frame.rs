//! What a shipment carries: [`Frame`]s, postcard-encoded back to back. Rows
//! travel as they sit in the reader's columns (one part per table, with where
//! each transaction's rows end), so neither side handles a row on its own; a
//! table's schema goes once per stream, before its first rows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::{
    ColumnData, CommitTs, DdlEvent, ResolvedTs, RunPart, RunTransaction, Segment, SourceEvent,
    TableChanges, TableSchema, Transaction, TransactionRun,
};

use crate::error::ShipError;

/// One transaction of a rows frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Its commit ts.
    pub commit_ts: u64,
    /// The source's id of it.
    pub id: u64,
    /// More parts of it follow (a transaction too large to hold whole).
    pub more: bool,
}

/// One table's rows in a rows frame, as received.
#[derive(Debug, Deserialize)]
pub struct Part {
    table_id: u32,
    version: u32,
    segments: Vec<Segment>,
    #[serde(with = "serde_bytes")]
    ops: Vec<u8>,
    seq: Vec<u32>,
    #[serde(with = "serde_bytes")]
    flags: Vec<u8>,
    before: Vec<ColumnData>,
    after: Vec<ColumnData>,
    bytes: u64,
}

/// One table's rows, as sent (borrowed from the reader's columns).
#[derive(Serialize)]
struct PartRef<'a> {
    table_id: u32,
    version: u32,
    segments: &'a [Segment],
    #[serde(with = "serde_bytes")]
    ops: &'a [u8],
    seq: &'a [u32],
    #[serde(with = "serde_bytes")]
    flags: &'a [u8],
    before: &'a [ColumnData],
    after: &'a [ColumnData],
    bytes: u64,
}

/// A frame as received. `FrameRef` is the same shape, borrowed, for sending:
/// postcard writes both alike.
#[derive(Debug, Deserialize)]
pub enum Frame {
    /// A table's schema at one version; rows of it follow.
    Schema(TableSchema),
    /// Consecutive transactions' rows, in commit-ts order.
    Rows {
        /// The transactions.
        txns: Vec<Mark>,
        /// Their rows, per table.
        parts: Vec<Part>,
    },
    /// A schema change of a shipped table.
    Ddl(DdlEvent),
    /// No event with a commit ts <= this follows.
    Resolved(u64),
    /// The source has nothing more.
    End,
}

#[derive(Serialize)]
enum FrameRef<'a> {
    Schema(&'a TableSchema),
    Rows {
        txns: &'a [Mark],
        parts: &'a [PartRef<'a>],
    },
    Ddl(&'a DdlEvent),
    Resolved(u64),
    End,
}

/// Writes frames for one receiver: each schema once, before the first rows
/// that need it.
#[derive(Debug, Default)]
pub struct Encoder {
    sent_schemas: HashSet<(u32, u32)>,
    out: Vec<u8>,
    /// The highest ts of anything written so far.
    through: u64,
}

impl Encoder {
    /// Nothing written yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn frame(&mut self, frame: &FrameRef<'_>) {
        // A Vec never fails to take bytes; a value that cannot be encoded is
        // a bug in the types above.
        let out = std::mem::take(&mut self.out);
        self.out = postcard::to_extend(frame, out).expect("frames always encode");
    }

    fn schema(&mut self, schema: &TableSchema) {
        if self.sent_schemas.insert((schema.table_id, schema.version)) {
            self.frame(&FrameRef::Schema(schema));
        }
    }

    /// The parts `parts` of a run of `transactions`: only the transactions
    /// they touch are named.
    pub fn run(&mut self, transactions: &[RunTransaction], parts: &[&RunPart]) {
        self.reached(transactions.last().map_or(0, |t| t.commit_ts.get()));
        // About what the frame takes: grown once, not by doubling copies.
        self.out
            .reserve(parts.iter().map(|p| p.changes.wire_bytes()).sum::<usize>() + 1024);
        for part in parts {
            self.schema(part.changes.schema());
        }
        let mut used: Vec<u32> = parts
            .iter()
            .flat_map(|p| p.segments.iter().map(|s| s.txn))
            .collect();
        used.sort_unstable();
        used.dedup();
        let txns: Vec<Mark> = used
            .iter()
            .map(|&i| {
                let t = &transactions[i as usize];
                Mark {
                    commit_ts: t.commit_ts.get(),
                    id: t.id,
                    more: false,
                }
            })
            .collect();
        let segments: Vec<Vec<Segment>> = parts
            .iter()
            .map(|p| {
                p.segments
                    .iter()
                    .map(|s| Segment {
                        // `used` holds every index, sorted.
                        txn: used.binary_search(&s.txn).unwrap_or_default() as u32,
                        ..*s
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<PartRef<'_>> = parts
            .iter()
            .zip(&segments)
            .map(|(p, segments)| part_ref(&p.changes, segments))
            .collect();
        self.frame(&FrameRef::Rows {
            txns: &txns,
            parts: &refs,
        });
    }

    /// The tables `tables` of transaction `txn` (a part of a large one
    /// included, whether or not it has rows).
    pub fn transaction(&mut self, txn: &Transaction, tables: &[&TableChanges]) {
        self.reached(txn.commit_ts.get());
        for t in tables {
            self.schema(t.schema());
        }
        let segments: Vec<[Segment; 1]> = tables
            .iter()
            .map(|t| {
                [Segment {
                    txn: 0,
                    rows: t.len(),
                    before: t.before().first().map_or(0, ColumnData::len),
                    after: t.after().first().map_or(0, ColumnData::len),
                    bytes: t.wire_bytes(),
                }]
            })
            .collect();
        let refs: Vec<PartRef<'_>> = tables
            .iter()
            .zip(&segments)
            .map(|(t, s)| part_ref(t, s))
            .collect();
        let txns = [Mark {
            commit_ts: txn.commit_ts.get(),
            id: txn.id,
            more: txn.more,
        }];
        self.frame(&FrameRef::Rows {
            txns: &txns,
            parts: &refs,
        });
    }

    /// A schema change.
    pub fn ddl(&mut self, ddl: &DdlEvent) {
        self.reached(ddl.commit_ts.get());
        self.frame(&FrameRef::Ddl(ddl));
    }

    /// A resolved ts.
    pub fn resolved(&mut self, ts: u64) {
        self.reached(ts);
        self.frame(&FrameRef::Resolved(ts));
    }

    /// The end of the source.
    pub fn end(&mut self) {
        self.frame(&FrameRef::End);
    }

    /// Whether nothing is written since the last [`Encoder::take`].
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// The frames written since the last take.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// The highest ts of the events written so far (a run's last
    /// transaction's, though the parts written may end below it).
    pub fn through(&self) -> u64 {
        self.through
    }

    fn reached(&mut self, ts: u64) {
        self.through = self.through.max(ts);
    }
}

fn part_ref<'a>(changes: &'a TableChanges, segments: &'a [Segment]) -> PartRef<'a> {
    PartRef {
        table_id: changes.schema().table_id,
        version: changes.schema().version,
        segments,
        ops: changes.ops(),
        seq: changes.seq(),
        flags: changes.flags(),
        before: changes.before(),
        after: changes.after(),
        bytes: changes.wire_bytes() as u64,
    }
}

/// What a shipment decodes to: source events, with rows as runs where the
/// reader shipped runs.
#[derive(Debug)]
pub enum Received {
    /// An event (a transaction only for a part of a large one).
    Event(SourceEvent),
    /// Consecutive whole transactions.
    Run(TransactionRun),
}

/// Reads frames back, keeping the schemas the stream has carried.
#[derive(Debug, Default)]
pub struct Decoder {
    schemas: HashMap<(u32, u32), Arc<TableSchema>>,
}

/// Most schemas a stream may carry (a bound on what a bad sender can make a
/// receiver hold; a changefeed with more tables than this cannot ship).
pub const MAX_SCHEMAS: usize = 1 << 16;

impl Decoder {
    /// No schema known yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The frames of one shipment, appended to `out`. Anything that does not
    /// decode, or rows that do not fit their schema, is an error: nothing of
    /// a bad shipment is handed on as data.
    pub fn decode(&mut self, mut bytes: &[u8], out: &mut Vec<Received>) -> Result<(), ShipError> {
        while !bytes.is_empty() {
            let (frame, rest) = postcard::take_from_bytes::<Frame>(bytes)
                .map_err(|e| ShipError::Malformed(format!("a frame does not decode: {e}")))?;
            bytes = rest;
            match frame {
                Frame::Schema(schema) => {
                    if self.schemas.len() >= MAX_SCHEMAS {
                        return Err(ShipError::Malformed(format!(
                            "more than {MAX_SCHEMAS} table schemas in one stream"
                        )));
                    }
                    self.schemas
                        .insert((schema.table_id, schema.version), Arc::new(schema));
                }
                Frame::Rows { txns, parts } => out.push(self.rows(txns, parts)?),
                Frame::Ddl(ddl) => out.push(Received::Event(SourceEvent::Ddl(ddl))),
                Frame::Resolved(ts) => {
                    out.push(Received::Event(SourceEvent::Resolved(ResolvedTs::new(ts))))
                }
                Frame::End => out.push(Received::Event(SourceEvent::End)),
            }
        }
        Ok(())
    }

    fn rows(&self, txns: Vec<Mark>, parts: Vec<Part>) -> Result<Received, ShipError> {
        if txns.windows(2).any(|w| w[0].commit_ts > w[1].commit_ts) {
            return Err(ShipError::Malformed(
                "a rows frame's transactions are not in commit-ts order".into(),
            ));
        }
        let more = txns.first().is_some_and(|t| t.more);
        if more && txns.len() != 1 {
            return Err(ShipError::Malformed(
                "a part of a large transaction shipped with others".into(),
            ));
        }
        let mut run_parts = Vec::with_capacity(parts.len());
        for p in parts {
            let schema = self
                .schemas
                .get(&(p.table_id, p.version))
                .ok_or_else(|| {
                    ShipError::Malformed(format!(
                        "rows of table {} version {} came before its schema",
                        p.table_id, p.version
                    ))
                })?
                .clone();
            let changes = TableChanges::from_columns(
                schema,
                p.ops,
                p.seq,
                p.flags,
                p.before,
                p.after,
                usize::try_from(p.bytes).unwrap_or(usize::MAX),
            )
            .map_err(|e| ShipError::Malformed(e.to_string()))?;
            run_parts.push(RunPart {
                changes,
                segments: p.segments,
            });
        }
        let transactions = txns
            .iter()
            .map(|t| RunTransaction {
                commit_ts: CommitTs::new(t.commit_ts),
                id: t.id,
                position: None,
            })
            .collect();
        let run = TransactionRun::from_parts(transactions, run_parts)
            .map_err(|e| ShipError::Malformed(e.to_string()))?;
        if more {
            let mut txn = run
                .into_transactions()
                .pop()
                .expect("one transaction was checked above");
            txn.more = true;
            return Ok(Received::Event(SourceEvent::Transaction(txn)));
        }
        Ok(Received::Run(run))
    }
}
