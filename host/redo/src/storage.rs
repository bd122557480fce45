//! Where a redo log lives: a directory (`file:///dir`) or an S3 bucket
//! (`s3://bucket/prefix`, AWS or any S3-compatible store, through
//! `object_store`).
//!
//! Every file is written whole and made durable before it is visible under its
//! name. In a directory: written to `<name>.tmp`, `fdatasync`ed, renamed, and
//! the directory `fsync`ed (a large log file is written past the page cache,
//! with `O_DIRECT`, where the file system takes it); a crash leaves at most a
//! `.tmp` file, which readers ignore and the next writer removes. In a
//! bucket: one PUT, or a multipart upload for a large file, which no reader
//! sees before it is complete (and which is aborted if a part fails, so the
//! bucket keeps no parts). Files are never appended to after that.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_core::WriteFence;

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
pub use sluice_config::{S3Location, StorageUri};

use crate::buf::{BLOCK, Block};

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
#[error("storage {what}: {source}")]
pub struct StorageError {
    /// What was being done, with the path.
    pub what: String,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// A file in the storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (no directory).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Files at and above this size go up to an object store in parts.
pub const MULTIPART_BYTES: usize = 8 << 20;

/// A redo log's storage: one directory (or prefix) per changefeed.
#[derive(Clone)]
pub struct Storage {
    backend: Backend,
    /// What to call it in messages (no secret).
    shown: String,
    /// Writes and deletes are refused once it closes ([`Storage::fenced`]).
    fence: WriteFence,
    /// And once this one closes ([`Storage::retired_by`]).
    retired: Option<WriteFence>,
}

impl std::fmt::Debug for Storage {
    // The store's own Debug may show its credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Storage").field(&self.shown).finish()
    }
}

/// The bytes of a file, shared with the writer that keeps them to try again.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[derive(Clone)]
enum Backend {
    Local(PathBuf),
    Object {
        store: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StorageError {
    let what = what.into();
    move |source| StorageError { what, source }
}

fn object(what: impl Into<String>) -> impl FnOnce(object_store::Error) -> StorageError {
    let what = what.into();
    move |e| {
        let kind = match &e {
            object_store::Error::NotFound { .. } => std::io::ErrorKind::NotFound,
            _ => std::io::ErrorKind::Other,
        };
        StorageError {
            what,
            source: std::io::Error::new(kind, e.to_string()),
        }
    }
}

impl Storage {
    /// The storage `uri` names, for changefeed directory `name` under it
    /// (created if missing).
    pub async fn open(uri: &StorageUri, name: &str) -> Result<Self, StorageError> {
        let shown = uri.child(name).to_string();
        match uri {
            StorageUri::Local(root) => {
                let dir = root.join(name);
                let d = dir.clone();
                tokio::task::spawn_blocking(move || -> Result<(), StorageError> {
                    std::fs::create_dir_all(&d)
                        .map_err(io(format!("cannot create {}", d.display())))?;
                    // A crash may have left a file half written.
                    for entry in
                        std::fs::read_dir(&d).map_err(io(format!("cannot list {}", d.display())))?
                    {
                        let entry = entry.map_err(io(format!("cannot list {}", d.display())))?;
                        if entry.file_name().to_string_lossy().ends_with(".tmp") {
                            let _ = std::fs::remove_file(entry.path());
                        }
                    }
                    Ok(())
                })
                .await
                .map_err(cancelled)??;
                Ok(Self {
                    backend: Backend::Local(dir),
                    shown,
                    fence: WriteFence::open(),
                    retired: None,
                })
            }
            StorageUri::S3(loc) => {
                let store = open_s3(loc).map_err(object(format!("cannot open {shown}")))?;
                let StorageUri::S3(child) = uri.child(name) else {
                    unreachable!("the child of an S3 location is one")
                };
                Ok(Self {
                    backend: Backend::Object {
                        store: Arc::new(store),
                        prefix: ObjectPath::from(child.prefix.as_str()),
                    },
                    shown,
                    fence: WriteFence::open(),
                    retired: None,
                })
            }
        }
    }

    /// The same storage, whose writes and deletes are refused once `fence`
    /// closes (a capture whose lease may have ended writes no more of a
    /// changefeed's redo log).
    pub fn fenced(mut self, fence: WriteFence) -> Self {
        self.fence = fence;
        self
    }

    /// Writes and deletes are refused once `retired` closes too (the run
    /// that writes the log ended: a write it had started must not land
    /// after the next run opened the log).
    pub fn retired_by(&mut self, retired: WriteFence) {
        self.retired = Some(retired);
    }

    pub(crate) fn check_fence(&self, doing: &str, name: &str) -> Result<(), StorageError> {
        let open = self
            .fence
            .check()
            .and_then(|()| self.retired.as_ref().map_or(Ok(()), WriteFence::check));
        open.map_err(|closed| StorageError {
            what: format!("cannot {doing} {name} in {}", self.shown),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, closed.to_string()),
        })
    }

    /// Where it is, for messages (`file:///dir/cf`, `s3://bucket/prefix/cf`;
    /// never a secret).
    pub fn location(&self) -> &str {
        &self.shown
    }

    /// The local directory, for a storage on the local file system.
    pub fn local_dir(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Local(dir) => Some(dir),
            Backend::Object { .. } => None,
        }
    }

    /// Writes `name` whole and durably (see the module docs): to an object
    /// store in one request, or in parts of [`MULTIPART_BYTES`] for a large
    /// file (a reader sees it only when every part is in). The caller keeps
    /// `bytes` to try again if it fails.
    pub async fn put(&self, name: &str, bytes: Arc<Vec<u8>>) -> Result<(), StorageError> {
        self.check_fence("write", name)?;
        match &self.backend {
            Backend::Local(dir) => {
                let (dir, name, storage) = (dir.clone(), name.to_string(), self.clone());
                tokio::task::spawn_blocking(move || {
                    put_durably(&dir, &name, &bytes, &|| storage.check_fence("write", &name))
                })
                .await
                .map_err(cancelled)?
            }
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                let what = || format!("cannot write {}/{name}", self.shown);
                if bytes.len() < MULTIPART_BYTES {
                    let payload = PutPayload::from_bytes(Bytes::from_owner(Shared(bytes)));
                    store.put(&path, payload).await.map_err(object(what()))?;
                    return Ok(());
                }
                let mut upload = store.put_multipart(&path).await.map_err(object(what()))?;
                // The parts go up side by side; if any fails, the upload is
                // aborted, so the store keeps no parts of it.
                let bytes = Bytes::from_owner(Shared(bytes));
                let mut parts = tokio::task::JoinSet::new();
                for at in (0..bytes.len()).step_by(MULTIPART_BYTES) {
                    let part = bytes.slice(at..(at + MULTIPART_BYTES).min(bytes.len()));
                    parts.spawn(upload.put_part(PutPayload::from_bytes(part)));
                }
                let mut failed = None;
                while let Some(done) = parts.join_next().await {
                    let error = match done {
                        Ok(Ok(())) => continue,
                        Ok(Err(e)) => e,
                        Err(e) => object_store::Error::Generic {
                            store: "redo",
                            source: Box::new(e),
                        },
                    };
                    failed.get_or_insert(error);
                }
                let result = match failed {
                    Some(e) => Err(e),
                    None => upload.complete().await.map(|_| ()),
                };
                match result {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        if let Err(abort) = upload.abort().await {
                            tracing::warn!(error = %abort, "Aborting a failed multipart upload of the redo log failed.");
                        }
                        Err(object(what())(e))
                    }
                }
            }
        }
    }

    /// Reads `name` whole.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StorageError> {
        match &self.backend {
            Backend::Local(dir) => {
                let path = dir.join(name);
                tokio::fs::read(&path)
                    .await
                    .map_err(io(format!("cannot read {}", path.display())))
            }
            Backend::Object { store, prefix } => {
                let what = || format!("cannot read {}/{name}", self.shown);
                let got = store
                    .get(&prefix.clone().join(name))
                    .await
                    .map_err(object(what()))?;
                Ok(got.bytes().await.map_err(object(what()))?.to_vec())
            }
        }
    }

    /// Whether `name` is there (written whole).
    pub async fn exists(&self, name: &str) -> Result<bool, StorageError> {
        match &self.backend {
            Backend::Local(dir) => {
                let path = dir.join(name);
                tokio::fs::try_exists(&path)
                    .await
                    .map_err(io(format!("cannot look for {}", path.display())))
            }
            Backend::Object { store, prefix } => {
                match store.head(&prefix.clone().join(name)).await {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(object(format!("cannot look for {}/{name}", self.shown))(e)),
                }
            }
        }
    }

    /// Reads `name` whole; `None` if there is no such file.
    pub async fn get_if_there(&self, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        match self.get(name).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.source.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The files there (not those half written), by name.
    pub async fn list(&self) -> Result<Vec<Entry>, StorageError> {
        let mut out = match &self.backend {
            Backend::Local(dir) => {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || -> Result<Vec<Entry>, StorageError> {
                    let mut out = Vec::new();
                    let what = || format!("cannot list {}", dir.display());
                    for entry in std::fs::read_dir(&dir).map_err(io(what()))? {
                        let entry = entry.map_err(io(what()))?;
                        let name = entry.file_name().to_string_lossy().into_owned();
                        if name.ends_with(".tmp") {
                            continue;
                        }
                        let size = entry.metadata().map_err(io(what()))?.len();
                        out.push(Entry { name, size });
                    }
                    Ok(out)
                })
                .await
                .map_err(cancelled)??
            }
            Backend::Object { store, prefix } => {
                let listed = store
                    .list_with_delimiter(Some(prefix))
                    .await
                    .map_err(object(format!("cannot list {}", self.shown)))?;
                listed
                    .objects
                    .into_iter()
                    .filter_map(|o| {
                        let name = o.location.filename()?.to_string();
                        Some(Entry { name, size: o.size })
                    })
                    .collect()
            }
        };
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes `name` (gone already is fine).
    pub async fn delete(&self, name: &str) -> Result<(), StorageError> {
        self.check_fence("delete", name)?;
        match &self.backend {
            Backend::Local(dir) => {
                let path = dir.join(name);
                match tokio::fs::remove_file(&path).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(io(format!("cannot remove {}", path.display()))(e)),
                }
            }
            Backend::Object { store, prefix } => {
                match store.delete(&prefix.clone().join(name)).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(object(format!("cannot remove {}/{name}", self.shown))(e)),
                }
            }
        }
    }
}

/// A blocking write that did not finish: the runtime is shutting down (or it
/// panicked).
pub(crate) fn cancelled(e: tokio::task::JoinError) -> StorageError {
    StorageError {
        what: "a storage operation did not finish".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// `<name>.tmp` written and synced, renamed to `name`, the directory synced.
/// `may_land` is asked again just before the rename (a fence: writing and
/// syncing take long enough for a lease to end meanwhile, and the rename is
/// what makes the file the log's); when it refuses, the file is not renamed
/// and its temporary is removed.
pub(crate) fn put_durably(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    may_land: &dyn Fn() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    put_durably_with(dir, name, bytes, None, may_land)
}

/// [`put_durably`], a large file written past the page cache when the
/// directory's file system allows it (see [`DirectWrites`]).
pub(crate) fn put_durably_with(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    direct: Option<&mut DirectWrites>,
    may_land: &dyn Fn() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let written = match direct {
        Some(direct) => direct
            .write(&tmp, bytes)
            .map_err(io(format!("cannot write {}", tmp.display())))?,
        None => false,
    };
    if !written {
        let mut file =
            std::fs::File::create(&tmp).map_err(io(format!("cannot create {}", tmp.display())))?;
        file.write_all(bytes)
            .map_err(io(format!("cannot write {}", tmp.display())))?;
        file.sync_data()
            .map_err(io(format!("cannot sync {}", tmp.display())))?;
    }
    if let Err(refused) = may_land() {
        let _ = std::fs::remove_file(&tmp);
        return Err(refused);
    }
    std::fs::rename(&tmp, &path).map_err(io(format!("cannot rename {}", tmp.display())))?;
    sync_dir(dir)
}

/// Files smaller than this go through the page cache (the copy is cheap).
const DIRECT_FROM: usize = 256 << 10;

/// Most blocks in [`DirectWrites`]' buffer: an unaligned file is copied
/// into it and written 1 MiB at a time, so the buffer stays small whatever
/// the file's size.
const CHUNK_BLOCKS: usize = 256;

/// Writes of large log files past the page cache (`O_DIRECT`, Linux): the
/// device reads the bytes from a block-aligned buffer, so the flush costs no
/// copy (the writer's file buffers are aligned: written from where they were
/// encoded, the last partial block copied) where the kernel would copy into
/// freshly allocated cache pages, which on these machines took 1.3-2.4 ms of
/// CPU per MB and most of a flush's time (a log file is written once and
/// read only by `redo apply`: it has no use for the cache). An unaligned
/// buffer is copied through one of its own (up to 1 MiB, kept).
/// A file system that refuses it (tmpfs, some network and FUSE file systems)
/// gets the ordinary write from then on.
#[derive(Default)]
pub(crate) struct DirectWrites {
    blocks: Vec<Block>,
    refused: bool,
    /// Files written past the cache, and bytes copied to do it (the tests
    /// look).
    #[cfg(test)]
    files: u64,
    #[cfg(test)]
    copied: u64,
}

impl DirectWrites {
    /// The file system refused a write past the cache.
    #[cfg(test)]
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }

    /// Files written past the cache.
    #[cfg(test)]
    pub(crate) fn files(&self) -> u64 {
        self.files
    }

    /// Bytes copied into the aligned buffer.
    #[cfg(test)]
    pub(crate) fn copied(&self) -> u64 {
        self.copied
    }

    /// Writes `bytes` to `path` (created or truncated) and syncs it; `false`
    /// when this file system, or this file's size, wants the ordinary write
    /// (nothing was written then, or what was is written over).
    #[cfg(target_os = "linux")]
    fn write(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if self.refused || bytes.len() < DIRECT_FROM {
            return Ok(false);
        }
        let refused = |e: &std::io::Error| {
            let refused = e.raw_os_error() == Some(libc::EINVAL);
            if refused {
                tracing::info!(
                    file = %path.display(),
                    "The redo log's file system does not take writes past the page cache; writing through it."
                );
            }
            refused
        };
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if refused(&e) => {
                self.refused = true;
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        // The whole blocks of a block-aligned buffer (the writer's files
        // are encoded into one: `crate::buf::FileBuf`) go straight from it,
        // in one write: no copy, and the device gets the whole file's
        // requests at once rather than one chunk's at a time. The rest (all
        // of an unaligned buffer, else the last partial block) is copied
        // into an aligned buffer no larger than it needs, at most 1 MiB.
        let direct = if (bytes.as_ptr() as usize).is_multiple_of(BLOCK) {
            bytes.len() / BLOCK * BLOCK
        } else {
            0
        };
        let rest = &bytes[direct..];
        let need = rest.len().div_ceil(BLOCK).min(CHUNK_BLOCKS);
        if self.blocks.len() < need {
            self.blocks = vec![bytemuck::Zeroable::zeroed(); need];
        }
        let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut self.blocks);
        // `false`: the file system refused it.
        let write = |file: &mut std::fs::File, range: &[u8]| match file.write_all(range) {
            Ok(()) => Ok(true),
            Err(e) if refused(&e) => Ok(false),
            Err(e) => Err(e),
        };
        let mut taken = direct == 0 || write(&mut file, &bytes[..direct])?;
        for chunk in rest.chunks(buf.len().max(1)) {
            if !taken {
                break;
            }
            // The last chunk is padded to whole blocks; the padding goes below.
            let padded = chunk.len().next_multiple_of(BLOCK);
            buf[..chunk.len()].copy_from_slice(chunk);
            buf[chunk.len()..padded].fill(0);
            #[cfg(test)]
            {
                self.copied += chunk.len() as u64;
            }
            taken = write(&mut file, &buf[..padded])?;
        }
        if !taken {
            self.refused = true;
            return Ok(false);
        }
        // The size change is synced with the data.
        file.set_len(bytes.len() as u64)?;
        file.sync_data()?;
        #[cfg(test)]
        {
            self.files += 1;
        }
        Ok(true)
    }

    /// Elsewhere every write goes through the page cache.
    #[cfg(not(target_os = "linux"))]
    fn write(&mut self, _path: &Path, _bytes: &[u8]) -> std::io::Result<bool> {
        Ok(false)
    }
}

/// `fsync` of a directory, so that a rename in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("cannot sync the directory {}", dir.display())))
}

/// A client of the S3 bucket `loc` names.
fn open_s3(loc: &S3Location) -> Result<object_store::aws::AmazonS3, object_store::Error> {
    use object_store::aws::AmazonS3Builder;
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(&loc.bucket)
        .with_virtual_hosted_style_request(loc.virtual_hosted)
        .with_client_options(
            object_store::ClientOptions::new()
                .with_connect_timeout(std::time::Duration::from_secs(5))
                .with_timeout(std::time::Duration::from_secs(60)),
        )
        // The writer tries again itself (and says so in its status).
        .with_retry(object_store::RetryConfig {
            max_retries: 2,
            retry_timeout: std::time::Duration::from_secs(20),
            ..Default::default()
        });
    if let Some(e) = &loc.endpoint {
        b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
    }
    if let Some(r) = &loc.region {
        b = b.with_region(r);
    }
    if let Some(k) = &loc.access_key {
        b = b.with_access_key_id(k);
    }
    if let Some(k) = loc.secret_key() {
        b = b.with_secret_access_key(k);
    }
    if let Some(t) = loc.session_token() {
        b = b.with_token(t);
    }
    b.build()
}
