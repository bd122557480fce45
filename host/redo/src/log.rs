//! Writing and reading a changefeed's redo log.
//!
//! Each flush writes at most one new file per log (rows, DDL) and then the
//! meta. A file is named `{rows|ddl}-{run}-{seq}-{cut}-{max}.log`. Files
//! order by `run`, then `seq`; `run` is the writer's (the changefeed's epoch
//! in a cluster), so a file that a writer paused past its lease lands after
//! its successor opened the log orders before every file of the
//! successor's, whose resumed marker supersedes it (names of four numbers
//! are of run 0). `cut` is the ts through which every event was appended
//! when the file was cut (the resolved ts the flush makes durable), `max` the
//! highest commit ts of a record in it (a transaction that comes in parts
//! may have parts above the cut). Because the meta is written only after the files of its
//! flush are durable, a file whose cut is above the meta's resolved ts holds
//! only events above it: nothing `redo apply` needs, so damage in it is
//! skipped (and said); damage in any other file stops the reader.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use sluice_core::{DdlEvent, RunPart, TableChanges, TableSchema, Transaction, TransactionRun};

use crate::buf::FileBuf;
use crate::format::rows::{RecordRef, TableRowsRef};
use crate::format::{self, Damage, LogKind, Record, Records, TooLarge};
use crate::meta::{META_FILE, Meta, MetaDamage};
use crate::storage::{DirectWrites, Entry, Storage, StorageError};

/// A file's place in the log, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileName {
    /// Which log.
    pub kind: LogKind,
    /// The run of the writer that wrote it: files order by run, then seq.
    pub run: u64,
    /// Its order among the log's files of a run (it goes on across runs).
    pub seq: u64,
    /// Every event at or below this was appended when it was cut.
    pub cut: u64,
    /// The highest commit ts of a record in it.
    pub max: u64,
}

impl FileName {
    /// The file's name.
    pub fn name(&self) -> String {
        format!(
            "{}-{:010}-{:010}-{:020}-{:020}.log",
            self.kind.prefix(),
            self.run,
            self.seq,
            self.cut,
            self.max
        )
    }

    /// Parses a name written by [`FileName::name`]; `None` for other files.
    pub fn parse(name: &str) -> Option<Self> {
        let stem = name.strip_suffix(".log")?;
        let mut parts = stem.split('-');
        let kind = match parts.next()? {
            "rows" => LogKind::Rows,
            "ddl" => LogKind::Ddl,
            _ => return None,
        };
        let numbers: Vec<u64> = parts.map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let (run, seq, cut, max) = match numbers[..] {
            [seq, cut, max] => (0, seq, cut, max),
            [run, seq, cut, max] => (run, seq, cut, max),
            _ => return None,
        };
        Some(Self {
            kind,
            run,
            seq,
            cut,
            max,
        })
    }
}

/// Why the log could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The meta is damaged.
    #[error(transparent)]
    Meta(#[from] MetaDamage),
    /// A record is too large to write.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// A file the replay needs is damaged.
    #[error("{file}: {damage}")]
    Damaged {
        /// The file's name.
        file: String,
        /// What is wrong, and where.
        damage: Damage,
    },
    /// A record refers to what the file does not have.
    #[error("{file}: {reason}")]
    Inconsistent {
        /// The file's name.
        file: String,
        /// What is missing.
        reason: String,
    },
}

/// Written into a log whose changefeed was removed, before its files are:
/// a writer that finds it starts the log anew (a changefeed created again
/// under the name), and `sluice redo` says the log was abandoned.
pub const REMOVED_MARKER: &str = "removed";

/// Removes a log's files, the [`REMOVED_MARKER`] (written first by whoever
/// removes a changefeed's log, so that a removal cut short is finished by the
/// next writer) last. Returns the files removed.
pub async fn remove_log(storage: &Storage) -> Result<usize, LogError> {
    let mut removed = 0;
    for entry in storage.list().await? {
        if entry.name != REMOVED_MARKER {
            storage.delete(&entry.name).await?;
            removed += 1;
        }
    }
    storage.delete(REMOVED_MARKER).await?;
    Ok(removed)
}

/// The files of a log, parsed and in order, and the meta.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Where the log stands; none before the first flush.
    pub meta: Option<Meta>,
    /// Its files, by kind and seq, with sizes.
    pub files: Vec<(FileName, u64)>,
    /// Other files in the directory (not the log's).
    pub others: Vec<Entry>,
    /// Its changefeed was removed ([`REMOVED_MARKER`]).
    pub removed: bool,
}

impl Listing {
    /// Lists `storage`.
    pub async fn read(storage: &Storage) -> Result<Self, LogError> {
        let mut out = Listing::default();
        for entry in storage.list().await? {
            if entry.name == META_FILE {
                continue;
            }
            if entry.name == REMOVED_MARKER {
                out.removed = true;
                continue;
            }
            match FileName::parse(&entry.name) {
                Some(f) => out.files.push((f, entry.size)),
                None => out.others.push(entry),
            }
        }
        out.files.sort();
        out.meta = match storage.get_if_there(META_FILE).await? {
            Some(bytes) => Some(Meta::decode(&bytes)?),
            None => None,
        };
        Ok(out)
    }

    /// The next seq to write; `None` when a file's seq is the last there
    /// is (no writer numbers that far: the name was made by hand).
    pub fn next_seq(&self) -> Option<u64> {
        self.files
            .iter()
            .map(|(f, _)| f.seq.checked_add(1))
            .try_fold(0, |next, seq| Some(next.max(seq?)))
    }

    /// The highest run of a file.
    pub fn last_run(&self) -> u64 {
        self.files.iter().map(|(f, _)| f.run).max().unwrap_or(0)
    }
}

/// Flush results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Bytes written (files and meta).
    pub bytes: u64,
    /// Files written.
    pub files: u32,
}

/// One log's records since the last flush.
struct Pending {
    kind: LogKind,
    bytes: FileBuf,
    max: u64,
    /// Schemas written into the current file (each file carries its own).
    schemas: HashSet<(u32, u32)>,
}

impl Pending {
    fn new(kind: LogKind) -> Self {
        Self {
            kind,
            bytes: FileBuf::default(),
            max: 0,
            schemas: HashSet::new(),
        }
    }

    fn start_if_empty(&mut self) {
        if self.bytes.is_empty() {
            self.bytes.extend_from_slice(&format::header(self.kind));
        }
    }

    fn has_records(&self) -> bool {
        self.bytes.len() > format::HEADER_LEN
    }

    fn schema(&mut self, schema: &TableSchema) -> Result<(), TooLarge> {
        self.start_if_empty();
        if !self.schemas.contains(&(schema.table_id, schema.version)) {
            format::frame(&Record::Schema(schema.clone()), &mut self.bytes)?;
            self.schemas.insert((schema.table_id, schema.version));
        }
        Ok(())
    }
}

/// Appends a changefeed's events to its redo log and flushes them.
pub struct LogWriter {
    storage: Storage,
    rows: Pending,
    ddl: Pending,
    /// The run its files are named with ([`Self::in_run`]).
    run: u64,
    next_seq: u64,
    meta: Meta,
    /// Every event at or below this has been appended.
    appended_through: u64,
    /// The meta's resolved ts when the writer opened on a log that had one:
    /// events at or below it are durable already and not appended again.
    resumed: Option<u64>,
    /// Logs whose first file since opening has yet to start with
    /// [`Record::Resumed`].
    marker_due: [bool; 2],
    /// How files are compressed.
    compression: sluice_config::RedoCompression,
    /// A flush whose write failed: [`LogWriter::flush`] writes it again (the
    /// same names, the same bytes) before anything else.
    unwritten: Option<Sealed>,
    /// The meta of the last flush sealed and not written yet: the next seal
    /// goes on from it.
    sealing: Option<Meta>,
    /// A written rows file's buffer, emptied, for the next rows file to
    /// append into (its pages are mapped and its capacity grown already: no
    /// page faults and no copies as it fills). One is enough: one file fills
    /// while the last one is written, and that one's buffer is the next's.
    spare: Option<FileBuf>,
    /// The largest rows file sealed so far: a new buffer is made this large
    /// where no size is expected.
    largest_rows: usize,
    /// The size rows files are expected to have ([`Self::expect_file_size`]):
    /// a new buffer is made this large, and a buffer that grew past twice
    /// that for an outsized file is let go once written, not kept resident.
    expected_rows: usize,
    /// The buffer of writes past the page cache, between flushes.
    direct: Option<DirectWrites>,
}

/// What one flush writes, cut from what was appended: at most one file per
/// log, then the meta. [`Sealed::write`] may run while the writer appends
/// the next events (it owns its bytes and a handle on the storage); a write
/// that failed is tried again with this same `Sealed`, so a file that may
/// have landed never lands under another name. Once written, give it back
/// to [`LogWriter::sealed`], in the order the flushes were sealed.
pub struct Sealed {
    storage: Storage,
    compression: sluice_config::RedoCompression,
    /// Files to write, and whether each is written.
    files: Vec<(FileName, SealedBytes, bool)>,
    /// The meta to write after them (if it moved).
    meta: Option<Meta>,
    /// The meta once this is written.
    result: Meta,
    /// A buffer that compression left over.
    recycled: Option<FileBuf>,
    /// The writer's buffer of writes past the page cache, while this has it.
    direct: Option<DirectWrites>,
}

/// A file's bytes: as appended (written so to a directory without
/// compression, from the block-aligned buffer), or compressed or copied for
/// an object store when first written.
enum SealedBytes {
    Raw(FileBuf),
    Ready(Arc<Vec<u8>>),
}

impl Sealed {
    /// The meta the log has once this is written.
    pub fn meta(&self) -> Meta {
        self.result
    }

    /// Bytes of the files before compression (or as written).
    pub fn bytes(&self) -> usize {
        self.files
            .iter()
            .map(|(_, b, _)| match b {
                SealedBytes::Raw(v) => v.len(),
                SealedBytes::Ready(v) => v.len(),
            })
            .sum()
    }

    /// Writes what is not written yet: the files (each made durable), then
    /// the meta. On an error, call it again. The CPU and blocking work of a
    /// flush is one job on the blocking pool (one hand-over, not one per
    /// file: a busy runtime would make every hop wait for a worker): the
    /// compression, and in a directory the writes too; an object store's
    /// requests follow it.
    pub async fn write(&mut self) -> Result<Flushed, LogError> {
        let local = self.storage.local_dir().map(Path::to_path_buf);
        let is_local = local.is_some();
        // Checked before each file and the meta, as `Storage::put` does: a
        // writer whose lease may have ended, or whose run ended while this
        // flush was under way, writes nothing more.
        let storage = self.storage.clone();
        let mut files = std::mem::take(&mut self.files);
        let (meta, compression) = (self.meta, self.compression);
        let mut recycled = self.recycled.take();
        let mut direct = self.direct.take().unwrap_or_default();
        let job = tokio::task::spawn_blocking(move || {
            let mut flushed = Flushed::default();
            let result = (|| {
                for (name, bytes, written) in files.iter_mut().filter(|f| !f.2) {
                    let ready = ready(bytes, compression, &mut recycled, is_local);
                    if let Some(dir) = &local {
                        let name = name.name();
                        let may_land = || storage.check_fence("write", &name);
                        may_land()?;
                        crate::storage::put_durably_with(
                            dir,
                            &name,
                            ready,
                            Some(&mut direct),
                            &may_land,
                        )?;
                        *written = true;
                        flushed.bytes += ready.len() as u64;
                        flushed.files += 1;
                    }
                }
                if let (Some(dir), Some(meta)) = (&local, meta) {
                    let may_land = || storage.check_fence("write", META_FILE);
                    may_land()?;
                    let bytes = meta.encode();
                    crate::storage::put_durably(dir, META_FILE, &bytes, &may_land)?;
                    flushed.bytes += bytes.len() as u64;
                }
                Ok::<_, StorageError>(())
            })();
            (files, recycled, direct, flushed, result)
        });
        let (files, recycled, direct, mut flushed, result) = match job.await {
            Ok(done) => done,
            // A panic is a bug: it goes on (the writer stops), rather than a
            // retry without the files it took.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => return Err(crate::storage::cancelled(e).into()),
        };
        self.files = files;
        self.recycled = recycled;
        self.direct = Some(direct);
        result?;
        if !is_local {
            for (name, bytes, written) in self.files.iter_mut().filter(|f| !f.2) {
                let SealedBytes::Ready(ready) = bytes else {
                    unreachable!("made ready by the job")
                };
                self.storage.put(&name.name(), ready.clone()).await?;
                *written = true;
                flushed.bytes += ready.len() as u64;
                flushed.files += 1;
            }
            if let Some(meta) = self.meta {
                let bytes = meta.encode();
                flushed.bytes += bytes.len() as u64;
                self.storage.put(META_FILE, Arc::new(bytes)).await?;
            }
        }
        self.meta = None;
        Ok(flushed)
    }
}

/// The bytes of a sealed file as written: compressed on first use (the raw
/// buffer, when compression made a new one, goes to `recycled`); for an
/// object store without compression, a copy it can share; else the buffer
/// itself.
fn ready<'a>(
    bytes: &'a mut SealedBytes,
    compression: sluice_config::RedoCompression,
    recycled: &mut Option<FileBuf>,
    local: bool,
) -> &'a [u8] {
    let plain = compression == sluice_config::RedoCompression::None;
    if let SealedBytes::Raw(raw) = bytes
        && !(plain && local)
    {
        let raw = std::mem::take(raw);
        let out = if plain {
            raw.as_slice().to_vec()
        } else {
            format::compress(raw.as_slice(), compression)
        };
        recycled.get_or_insert(raw);
        *bytes = SealedBytes::Ready(Arc::new(out));
    }
    match bytes {
        SealedBytes::Raw(b) => b.as_slice(),
        SealedBytes::Ready(b) => b,
    }
}

impl LogWriter {
    /// Rows files are expected to be about `bytes` large (what the caller
    /// flushes at): their buffers are made that large from the first, not
    /// grown to it by doubling and copying. A larger file grows its buffer,
    /// which is let go once written if it grew past twice `bytes` (so an
    /// outsized flush does not keep its memory resident). Without an
    /// expectation, buffers are made as large as the largest file so far.
    pub fn expect_file_size(&mut self, bytes: usize) {
        self.expected_rows = bytes;
    }

    fn new_buffer_size(&self) -> usize {
        if self.expected_rows > 0 {
            self.expected_rows
        } else {
            self.largest_rows
        }
    }

    /// Whether a written buffer is kept for the next file.
    fn keeps(&self, buf: &FileBuf) -> bool {
        buf.capacity() > 0
            && (self.expected_rows == 0 || buf.capacity() <= self.expected_rows.saturating_mul(2))
    }

    /// Files written from now on are compressed so (`consistent.compression`).
    pub fn with_compression(mut self, compression: sluice_config::RedoCompression) -> Self {
        self.compression = compression;
        self
    }

    /// A writer of the log in `storage`, going on after what is there.
    pub async fn open(storage: Storage) -> Result<Self, LogError> {
        let mut listing = Listing::read(&storage).await?;
        if listing.removed {
            // What is left of a removed changefeed of this name.
            tracing::info!(
                log = storage.location(),
                "The redo log belonged to a removed changefeed; starting it anew."
            );
            remove_log(&storage).await?;
            listing = Listing::read(&storage).await?;
        }
        let resumed = (listing.meta.is_some() || !listing.files.is_empty())
            .then(|| listing.meta.unwrap_or_default().resolved_ts);
        let meta = listing.meta.unwrap_or_default();
        let next_seq = listing.next_seq().ok_or_else(|| LogError::Inconsistent {
            file: storage.location().to_string(),
            reason: format!(
                "a file has seq {}, and no file can follow it (a name Sluice did not write?)",
                u64::MAX
            ),
        })?;
        Ok(Self {
            storage,
            rows: Pending::new(LogKind::Rows),
            ddl: Pending::new(LogKind::Ddl),
            run: listing.last_run(),
            next_seq,
            appended_through: meta.resolved_ts,
            meta,
            resumed,
            marker_due: [resumed.is_some(); 2],
            compression: sluice_config::RedoCompression::None,
            unwritten: None,
            sealing: None,
            spare: None,
            largest_rows: 0,
            expected_rows: 0,
            direct: None,
        })
    }

    /// Names its files with run `run` (the changefeed's epoch in a cluster,
    /// which grows with every assignment), so that they order after every
    /// file an earlier epoch's writer landed, one landing late included. A
    /// run below the log's last is not taken: the files go on in the last.
    pub fn in_run(mut self, run: u64) -> Self {
        self.run = self.run.max(run);
        self
    }

    /// The run its files are named with.
    pub fn run(&self) -> u64 {
        self.run
    }

    /// Goes on from `checkpoint` (the run's start) when the log was resolved
    /// past it: what the log holds above it is read again, and logged again.
    /// A source need not give an event read again the commit ts it had the
    /// first time (a MySQL source gives resolved ts from heartbeats by the
    /// clock, and later transactions a ts above them; read again from a
    /// position, they get a ts from their binlog time), so skipping what is
    /// at or below the old resolved ts would drop some and log others twice.
    /// The meta goes back to `checkpoint` first (written now, so that the log
    /// never claims what it does not hold in order), the files written from
    /// now on open with a resumed marker at `checkpoint`, and a replay counts
    /// the records before it only up to there.
    ///
    /// Either way, the next flush writes a file of each log (rows and DDL)
    /// opening with the marker, even with nothing else in it: a DDL the last
    /// run logged above the marker is superseded as its rows are, not left
    /// to be applied a second time in another place.
    pub async fn rewind_to(&mut self, checkpoint: u64) -> Result<(), LogError> {
        let Some(resumed) = self.resumed else {
            return Ok(());
        };
        if checkpoint < resumed {
            let meta = Meta {
                resolved_ts: checkpoint,
                checkpoint_ts: self.meta.checkpoint_ts.min(checkpoint),
            };
            self.storage.put(META_FILE, Arc::new(meta.encode())).await?;
            self.meta = meta;
            self.appended_through = checkpoint;
            self.resumed = Some(checkpoint);
        }
        self.start(LogKind::Rows)?;
        self.start(LogKind::Ddl)?;
        Ok(())
    }

    /// Whether an event at `ts` is durable already (read again after a
    /// restart).
    fn durable(&self, ts: u64) -> bool {
        self.resumed.is_some_and(|r| ts <= r)
    }

    /// Starts `kind`'s pending file if empty, with the resumed marker if it
    /// is the first since opening.
    fn start(&mut self, kind: LogKind) -> Result<(), TooLarge> {
        let new_size = self.new_buffer_size();
        let (pending, due) = match kind {
            LogKind::Rows => (&mut self.rows, &mut self.marker_due[0]),
            LogKind::Ddl => (&mut self.ddl, &mut self.marker_due[1]),
        };
        if pending.bytes.capacity() == 0 && kind == LogKind::Rows {
            pending.bytes = self
                .spare
                .take()
                .unwrap_or_else(|| FileBuf::with_capacity(new_size));
        }
        pending.start_if_empty();
        if std::mem::take(due) {
            let resolved_ts = self.resumed.unwrap_or(0);
            format::frame(&Record::Resumed { resolved_ts }, &mut pending.bytes)?;
        }
        Ok(())
    }

    /// The capacity of the buffer kept for the next rows file.
    #[cfg(test)]
    pub(crate) fn spare_capacity(&self) -> Option<usize> {
        self.spare.as_ref().map(FileBuf::capacity)
    }

    /// Files written past the page cache, and bytes copied to do it.
    #[cfg(test)]
    pub(crate) fn direct_writes(&self) -> Option<(u64, u64, bool)> {
        self.direct
            .as_ref()
            .map(|d| (d.files(), d.copied(), d.refused()))
    }

    /// Where the log stands (as last written).
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// The storage.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Writes nothing more once `retired` closes, a flush under way included
    /// (see [`Storage::retired_by`]).
    pub fn retire_with(&mut self, retired: sluice_core::WriteFence) {
        self.storage.retired_by(retired);
    }

    /// Bytes appended since the last flush (a failed write's included).
    pub fn pending_bytes(&self) -> usize {
        [&self.rows, &self.ddl]
            .iter()
            .map(|p| p.bytes.len())
            .sum::<usize>()
            + self.unwritten.as_ref().map_or(0, Sealed::bytes)
    }

    /// Appends one transaction (or one part of it).
    pub fn append_transaction(&mut self, txn: &Transaction) -> Result<(), LogError> {
        if txn.tables.iter().all(TableChanges::is_empty) || self.durable(txn.commit_ts.get()) {
            if !txn.more {
                self.appended_through = self.appended_through.max(txn.commit_ts.get());
            }
            return Ok(());
        }
        self.start(LogKind::Rows)?;
        for t in &txn.tables {
            self.rows.schema(t.schema())?;
        }
        let marks = [format::TxnMark {
            commit_ts: txn.commit_ts.get(),
            id: txn.id,
            more: txn.more,
        }];
        let tables: Vec<TableRowsRef<'_>> = txn
            .tables
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| table_rows(t, vec![(row_count(t.len()), 0)]))
            .collect();
        encode_rows(&mut self.rows.bytes, &marks, &tables)?;
        self.rows.max = self.rows.max.max(txn.commit_ts.get());
        if !txn.more {
            self.appended_through = self.appended_through.max(txn.commit_ts.get());
        }
        Ok(())
    }

    /// Appends consecutive transactions gathered into a run.
    pub fn append_run(&mut self, run: &TransactionRun) -> Result<(), LogError> {
        let Some(last) = run.transactions.last() else {
            return Ok(());
        };
        if self.durable(run.transactions[0].commit_ts.get()) {
            // Read again after a restart: what is durable already is not
            // appended again (the transactions after it one by one).
            for txn in run.clone().into_transactions() {
                self.append_transaction(&txn)?;
            }
            return Ok(());
        }
        self.start(LogKind::Rows)?;
        for part in &run.parts {
            self.rows.schema(part.changes.schema())?;
        }
        let marks: Vec<format::TxnMark> = run
            .transactions
            .iter()
            .map(|t| format::TxnMark {
                commit_ts: t.commit_ts.get(),
                id: t.id,
                more: false,
            })
            .collect();
        let tables: Vec<TableRowsRef<'_>> = run
            .parts
            .iter()
            .filter(|p| !p.changes.is_empty())
            .map(|p: &RunPart| {
                let runs = p.segments.iter().map(|s| (row_count(s.rows), s.txn));
                table_rows(&p.changes, runs.collect())
            })
            .collect();
        if !tables.is_empty() {
            encode_rows(&mut self.rows.bytes, &marks, &tables)?;
            self.rows.max = self.rows.max.max(last.commit_ts.get());
        }
        self.appended_through = self.appended_through.max(last.commit_ts.get());
        Ok(())
    }

    /// Appends a DDL.
    pub fn append_ddl(&mut self, ddl: &DdlEvent) -> Result<(), LogError> {
        if self.durable(ddl.commit_ts.get()) {
            return Ok(());
        }
        self.start(LogKind::Ddl)?;
        format::frame(&Record::Ddl(ddl.clone()), &mut self.ddl.bytes)?;
        self.ddl.max = self.ddl.max.max(ddl.commit_ts.get());
        self.appended_through = self.appended_through.max(ddl.commit_ts.get());
        Ok(())
    }

    /// Every event at or below `ts` has been appended (a resolved ts of the
    /// source).
    pub fn resolved(&mut self, ts: u64) {
        self.appended_through = self.appended_through.max(ts);
    }

    /// Every event at or below this has been appended.
    pub fn appended_through(&self) -> u64 {
        self.appended_through
    }

    /// Writes what was appended (one file per log that has records), then the
    /// meta with the resolved ts moved to what was appended through and the
    /// checkpoint to `checkpoint` (never past the resolved ts, never back):
    /// [`Self::seal`], [`Sealed::write`], [`Self::sealed`]. A flush that
    /// failed is written first by the next (under the same names).
    pub async fn flush(&mut self, checkpoint: u64) -> Result<Flushed, LogError> {
        let mut flushed = Flushed::default();
        if let Some(mut failed) = self.unwritten.take() {
            match failed.write().await {
                Ok(f) => {
                    flushed = f;
                    self.sealed(failed);
                }
                Err(e) => {
                    self.unwritten = Some(failed);
                    return Err(e);
                }
            }
        }
        let mut sealed = self.seal(checkpoint);
        match sealed.write().await {
            Ok(f) => {
                flushed.bytes += f.bytes;
                flushed.files += f.files;
                self.sealed(sealed);
                Ok(flushed)
            }
            Err(e) => {
                self.unwritten = Some(sealed);
                Err(e)
            }
        }
    }

    /// Cuts what was appended into the files of one flush, and the meta that
    /// follows them (see [`Sealed`]); appending goes on into new files.
    /// Sealed flushes must be written one after another, in the order they
    /// were sealed (a meta never lands before the files of its flush and of
    /// those before it).
    pub fn seal(&mut self, checkpoint: u64) -> Sealed {
        let cut = self.appended_through;
        let mut files = Vec::new();
        for pending in [&mut self.rows, &mut self.ddl] {
            if !pending.has_records() {
                continue;
            }
            let name = FileName {
                kind: pending.kind,
                run: self.run,
                seq: self.next_seq,
                cut,
                max: pending.max.max(cut),
            };
            // Below u64::MAX: `open` refuses a log numbered that far, and
            // a writer writes far fewer files.
            self.next_seq += 1;
            if pending.kind == LogKind::Rows {
                self.largest_rows = self.largest_rows.max(pending.bytes.len());
            }
            files.push((
                name,
                SealedBytes::Raw(std::mem::take(&mut pending.bytes)),
                false,
            ));
            pending.max = 0;
            pending.schemas.clear();
        }
        let base = self.sealing.unwrap_or(self.meta);
        let result = Meta {
            resolved_ts: base.resolved_ts.max(cut),
            checkpoint_ts: base
                .checkpoint_ts
                .max(checkpoint.min(base.resolved_ts.max(cut))),
        };
        self.sealing = Some(result);
        Sealed {
            storage: self.storage.clone(),
            compression: self.compression,
            files,
            meta: (result != base).then_some(result),
            result,
            recycled: None,
            direct: self.direct.take(),
        }
    }

    /// `sealed` is written: its meta is the log's (and a buffer of it is kept
    /// for the next file).
    pub fn sealed(&mut self, sealed: Sealed) {
        debug_assert!(sealed.meta.is_none(), "written");
        let returned = sealed
            .files
            .into_iter()
            .filter(|(name, _, _)| name.kind == LogKind::Rows)
            .filter_map(|(_, bytes, _)| match bytes {
                SealedBytes::Ready(_) => None,
                SealedBytes::Raw(b) => Some(b),
            })
            .chain(sealed.recycled)
            .chain(self.spare.take())
            .filter(|b| self.keeps(b))
            .max_by_key(FileBuf::capacity);
        self.spare = returned.map(|mut b| {
            b.clear();
            b
        });
        if self.direct.is_none() {
            self.direct = sealed.direct;
        }
        if sealed.result.resolved_ts >= self.meta.resolved_ts {
            self.meta = sealed.result;
        }
        if self.sealing == Some(sealed.result) {
            self.sealing = None;
        }
    }

    /// Removes the files wholly at or below the meta's checkpoint (every
    /// record in them is downstream); returns how many.
    pub async fn collect_garbage(&mut self) -> Result<usize, LogError> {
        let listing = Listing::read(&self.storage).await?;
        let checkpoint = self.meta.checkpoint_ts;
        let mut removed = 0;
        // Oldest first, and only while every file so far is wholly below
        // the checkpoint: a file that opens with a resumed marker is never
        // removed while a file before it (whose records it may discard) is
        // there.
        let mut files = listing.files;
        files.sort_by_key(|(f, _)| (f.run, f.seq));
        for (file, _) in files {
            // `max` is never below `cut`.
            if file.max > checkpoint {
                break;
            }
            self.storage.delete(&file.name()).await?;
            removed += 1;
        }
        Ok(removed)
    }
}

/// The rows of `changes` for a record: `txn` gives their transactions as
/// (end of their rows, index in the record) runs.
fn table_rows(changes: &TableChanges, txn: Vec<(u32, u32)>) -> TableRowsRef<'_> {
    TableRowsRef {
        table_id: changes.schema().table_id,
        schema_version: changes.schema().version,
        ops: changes.ops(),
        txn,
        seq: changes.seq(),
        flags: changes.flags(),
        before: changes.before(),
        after: changes.after(),
    }
}

/// A row count as a record holds it (a record is far below 4 Gi rows: it
/// holds at most `MAX_RECORD_BYTES`, and every row takes bytes).
fn row_count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn encode_rows(
    out: &mut FileBuf,
    txns: &[format::TxnMark],
    tables: &[TableRowsRef<'_>],
) -> Result<(), TooLarge> {
    format::frame(&RecordRef::Rows { txns, tables }, out).map(|_| ())
}

/// What a reader found in one file.
#[derive(Debug)]
pub struct FileRecords {
    /// The file.
    pub file: FileName,
    /// Its records, in order (the schemas resolved).
    pub records: Vec<Record>,
    /// Damage past the resolved ts that was skipped, if any.
    pub skipped: Option<Damage>,
}

/// Reads the files of a log for a replay up to the meta's resolved ts.
pub struct LogReader {
    storage: Storage,
    listing: Listing,
}

impl LogReader {
    /// A reader of the log in `storage`.
    pub async fn open(storage: Storage) -> Result<Self, LogError> {
        let listing = Listing::read(&storage).await?;
        Ok(Self { storage, listing })
    }

    /// The log's files and meta.
    pub fn listing(&self) -> &Listing {
        &self.listing
    }

    /// The files a replay of (checkpoint, resolved] needs, in order: those
    /// that may hold a record above the checkpoint and at or below the
    /// resolved ts.
    pub fn files_for(&self, kind: LogKind, meta: Meta) -> Vec<FileName> {
        self.listing
            .files
            .iter()
            .map(|(f, _)| *f)
            .filter(|f| f.kind == kind && f.max > meta.checkpoint_ts)
            .collect()
    }

    /// Reads `file` whole. Damage stops the read with an error, unless the
    /// file's cut is above `resolved` (it holds only events past it): then
    /// the records before the damage are returned and the damage is said in
    /// `skipped`.
    pub async fn read(&self, file: FileName, resolved: u64) -> Result<FileRecords, LogError> {
        let name = file.name();
        let bytes = self.storage.get(&name).await?;
        let beyond = file.cut > resolved;
        let damaged = |damage: Damage| LogError::Damaged {
            file: name.clone(),
            damage,
        };
        // Damage to the file as a whole: nothing of it is read.
        let unreadable = |damage: Damage| {
            if beyond {
                Ok(FileRecords {
                    file,
                    records: Vec::new(),
                    skipped: Some(damage),
                })
            } else {
                Err(damaged(damage))
            }
        };
        let bytes = match format::decompress(bytes) {
            Ok(bytes) => bytes,
            Err(damage) => return unreadable(damage),
        };
        let (kind, records) = match Records::new(&bytes) {
            Ok(r) => r,
            Err(damage) => return unreadable(damage),
        };
        if kind != file.kind {
            return Err(LogError::Inconsistent {
                file: name,
                reason: format!("its header says {:?}, its name {:?}", kind, file.kind),
            });
        }
        let mut out = Vec::new();
        let mut skipped = None;
        for record in records {
            match record {
                Ok((_, record)) => out.push(record),
                Err(damage) if beyond => {
                    skipped = Some(damage);
                    break;
                }
                Err(damage) => return Err(damaged(damage)),
            }
        }
        Ok(FileRecords {
            file,
            records: out,
            skipped,
        })
    }
}

/// The schemas a file's rows refer to, gathered as its records are read.
#[derive(Default)]
pub struct Schemas(HashMap<(u32, u32), Arc<TableSchema>>);

impl Schemas {
    /// Keeps `schema`.
    pub fn add(&mut self, schema: TableSchema) {
        self.0
            .insert((schema.table_id, schema.version), Arc::new(schema));
    }

    /// The schema of `table_id` at `version`, if seen.
    pub fn get(&self, table_id: u32, version: u32) -> Option<&Arc<TableSchema>> {
        self.0.get(&(table_id, version))
    }
}
