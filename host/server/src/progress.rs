//! Durable positions for `sluice run` with `resume = true`: the task position of the
//! changefeed in the embedded meta store (`<data-dir>/meta.redb`).

use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointTs, CommitTs, ResolvedTs};
use sluice_meta::{Compare, MetaStore, Op, Revision, Txn, keys};
use sluice_processor::{ProgressStore, ProgressStoreError, StoreFuture};

/// The tenant and capture `sluice run` writes under (a single local process).
const TENANT: &str = "default";
const CAPTURE: &str = "local";

/// What is saved (see `docs/meta-layout.md`, task position).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TaskPosition {
    pub version: u32,
    /// Incremented by every run; a save from an older run is fenced.
    pub epoch: u64,
    /// Every row with commit ts <= this is durable downstream.
    pub checkpoint_ts: u64,
    pub resolved_ts: u64,
    /// Rows above this never reached the sink.
    pub fence_ts: u64,
}

/// Saves a changefeed's positions with compare-and-swap on the key's revision, so
/// that only the run that claimed the key last can write it.
pub struct MetaProgressStore {
    store: Arc<dyn MetaStore>,
    key: String,
    record: TaskPosition,
    revision: Revision,
}

impl MetaProgressStore {
    /// Claim the changefeed's task position for this run (a new epoch). Returns the
    /// store and the position the previous run left.
    pub async fn claim(
        store: Arc<dyn MetaStore>,
        changefeed: &str,
    ) -> anyhow::Result<(Self, TaskPosition)> {
        keys::ensure_layout(store.as_ref()).await?;
        let key = keys::task_position(TENANT, changefeed, CAPTURE)?;
        let (previous, compare) = match store.get(&key).await? {
            Some(kv) => (
                keys::decode::<TaskPosition>(&key, &kv.value)?,
                Compare::mod_revision(&key, kv.mod_revision),
            ),
            None => (
                TaskPosition {
                    version: 1,
                    ..TaskPosition::default()
                },
                Compare::absent(&key),
            ),
        };
        let record = TaskPosition {
            epoch: previous.epoch + 1,
            ..previous.clone()
        };
        let result = store
            .txn(
                Txn::new()
                    .when([compare])
                    .and_then([Op::put(&key, keys::encode(&record)?)]),
            )
            .await
            .context("claiming the changefeed's position")?;
        if !result.succeeded {
            bail!(
                "another `sluice run` of changefeed {changefeed} claimed it at the same time; stop it first"
            );
        }
        Ok((
            Self {
                store,
                key,
                record,
                revision: result.revision,
            },
            previous,
        ))
    }

    async fn save(&mut self, record: TaskPosition) -> Result<(), ProgressStoreError> {
        let value =
            keys::encode(&record).map_err(|e| ProgressStoreError::Unavailable(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::mod_revision(&self.key, self.revision)])
            .and_then([Op::put(&self.key, value)]);
        let result = self
            .store
            .txn(txn)
            .await
            .map_err(|e| ProgressStoreError::Unavailable(e.to_string()))?;
        if !result.succeeded {
            return Err(ProgressStoreError::Fenced(format!(
                "epoch {} of this changefeed was superseded by a newer run",
                self.record.epoch
            )));
        }
        self.record = record;
        self.revision = result.revision;
        Ok(())
    }
}

impl ProgressStore for MetaProgressStore {
    fn save_fence(&mut self, fence: CommitTs) -> StoreFuture<'_> {
        let record = TaskPosition {
            fence_ts: fence.get().max(self.record.fence_ts),
            ..self.record.clone()
        };
        Box::pin(self.save(record))
    }

    fn save_checkpoint(
        &mut self,
        checkpoint: CheckpointTs,
        resolved: ResolvedTs,
    ) -> StoreFuture<'_> {
        let record = TaskPosition {
            checkpoint_ts: checkpoint.get(),
            resolved_ts: resolved.get(),
            ..self.record.clone()
        };
        Box::pin(self.save(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_claim_fences_the_first_and_positions_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store: Arc<dyn MetaStore> =
            Arc::new(sluice_meta::EmbeddedMetaStore::open(&path).await.unwrap());
        let (mut first, previous) = MetaProgressStore::claim(store.clone(), "orders")
            .await
            .unwrap();
        assert_eq!(previous.epoch, 0);
        first.save_fence(CommitTs(500)).await.unwrap();
        first
            .save_checkpoint(CheckpointTs(300), ResolvedTs(400))
            .await
            .unwrap();

        let (mut second, previous) = MetaProgressStore::claim(store.clone(), "orders")
            .await
            .unwrap();
        assert_eq!(
            previous,
            TaskPosition {
                version: 1,
                epoch: 1,
                checkpoint_ts: 300,
                resolved_ts: 400,
                fence_ts: 500
            }
        );
        let err = first
            .save_checkpoint(CheckpointTs(350), ResolvedTs(400))
            .await
            .unwrap_err();
        assert!(matches!(err, ProgressStoreError::Fenced(_)), "{err:?}");
        second
            .save_checkpoint(CheckpointTs(360), ResolvedTs(400))
            .await
            .unwrap();
        drop((first, second, store));

        let store: Arc<dyn MetaStore> =
            Arc::new(sluice_meta::EmbeddedMetaStore::open(&path).await.unwrap());
        let (_third, previous) = MetaProgressStore::claim(store, "orders").await.unwrap();
        assert_eq!(
            (previous.epoch, previous.checkpoint_ts, previous.fence_ts),
            (2, 360, 500)
        );
    }
}
