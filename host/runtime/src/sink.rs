//! `WasmSink`: a sink plugin behind the `sluice_core::Sink` trait.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_core::{Batch, CheckpointTs, CommitTs, DdlEvent, PluginError, Sink, TableSchema};

use crate::bindings::sink::Sink as SinkBindings;
use crate::component::{PluginComponent, PluginKind, Pre};
use crate::config::PluginSettings;
use crate::convert;
use crate::error::LoadError;
use crate::instance::{Slot, guarded_call, restore};
use crate::state::PluginStats;

/// Runs a sink component: one live instance at a time, created on first use and
/// after every failure.
pub struct WasmSink {
    slot: Slot<SinkBindings>,
    /// The run's first saved checkpoint was handed over (the one it starts
    /// from): later ones only move it forward.
    run_started: bool,
}

impl WasmSink {
    /// A sink for `component` (which must implement the sink world).
    pub fn new(component: PluginComponent, settings: PluginSettings) -> Result<Self, LoadError> {
        if component.kind != PluginKind::Sink {
            return Err(LoadError::WrongWorld {
                world: "sink",
                reason: "this component implements the filter world".into(),
            });
        }
        let grants = &settings.capabilities.sql;
        let sql = if grants.is_empty() {
            None
        } else {
            let handle =
                tokio::runtime::Handle::try_current().map_err(|_| crate::sql::GrantError {
                    name: grants[0].0.clone(),
                    problem: "databases can only be granted inside the host's async runtime".into(),
                })?;
            Some(Arc::new(crate::sql::SqlPools::new(
                grants,
                settings.limits.sql_connections,
                handle,
                settings.capabilities.fence.clone(),
            )?))
        };
        let mut slot = Slot::new(component, settings);
        slot.sql = sql;
        Ok(Self {
            slot,
            run_started: false,
        })
    }

    /// Counters and stop reasons of this plugin.
    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.slot.stats
    }

    /// Counts into `stats` instead of fresh counters (set before the first call):
    /// a server hands each new sink of a changefeed the counters of the one before,
    /// so that they never go backwards across restarts.
    pub fn with_stats(mut self, stats: Arc<PluginStats>) -> Self {
        self.slot.stats = stats;
        self
    }

    /// Largest batch (wire bytes) the host sends in one call.
    pub fn max_batch_bytes(&self) -> u64 {
        self.slot.settings.limits.batch_bytes()
    }

    /// Linear memory of the live instance, if one is live.
    pub fn instance_memory_bytes(&self) -> Option<u64> {
        self.slot.memory_bytes()
    }

    /// Whether an instance is live.
    pub fn is_live(&self) -> bool {
        self.slot.live.is_some()
    }

    async fn instantiate(&mut self) -> Result<(), PluginError> {
        let Pre::Sink(pre) = &*self.slot.component.pre else {
            unreachable!("checked in WasmSink::new");
        };
        let pre = pre.clone();
        self.slot
            .instantiate_with(move |mut store| async move {
                let made = pre.instantiate_async(&mut store).await;
                (store, made)
            })
            .await
    }

    /// Ask the plugin whether its configuration is valid (a throwaway instance;
    /// nothing is opened).
    pub async fn validate_config(&mut self) -> Result<(), PluginError> {
        self.instantiate().await?;
        let config = self.slot.settings.config_json.clone();
        let (result, _) = guarded_call!(self.slot, config, |live, config| live
            .bindings
            .sluice_plugin_sink_api()
            .call_validate_config(&mut live.store, &config));
        self.slot.live = None;
        result
    }

    /// Refuses every call once the capture's [`WriteFence`] has closed: no
    /// write, flush or schema change reaches the destination.
    ///
    /// [`WriteFence`]: sluice_core::WriteFence
    fn fenced(&self) -> Result<(), PluginError> {
        self.slot
            .settings
            .capabilities
            .fence
            .check()
            .map_err(|closed| PluginError::Refused(closed.to_string()))
    }

    async fn live(&mut self) -> Result<(), PluginError> {
        self.fenced()?;
        if self.slot.live.is_none() {
            self.instantiate().await?;
            let config = self.slot.settings.config_json.clone();
            guarded_call!(self.slot, config, |live, config| live
                .bindings
                .sluice_plugin_sink_api()
                .call_open(&mut live.store, &config))
            .0?;
        }
        Ok(())
    }
}

impl Sink for WasmSink {
    fn name(&self) -> &str {
        &self.slot.settings.name
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        self.live().await
    }

    async fn write(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        self.slot.check_bound(batch)?;
        self.live().await?;
        let (keys, wire) = self.slot.wire_batch(schemas, batch);
        let (result, wire) = guarded_call!(self.slot, wire, |live, wire| live
            .bindings
            .sluice_plugin_sink_api()
            .call_write(&mut live.store, &wire));
        if let Some(wire) = wire {
            restore(batch, wire);
        }
        if result.is_ok() {
            self.slot.mark_sent(keys);
        }
        result
    }

    async fn flush(&mut self, ts: CommitTs) -> Result<(), PluginError> {
        self.live().await?;
        guarded_call!(self.slot, ts.get(), |live, ts| live
            .bindings
            .sluice_plugin_sink_api()
            .call_flush(&mut live.store, ts))
        .0
    }

    async fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), PluginError> {
        self.live().await?;
        let wire = convert::ddl(ddl);
        guarded_call!(self.slot, wire, |live, wire| live
            .bindings
            .sluice_plugin_sink_api()
            .call_apply_ddl(&mut live.store, &wire))
        .0
    }

    async fn close(&mut self) -> Result<(), PluginError> {
        if self.slot.live.is_none() {
            return Ok(());
        }
        if let Err(e) = self.fenced() {
            // What the instance holds unflushed is not delivered: the
            // capture that takes over writes it again from the checkpoint.
            self.slot.live = None;
            return Err(e);
        }
        let (result, _) = guarded_call!(self.slot, (), |live, _unit| live
            .bindings
            .sluice_plugin_sink_api()
            .call_close(&mut live.store));
        self.slot.live = None;
        result
    }

    /// Closes the live instance (the plugin's `close`) and gives its slot
    /// back; the next call instantiates and opens a new one from the
    /// precompiled component.
    async fn release_idle(&mut self) {
        if self.slot.live.is_none() {
            return;
        }
        if let Err(e) = self.close().await {
            tracing::debug!(plugin = %self.slot.settings.name, error = %e, "An idle sink's close failed; its instance is released anyway.");
        }
        self.slot
            .stats
            .idle_releases
            .fetch_add(1, Ordering::Relaxed);
    }

    fn checkpoint_saved(&mut self, ts: CheckpointTs) {
        let saved = &self.slot.stats.saved_checkpoint;
        if self.run_started {
            saved.fetch_max(ts.get(), Ordering::Relaxed);
        } else {
            // The counters outlive runs (`with_stats`); the saved checkpoint
            // is the run's: another capture's side of an earlier run may
            // have saved past where this one starts, and rows above this
            // one's start come again.
            saved.store(ts.get(), Ordering::Relaxed);
            self.run_started = true;
        }
    }
}
