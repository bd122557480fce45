//! Durable positions of a running changefeed: its task position in the meta store
//! (for `sluice run` with `resume = true`, the embedded store in its data dir; for
//! `sluice server`, the server's store, under the capture that runs it).

use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use sluice_core::{Checkpoint, CheckpointTs, CommitTs, ResolvedTs, SourcePosition};
use sluice_meta::{Compare, MetaStore, Op, Revision, Txn, keys};
use sluice_processor::{ProgressStore, ProgressStoreError, StoreFuture};

/// The tenant and capture `sluice run` writes under (a single local process).
pub const RUN_TENANT: &str = "default";
pub const RUN_CAPTURE: &str = "local";

/// What is saved (see `docs/meta-layout.md`, task position).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TaskPosition {
    pub version: u32,
    /// Incremented by every run; a save from an older run is fenced.
    pub epoch: u64,
    /// The changefeed's epoch (in the server) of the run that claimed the key; 0
    /// for `sluice run`. On a restart the owner trusts only positions of the
    /// changefeed's current epoch: older ones may predate an overwritten
    /// checkpoint or a removal.
    #[serde(default)]
    pub changefeed_epoch: u64,
    /// Every row with commit ts <= this is durable downstream.
    pub checkpoint_ts: u64,
    pub resolved_ts: u64,
    /// Rows above this never reached the sink.
    pub fence_ts: u64,
    /// The source position of the last transaction at or below `checkpoint-ts`,
    /// saved with it (absent in records of older versions, and for sources
    /// without positions): valid only together with that checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_position: Option<SourcePosition>,
}

impl TaskPosition {
    /// Where a run resumes when it starts at `checkpoint`: with the saved source
    /// position if it was saved with this very checkpoint (an overwritten
    /// checkpoint resumes by ts alone).
    pub fn resume_point(&self, checkpoint: CheckpointTs) -> Checkpoint {
        Checkpoint {
            ts: checkpoint,
            position: self
                .source_position
                .clone()
                .filter(|_| self.checkpoint_ts == checkpoint.get()),
        }
    }
}

/// Which task position a run claims.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub tenant: &'a str,
    pub changefeed: &'a str,
    pub capture: &'a str,
    pub changefeed_epoch: u64,
}

impl<'a> Claim<'a> {
    /// The position `sluice run` uses for changefeed `id`.
    pub fn local(changefeed: &'a str) -> Self {
        Claim {
            tenant: RUN_TENANT,
            changefeed,
            capture: RUN_CAPTURE,
            changefeed_epoch: 0,
        }
    }
}

/// Saves a changefeed's positions with compare-and-swap on the key's revision, so
/// that only the run that claimed the key last can write it.
pub struct MetaProgressStore {
    store: Arc<dyn MetaStore>,
    /// Checked with every save too (the server's ownership).
    guard: Option<Compare>,
    key: String,
    record: TaskPosition,
    revision: Revision,
}

impl MetaProgressStore {
    /// Claim the changefeed's task position on `capture` for a new run (a new
    /// epoch of the key) of changefeed epoch `changefeed_epoch`, starting at
    /// `start` (`None`: at the saved checkpoint). `guard` is checked in the same
    /// transaction (the server passes its ownership). Returns the store and what
    /// earlier runs left: the position on this capture, with its fence raised to
    /// the highest fence any capture saved, since rows up to any of them may have
    /// reached the sink.
    pub async fn claim(
        store: Arc<dyn MetaStore>,
        key: Claim<'_>,
        start: Option<CheckpointTs>,
        guard: Option<Compare>,
    ) -> anyhow::Result<(Self, TaskPosition)> {
        keys::ensure_layout(store.as_ref()).await?;
        let changefeed = key.changefeed;
        let prefix = keys::task_prefix(key.tenant, changefeed)?;
        let key_name = keys::task_position(key.tenant, changefeed, key.capture)?;
        let mut previous = TaskPosition {
            version: 1,
            ..TaskPosition::default()
        };
        let mut compare = Compare::absent(&key_name);
        let mut highest_fence = 0;
        for kv in store.list(&prefix).await?.kvs {
            if kv.key == key_name {
                previous = keys::decode::<TaskPosition>(&kv.key, &kv.value)?;
                compare = Compare::mod_revision(&key_name, kv.mod_revision);
                highest_fence = highest_fence.max(previous.fence_ts);
                continue;
            }
            // Another capture's position: only its fence matters here.
            match keys::decode::<TaskPosition>(&kv.key, &kv.value) {
                Ok(p) => highest_fence = highest_fence.max(p.fence_ts),
                Err(e) => tracing::warn!(error = %e, "Ignoring an unreadable task position."),
            }
        }
        previous.fence_ts = previous.fence_ts.max(highest_fence);
        let checkpoint_ts = start.map_or(previous.checkpoint_ts, CheckpointTs::get);
        let record = TaskPosition {
            version: 1,
            epoch: previous.epoch + 1,
            changefeed_epoch: key.changefeed_epoch,
            checkpoint_ts,
            // A position is valid only with the checkpoint it was saved with.
            source_position: previous
                .source_position
                .clone()
                .filter(|_| checkpoint_ts == previous.checkpoint_ts),
            ..previous.clone()
        };
        let result = store
            .txn(
                Txn::new()
                    .when(std::iter::once(compare).chain(guard.clone()))
                    .and_then([Op::put(&key_name, keys::encode(&record)?)]),
            )
            .await
            .context("claiming the changefeed's position")?;
        if !result.succeeded {
            bail!(
                "another run of changefeed {changefeed} claimed its position at the same time, or this server is no longer the owner; stop it first"
            );
        }
        Ok((
            Self {
                store,
                guard,
                key: key_name,
                record,
                revision: result.revision,
            },
            previous,
        ))
    }

    async fn save(&mut self, record: TaskPosition) -> Result<(), ProgressStoreError> {
        let value =
            keys::encode(&record).map_err(|e| ProgressStoreError::Unavailable(e.to_string()))?;
        let own = Compare::mod_revision(&self.key, self.revision);
        let txn = Txn::new()
            .when(std::iter::once(own).chain(self.guard.clone()))
            .and_then([Op::put(&self.key, value)]);
        let result = self
            .store
            .txn(txn)
            .await
            .map_err(|e| ProgressStoreError::Unavailable(e.to_string()))?;
        if !result.succeeded {
            return Err(ProgressStoreError::Fenced(format!(
                "epoch {} of this changefeed was superseded by a newer run, or this server is no longer the owner",
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
        checkpoint: &Checkpoint,
        resolved: ResolvedTs,
    ) -> StoreFuture<'_> {
        let record = TaskPosition {
            checkpoint_ts: checkpoint.ts.get(),
            resolved_ts: resolved.get(),
            source_position: checkpoint.position.clone(),
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
        let (mut first, previous) =
            MetaProgressStore::claim(store.clone(), Claim::local("orders"), None, None)
                .await
                .unwrap();
        assert_eq!(previous.epoch, 0);
        first.save_fence(CommitTs::new(500)).await.unwrap();
        let position = SourcePosition {
            version: 1,
            bytes: vec![9, 9],
        };
        first
            .save_checkpoint(
                &Checkpoint {
                    ts: CheckpointTs::new(300),
                    position: Some(position.clone()),
                },
                ResolvedTs::new(400),
            )
            .await
            .unwrap();

        let (mut second, previous) =
            MetaProgressStore::claim(store.clone(), Claim::local("orders"), None, None)
                .await
                .unwrap();
        assert_eq!(
            previous,
            TaskPosition {
                version: 1,
                epoch: 1,
                changefeed_epoch: 0,
                checkpoint_ts: 300,
                resolved_ts: 400,
                fence_ts: 500,
                source_position: Some(position.clone()),
            }
        );
        assert_eq!(
            previous.resume_point(CheckpointTs::new(300)).position,
            Some(position)
        );
        assert_eq!(previous.resume_point(CheckpointTs::new(299)).position, None);
        let err = first
            .save_checkpoint(&CheckpointTs::new(350).into(), ResolvedTs::new(400))
            .await
            .unwrap_err();
        assert!(matches!(err, ProgressStoreError::Fenced(_)), "{err:?}");
        second
            .save_checkpoint(&CheckpointTs::new(360).into(), ResolvedTs::new(400))
            .await
            .unwrap();
        drop((first, second, store));

        let store: Arc<dyn MetaStore> =
            Arc::new(sluice_meta::EmbeddedMetaStore::open(&path).await.unwrap());
        let (_third, previous) =
            MetaProgressStore::claim(store, Claim::local("orders"), None, None)
                .await
                .unwrap();
        assert_eq!(
            (previous.epoch, previous.checkpoint_ts, previous.fence_ts),
            (2, 360, 500)
        );
        assert_eq!(previous.source_position, None);
    }

    #[test]
    fn records_without_a_source_position_still_decode() {
        let old = r#"{"version":1,"epoch":3,"checkpoint-ts":10,"resolved-ts":11,"fence-ts":12}"#;
        let p: TaskPosition = serde_json::from_str(old).unwrap();
        assert_eq!((p.epoch, p.checkpoint_ts, p.source_position), (3, 10, None));
    }
}
