//! A deterministic data generator: the same seed and settings always produce the
//! same transactions, rows, values and commit timestamps.

use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
pub use sluice_config::source::{DatagenConfig, Mix};
use sluice_core::{
    ChangesPool, Checkpoint, Column, ColumnType, CommitTs, ResolvedTs, ResumeError, RowWriter,
    RunShape, Source, SourceEvent, SourcePosition, TableChanges, TableSchema, Transaction,
    TransactionRun,
};

/// Bad datagen settings.
#[derive(Debug, thiserror::Error)]
pub enum DatagenError {
    /// `tables` names a table datagen does not generate (the name given).
    #[error("datagen: unknown table `{0}`; choose from users, orders, events")]
    UnknownTable(String),
    /// A setting is out of its range or contradicts another (what to change).
    #[error("datagen: {0}")]
    Invalid(String),
    /// The saved position does not match what this workload generates (the seed
    /// or settings changed since it was saved).
    #[error(
        "datagen cannot resume from its saved position (transaction {count} at ts {ts}): \
         this workload generates another transaction there, so the seed or settings changed; \
         overwrite the checkpoint to resume by ts"
    )]
    PositionMismatch {
        /// Transactions generated before the saved position.
        count: u64,
        /// Commit ts of the last of them, as saved.
        ts: u64,
    },
    #[error(
        "datagen ran out of commit timestamps (their physical part reached the year 4199); \
         lower start-millis or set total-rows"
    )]
    /// Generated time reached the end of the commit-ts range: the run ends with
    /// this error rather than repeat or wrap timestamps.
    Exhausted,
}

/// Live rows a table keeps for updates and deletes; at this many, the generator
/// deletes instead of inserting, so that an endless run has bounded memory.
pub const MAX_LIVE_ROWS: usize = 100_000;
/// The largest physical part a commit ts can hold (46 bits of milliseconds).
const MAX_PHYSICAL_MILLIS: u64 = (1 << 46) - 1;
/// Transactions skipped (on a resume) between two yields to the async runtime, so
/// that a long skip can be cancelled and does not hold a worker.
const SKIP_YIELD_EVERY: u32 = 256;

/// Unpaced, a resolved mark follows every this many transactions (and the last).
const RESOLVED_EVERY: u64 = 256;

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

/// A live row: enough to regenerate its current image (see [`write_image`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    id: i64,
    version: i64,
    /// Physical milliseconds of the commit ts that wrote this version.
    millis: i64,
}

struct TableState {
    schema: Arc<TableSchema>,
    next_id: i64,
    /// Live rows, in insertion order for deterministic picks. Images are not
    /// kept: a row's values follow from (seed, table, key, version, millis).
    live: Vec<Live>,
}

/// Layout version of datagen's [`SourcePosition`]: the number of transactions
/// generated so far, then the commit ts of the last one (both u64, little endian).
pub const POSITION_VERSION: u32 = 1;

/// Generates transactions from a seed. Implements [`Source`].
pub struct DatagenSource {
    config: DatagenConfig,
    rng: ChaCha8Rng,
    tables: Vec<TableState>,
    emitted_rows: u64,
    /// Transactions generated so far.
    generated: u64,
    next_ts: CommitTs,
    skip_until: CommitTs,
    /// From a saved position: skip this many transactions, the last of which
    /// must have this commit ts.
    skip_to: Option<(u64, CommitTs)>,
    pending_resolved: Option<ResolvedTs>,
    /// The resolved mark of the last transaction handed out, not announced yet
    /// (unpaced, a mark goes out every [`RESOLVED_EVERY`] transactions and
    /// before the end, not after each one).
    unannounced: Option<ResolvedTs>,
    /// When the first row was emitted, and how many were generated before it.
    started: Option<(tokio::time::Instant, u64)>,
    ended: bool,
    /// Commit ts ran out (46 bits of milliseconds): the next event is an error.
    exhausted: bool,
    /// [`MAX_LIVE_ROWS`], lower in tests.
    max_live_rows: usize,
    /// Buffers of transactions the pipeline is done with.
    pool: ChangesPool,
    /// How large the last run's columns grew: the next starts so large.
    run_shape: RunShape,
}

const FIRST: [&str; 8] = [
    "ada", "grace", "alan", "edsger", "barbara", "ken", "linus", "margaret",
];
const LAST: [&str; 6] = [
    "lovelace", "hopper", "turing", "dijkstra", "liskov", "o'neil",
];
const STATUS: [&str; 4] = ["new", "paid", "shipped", "cancelled"];

/// SplitMix64: the values of one row version, from a hash of what identifies it.
struct RowRng(u64);

impl RowRng {
    fn new(seed: u64, table_id: u32, live: Live) -> Self {
        let mut r = RowRng(
            seed ^ u64::from(table_id).wrapping_mul(0xA076_1D64_78BD_642F)
                ^ (live.id as u64).wrapping_mul(0xE703_7ED1_A0B4_28DB)
                ^ (live.version as u64).wrapping_mul(0x8EBC_6AF0_9C88_C6E3)
                ^ (live.millis as u64).wrapping_mul(0x5899_65CC_7537_4CC3),
        );
        r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Append the decimal digits of `n`.
fn put_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[at..]);
}

/// Append the decimal digits of `n`, with a sign if it is negative.
fn put_i64(buf: &mut Vec<u8>, n: i64) {
    if n < 0 {
        buf.push(b'-');
    }
    put_u64(buf, n.unsigned_abs());
}

/// Write the image of row version `live` of table `schema` (one of datagen's):
/// the same arguments always give the same values, so a before image is
/// regenerated rather than stored. Text is written straight into the columns.
fn write_image(seed: u64, schema: &TableSchema, live: Live, w: &mut RowWriter<'_>) {
    let mut r = RowRng::new(seed, schema.table_id, live);
    let (id, ms) = (live.id, live.millis);
    match schema.table_name.as_str() {
        "users" => {
            let first = r.pick(&FIRST).as_bytes();
            let last = r.pick(&LAST).as_bytes();
            let cents = r.below(10_000_000) as i64;
            w.int(id)
                .bytes_with(|b| {
                    // "{first} {last}"
                    b.extend_from_slice(first);
                    b.push(b' ');
                    b.extend_from_slice(last);
                })
                .bytes_with(|b| {
                    // "{first}.{last}{id}@example.com"
                    b.extend_from_slice(first);
                    b.push(b'.');
                    b.extend_from_slice(last);
                    put_i64(b, id);
                    b.extend_from_slice(b"@example.com");
                })
                .bytes_with(|b| {
                    // "{cents / 100}.{cents % 100:02}"
                    put_i64(b, cents / 100);
                    b.push(b'.');
                    b.push(b'0' + (cents % 100 / 10) as u8);
                    b.push(b'0' + (cents % 10) as u8);
                })
                .int(ms * 1000 + r.below(1000) as i64);
            if r.below(5) != 0 {
                let tier = r.below(4);
                w.bytes_with(|b| {
                    // {"tier":{tier},"tags":["{first}","{last}"]}
                    b.extend_from_slice(br#"{"tier":"#);
                    put_u64(b, tier);
                    b.extend_from_slice(br#","tags":[""#);
                    b.extend_from_slice(first);
                    b.extend_from_slice(br#"",""#);
                    b.extend_from_slice(last);
                    b.extend_from_slice(br#""]}"#);
                });
            } else {
                w.null();
            }
            let mut avatar = [0u8; 48];
            let len = r.below(48) as usize;
            for b in &mut avatar[..len] {
                *b = r.next() as u8;
            }
            w.bytes(&avatar[..len]).int(live.version);
        }
        "orders" => {
            w.uint(id as u64)
                .int(1 + r.below(1000) as i64)
                .float(r.below(1_000_000) as f64 / 100.0)
                .bytes(r.pick(&STATUS).as_bytes());
            if r.below(3) == 0 {
                w.null();
            } else {
                let line = r.below(100);
                w.bytes_with(|b| {
                    b.extend_from_slice(b"deliver \"fast\", line ");
                    put_u64(b, line);
                    b.extend_from_slice(b"\nthanks");
                });
            }
            w.int(ms / 86_400_000 - r.below(30) as i64)
                .int(live.version);
        }
        _ => {
            let kind = r.below(256);
            w.int(id)
                .uint(kind)
                .bytes_with(|b| {
                    // {"kind":{kind},"seq":{id},"msg":"ev\u00e9nement {id}"}
                    b.extend_from_slice(br#"{"kind":"#);
                    put_u64(b, kind);
                    b.extend_from_slice(br#","seq":"#);
                    put_i64(b, id);
                    b.extend_from_slice(br#","msg":"ev\u00e9nement "#);
                    put_i64(b, id);
                    b.extend_from_slice(br#""}"#);
                })
                .int(ms * 1000)
                .int(r.below(2) as i64)
                .int(live.version);
        }
    }
}

impl DatagenSource {
    /// A generator for `config` (validated).
    pub fn new(config: DatagenConfig) -> Result<Self, DatagenError> {
        config
            .validate()
            .map_err(|e| DatagenError::Invalid(e.to_string()))?;
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
            generated: 0,
            skip_until: CommitTs::ZERO,
            skip_to: None,
            pending_resolved: None,
            unannounced: None,
            started: None,
            ended: false,
            exhausted: false,
            max_live_rows: MAX_LIVE_ROWS,
            pool: ChangesPool::new(),
            run_shape: RunShape::default(),
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

    /// The position after the transactions generated so far.
    pub fn position(&self, last_ts: CommitTs) -> SourcePosition {
        let mut bytes = Vec::with_capacity(16);
        bytes.extend_from_slice(&self.generated.to_le_bytes());
        bytes.extend_from_slice(&last_ts.get().to_le_bytes());
        SourcePosition {
            version: POSITION_VERSION,
            bytes,
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.rng.next_u64() % n }
    }

    /// One row change into `into`, change `seq` of its transaction; into
    /// [`Into::Nothing`], only the generator's state moves (skipping on a
    /// resume), no values are written.
    fn row(&mut self, into: &mut Into<'_>, seq: u32) {
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
        let millis = self.next_ts.physical_millis() as i64;
        let seed = self.config.seed;
        let state = &mut self.tables[table];
        if pick < insert {
            let id = state.next_id;
            state.next_id += 1;
            let now = Live {
                id,
                version: 1,
                millis,
            };
            state.live.push(now);
            if let Some(changes) = into.table(&state.schema, &self.pool) {
                write_image(seed, &state.schema, now, &mut changes.insert_at(seq));
            }
        } else if pick < insert + update {
            let pos = self.below(live) as usize;
            let state = &mut self.tables[table];
            let was = state.live[pos];
            let now = Live {
                id: was.id,
                version: was.version + 1,
                millis,
            };
            state.live[pos] = now;
            if let Some(changes) = into.table(&state.schema, &self.pool) {
                let mut w = changes.update_at(seq);
                write_image(seed, &state.schema, was, &mut w);
                write_image(seed, &state.schema, now, &mut w);
            }
        } else {
            let pos = self.below(live) as usize;
            let state = &mut self.tables[table];
            let was = state.live.swap_remove(pos);
            if let Some(changes) = into.table(&state.schema, &self.pool) {
                write_image(seed, &state.schema, was, &mut changes.delete_at(seq));
            }
        }
    }

    /// The next transaction, or `None` when the total is reached (or commit ts
    /// ran out: see [`Source::next_event`]).
    pub fn next_transaction(&mut self) -> Option<Transaction> {
        self.generate(false)
    }

    fn generate(&mut self, dry: bool) -> Option<Transaction> {
        let mut txn = Transaction::new(self.next_ts);
        let mut into = if dry {
            Into::Nothing
        } else {
            Into::Transaction(&mut txn)
        };
        self.step(&mut into)?;
        Some(txn)
    }

    /// Generate the next transaction into `into`; its commit ts, or `None` when
    /// the total is reached (or commit ts ran out).
    fn step(&mut self, into: &mut Into<'_>) -> Option<CommitTs> {
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
        for seq in 0..n {
            self.row(into, seq as u32);
        }
        self.emitted_rows += n;
        self.generated += 1;
        match into {
            Into::Nothing => {}
            Into::Transaction(txn) => {
                txn.position = Some(self.position(commit_ts));
                txn.id = self.generated;
            }
            Into::Run(run) => run.end_transaction_with_id(
                commit_ts,
                self.generated,
                Some(self.position(commit_ts)),
            ),
        }
        // Advance 1..=3 ms per transaction, logical part for a little variety.
        let step = 1 + self.below(3);
        let logical = self.below(4);
        let millis = commit_ts.physical_millis() + step;
        if millis > MAX_PHYSICAL_MILLIS {
            self.exhausted = true;
        } else {
            self.next_ts = CommitTs::compose(millis, logical);
        }
        Some(commit_ts)
    }
}

/// Where generated rows go.
enum Into<'a> {
    /// Nowhere: skipping on a resume.
    Nothing,
    /// One transaction.
    Transaction(&'a mut Transaction),
    /// The transaction being written into a run.
    Run(&'a mut TransactionRun),
}

impl Into<'_> {
    fn table(
        &mut self,
        schema: &Arc<TableSchema>,
        pool: &ChangesPool,
    ) -> Option<&mut TableChanges> {
        match self {
            Into::Nothing => None,
            Into::Transaction(txn) => Some(txn.table_from(schema, pool)),
            // Datagen's schemas never change, so the run never refuses a table.
            Into::Run(run) => run.table(schema),
        }
    }
}

impl Source for DatagenSource {
    type Error = DatagenError;

    async fn next_event(&mut self) -> Result<SourceEvent, DatagenError> {
        if let Some(r) = self.pending_resolved.take() {
            return Ok(SourceEvent::Resolved(r));
        }
        if self.ended {
            if self.config.keep_open {
                // Quiet, not ended: nothing more ever comes.
                std::future::pending::<()>().await;
            }
            return Ok(SourceEvent::End);
        }
        let mut skipped = 0u32;
        // From a saved position: regenerate the workload's structure up to it
        // (no values), and check that it is the same workload.
        if let Some((count, ts)) = self.skip_to.take() {
            let mut last = None;
            while self.generated < count {
                match self.generate(true) {
                    Some(t) => last = Some(t.commit_ts),
                    None => break,
                }
                skipped += 1;
                if skipped.is_multiple_of(SKIP_YIELD_EVERY) {
                    tokio::task::yield_now().await;
                }
            }
            if self.generated != count || last != Some(ts) {
                self.ended = true;
                return Err(DatagenError::PositionMismatch {
                    count,
                    ts: ts.get(),
                });
            }
        }
        loop {
            if self.exhausted {
                self.ended = true;
                return Err(DatagenError::Exhausted);
            }
            let skip = self.next_ts <= self.skip_until;
            let Some(txn) = self.generate(skip) else {
                if self.exhausted {
                    continue;
                }
                self.ended = true;
                // The last transaction's mark, then End.
                if let Some(r) = self.unannounced.take() {
                    return Ok(SourceEvent::Resolved(r));
                }
                if self.config.keep_open {
                    // Quiet, not ended: nothing more ever comes.
                    std::future::pending::<()>().await;
                }
                return Ok(SourceEvent::End);
            };
            if skip {
                skipped += 1;
                if skipped.is_multiple_of(SKIP_YIELD_EVERY) {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            if self.config.rate > 0 {
                // Pace the rows emitted since the first one, not those skipped on resume.
                let first = self.emitted_rows - txn.row_count() as u64;
                let (started, base) = *self
                    .started
                    .get_or_insert_with(|| (tokio::time::Instant::now(), first));
                let paced = (self.emitted_rows - base) as f64 / self.config.rate as f64;
                tokio::time::sleep_until(started + Duration::from_secs_f64(paced)).await;
            }
            // The next transaction has a larger ts, so this one is resolved. While
            // transactions come without waiting, the mark goes out only every
            // RESOLVED_EVERY of them: the next transaction moves reading on anyway.
            let resolved = ResolvedTs::from(txn.commit_ts);
            if self.config.rate > 0 || self.generated.is_multiple_of(RESOLVED_EVERY) {
                self.pending_resolved = Some(resolved);
                self.unannounced = None;
            } else {
                self.unannounced = Some(resolved);
            }
            return Ok(SourceEvent::Transaction(txn));
        }
    }

    async fn next_run(
        &mut self,
        max_transactions: usize,
        max_bytes: usize,
    ) -> Result<Option<TransactionRun>, DatagenError> {
        // Paced, resuming, skipping or ending: one event at a time.
        if self.config.rate > 0
            || self.pending_resolved.is_some()
            || self.ended
            || self.exhausted
            || self.skip_to.is_some()
            || self.next_ts <= self.skip_until
        {
            return Ok(None);
        }
        let mut run = TransactionRun::shaped(std::mem::take(&mut self.run_shape));
        let mut last = None;
        while run.len() < max_transactions && run.wire_bytes() < max_bytes {
            match self.step(&mut Into::Run(&mut run)) {
                Some(ts) => last = Some(ts),
                None => break,
            }
        }
        self.run_shape = run.shape();
        let Some(last) = last else {
            return Ok(None);
        };
        // The next transaction has a larger ts: the run is resolved (one mark
        // per run, announced by the next event).
        self.pending_resolved = Some(ResolvedTs::from(last));
        self.unannounced = None;
        Ok(Some(run))
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.skip_until = CommitTs::from(from.ts);
        if let Some(position) = &from.position {
            if position.version != POSITION_VERSION {
                return Err(ResumeError(format!(
                    "datagen position version {} is unknown (this build reads version {POSITION_VERSION}); \
                     resume from the checkpoint ts alone by overwriting the checkpoint",
                    position.version
                )));
            }
            let bytes: [u8; 16] = position.bytes.as_slice().try_into().map_err(|_| {
                ResumeError(format!(
                    "datagen position has {} bytes, version {POSITION_VERSION} has 16",
                    position.bytes.len()
                ))
            })?;
            let count = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
            let ts = CommitTs::new(u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes")));
            self.skip_to = (count > 0).then_some((count, ts));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::source::{MAX_MIX_WEIGHT, MAX_START_MILLIS, MAX_TXN_ROWS};
    use sluice_core::{CheckpointTs, Op};

    fn drain(config: DatagenConfig) -> Vec<Transaction> {
        let mut g = DatagenSource::new(config).unwrap();
        std::iter::from_fn(|| g.next_transaction()).collect()
    }

    #[tokio::test]
    async fn a_source_kept_open_goes_quiet_after_its_rows_instead_of_ending() {
        let config = DatagenConfig {
            total_rows: 500,
            keep_open: true,
            ..Default::default()
        };
        let expected = drain(config.clone());
        let mut g = DatagenSource::new(config).unwrap();
        let mut txns = Vec::new();
        let quiet = loop {
            match tokio::time::timeout(Duration::from_millis(500), g.next_event()).await {
                Ok(Ok(SourceEvent::Transaction(t))) => txns.push(t),
                Ok(Ok(SourceEvent::Resolved(_))) => {}
                Ok(other) => panic!("{other:?}"),
                Err(_elapsed) => break true,
            }
        };
        assert!(quiet, "nothing more, and no End");
        assert_eq!(txns.len(), expected.len());
        assert_eq!(
            txns.last().map(|t| t.commit_ts),
            expected.last().map(|t| t.commit_ts)
        );
    }

    #[tokio::test]
    async fn runs_carry_exactly_the_transactions_of_the_event_stream() {
        let config = DatagenConfig {
            total_rows: 3_000,
            ..Default::default()
        };
        let one_by_one = drain(config.clone());
        let mut g = DatagenSource::new(config).unwrap();
        let (mut txns, mut runs) = (Vec::new(), 0);
        loop {
            if let Some(run) = g.next_run(100, 1 << 20).await.unwrap() {
                assert!(run.len() <= 100);
                runs += 1;
                txns.extend(run.into_transactions());
                continue;
            }
            match g.next_event().await.unwrap() {
                SourceEvent::Transaction(t) => txns.push(t),
                SourceEvent::Resolved(r) => {
                    // Each run is resolved by the mark that follows it.
                    assert_eq!(r, ResolvedTs::from(txns.last().unwrap().commit_ts));
                }
                SourceEvent::End => break,
                SourceEvent::Ddl(_) => unreachable!("datagen has no DDL"),
            }
        }
        assert!(runs >= one_by_one.len() / 100, "{runs} runs");
        // A run gives a transaction's tables back in the run's table order.
        let by_table = |mut txns: Vec<Transaction>| {
            for t in &mut txns {
                t.tables.sort_by_key(|c| c.schema().table_id);
            }
            txns
        };
        let (txns, one_by_one) = (by_table(txns), by_table(one_by_one));
        assert_eq!(txns.len(), one_by_one.len());
        for (a, b) in txns.iter().zip(&one_by_one) {
            assert!(a == b, "transaction at {} differs", b.commit_ts);
        }
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
        assert_eq!(a.iter().map(Transaction::row_count).sum::<usize>(), 500);
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
        let mut live = std::collections::HashMap::new();
        let mut ops = [0usize; 3];
        for (table, row) in txns.iter().flat_map(Transaction::rows) {
            let key = (table.table_id, format!("{:?}", row.value(0)));
            match row.op {
                Op::Insert => assert!(live.insert(key, row.after()).is_none()),
                // The before image is the image the row was last written with.
                Op::Update => assert_eq!(live.insert(key, row.after()), Some(row.before())),
                Op::Delete => assert_eq!(live.remove(&key), Some(row.before())),
            }
            ops[row.op.code() as usize] += 1;
            for image in [row.before(), row.after()].into_iter().flatten() {
                assert_eq!(image.len(), table.columns.len());
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
        assert_eq!(txns.iter().map(Transaction::row_count).sum::<usize>(), 300);
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
            for (_, row) in txn.rows() {
                ops[row.op.code() as usize] += 1;
            }
        }
        assert!(g.tables.iter().all(|t| t.live.len() <= 50));
        assert!(ops[Op::Delete.code() as usize] > 1_000, "{ops:?}");
    }

    #[test]
    fn a_start_ts_past_the_generator_starts_generated_time_after_it() {
        let start = CommitTs::compose(DatagenConfig::default().start_millis + 86_400_000 * 365, 7);
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
            g.resume(&Checkpoint::from(sluice_core::CheckpointTs::compose(
                MAX_START_MILLIS,
                0,
            )))
            .unwrap();
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

    fn events(mut g: DatagenSource) -> Result<Vec<Transaction>, DatagenError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut out = Vec::new();
            loop {
                match g.next_event().await? {
                    SourceEvent::Transaction(t) => out.push(t),
                    SourceEvent::End => return Ok(out),
                    _ => {}
                }
            }
        })
    }

    #[test]
    fn unpaced_resolved_marks_are_sparse_and_the_last_transaction_is_resolved_before_end() {
        let config = DatagenConfig {
            total_rows: 5_000,
            ..DatagenConfig::default()
        };
        let mut g = DatagenSource::new(config).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seen = rt.block_on(async {
            let mut seen = Vec::new();
            loop {
                match g.next_event().await.unwrap() {
                    SourceEvent::End => return seen,
                    e => seen.push(e),
                }
            }
        });
        let txns: Vec<CommitTs> = seen
            .iter()
            .filter_map(|e| match e {
                SourceEvent::Transaction(t) => Some(t.commit_ts),
                _ => None,
            })
            .collect();
        let marks = seen.len() - txns.len();
        assert!(
            txns.len() > 2 * RESOLVED_EVERY as usize,
            "{} transactions",
            txns.len()
        );
        assert_eq!(marks as u64, (txns.len() as u64).div_ceil(RESOLVED_EVERY));
        // Every mark resolves exactly the transaction before it, and the last
        // event before End is the mark of the last transaction.
        for pair in seen.windows(2) {
            if let (SourceEvent::Transaction(t), SourceEvent::Resolved(r)) = (&pair[0], &pair[1]) {
                assert_eq!(r.get(), t.commit_ts.get());
            }
        }
        match seen.last() {
            Some(SourceEvent::Resolved(r)) => assert_eq!(r.get(), txns.last().unwrap().get()),
            other => panic!("expected the last mark, got {other:?}"),
        }
    }

    #[test]
    fn resuming_from_a_position_gives_exactly_the_transactions_after_it() {
        let config = DatagenConfig {
            total_rows: 3_000,
            ..Default::default()
        };
        let all = drain(config.clone());
        for at in [0, 1, 17, 500, all.len() - 1] {
            let txn = &all[at];
            let mut g = DatagenSource::new(config.clone()).unwrap();
            g.resume(&Checkpoint {
                ts: CheckpointTs::from(txn.commit_ts),
                position: txn.position.clone(),
            })
            .unwrap();
            assert_eq!(events(g).unwrap(), all[at + 1..], "after transaction {at}");
        }
        // By ts alone (no position saved), the same.
        let mut g = DatagenSource::new(config.clone()).unwrap();
        g.resume(&Checkpoint::from(CheckpointTs::from(all[40].commit_ts)))
            .unwrap();
        assert_eq!(events(g).unwrap(), all[41..]);
    }

    #[test]
    fn a_position_it_cannot_read_is_a_clear_error() {
        let config = DatagenConfig {
            total_rows: 500,
            ..Default::default()
        };
        let all = drain(config.clone());
        let mut g = DatagenSource::new(config.clone()).unwrap();
        let mut position = all[10].position.clone().unwrap();
        position.version = 9;
        let err = g
            .resume(&Checkpoint {
                ts: CheckpointTs::from(all[10].commit_ts),
                position: Some(position),
            })
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("datagen position version 9 is unknown"),
            "{err}"
        );
        // A position of another workload (another seed) is refused, not misread.
        let other = drain(DatagenConfig {
            seed: 7,
            ..config.clone()
        });
        let mut g = DatagenSource::new(config).unwrap();
        g.resume(&Checkpoint {
            ts: CheckpointTs::from(other[10].commit_ts),
            position: other[10].position.clone(),
        })
        .unwrap();
        let err = events(g).unwrap_err();
        assert!(
            matches!(err, DatagenError::PositionMismatch { count: 11, .. }),
            "{err}"
        );
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
