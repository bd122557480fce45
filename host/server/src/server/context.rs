//! The owner's context in this server: its records in the meta store, plugin
//! checks and deletes through the registry, and work assigned through the meta
//! store to this node's capture (whose agent runs it and reports back there).

use std::sync::Arc;

use sluice_capture::{Capture, registry_error};
use sluice_config::SourceConfig;
use sluice_core::CheckpointTs;
use sluice_meta::Revision;
use sluice_owner::{
    AssignedWork, Assigner, ChangefeedId, ChangefeedInfo, ChangefeedStatus, Epoch, InfoWrite,
    MetaRecords, OwnerContext, OwnerError, PluginId, SaveError, Stored,
};

/// The owner's I/O, wired to this process.
pub struct ServerContext {
    pub records: MetaRecords,
    pub assigner: Assigner,
    pub capture: Arc<Capture>,
}

impl OwnerContext for ServerContext {
    type Work = AssignedWork;

    /// Reads the records, and the assignments of earlier owners: what still
    /// runs is adopted (it goes on where it runs), every other assignment is
    /// deleted (that work is gone, or fenced once a new epoch claims its
    /// task position).
    async fn load(&self) -> Result<Stored, OwnerError> {
        let mut stored = self.records.load().await?;
        stored.running = self
            .assigner
            .adopt()
            .await
            .map_err(|e| OwnerError::Unavailable(format!("meta store: {e}")))?;
        Ok(stored)
    }

    async fn save(
        &self,
        id: &ChangefeedId,
        info: Option<InfoWrite<'_>>,
        status: Option<&ChangefeedStatus>,
    ) -> Result<Revision, SaveError> {
        self.records.save(id, info, status).await
    }

    async fn forget(&self, id: &ChangefeedId) -> Result<(), SaveError> {
        self.records.forget(id).await
    }

    async fn check(&self, info: &ChangefeedInfo) -> Result<Option<SourceConfig>, OwnerError> {
        self.capture.check_plugins(info).await?;
        self.capture.prepare_source(info).await
    }

    async fn check_plugins(&self, info: &ChangefeedInfo) -> Result<(), OwnerError> {
        self.capture.check_plugins(info).await
    }

    async fn delete_plugin(
        &self,
        tenant: &str,
        plugin: &PluginId,
        used_by: &[String],
    ) -> Result<(), OwnerError> {
        self.capture
            .ctx()
            .registry
            .delete(tenant, plugin, used_by)
            .await
            .map(drop)
            .map_err(registry_error)
    }

    fn start_work(
        &self,
        info: &ChangefeedInfo,
        epoch: Epoch,
        checkpoint: CheckpointTs,
        info_revision: Revision,
    ) -> AssignedWork {
        self.assigner.assign(info, epoch, checkpoint, info_revision)
    }

    fn forget_work(&self, id: &ChangefeedId) {
        self.capture.forget(id);
    }

    async fn release_unadopted(&self) -> Result<(), OwnerError> {
        self.assigner
            .release_unadopted()
            .await
            .map_err(|e| OwnerError::Unavailable(format!("meta store: {e}")))
    }
}
