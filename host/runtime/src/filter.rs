//! `WasmFilter`: a filter plugin behind the `sluice_core::Filter` trait.

use std::sync::Arc;

use sluice_core::{Batch, Filter, PluginError, TableSchema};

use crate::bindings::filter::Filter as FilterBindings;
use crate::bindings::types as wit;
use crate::component::{PluginComponent, PluginKind, Pre};
use crate::config::PluginSettings;
use crate::convert;
use crate::error::LoadError;
use crate::instance::{Slot, guarded_call, restore};
use crate::state::PluginStats;

/// Runs a filter component: one live instance at a time.
pub struct WasmFilter {
    slot: Slot<FilterBindings>,
}

impl WasmFilter {
    /// A filter for `component` (which must implement the filter world).
    pub fn new(component: PluginComponent, settings: PluginSettings) -> Result<Self, LoadError> {
        if component.kind != PluginKind::Filter {
            return Err(LoadError::WrongWorld {
                world: "filter",
                reason: "this component implements the sink world".into(),
            });
        }
        Ok(Self {
            slot: Slot::new(component, settings),
        })
    }

    /// Counters and stop reasons of this plugin.
    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.slot.stats
    }

    /// Counts into `stats` instead of fresh counters (set before the first call):
    /// a server hands each new filter of a changefeed the counters of the one before,
    /// so that they never go backwards across restarts.
    pub fn with_stats(mut self, stats: Arc<PluginStats>) -> Self {
        self.slot.stats = stats;
        self
    }

    /// Largest batch (wire bytes) the host sends in one call.
    pub fn max_batch_bytes(&self) -> u64 {
        self.slot.settings.limits.batch_bytes()
    }

    async fn instantiate(&mut self) -> Result<(), PluginError> {
        let Pre::Filter(pre) = &*self.slot.component.pre else {
            unreachable!("checked in WasmFilter::new");
        };
        let pre = pre.clone();
        self.slot
            .instantiate_with(move |mut store| async move {
                let made = pre.instantiate_async(&mut store).await;
                (store, made)
            })
            .await
    }

    /// Ask the plugin whether its configuration is valid (a throwaway instance).
    pub async fn validate_config(&mut self) -> Result<(), PluginError> {
        self.instantiate().await?;
        let config = self.slot.settings.config_json.clone();
        let (result, _) = guarded_call!(self.slot, config, |live, config| live
            .bindings
            .sluice_plugin_filter_api()
            .call_validate_config(&mut live.store, &config));
        self.slot.live = None;
        result
    }

    async fn live(&mut self) -> Result<(), PluginError> {
        if self.slot.live.is_none() {
            self.instantiate().await?;
            let config = self.slot.settings.config_json.clone();
            guarded_call!(self.slot, config, |live, config| live
                .bindings
                .sluice_plugin_filter_api()
                .call_open(&mut live.store, &config))
            .0?;
        }
        Ok(())
    }
}

impl Filter for WasmFilter {
    fn name(&self) -> &str {
        &self.slot.settings.name
    }

    /// Drops the live instance and gives its slot back; the next call
    /// instantiates and opens a new one.
    async fn release_idle(&mut self) {
        if self.slot.live.take().is_some() {
            self.slot
                .stats
                .idle_releases
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        self.live().await
    }

    async fn transform(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        self.slot.check_bound(batch)?;
        self.live().await?;
        let (keys, wire) = self.slot.wire_batch(schemas, batch);
        let (result, wire) = guarded_call!(self.slot, wire, |live, wire| live
            .bindings
            .sluice_plugin_filter_api()
            .call_transform(&mut live.store, &wire));
        if result.is_ok() {
            self.slot.mark_sent(keys);
        }
        match result.and_then(|output| checked_output(schemas, output)) {
            Ok(tables) => {
                batch.tables = tables;
                Ok(())
            }
            Err(err) => {
                // The input goes back untouched, so the caller can retry it; an
                // instance that returned garbage is not kept.
                self.slot.live = None;
                if let Some(wire) = wire {
                    restore(batch, wire);
                }
                Err(err)
            }
        }
    }
}

/// A filter's output, checked: no new schemas (not supported yet), every table
/// from the input, every table batch consistent with its schema.
fn checked_output(
    schemas: &[Arc<TableSchema>],
    output: wit::Batch,
) -> Result<Vec<sluice_core::TableBatch>, PluginError> {
    if !output.schemas.is_empty() {
        return Err(PluginError::Fatal(
            "the filter returned new schemas; schema-changing filters are not supported by this host yet".into(),
        ));
    }
    let tables: Vec<_> = output
        .tables
        .into_iter()
        .map(convert::table_from_wit)
        .collect();
    for t in &tables {
        let schema = schemas
            .iter()
            .find(|s| (s.table_id, s.version) == (t.table_id, t.schema_version))
            .ok_or_else(|| {
                PluginError::Fatal(format!(
                    "the filter returned rows for table {} version {}, which was not in its input",
                    t.table_id, t.schema_version
                ))
            })?;
        t.validate(schema).map_err(|e| {
            PluginError::Fatal(format!("the filter returned a malformed batch: {e}"))
        })?;
    }
    Ok(tables)
}
