//! `EmbeddedMetaStore`: the single-node meta store, one redb file in the data dir.
//!
//! Durability: every write (put, delete, a transaction that changes anything, a
//! lease grant, a revocation or expiry) is one redb write transaction, durable when
//! its call returns. The store revision is kept in the same file, so it survives a
//! restart or a crash together with the data.
//!
//! Leases live in memory with their deadlines. Keys record their lease in the file,
//! so when the store is opened, every key that is still attached to a lease is
//! deleted (one write): a lease never outlives the process that granted it, exactly
//! as if it had expired while the store was down.
//!
//! Watches read a bounded, in-memory history of committed changes (the last
//! [`EmbeddedOptions::history_capacity`] changes since the store was opened). Asking
//! for older changes, or falling that far behind, gives [`MetaError::Compacted`].

mod history;
mod leases;
mod record;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::MetaError;
use crate::store::{KeyValue, Lease, LeaseId, Listing, MetaStore, Revision};
use crate::txn::{Op, OpResult, Txn, TxnResult};
use crate::watch::{WatchEvent, WatchEventKind, WatchStream};

use history::{Cursor, History};
use leases::Leases;

/// Every key and its record (see `record.rs`).
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// Store-wide counters: `format-version`, `revision`, `next-lease-id`.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const FORMAT_VERSION_KEY: &str = "format-version";
const REVISION_KEY: &str = "revision";
const NEXT_LEASE_KEY: &str = "next-lease-id";

/// The version of the file's tables and record encoding. A file with a higher
/// version is refused with [`MetaError::NewerLayout`].
pub const FORMAT_VERSION: u64 = 1;

/// How many events a watch task reads from the history at a time.
const READ_BATCH: usize = 64;

/// How long `open` waits for a store of this process that still holds the file
/// (a call in flight after the last handle was dropped) to let go of it.
const REOPEN_WAIT: Duration = Duration::from_secs(2);

/// How long `open` waits for another process that holds the file to let go
/// of it (a server killed a moment ago is still tearing down).
const OTHER_PROCESS_WAIT: Duration = Duration::from_secs(10);

/// The files held by the stores of this process (canonical paths).
static OPEN_FILES: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// A file's entry in [`OPEN_FILES`], removed after the database is closed.
struct Registration(PathBuf);

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&OPEN_FILES).remove(&self.0);
    }
}

fn held_by_this_process(path: &Path) -> bool {
    std::fs::canonicalize(path).is_ok_and(|p| lock(&OPEN_FILES).contains(&p))
}

/// Options of [`EmbeddedMetaStore::open_with`].
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How many changes the watch history keeps (at least 1). Default 10,000.
    pub history_capacity: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            history_capacity: 10_000,
        }
    }
}

/// The embedded, file-backed meta store. Cheap to clone; clones share the store.
/// The file closes when the last clone (and the last call in flight) is dropped.
#[derive(Clone)]
pub struct EmbeddedMetaStore {
    shared: Arc<Shared>,
}

struct Shared {
    db: Database,
    path: PathBuf,
    /// Held from the start of a write transaction until its changes are published,
    /// so the history is in revision order.
    writer: Mutex<()>,
    leases: Mutex<Leases>,
    history: Arc<Mutex<History>>,
    /// The history's next sequence number, bumped after every publish.
    published: watch::Sender<u64>,
    /// Wakes the lease expiry task: a lease was granted, or the store is dropped.
    lease_wakeup: Arc<Notify>,
    /// Dropped after `db` (fields drop in order), so the file is closed by then.
    _registration: Registration,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.lease_wakeup.notify_one();
    }
}

impl std::fmt::Debug for EmbeddedMetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedMetaStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

impl EmbeddedMetaStore {
    /// The file name the server uses inside its data dir.
    pub const FILE_NAME: &str = "meta.redb";

    /// Open (or create) the store in the file at `path`, with default options.
    /// See [`EmbeddedMetaStore::open_with`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, MetaError> {
        Self::open_with(path, EmbeddedOptions::default()).await
    }

    /// Open (or create) the store in the file at `path`. Must be called inside a
    /// tokio runtime (it starts the lease expiry task).
    ///
    /// The whole file is checked on open, so a damaged file, or one that is not a
    /// meta store, is [`MetaError::Corrupt`]; one written by a newer Sluice is
    /// [`MetaError::NewerLayout`]; one open elsewhere is [`MetaError::InUse`]. Keys
    /// attached to leases are deleted (see the module docs).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: EmbeddedOptions,
    ) -> Result<Self, MetaError> {
        let path = path.as_ref().to_path_buf();
        let give_up = Instant::now() + REOPEN_WAIT;
        let other_gives_up = Instant::now() + OTHER_PROCESS_WAIT;
        let mut waited = false;
        let opened = loop {
            let file = path.clone();
            let opened = match tokio::task::spawn_blocking(move || open_file(&file)).await {
                Ok(opened) => opened,
                // redb documents that it may panic on a file damaged outside redb.
                Err(err) if err.is_panic() => Err(MetaError::Corrupt {
                    path: path.clone(),
                    reason: "the storage engine failed on its contents".into(),
                    source: None,
                }),
                Err(_) => Err(shutting_down()),
            };
            match opened {
                Err(MetaError::InUse { .. })
                    if held_by_this_process(&path) && Instant::now() < give_up =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                // Another process holds the lock: one just killed lets go as
                // it tears down (a fraction of a second); one that runs on
                // keeps it, and the open fails with InUse after the wait.
                Err(MetaError::InUse { .. })
                    if !held_by_this_process(&path) && Instant::now() < other_gives_up =>
                {
                    if !waited {
                        waited = true;
                        tracing::warn!(
                            path = %path.display(),
                            wait_s = OTHER_PROCESS_WAIT.as_secs(),
                            "The meta store file is locked by another process; waiting for it to let go (a process that was just stopped takes a moment to release it)."
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                opened => break opened?,
            }
        };
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        lock(&OPEN_FILES).insert(canonical.clone());
        let registration = Registration(canonical);
        info!(
            path = %path.display(),
            revision = %opened.revision,
            deleted_leased_keys = opened.deleted_leased_keys,
            "Meta store opened."
        );
        let (published, _) = watch::channel(0);
        let lease_wakeup = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            db: opened.db,
            path,
            writer: Mutex::new(()),
            leases: Mutex::new(Leases::default()),
            history: Arc::new(Mutex::new(History::new(
                opened.revision,
                options.history_capacity,
            ))),
            published,
            lease_wakeup: lease_wakeup.clone(),
            _registration: registration,
        });
        tokio::spawn(expire_leases(Arc::downgrade(&shared), lease_wakeup));
        Ok(Self { shared })
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Forget the watch history at and below `revision` (etcd's compaction, which
    /// the embedded store otherwise does only by its history bound). Watches that
    /// still needed those changes end with [`MetaError::Compacted`].
    pub fn compact(&self, revision: Revision) {
        lock(&self.shared.history).compact(revision);
        self.shared.published.send_modify(|_| {});
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Shared) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        let shared = self.shared.clone();
        match tokio::task::spawn_blocking(move || f(&shared)).await {
            Ok(result) => result,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Err(shutting_down()),
        }
    }
}

#[async_trait]
impl MetaStore for EmbeddedMetaStore {
    async fn txn(&self, txn: Txn) -> Result<TxnResult, MetaError> {
        txn.validate()?;
        self.blocking(move |s| s.txn(&txn)).await
    }

    async fn list(&self, prefix: &str) -> Result<Listing, MetaError> {
        let prefix = prefix.to_owned();
        self.blocking(move |s| s.list(&prefix)).await
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        crate::txn::validate_key(key)?;
        let key = key.to_owned();
        self.blocking(move |s| s.get(&key)).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, MetaError> {
        crate::store::validate_lease_ttl(ttl)?;
        self.blocking(move |s| s.grant_lease(ttl)).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        lock(&self.shared.leases).keep_alive(lease, Instant::now())
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.blocking(move |s| s.revoke(lease)).await
    }

    async fn watch(&self, prefix: &str, after: Option<Revision>) -> Result<WatchStream, MetaError> {
        let cursor = lock(&self.shared.history).start(after)?;
        let published = self.shared.published.subscribe();
        let (tx, stream) = WatchStream::channel();
        tokio::spawn(feed_watch(
            self.shared.history.clone(),
            published,
            cursor,
            prefix.to_owned(),
            tx,
        ));
        Ok(stream)
    }
}

/// What `open_file` found.
struct Opened {
    db: Database,
    revision: Revision,
    deleted_leased_keys: usize,
}

/// Open or create the file, check its format, and delete the keys of the leases of
/// the previous run.
fn open_file(path: &Path) -> Result<Opened, MetaError> {
    let err = |e| storage_error(path, e);
    let mut builder = redb::Builder::new();
    builder.set_check_integrity_on_open(true);
    // A new store is created only where no file exists: an existing file that is
    // empty, truncated or foreign is refused, never silently replaced by an empty
    // store (which would lose every record while looking healthy).
    let db = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => builder.create(path),
        Err(e) => {
            return Err(MetaError::Corrupt {
                path: path.to_owned(),
                reason: format!("it cannot be read ({e})"),
                source: None,
            });
        }
        Ok(m) if m.len() == 0 => {
            return Err(MetaError::Corrupt {
                path: path.to_owned(),
                reason: "the file is empty (0 bytes); a new store is created only where no \
                         file exists"
                    .into(),
                source: None,
            });
        }
        Ok(_) => builder.open(path),
    }
    .map_err(|e| err(e.into()))?;
    let wtx = db.begin_write().map_err(|e| err(e.into()))?;
    let tables: Vec<String> = wtx
        .list_tables()
        .map_err(|e| err(e.into()))?
        .map(|t| t.name().to_owned())
        .collect();
    let (revision, deleted) = {
        let mut meta = wtx.open_table(META).map_err(|e| err(e.into()))?;
        let mut kv = wtx.open_table(KV).map_err(|e| err(e.into()))?;
        let format = meta
            .get(FORMAT_VERSION_KEY)
            .map_err(|e| err(e.into()))?
            .map(|v| v.value());
        let corrupt = |reason: &str| MetaError::Corrupt {
            path: path.to_owned(),
            reason: reason.to_owned(),
            source: None,
        };
        match format {
            None if tables.is_empty() => {
                for (key, value) in [
                    (FORMAT_VERSION_KEY, FORMAT_VERSION),
                    (REVISION_KEY, 0),
                    (NEXT_LEASE_KEY, 1),
                ] {
                    meta.insert(key, value).map_err(|e| err(e.into()))?;
                }
            }
            None => return Err(corrupt("it holds tables but no format version")),
            Some(found) if found > FORMAT_VERSION => {
                return Err(MetaError::NewerLayout {
                    location: format!("meta store file {}", path.display()),
                    found,
                    supported: FORMAT_VERSION,
                });
            }
            Some(0) => return Err(corrupt("its format version is 0")),
            Some(_) => {}
        }
        let mut revision = read_counter(path, &meta, REVISION_KEY)?;
        read_counter(path, &meta, NEXT_LEASE_KEY)?;
        let mut leased = Vec::new();
        for entry in kv.iter().map_err(|e| err(e.into()))? {
            let (key, value) = entry.map_err(|e| err(e.into()))?;
            let kv = record::decode(key.value(), value.value()).map_err(|r| corrupt(&r))?;
            if kv.mod_revision > revision {
                return Err(corrupt(&format!(
                    "key {:?} has mod revision {} above the store revision {revision}",
                    kv.key, kv.mod_revision
                )));
            }
            if kv.lease.is_some() {
                leased.push(kv.key);
            }
        }
        if !leased.is_empty() {
            revision = revision.next();
            for key in &leased {
                kv.remove(key.as_str()).map_err(|e| err(e.into()))?;
            }
            meta.insert(REVISION_KEY, revision.0)
                .map_err(|e| err(e.into()))?;
        }
        (revision, leased.len())
    };
    wtx.commit().map_err(|e| err(e.into()))?;
    Ok(Opened {
        db,
        revision,
        deleted_leased_keys: deleted,
    })
}

fn read_counter(
    path: &Path,
    meta: &impl ReadableTable<&'static str, u64>,
    key: &str,
) -> Result<Revision, MetaError> {
    match meta.get(key).map_err(|e| storage_error(path, e.into()))? {
        Some(v) => Ok(Revision(v.value())),
        None => Err(MetaError::Corrupt {
            path: path.to_owned(),
            reason: format!("its {key} counter is missing"),
            source: None,
        }),
    }
}

impl Shared {
    fn err(&self, err: impl Into<redb::Error>) -> MetaError {
        storage_error(&self.path, err.into())
    }

    fn corrupt(&self, reason: String) -> MetaError {
        MetaError::Corrupt {
            path: self.path.clone(),
            reason,
            source: None,
        }
    }

    fn read(
        &self,
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        key: &str,
    ) -> Result<Option<KeyValue>, MetaError> {
        match table.get(key).map_err(|e| self.err(e))? {
            Some(bytes) => record::decode(key, bytes.value())
                .map(Some)
                .map_err(|r| self.corrupt(r)),
            None => Ok(None),
        }
    }

    fn revision(
        &self,
        meta: &impl ReadableTable<&'static str, u64>,
    ) -> Result<Revision, MetaError> {
        read_counter(&self.path, meta, REVISION_KEY)
    }

    fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let rtx = self.db.begin_read().map_err(|e| self.err(e))?;
        let kv = rtx.open_table(KV).map_err(|e| self.err(e))?;
        self.read(&kv, key)
    }

    fn list(&self, prefix: &str) -> Result<Listing, MetaError> {
        let rtx = self.db.begin_read().map_err(|e| self.err(e))?;
        let kv = rtx.open_table(KV).map_err(|e| self.err(e))?;
        let meta = rtx.open_table(META).map_err(|e| self.err(e))?;
        let mut kvs = Vec::new();
        for entry in kv.range(prefix..).map_err(|e| self.err(e))? {
            let (key, value) = entry.map_err(|e| self.err(e))?;
            let key = key.value();
            if !key.starts_with(prefix) {
                break;
            }
            kvs.push(record::decode(key, value.value()).map_err(|r| self.corrupt(r))?);
        }
        Ok(Listing {
            kvs,
            revision: self.revision(&meta)?,
        })
    }

    fn txn(&self, txn: &Txn) -> Result<TxnResult, MetaError> {
        let writes = txn
            .success
            .iter()
            .chain(&txn.failure)
            .any(|op| !matches!(op, Op::Get { .. }));
        if !writes {
            return self.read_only_txn(txn);
        }
        let _writer = lock(&self.writer);
        let wtx = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut events = Vec::new();
        let mut moves = Vec::new();
        let mut results = Vec::new();
        let (succeeded, revision) = {
            let mut kv = wtx.open_table(KV).map_err(|e| self.err(e))?;
            let mut meta = wtx.open_table(META).map_err(|e| self.err(e))?;
            let current = self.revision(&meta)?;
            let mut succeeded = true;
            for compare in &txn.compares {
                succeeded &= compare.holds(self.read(&kv, compare.key())?.as_ref());
            }
            let ops = if succeeded {
                &txn.success
            } else {
                &txn.failure
            };
            {
                let leases = lock(&self.leases);
                let now = Instant::now();
                for op in ops {
                    if let Op::Put {
                        lease: Some(lease), ..
                    } = op
                        && !leases.is_live(*lease, now)
                    {
                        return Err(MetaError::LeaseNotFound { lease: *lease });
                    }
                }
            }
            let revision = current.next();
            for op in ops {
                match op {
                    Op::Put { key, value, lease } => {
                        let old = self.read(&kv, key)?;
                        let create = old.as_ref().map_or(revision, |o| o.create_revision);
                        kv.insert(
                            key.as_str(),
                            record::encode(create, revision, *lease, value).as_slice(),
                        )
                        .map_err(|e| self.err(e))?;
                        moves.push((key.clone(), old.and_then(|o| o.lease), *lease));
                        events.push(WatchEvent {
                            kind: WatchEventKind::Put,
                            kv: KeyValue {
                                key: key.clone(),
                                value: value.clone(),
                                create_revision: create,
                                mod_revision: revision,
                                lease: *lease,
                            },
                            revision,
                        });
                        results.push(OpResult::Put);
                    }
                    Op::Delete { key } => {
                        let old = self.read(&kv, key)?;
                        if let Some(old) = &old {
                            kv.remove(key.as_str()).map_err(|e| self.err(e))?;
                            moves.push((key.clone(), old.lease, None));
                            events.push(deleted(key, revision));
                        }
                        results.push(OpResult::Delete {
                            deleted: old.is_some(),
                        });
                    }
                    Op::Get { key } => results.push(OpResult::Get(self.read(&kv, key)?)),
                }
            }
            if events.is_empty() {
                (succeeded, current)
            } else {
                meta.insert(REVISION_KEY, revision.0)
                    .map_err(|e| self.err(e))?;
                (succeeded, revision)
            }
        };
        if events.is_empty() {
            wtx.abort().map_err(|e| self.err(e))?;
        } else {
            wtx.commit().map_err(|e| self.err(e))?;
            let mut leases = lock(&self.leases);
            for (key, from, to) in &moves {
                leases.attach(key, *from, *to);
            }
            drop(leases);
            self.publish(revision, events);
        }
        Ok(TxnResult {
            succeeded,
            revision,
            results,
        })
    }

    fn read_only_txn(&self, txn: &Txn) -> Result<TxnResult, MetaError> {
        let rtx = self.db.begin_read().map_err(|e| self.err(e))?;
        let kv = rtx.open_table(KV).map_err(|e| self.err(e))?;
        let meta = rtx.open_table(META).map_err(|e| self.err(e))?;
        let mut succeeded = true;
        for compare in &txn.compares {
            succeeded &= compare.holds(self.read(&kv, compare.key())?.as_ref());
        }
        let ops = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(OpResult::Get(self.read(&kv, op.key())?));
        }
        Ok(TxnResult {
            succeeded,
            revision: self.revision(&meta)?,
            results,
        })
    }

    fn grant_lease(&self, ttl: Duration) -> Result<Lease, MetaError> {
        let _writer = lock(&self.writer);
        let wtx = self.db.begin_write().map_err(|e| self.err(e))?;
        let id = {
            let mut meta = wtx.open_table(META).map_err(|e| self.err(e))?;
            let id = read_counter(&self.path, &meta, NEXT_LEASE_KEY)?.0;
            let id = i64::try_from(id)
                .map_err(|_| self.corrupt(format!("its next lease id {id} is out of range")))?;
            meta.insert(NEXT_LEASE_KEY, (id + 1) as u64)
                .map_err(|e| self.err(e))?;
            LeaseId(id)
        };
        wtx.commit().map_err(|e| self.err(e))?;
        lock(&self.leases).grant(id, ttl, Instant::now());
        self.lease_wakeup.notify_one();
        Ok(Lease { id, ttl })
    }

    /// Delete the keys of `lease` in one write and forget the lease.
    fn revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        let _writer = lock(&self.writer);
        let keys = lock(&self.leases)
            .keys(lease)
            .ok_or(MetaError::LeaseNotFound { lease })?;
        let mut events = Vec::new();
        let mut revision = Revision::ZERO;
        if !keys.is_empty() {
            let wtx = self.db.begin_write().map_err(|e| self.err(e))?;
            {
                let mut kv = wtx.open_table(KV).map_err(|e| self.err(e))?;
                let mut meta = wtx.open_table(META).map_err(|e| self.err(e))?;
                revision = self.revision(&meta)?.next();
                for key in &keys {
                    // The lease's key set follows every write; check anyway, so a
                    // key that moved can never be deleted with its old lease.
                    match self.read(&kv, key)? {
                        Some(kv_now) if kv_now.lease == Some(lease) => {
                            kv.remove(key.as_str()).map_err(|e| self.err(e))?;
                            events.push(deleted(key, revision));
                        }
                        _ => {
                            warn!(key = %key, lease = %lease, "Key no longer carries the lease being revoked; kept.")
                        }
                    }
                }
                if !events.is_empty() {
                    meta.insert(REVISION_KEY, revision.0)
                        .map_err(|e| self.err(e))?;
                }
            }
            if events.is_empty() {
                wtx.abort().map_err(|e| self.err(e))?;
            } else {
                wtx.commit().map_err(|e| self.err(e))?;
            }
        }
        lock(&self.leases).remove(lease);
        if !events.is_empty() {
            self.publish(revision, events);
        }
        Ok(())
    }

    fn publish(&self, revision: Revision, events: Vec<WatchEvent>) {
        let next = {
            let mut history = lock(&self.history);
            history.publish(revision, events);
            history.next_seq()
        };
        self.published.send_replace(next);
    }
}

fn deleted(key: &str, revision: Revision) -> WatchEvent {
    WatchEvent {
        kind: WatchEventKind::Delete,
        kv: KeyValue {
            key: key.to_owned(),
            value: Vec::new(),
            create_revision: Revision::ZERO,
            mod_revision: revision,
            lease: None,
        },
        revision,
    }
}

/// Revoke leases as their deadlines pass. Ends when the store is dropped.
async fn expire_leases(shared: Weak<Shared>, wakeup: Arc<Notify>) {
    loop {
        let next = {
            let Some(store) = shared.upgrade() else {
                return;
            };
            let due = lock(&store.leases).due(Instant::now());
            let mut failed = false;
            for lease in due {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || s.revoke(lease)).await {
                    Ok(Ok(())) | Ok(Err(MetaError::LeaseNotFound { .. })) => {
                        debug!(lease = %lease, "Lease expired; its keys were deleted.");
                    }
                    Ok(Err(err)) => {
                        warn!(lease = %lease, error = %err, "Deleting the keys of an expired lease failed; retrying in a second.");
                        failed = true;
                    }
                    Err(_) => return,
                }
            }
            if failed {
                Some(Instant::now() + Duration::from_secs(1))
            } else {
                lock(&store.leases).next_deadline()
            }
        };
        match next {
            Some(deadline) => {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = wakeup.notified() => {}
                }
            }
            None => wakeup.notified().await,
        }
    }
}

/// Copy the history's changes under `prefix` into a watch stream, from `cursor` on.
async fn feed_watch(
    history: Arc<Mutex<History>>,
    mut published: watch::Receiver<u64>,
    mut cursor: Cursor,
    prefix: String,
    tx: tokio::sync::mpsc::Sender<Result<WatchEvent, MetaError>>,
) {
    let mut store_dropped = false;
    loop {
        published.borrow_and_update();
        let read = lock(&history).read(&mut cursor, &prefix, READ_BATCH);
        match read {
            Err(err) => {
                let _ = tx.send(Err(err)).await;
                return;
            }
            Ok(events) if events.is_empty() => {
                if store_dropped {
                    return;
                }
                tokio::select! {
                    changed = published.changed() => store_dropped = changed.is_err(),
                    () = tx.closed() => return,
                }
            }
            Ok(events) => {
                for event in events {
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Lock a mutex whose data stays consistent even if a holder panicked (every
/// update is a single step, and the file is the source of truth for revisions).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn shutting_down() -> MetaError {
    MetaError::Unavailable {
        reason: "the runtime is shutting down".into(),
        source: None,
    }
}

/// Map a storage engine error to what the caller should do about it.
fn storage_error(path: &Path, err: redb::Error) -> MetaError {
    let corrupt = |reason: String, source: Option<redb::Error>| MetaError::Corrupt {
        path: path.to_owned(),
        reason,
        source: source.map(|e| Box::new(e) as _),
    };
    match err {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => MetaError::InUse {
            path: path.to_owned(),
        },
        redb::Error::Corrupted(reason) => corrupt(reason, None),
        redb::Error::UpgradeRequired(version) => corrupt(
            format!("it uses storage file format {version}, which this build cannot read"),
            None,
        ),
        redb::Error::RepairAborted => corrupt("it could not be repaired".into(), None),
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => corrupt(
            "it is not a redb database".into(),
            Some(redb::Error::Io(io)),
        ),
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => corrupt(
            "it ends before its contents do (truncated)".into(),
            Some(redb::Error::Io(io)),
        ),
        err @ (redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. }) => {
            corrupt("its tables are not the meta store's".into(), Some(err))
        }
        err => MetaError::Unavailable {
            reason: format!(
                "cannot read or write {} (check that its directory exists, is writable and has \
                 free space)",
                path.display()
            ),
            source: Some(Box::new(err)),
        },
    }
}
