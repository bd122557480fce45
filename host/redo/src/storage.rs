//! Where a redo log lives: a directory (`file:///dir`).
//!
//! Every file is written whole and made durable before it is visible under its
//! name: written to `<name>.tmp`, `fdatasync`ed, renamed, and the directory
//! `fsync`ed. A crash leaves at most a `.tmp` file, which readers ignore and
//! the next writer removes. Files are never appended to after that.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
#[error("redo storage {what}: {source}")]
pub struct StorageError {
    /// What was being done, with the path.
    pub what: String,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// Where a redo log is kept, parsed from `storage = "file:///dir"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUri {
    /// A local directory.
    Local(PathBuf),
}

impl StorageUri {
    /// Parses a storage URI; the error says what is accepted.
    pub fn parse(uri: &str) -> Result<Self, String> {
        if let Some(path) = uri.strip_prefix("file://") {
            if path.is_empty() || !path.starts_with('/') {
                return Err(format!(
                    "`{uri}`: a file URI names an absolute directory, e.g. file:///var/lib/sluice/redo"
                ));
            }
            return Ok(StorageUri::Local(PathBuf::from(path)));
        }
        Err(format!(
            "`{uri}`: redo storage is a file:// URI (file:///dir)"
        ))
    }
}

impl std::fmt::Display for StorageUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageUri::Local(p) => write!(f, "file://{}", p.display()),
        }
    }
}

/// A file in the storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (no directory).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A redo log's storage: one directory per changefeed.
#[derive(Debug, Clone)]
pub struct Storage {
    dir: PathBuf,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StorageError {
    let what = what.into();
    move |source| StorageError { what, source }
}

impl Storage {
    /// The storage `uri` names, for changefeed directory `name` under it
    /// (created if missing).
    pub async fn open(uri: &StorageUri, name: &str) -> Result<Self, StorageError> {
        let StorageUri::Local(root) = uri;
        let dir = root.join(name);
        let d = dir.clone();
        tokio::task::spawn_blocking(move || -> Result<(), StorageError> {
            std::fs::create_dir_all(&d).map_err(io(format!("cannot create {}", d.display())))?;
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
        Ok(Self { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `name` whole and durably (see the module docs). The caller
    /// keeps `bytes` to try again if it fails.
    pub async fn put(&self, name: &str, bytes: Arc<Vec<u8>>) -> Result<(), StorageError> {
        let (dir, name) = (self.dir.clone(), name.to_string());
        tokio::task::spawn_blocking(move || put_durably(&dir, &name, &bytes))
            .await
            .map_err(cancelled)?
    }

    /// Reads `name` whole.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StorageError> {
        let path = self.dir.join(name);
        tokio::fs::read(&path)
            .await
            .map_err(io(format!("cannot read {}", path.display())))
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
        let dir = self.dir.clone();
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
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
        .await
        .map_err(cancelled)?
    }

    /// Removes `name` (gone already is fine).
    pub async fn delete(&self, name: &str) -> Result<(), StorageError> {
        let path = self.dir.join(name);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(format!("cannot remove {}", path.display()))(e)),
        }
    }
}

/// A blocking write that did not finish: the runtime is shutting down (or it
/// panicked).
fn cancelled(e: tokio::task::JoinError) -> StorageError {
    StorageError {
        what: "a storage operation did not finish".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// `<name>.tmp` written and synced, renamed to `name`, the directory synced.
fn put_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut file =
        std::fs::File::create(&tmp).map_err(io(format!("cannot create {}", tmp.display())))?;
    file.write_all(bytes)
        .map_err(io(format!("cannot write {}", tmp.display())))?;
    file.sync_data()
        .map_err(io(format!("cannot sync {}", tmp.display())))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(io(format!("cannot rename {}", tmp.display())))?;
    sync_dir(dir)
}

/// `fsync` of a directory, so that a rename in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("cannot sync the directory {}", dir.display())))
}
