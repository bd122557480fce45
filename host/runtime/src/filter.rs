//! `WasmFilter`: a filter plugin behind the `sluice_core::Filter` trait.

use std::sync::Arc;

use sluice_core::{Batch, Filter, PluginError, TableSchema};

use crate::bindings::filter::Filter as FilterBindings;
use crate::bindings::types as wit;
use crate::component::{PluginComponent, PluginKind, Pre};
use crate::config::PluginSettings;
use crate::convert;
use crate::error::LoadError;
use crate::instance::{Slot, guarded_call};
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

    /// Largest batch (wire bytes) the host sends in one call.
    pub fn max_batch_bytes(&self) -> u64 {
        self.slot.settings.limits.batch_bytes()
    }

    async fn instantiate(&mut self) -> Result<(), PluginError> {
        let Pre::Filter(pre) = &self.slot.component.pre else {
            unreachable!("checked in WasmFilter::new");
        };
        let pre = pre.clone();
        let (mut store, stderr) = self.slot.new_store()?;
        store.set_epoch_deadline(crate::instance::ticks(
            self.slot.settings.limits.call_timeout,
            self.slot.component.runtime.inner.epoch_tick,
        ));
        let timeout = self.slot.settings.limits.host_call_timeout;
        match tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await {
            Ok(Ok(bindings)) => self.slot.install(store, bindings, stderr),
            Ok(Err(e)) => return Err(PluginError::Stopped(format!("instantiation failed: {e:#}"))),
            Err(_) => {
                return Err(PluginError::Stopped(format!(
                    "instantiation took longer than {timeout:?}"
                )));
            }
        }
        Ok(())
    }

    /// Ask the plugin whether its configuration is valid (a throwaway instance).
    pub async fn validate_config(&mut self) -> Result<(), PluginError> {
        self.instantiate().await?;
        let config = self.slot.settings.config_json.clone();
        let result = guarded_call!(self.slot, |live| live
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
            guarded_call!(self.slot, |live| live
                .bindings
                .sluice_plugin_filter_api()
                .call_open(&mut live.store, &config))?;
        }
        Ok(())
    }
}

impl Filter for WasmFilter {
    fn name(&self) -> &str {
        &self.slot.settings.name
    }

    async fn open(&mut self) -> Result<(), PluginError> {
        self.live().await
    }

    async fn transform(
        &mut self,
        schemas: &[Arc<TableSchema>],
        batch: &mut Batch,
    ) -> Result<(), PluginError> {
        let bytes = batch.wire_bytes() as u64;
        if bytes > self.max_batch_bytes() {
            return Err(PluginError::Refused(format!(
                "batch of {bytes} bytes is over this plugin's bound of {} bytes (a quarter of its memory quota); split it",
                self.max_batch_bytes()
            )));
        }
        self.live().await?;
        let sent = &self.slot.live.as_ref().expect("live").sent;
        let new: Vec<&Arc<TableSchema>> = schemas
            .iter()
            .filter(|s| !sent.contains(&(s.table_id, s.version)))
            .filter(|s| {
                batch
                    .tables
                    .iter()
                    .any(|t| (t.table_id, t.schema_version) == (s.table_id, s.version))
            })
            .collect();
        let wire = wit::Batch {
            schemas: new.iter().map(|s| convert::schema(s)).collect(),
            tables: std::mem::take(&mut batch.tables)
                .into_iter()
                .map(convert::table_to_wit)
                .collect(),
        };
        let result = guarded_call!(self.slot, |live| live
            .bindings
            .sluice_plugin_filter_api()
            .call_transform(&mut live.store, &wire));
        let output = match result {
            Ok(output) => output,
            Err(err) => {
                batch.tables = wire
                    .tables
                    .into_iter()
                    .map(convert::table_from_wit)
                    .collect();
                return Err(err);
            }
        };
        if let Some(live) = &mut self.slot.live {
            live.sent
                .extend(new.iter().map(|s| (s.table_id, s.version)));
        }
        if !output.schemas.is_empty() {
            batch.tables = wire
                .tables
                .into_iter()
                .map(convert::table_from_wit)
                .collect();
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
                });
            let schema = match schema {
                Ok(s) => s,
                Err(e) => {
                    batch.tables = wire
                        .tables
                        .into_iter()
                        .map(convert::table_from_wit)
                        .collect();
                    return Err(e);
                }
            };
            if let Err(e) = t.validate(schema) {
                batch.tables = wire
                    .tables
                    .into_iter()
                    .map(convert::table_from_wit)
                    .collect();
                return Err(PluginError::Fatal(format!(
                    "the filter returned a malformed batch: {e}"
                )));
            }
        }
        batch.tables = tables;
        Ok(())
    }
}
