//! What a capture runs: [`Capture`] starts a changefeed's work (a [`Processor`])
//! at an epoch from a checkpoint (its agent does, for what the owner assigned),
//! keeps each changefeed's plugin counters across its processors, and checks the
//! plugins a changefeed names before it is stored.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use sluice_config::SourceConfig;
use sluice_core::CheckpointTs;
use sluice_owner::{ChangefeedId, ChangefeedInfo, OwnerError};
use sluice_protocol::{Epoch, Shipment};
use sluice_registry::RegistryError;
use sluice_runtime::{PluginKind, WasmFilter, WasmSink};

use crate::processor::{Live, PluginCounters, Processor, SwapStats, plugin_roles};
use crate::{Ctx, error_chain};

/// What this capture runs, one processor per changefeed at most.
pub struct Capture {
    ctx: Arc<Ctx>,
    /// Each changefeed's plugin counters, handed from processor to processor so
    /// that plugin series neither vanish nor go backwards; dropped when the
    /// changefeed is removed.
    counters: Mutex<BTreeMap<ChangefeedId, PluginCounters>>,
    /// Each changefeed's swap counters, likewise.
    swaps: Mutex<BTreeMap<ChangefeedId, Arc<SwapStats>>>,
    /// Each changefeed's latest processor here, while it lives.
    runs: Mutex<BTreeMap<ChangefeedId, Started>>,
}

/// A processor this capture started, seen from outside.
struct Started {
    epoch: Epoch,
    side: Side,
    live: Weak<Live>,
}

/// Which part of a changefeed's run a capture runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// All of it.
    Whole,
    /// It reads the source and ships other captures their tables.
    Reads,
    /// Some tables, shipped from the capture that reads.
    Receives,
}

impl Side {
    /// The side of a run with `shipment` (none: whole).
    pub fn of(shipment: Option<&Shipment>) -> Self {
        match shipment.map(|s| &s.role) {
            None => Self::Whole,
            Some(sluice_protocol::ShipRole::Reads { .. }) => Self::Reads,
            Some(sluice_protocol::ShipRole::Receives { .. }) => Self::Receives,
        }
    }

    /// Its name in logs and metrics: `whole`, `reads` or `receives`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Whole => "whole",
            Self::Reads => "reads",
            Self::Receives => "receives",
        }
    }
}

/// A processor running on this capture, as [`Capture::runs`] lists it.
pub struct LocalRun {
    /// Its changefeed.
    pub id: ChangefeedId,
    /// The changefeed epoch it runs under.
    pub epoch: Epoch,
    /// Its part of the changefeed's run.
    pub side: Side,
    /// Its progress and counters.
    pub live: Arc<Live>,
    /// Its plugins' counters.
    pub plugins: PluginCounters,
}

impl Capture {
    /// A capture whose processors share `ctx`.
    pub fn new(ctx: Arc<Ctx>) -> Self {
        Self {
            ctx,
            counters: Mutex::new(BTreeMap::new()),
            swaps: Mutex::new(BTreeMap::new()),
            runs: Mutex::new(BTreeMap::new()),
        }
    }

    /// What the processors share.
    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    /// Starts `info`'s pipeline under `epoch`, replicating after `checkpoint`
    /// (of the tables `shipment` gives this capture, when it has one).
    pub fn start(
        &self,
        info: &ChangefeedInfo,
        epoch: Epoch,
        checkpoint: CheckpointTs,
        shipment: Option<Shipment>,
    ) -> Processor {
        let plugins = {
            let mut counters = self.counters.lock().expect("not poisoned");
            let entry = counters.entry(info.id.clone()).or_default();
            *entry = carry_over(entry, info);
            entry.clone()
        };
        let swaps = self.swap_stats(&info.id);
        let side = Side::of(shipment.as_ref());
        let processor = Processor::start(
            self.ctx.clone(),
            info.clone(),
            epoch,
            checkpoint,
            shipment,
            plugins,
            swaps,
        );
        let started = Started {
            epoch,
            side,
            live: Arc::downgrade(&processor.live),
        };
        let mut runs = self.runs.lock().expect("not poisoned");
        runs.retain(|_, r| r.live.strong_count() > 0);
        runs.insert(info.id.clone(), started);
        processor
    }

    /// The processors running here (those the agent still holds), by
    /// changefeed: of `tenant`'s changefeeds, or every tenant's for `""`.
    pub fn runs(&self, tenant: &str) -> Vec<LocalRun> {
        let runs = self.runs.lock().expect("not poisoned");
        runs.iter()
            .filter(|(id, _)| tenant.is_empty() || id.tenant() == tenant)
            .filter_map(|(id, r)| {
                Some(LocalRun {
                    id: id.clone(),
                    epoch: r.epoch,
                    side: r.side,
                    live: r.live.upgrade()?,
                    plugins: self.plugin_counters(id),
                })
            })
            .collect()
    }

    /// Drops a removed changefeed's counters and removes its redo log, if it
    /// has one (see [`remove_redo`]).
    pub fn forget(&self, id: &ChangefeedId) {
        self.counters.lock().expect("not poisoned").remove(id);
        self.swaps.lock().expect("not poisoned").remove(id);
        self.runs.lock().expect("not poisoned").remove(id);
        let (root, id) = (self.ctx.redo_root.clone(), id.clone());
        // Its processor may take up to the stop timeout to stop.
        let grace = self.ctx.stop_timeout + std::time::Duration::from_secs(1);
        tokio::spawn(async move {
            if let Err(e) = remove_redo(&root, &id, grace).await {
                tracing::warn!(changefeed = %id, error = %e, "Could not remove the redo log of a removed changefeed.");
            }
        });
    }

    /// The swap counters of `id` (created on first use).
    pub fn swap_stats(&self, id: &ChangefeedId) -> Arc<SwapStats> {
        self.swaps
            .lock()
            .expect("not poisoned")
            .entry(id.clone())
            .or_default()
            .clone()
    }

    /// The counters of `id`'s plugins (of its latest processor, running or not).
    pub fn plugin_counters(&self, id: &ChangefeedId) -> PluginCounters {
        self.counters
            .lock()
            .expect("not poisoned")
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    /// Where this capture keeps the private directory of one plugin of a
    /// changefeed (`role` is `sink` or `filter-<i>`).
    pub fn plugin_data_dir(&self, id: &ChangefeedId, role: &str) -> PathBuf {
        crate::plugin_data_dir(&self.ctx.data_dir, id, role)
    }

    /// Checks `info`'s source the way a create does (see
    /// `sluice_source::prepare`): reachable and set up for change capture, with
    /// a `now` start pinned. Returns the source config to store, if it changed.
    pub async fn prepare_source(
        &self,
        info: &ChangefeedInfo,
    ) -> Result<Option<SourceConfig>, OwnerError> {
        match sluice_source::prepare(&info.config.source).await {
            Ok(prepared) => Ok((prepared != info.config.source).then_some(prepared)),
            Err(e) if e.is_fatal() => Err(OwnerError::Invalid(format!("source: {e}"))),
            Err(e) => Err(OwnerError::Unavailable(format!("source: {e}"))),
        }
    }

    /// Checks every plugin `info` names: uploaded in its tenant, of the right
    /// world, and its options accepted by its own `validate-config` (on the
    /// plugin's own thread). Each plugin is loaded once.
    pub async fn check_plugins(&self, info: &ChangefeedInfo) -> Result<(), OwnerError> {
        let tenant = info.id.tenant();
        let plugins = info
            .config
            .filters
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("filters[{i}]"), f, PluginKind::Filter))
            .chain([("sink".to_string(), &info.config.sink, PluginKind::Sink)]);
        let plugins: Vec<_> = plugins.collect();
        let registry = &self.ctx.registry;
        for (at, plugin, kind) in &plugins {
            let record = registry
                .get(tenant, &plugin.plugin)
                .await
                .map_err(registry_error)?
                .ok_or_else(|| {
                    OwnerError::NotFound(format!(
                        "{at}.plugin: no plugin {} in tenant {tenant}; upload it first (sluice cli plugin upload)",
                        plugin.plugin
                    ))
                })?;
            if record.world != kind.world() {
                return Err(OwnerError::Invalid(format!(
                    "{at}.plugin: {} is a {} plugin; {at} needs a {}",
                    plugin.plugin,
                    record.world,
                    kind.world()
                )));
            }
        }
        for (at, plugin, _) in &plugins {
            self.ctx.reserved.check(at, &plugin.capabilities).await?;
        }
        for (at, plugin, kind) in &plugins {
            let component = registry
                .load(tenant, &plugin.plugin)
                .await
                .map_err(registry_error)?;
            let settings = self.ctx.plugin_settings(
                plugin,
                &info.id.to_string(),
                plugin.plugin.to_string(),
                None,
            );
            let invalid = |e: &dyn std::fmt::Display| OwnerError::Invalid(e.to_string());
            let rejected = |e: &dyn std::fmt::Display| {
                OwnerError::Invalid(format!(
                    "{at}.config was rejected by `{}`: {e}",
                    plugin.plugin
                ))
            };
            match kind {
                PluginKind::Filter => {
                    let mut filter =
                        WasmFilter::new(component, settings).map_err(|e| invalid(&e))?;
                    filter.validate_config().await.map_err(|e| rejected(&e))?;
                }
                PluginKind::Sink => {
                    let mut sink = WasmSink::new(component, settings).map_err(|e| invalid(&e))?;
                    sink.validate_config().await.map_err(|e| rejected(&e))?;
                }
            }
        }
        Ok(())
    }
}

/// A registry error as the owner's error: what the caller does next.
pub fn registry_error(e: RegistryError) -> OwnerError {
    let message = error_chain(&e);
    match e {
        RegistryError::InvalidId(_) | RegistryError::NotAPlugin { .. } => {
            OwnerError::Invalid(message)
        }
        RegistryError::TooLarge { .. } => OwnerError::Exhausted(message),
        RegistryError::Conflict { .. } | RegistryError::WorldConflict { .. } => {
            OwnerError::AlreadyExists(message)
        }
        RegistryError::NotFound { .. } => OwnerError::NotFound(message),
        RegistryError::InUse { .. } => OwnerError::Precondition(message),
        RegistryError::Damaged { .. } => OwnerError::DataLoss(message),
        RegistryError::InvalidStore(_) => OwnerError::Precondition(message),
        RegistryError::Store(_) | RegistryError::Io { .. } | RegistryError::NotOwner => {
            OwnerError::Unavailable(message)
        }
    }
}

/// The counters for a processor of `info`: those of the previous processor where
/// the role still runs the same plugin (they carry on), fresh ones elsewhere
/// (an update that changed a plugin starts its series anew; the old ones go).
fn carry_over(previous: &PluginCounters, info: &ChangefeedInfo) -> PluginCounters {
    plugin_roles(info)
        .into_iter()
        .map(|(role, plugin)| {
            let stats = previous
                .iter()
                .find(|(r, p, _)| *r == role && *p == plugin)
                .map(|(_, _, s)| s.clone())
                .unwrap_or_default();
            (role, plugin, stats)
        })
        .collect()
}

/// Removes the redo log of removed changefeed `id` under `root`, if there is
/// one: marks it removed at once (a changefeed created again under the name
/// starts the log anew), waits `grace` for the processor to stop, then
/// removes its files unless a new changefeed took the log over meanwhile.
pub async fn remove_redo(
    root: &sluice_redo::StorageUri,
    id: &ChangefeedId,
    grace: std::time::Duration,
) -> Result<(), sluice_redo::LogError> {
    let tenant_root = root.child(id.tenant());
    if let sluice_redo::StorageUri::Local(dir) = &tenant_root
        && !dir.join(id.name()).is_dir()
    {
        return Ok(());
    }
    let storage = sluice_redo::Storage::open(&tenant_root, id.name()).await?;
    if storage.list().await?.is_empty() {
        if let Some(dir) = storage.local_dir() {
            let _ = std::fs::remove_dir(dir);
        }
        return Ok(());
    }
    storage
        .put(
            sluice_redo::REMOVED_MARKER,
            Arc::new(b"this changefeed was removed\n".to_vec()),
        )
        .await?;
    tokio::time::sleep(grace).await;
    if !sluice_redo::Listing::read(&storage).await?.removed {
        return Ok(());
    }
    let removed = sluice_redo::remove_log(&storage).await?;
    if let Some(dir) = storage.local_dir() {
        let _ = std::fs::remove_dir(dir);
    }
    tracing::info!(changefeed = %id, files = removed, log = storage.location(), "Removed the redo log of a removed changefeed.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice_core::{CommitTs, Transaction};
    use sluice_redo::{LogWriter, Storage, StorageUri};

    use super::*;

    async fn a_log(root: &StorageUri, id: &ChangefeedId) -> Storage {
        let storage = Storage::open(&root.child(id.tenant()), id.name())
            .await
            .unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.append_transaction(&Transaction::new(CommitTs::new(10)))
            .unwrap();
        w.resolved(10);
        w.flush(0).await.unwrap();
        assert!(!storage.list().await.unwrap().is_empty());
        storage
    }

    #[tokio::test]
    async fn a_removed_changefeeds_redo_log_is_removed_unless_a_new_one_took_it_over() {
        let dir = tempfile::tempdir().unwrap();
        let root = StorageUri::Local(dir.path().to_path_buf());
        let id = ChangefeedId::new("acme", "orders").unwrap();
        let storage = a_log(&root, &id).await;
        remove_redo(&root, &id, Duration::ZERO).await.unwrap();
        assert!(
            !storage.local_dir().unwrap().exists(),
            "the log's directory is gone"
        );
        // Nothing there: nothing to do, and nothing created.
        remove_redo(&root, &id, Duration::ZERO).await.unwrap();
        assert!(!storage.local_dir().unwrap().exists());

        // Created again while the removal waits: the new changefeed's
        // writer starts the log anew and the removal leaves it alone.
        let storage = a_log(&root, &id).await;
        let removal = tokio::spawn({
            let (root, id) = (root.clone(), id.clone());
            async move { remove_redo(&root, &id, Duration::from_millis(300)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        assert_eq!(
            w.meta(),
            sluice_redo::Meta::default(),
            "the old log is gone"
        );
        w.append_transaction(&Transaction::new(CommitTs::new(20)))
            .unwrap();
        w.resolved(20);
        w.flush(0).await.unwrap();
        removal.await.unwrap().unwrap();
        let listing = sluice_redo::Listing::read(&storage).await.unwrap();
        assert!(!listing.removed);
        assert_eq!(listing.meta.unwrap().resolved_ts, 20, "the new log is kept");
    }
}
