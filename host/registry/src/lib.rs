//! The plugin registry: uploaded components stored content-addressed (sha256)
//! in the cluster's plugin store ([`PluginFiles`]), recorded under
//! `name@version` per tenant in the meta store, checked against their world and
//! precompiled at upload.

mod files;

pub use files::{DEFAULT_CACHE_BYTES, PluginFiles};

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sluice_meta::{Compare, MetaError, MetaStore, Op, Txn, keys};
use sluice_owner::PluginId;
use sluice_runtime::{LoadError, PluginComponent, PluginKind, PluginRuntime};

/// What the meta store keeps about one uploaded plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PluginRecord {
    /// The record's stored-form version.
    pub version: u32,
    /// The tenant it was uploaded to.
    pub tenant: String,
    /// The plugin's name.
    pub name: String,
    /// Its version (the part after `@`).
    pub plugin_version: String,
    /// `sink` or `filter`.
    pub world: String,
    /// The sha256 of its bytes, hex: the file name in the plugin store.
    pub sha256: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// When it was uploaded, milliseconds since the Unix epoch.
    pub uploaded_at_ms: u64,
    /// The linear memory the plugin declares it needs (its `sluice:limits`
    /// section): the quota of a changefeed that gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_memory: Option<u64>,
}

/// Why a registry request failed, grouped by what the caller does next.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Reject the request: the name, version or bytes are not acceptable.
    #[error("invalid plugin id: {0}")]
    InvalidId(String),
    /// Reject the request: the component is larger than the upload limit.
    #[error("plugin is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Reject the request: the bytes are not a component of the asked world.
    #[error("not a usable {world} plugin")]
    NotAPlugin {
        /// `sink` or `filter`.
        world: &'static str,
        /// Why loading it failed.
        #[source]
        source: LoadError,
    },
    /// Reject the request: `name@version` is taken by other bytes.
    #[error("{id} already exists with other bytes (sha256 {existing}); upload it as a new version")]
    Conflict {
        /// `name@version`.
        id: String,
        /// The sha256 of the stored bytes.
        existing: String,
    },
    /// Reject the request: `name@version` was uploaded as the other world.
    #[error(
        "{id} already exists as a {existing} plugin; a name@version is immutable: upload it as a \
         new version to use it as a {asked}"
    )]
    WorldConflict {
        /// `name@version`.
        id: String,
        /// The world it was uploaded as.
        existing: String,
        /// The world asked for now.
        asked: &'static str,
    },
    /// No such plugin in the tenant.
    #[error("no plugin {id} in tenant {tenant}")]
    NotFound {
        /// The tenant asked.
        tenant: String,
        /// `name@version`.
        id: String,
    },
    /// Refused while changefeeds use the plugin.
    #[error("{id} is used by {used_by}; remove or update those changefeeds first")]
    InUse {
        /// `name@version`.
        id: String,
        /// The changefeeds using it, comma-separated.
        used_by: String,
    },
    /// An operator must act: the stored bytes do not match their record.
    #[error("stored bytes of {id} do not match their sha256 ({path}); upload the plugin again")]
    Damaged {
        /// `name@version`.
        id: String,
        /// The file holding the bytes.
        path: String,
    },
    /// Retry later.
    #[error("meta store")]
    Store(#[from] MetaError),
    /// This server no longer owns the meta store; another one does the work.
    #[error("this server is no longer the owner; retry against the current owner")]
    NotOwner,
    /// An operator must act: the plugin store named is not usable as one.
    #[error("plugin store: {0}")]
    InvalidStore(String),
    /// Reading or writing the plugin store failed; retry later.
    #[error("plugin storage at {path}")]
    Io {
        /// The file or directory.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Uploaded plugins of every tenant.
pub struct PluginRegistry {
    store: Arc<dyn MetaStore>,
    runtime: PluginRuntime,
    files: PluginFiles,
    max_bytes: u64,
    /// The short end of uploads (bytes and record) and deletes one at a time,
    /// so that a delete never removes bytes an upload just decided to reuse.
    /// Never held across a compile.
    changes: tokio::sync::Mutex<()>,
    /// Who compiles an upload now.
    compiles: CompileGate,
    /// Checked with every write (the server's ownership), once it owns.
    guard: std::sync::OnceLock<Compare>,
}

/// Lower-case hex sha256, as plugins are addressed.
pub fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn world_name(kind: PluginKind) -> &'static str {
    kind.world()
}

impl PluginRegistry {
    /// The runtime plugins are checked and run with.
    pub fn runtime(&self) -> &PluginRuntime {
        &self.runtime
    }

    /// A registry keeping component bytes in `files`.
    pub fn new(
        store: Arc<dyn MetaStore>,
        runtime: PluginRuntime,
        files: PluginFiles,
        max_bytes: u64,
    ) -> Self {
        Self {
            store,
            runtime,
            files,
            max_bytes,
            changes: tokio::sync::Mutex::new(()),
            compiles: CompileGate::new(),
            guard: std::sync::OnceLock::new(),
        }
    }

    /// Where the plugin files are.
    pub fn files(&self) -> &PluginFiles {
        &self.files
    }

    /// Checks `guard` with every write from now on (set once: a server owns
    /// at most once).
    pub fn guard_writes(&self, guard: Compare) {
        let _ = self.guard.set(guard);
    }

    /// The largest upload accepted, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn key(tenant: &str, id: &PluginId) -> Result<String, RegistryError> {
        keys::plugin(tenant, id.name(), id.version())
            .map_err(|e| RegistryError::InvalidId(e.to_string()))
    }

    /// Store a plugin. Uploading the same bytes again is a no-op; other bytes under
    /// an existing `name@version` are refused.
    pub async fn upload(
        &self,
        tenant: &str,
        id: &PluginId,
        kind: PluginKind,
        bytes: &[u8],
    ) -> Result<PluginRecord, RegistryError> {
        let key = Self::key(tenant, id)?;
        let size = bytes.len() as u64;
        if size > self.max_bytes {
            return Err(RegistryError::TooLarge {
                size,
                limit: self.max_bytes,
            });
        }
        let sha256 = hex_sha256(bytes);
        if let Some(existing) = self.get(tenant, id).await? {
            return same_upload(existing, id, &sha256, kind);
        }
        let declared_memory = {
            // Checks the world and precompiles into the runtime's cache;
            // compiling takes a while, so off the async workers, and in the
            // tenant's turn: no lock that another tenant's request needs is
            // held meanwhile.
            let _turn = self.compiles.enter(tenant).await;
            let component = self
                .runtime
                .load_in_background(kind, bytes.to_vec())
                .await
                .map_err(|source| RegistryError::Io {
                    path: "(compiling)".into(),
                    source,
                })?
                .map_err(|source| RegistryError::NotAPlugin {
                    world: world_name(kind),
                    source,
                })?;
            component.declared_memory()
        };
        let _one_at_a_time = self.changes.lock().await;
        // The file first, then the record (the commit point): a crash between
        // the two leaves a file no record names, never a record without a file.
        self.files.put(&sha256, Arc::new(bytes.to_vec())).await?;
        let record = PluginRecord {
            version: 1,
            tenant: tenant.to_string(),
            name: id.name().to_string(),
            plugin_version: id.version().to_string(),
            world: world_name(kind).to_string(),
            sha256,
            size_bytes: size,
            uploaded_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            declared_memory,
        };
        let put = Txn::new()
            .when(std::iter::once(Compare::absent(&key)).chain(self.guard.get().cloned()))
            .and_then([Op::put(&key, keys::encode(&record)?)]);
        if !self.store.txn(put).await?.succeeded {
            // Someone uploaded the same id meanwhile: same answer as above.
            return match self.get(tenant, id).await? {
                Some(existing) => same_upload(existing, id, &record.sha256, kind),
                None => Err(RegistryError::NotOwner),
            };
        }
        Ok(record)
    }

    /// The record of `id`, if uploaded.
    pub async fn get(
        &self,
        tenant: &str,
        id: &PluginId,
    ) -> Result<Option<PluginRecord>, RegistryError> {
        let key = Self::key(tenant, id)?;
        match self.store.get(&key).await? {
            Some(kv) => Ok(Some(keys::decode(&key, &kv.value)?)),
            None => Ok(None),
        }
    }

    /// The record of `id`, or `NotFound`.
    async fn require(&self, tenant: &str, id: &PluginId) -> Result<PluginRecord, RegistryError> {
        self.get(tenant, id)
            .await?
            .ok_or_else(|| RegistryError::NotFound {
                tenant: tenant.into(),
                id: id.to_string(),
            })
    }

    /// Every plugin of `tenant`, sorted by name and version.
    pub async fn list(&self, tenant: &str) -> Result<Vec<PluginRecord>, RegistryError> {
        let prefix =
            keys::plugin_prefix(tenant).map_err(|e| RegistryError::InvalidId(e.to_string()))?;
        let listing = self.store.list(&prefix).await?;
        listing
            .kvs
            .iter()
            .map(|kv| keys::decode(&kv.key, &kv.value).map_err(RegistryError::from))
            .collect()
    }

    /// Load `id` for running: the stored bytes are checked against their sha256.
    pub async fn load(
        &self,
        tenant: &str,
        id: &PluginId,
    ) -> Result<PluginComponent, RegistryError> {
        let record = self.require(tenant, id).await?;
        let kind = if record.world == "sink" {
            PluginKind::Sink
        } else {
            PluginKind::Filter
        };
        let bytes = self.files.read(&record.sha256, &id.to_string()).await?;
        let runtime = self.runtime.clone();
        // Compiling (on a cache miss) takes a while: off the async workers,
        // which also keep the capture's lease alive.
        tokio::task::spawn_blocking(move || {
            runtime
                .load(kind, &bytes)
                .map_err(|source| RegistryError::NotAPlugin {
                    world: world_name(kind),
                    source,
                })
        })
        .await
        .map_err(|e| RegistryError::Io {
            path: "(loading)".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    }

    /// Remove `id`, unless `used_by` names changefeeds that use it. The bytes stay
    /// while another record refers to the same sha256.
    pub async fn delete(
        &self,
        tenant: &str,
        id: &PluginId,
        used_by: &[String],
    ) -> Result<PluginRecord, RegistryError> {
        if !used_by.is_empty() {
            return Err(RegistryError::InUse {
                id: id.to_string(),
                used_by: used_by.join(", "),
            });
        }
        let key = Self::key(tenant, id)?;
        let _one_at_a_time = self.changes.lock().await;
        let record = self.require(tenant, id).await?;
        let delete = Txn::new()
            .when(self.guard.get().cloned())
            .and_then([Op::delete(&key)]);
        if !self.store.txn(delete).await?.succeeded {
            return Err(RegistryError::NotOwner);
        }
        let still_used = self
            .store
            .list(&keys::tenants_prefix())
            .await?
            .kvs
            .iter()
            .any(|kv| {
                kv.key.contains("/plugin/")
                    && keys::decode::<PluginRecord>(&kv.key, &kv.value)
                        .is_ok_and(|r| r.sha256 == record.sha256)
            });
        if !still_used && let Err(e) = self.files.delete(&record.sha256).await {
            // An unreferenced file costs space only.
            tracing::warn!(error = %e, sha256 = %record.sha256, "A removed plugin's file stays in the plugin store.");
        }
        Ok(record)
    }
}

/// The answer to an upload of `sha256` as `id` when `existing` is there
/// already: the same record for the same bytes and world, else a conflict.
fn same_upload(
    existing: PluginRecord,
    id: &PluginId,
    sha256: &str,
    kind: PluginKind,
) -> Result<PluginRecord, RegistryError> {
    if existing.sha256 != sha256 {
        return Err(RegistryError::Conflict {
            id: id.to_string(),
            existing: existing.sha256,
        });
    }
    if existing.world != world_name(kind) {
        return Err(RegistryError::WorldConflict {
            id: id.to_string(),
            existing: existing.world,
            asked: world_name(kind),
        });
    }
    Ok(existing)
}

/// Turns to compile uploads: one at a time per tenant, and a few at a time
/// over the server (at least two, so that a tenant whose uploads queue never
/// holds every turn).
struct CompileGate {
    server: Arc<tokio::sync::Semaphore>,
    tenants: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// A turn to compile; the next one waits until it is dropped.
struct CompileTurn {
    _tenant: tokio::sync::OwnedSemaphorePermit,
    _server: tokio::sync::OwnedSemaphorePermit,
}

impl CompileGate {
    fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            server: Arc::new(tokio::sync::Semaphore::new(cores.max(2))),
            tenants: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Waits for `tenant`'s turn, then for one of the server's.
    async fn enter(&self, tenant: &str) -> CompileTurn {
        let own = {
            let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
            // Tenants nobody waits for or holds a turn of are forgotten.
            tenants.retain(|_, s| Arc::strong_count(s) > 1);
            tenants
                .entry(tenant.to_string())
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1)))
                .clone()
        };
        let tenant = own.acquire_owned().await.expect("never closed");
        let server = self
            .server
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        CompileTurn {
            _tenant: tenant,
            _server: server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_runtime::RuntimeConfig;
    use std::path::Path;
    use std::time::Duration;

    fn plugin_bytes(name: &str) -> Vec<u8> {
        std::fs::read(sluice_tests::plugin_path(name)).unwrap()
    }

    async fn registry(dir: &Path) -> PluginRegistry {
        let store: Arc<dyn MetaStore> = Arc::new(
            sluice_meta::EmbeddedMetaStore::open(dir.join("meta.redb"))
                .await
                .unwrap(),
        );
        let runtime = PluginRuntime::new(RuntimeConfig {
            cache_dir: Some(dir.join("precompiled")),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let files = PluginFiles::open(
            &sluice_redo::StorageUri::Local(dir.join("plugins")),
            &dir.join("plugin-cache"),
        )
        .await
        .unwrap();
        PluginRegistry::new(store, runtime, files, 4 << 20)
    }

    #[tokio::test]
    async fn uploads_are_content_addressed_checked_and_immutable() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path()).await;
        let id: PluginId = "sink-blackhole@0.1.0".parse().unwrap();
        let bytes = plugin_bytes("sink-blackhole");
        let record = reg
            .upload("acme", &id, PluginKind::Sink, &bytes)
            .await
            .unwrap();
        assert_eq!(record.sha256, hex_sha256(&bytes));
        assert_eq!(record.world, "sink");
        assert!(
            dir.path()
                .join(format!("plugins/{}.wasm", record.sha256))
                .exists()
        );
        // Same bytes again: the same record. Other bytes: refused.
        assert_eq!(
            reg.upload("acme", &id, PluginKind::Sink, &bytes)
                .await
                .unwrap(),
            record
        );
        let other = plugin_bytes("sink-file");
        let err = reg
            .upload("acme", &id, PluginKind::Sink, &other)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::Conflict { .. }), "{err}");
        assert!(
            err.to_string().contains("upload it as a new version"),
            "{err}"
        );
        // Wrong world, not a component, too large.
        let filter_id: PluginId = "filter-mask@1.0.0".parse().unwrap();
        let err = reg
            .upload(
                "acme",
                &filter_id,
                PluginKind::Sink,
                &plugin_bytes("filter-mask"),
            )
            .await
            .unwrap_err();
        let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(
            chain.contains("missing export `sluice:plugin/sink-api@0.2.0`"),
            "{chain}"
        );
        let err = reg
            .upload("acme", &filter_id, PluginKind::Filter, b"\0asm\x01\0\0\0")
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                RegistryError::NotAPlugin {
                    source: LoadError::CoreModule,
                    ..
                }
            ),
            "{err}"
        );
        let big = vec![0u8; (4 << 20) + 1];
        assert!(matches!(
            reg.upload("acme", &filter_id, PluginKind::Filter, &big)
                .await
                .unwrap_err(),
            RegistryError::TooLarge { .. }
        ));
        // Listing is per tenant.
        assert_eq!(reg.list("acme").await.unwrap(), vec![record.clone()]);
        assert!(reg.list("other").await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_compiling_holds_up_only_its_own_next_upload() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Arc::new(registry(dir.path()).await);
        let bytes = Arc::new(plugin_bytes("sink-blackhole"));
        // Tenant "busy" is compiling (its turn is held here).
        let turn = reg.compiles.enter("busy").await;
        let upload = |tenant: &'static str, version: &'static str| {
            let (reg, bytes) = (reg.clone(), bytes.clone());
            tokio::spawn(async move {
                let id: PluginId = format!("sink-blackhole@{version}").parse().unwrap();
                reg.upload(tenant, &id, PluginKind::Sink, &bytes).await
            })
        };
        let busy_next = upload("busy", "0.2.0");
        // Another tenant's upload, and a delete, go through meanwhile (the
        // timeout only guards against a hang).
        let other = tokio::time::timeout(Duration::from_secs(120), upload("other", "0.1.0"))
            .await
            .expect("another tenant's upload does not wait for busy's compile")
            .unwrap()
            .unwrap();
        let id: PluginId = "sink-blackhole@0.1.0".parse().unwrap();
        tokio::time::timeout(Duration::from_secs(60), reg.delete("other", &id, &[]))
            .await
            .expect("a delete does not wait for a compile")
            .unwrap();
        assert_eq!(other.sha256, hex_sha256(&bytes));
        // Busy's next upload has waited for its turn all along.
        assert!(!busy_next.is_finished());
        assert!(reg.list("busy").await.unwrap().is_empty());
        drop(turn);
        let record = busy_next.await.unwrap().unwrap();
        assert_eq!(record.plugin_version, "0.2.0");
        assert_eq!(reg.list("busy").await.unwrap(), vec![record]);
        // The bytes stay for busy's record though other's was deleted.
        assert!(
            reg.load("busy", &"sink-blackhole@0.2.0".parse().unwrap())
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn loads_verify_the_bytes_and_deletes_respect_users() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path()).await;
        let id: PluginId = "sink-blackhole@0.1.0".parse().unwrap();
        let record = reg
            .upload(
                "acme",
                &id,
                PluginKind::Sink,
                &plugin_bytes("sink-blackhole"),
            )
            .await
            .unwrap();
        let component = reg.load("acme", &id).await.unwrap();
        assert_eq!(component.digest(), record.sha256);

        let err = reg
            .delete("acme", &id, &["acme/orders".to_string()])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sink-blackhole@0.1.0 is used by acme/orders; remove or update those changefeeds first"
        );

        // Damaged bytes on disk are detected, not run.
        let path = dir.path().join(format!("plugins/{}.wasm", record.sha256));
        std::fs::write(&path, b"tampered").unwrap();
        assert!(matches!(
            reg.load("acme", &id).await.unwrap_err(),
            RegistryError::Damaged { .. }
        ));

        assert_eq!(reg.delete("acme", &id, &[]).await.unwrap(), record);
        assert!(!path.exists());
        assert!(matches!(
            reg.load("acme", &id).await.unwrap_err(),
            RegistryError::NotFound { .. }
        ));
    }
}
