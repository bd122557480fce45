//! Where uploaded plugin files live (ADR 0012): one content-addressed store
//! per cluster (`<sha256>.wasm` in a directory or under an S3 prefix, written
//! once, never rewritten), read by every capture through a local cache when
//! the store is not a local directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_meta::{Compare, MetaStore, Op, Txn, keys};
use sluice_redo::{Storage, StorageUri};

use crate::{RegistryError, hex_sha256};

/// The plugin files of a cluster, as one capture reads and writes them.
#[derive(Debug, Clone)]
pub struct PluginFiles {
    store: Storage,
    /// Where files of a store that is not a local directory are kept after
    /// their first read (`None`: the store is a local directory).
    cache: Option<PathBuf>,
    /// Most bytes of files kept there; past it the least recently read go.
    cache_max_bytes: u64,
}

/// The bound of a capture's cache of plugin files, unless set.
pub const DEFAULT_CACHE_BYTES: u64 = sluice_runtime::DEFAULT_CACHE_MAX_BYTES;

/// What the meta store keeps about the cluster's plugin store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct StoreRecord {
    version: u32,
    /// The store's location without credentials.
    location: String,
}

fn storage_error(e: sluice_redo::StorageError) -> RegistryError {
    RegistryError::Io {
        path: e.what,
        source: e.source,
    }
}

impl PluginFiles {
    /// The files in the directory or S3 prefix `uri` names; `cache` is where a
    /// capture keeps those it read from an object store (created if missing).
    pub async fn open(uri: &StorageUri, cache: &Path) -> Result<Self, RegistryError> {
        let Some((parent, name)) = uri.split_last() else {
            return Err(RegistryError::InvalidStore(format!(
                "{uri} is the root of its bucket; name a prefix for the plugin files, e.g. \
                 {}",
                uri.child("plugins")
            )));
        };
        let store = Storage::open(&parent, &name).await.map_err(storage_error)?;
        let cache = match store.local_dir() {
            Some(_) => None,
            None => {
                let io = |source| RegistryError::Io {
                    path: cache.display().to_string(),
                    source,
                };
                std::fs::create_dir_all(cache).map_err(io)?;
                // A crash mid-copy leaves a temporary file (never a half file
                // under a plugin's name), which goes; one capture owns this
                // directory.
                // The bound is applied once it is known (`with_cache_bound`):
                // only those temporary files go now.
                sluice_runtime::trim_cache_dir(cache, ".wasm", u64::MAX).map_err(io)?;
                Some(cache.to_path_buf())
            }
        };
        Ok(Self {
            store,
            cache,
            cache_max_bytes: DEFAULT_CACHE_BYTES,
        })
    }

    /// Keeps at most `max_bytes` of files in the local cache (the least
    /// recently read go first; the most recent stays whatever its size).
    pub fn with_cache_bound(mut self, max_bytes: u64) -> Self {
        self.cache_max_bytes = max_bytes;
        self.trim();
        self
    }

    fn trim(&self) {
        if let Some(cache) = &self.cache
            && let Err(e) = sluice_runtime::trim_cache_dir(cache, ".wasm", self.cache_max_bytes)
        {
            tracing::warn!(path = %cache.display(), error = %e, "Could not bound the local cache of plugin files.");
        }
    }

    /// Where the files are, for messages (never a secret).
    pub fn location(&self) -> &str {
        self.store.location()
    }

    /// The local directory holding the files, for a store that is one.
    pub fn local_dir(&self) -> Option<&Path> {
        self.store.local_dir()
    }

    fn name(sha256: &str) -> String {
        format!("{sha256}.wasm")
    }

    /// Stores `bytes` as `sha256` unless they are there already; durable when
    /// it returns.
    pub(crate) async fn put(&self, sha256: &str, bytes: Arc<Vec<u8>>) -> Result<(), RegistryError> {
        let name = Self::name(sha256);
        if self.store.exists(&name).await.map_err(storage_error)? {
            return Ok(());
        }
        self.store.put(&name, bytes).await.map_err(storage_error)
    }

    /// The bytes of `sha256`, checked against it: from the local cache, else
    /// from the store (and then kept in the cache). `id` names the plugin in
    /// errors.
    pub(crate) async fn read(&self, sha256: &str, id: &str) -> Result<Vec<u8>, RegistryError> {
        let name = Self::name(sha256);
        let damaged = |path: String| RegistryError::Damaged {
            id: id.to_string(),
            path,
        };
        let Some(cache) = &self.cache else {
            let bytes = self.store.get(&name).await.map_err(storage_error)?;
            return verified(bytes, sha256)
                .await
                .ok_or_else(|| damaged(format!("{}/{name}", self.location())));
        };
        let cached = cache.join(&name);
        if let Ok(bytes) = tokio::fs::read(&cached).await {
            match verified(bytes, sha256).await {
                Some(bytes) => {
                    sluice_runtime::mark_used(&cached);
                    return Ok(bytes);
                }
                None => {
                    tracing::warn!(file = %cached.display(), "A cached plugin file does not match its sha256; reading it from the plugin store again.");
                    let _ = tokio::fs::remove_file(&cached).await;
                }
            }
        }
        let bytes = self.store.get(&name).await.map_err(storage_error)?;
        let bytes = verified(bytes, sha256)
            .await
            .ok_or_else(|| damaged(format!("{}/{name}", self.location())))?;
        if let Err(e) = keep(cache, &name, &bytes).await {
            // The next load reads the store again; nothing is lost.
            tracing::warn!(file = %cached.display(), error = %e, "A plugin file could not be kept in the local cache.");
        }
        self.trim();
        Ok(bytes)
    }

    /// Removes `sha256` from the store and the cache (gone already is fine).
    pub(crate) async fn delete(&self, sha256: &str) -> Result<(), RegistryError> {
        let name = Self::name(sha256);
        if let Some(cache) = &self.cache {
            let _ = tokio::fs::remove_file(cache.join(&name)).await;
        }
        self.store.delete(&name).await.map_err(storage_error)
    }

    /// The number of plugin files in the store.
    pub async fn count(&self) -> Result<usize, RegistryError> {
        Ok(self
            .store
            .list()
            .await
            .map_err(storage_error)?
            .iter()
            .filter(|e| e.name.ends_with(".wasm"))
            .count())
    }

    /// Records this store as the cluster's, or checks that it is the one
    /// recorded: every capture must read the files every other one wrote. A
    /// server started with another store is refused here, naming both,
    /// rather than at its first placement. `record`: record it if none is (a
    /// server on a shared meta store does; a single server on its own embedded
    /// store need not, so that its data dir may move).
    pub async fn agree(&self, meta: &dyn MetaStore, record: bool) -> Result<(), RegistryError> {
        let key = keys::cluster_plugin_store();
        let recorded = match meta.get(&key).await? {
            Some(kv) => Some(keys::decode::<StoreRecord>(&key, &kv.value)?),
            None => None,
        };
        match recorded {
            Some(r) if r.location == self.location() => Ok(()),
            Some(r) => Err(RegistryError::InvalidStore(format!(
                "this cluster keeps its plugin files in {}; start this server with the same \
                 --plugin-store (it uses {})",
                r.location,
                self.location()
            ))),
            None if !record => Ok(()),
            None => {
                let ours = StoreRecord {
                    version: 1,
                    location: self.location().to_string(),
                };
                let put = Txn::new()
                    .when([Compare::absent(&key)])
                    .and_then([Op::put(&key, keys::encode(&ours)?)]);
                if meta.txn(put).await?.succeeded {
                    Ok(())
                } else {
                    // Another server recorded one meanwhile: check against it.
                    Box::pin(self.agree(meta, record)).await
                }
            }
        }
    }
}

/// `bytes` if their sha256 is `sha256` (hashed off the async workers: a
/// plugin may be 1 GiB).
async fn verified(bytes: Vec<u8>, sha256: &str) -> Option<Vec<u8>> {
    let sha256 = sha256.to_string();
    tokio::task::spawn_blocking(move || (hex_sha256(&bytes) == sha256).then_some(bytes))
        .await
        .ok()
        .flatten()
}

/// Writes `bytes` to `dir/name` whole (a temporary file renamed), so that a
/// crash leaves no half file under the name.
async fn keep(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.tmp{}-{n}", std::process::id()));
    tokio::fs::write(&tmp, bytes).await?;
    let result = tokio::fs::rename(&tmp, dir.join(name)).await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}
