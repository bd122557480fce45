//! Durable positions of a running changefeed: its task position in the meta store
//! (for `sluice run` with `resume = true`, the embedded store in its data dir; for
//! `sluice server`, the server's store, under the capture that runs it).

use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use sluice_core::{Checkpoint, CheckpointTs, CommitTs, ResolvedTs};
use sluice_meta::{Compare, MetaStore, Op, Revision, Txn, keys};
use sluice_processor::{ProgressStore, ProgressStoreError, StoreFuture};
use sluice_protocol::{Counters, TaskPosition, TaskState};

/// The tenant and capture `sluice run` writes under (a single local process).
pub const RUN_TENANT: &str = "default";
/// The capture id `sluice run` writes under.
pub const RUN_CAPTURE: &str = "local";

/// Reads a run's counters when a save goes out.
pub type CounterSource = Box<dyn Fn() -> Option<Counters> + Send + Sync>;

/// Reads how busy the run is, for the task position.
pub type LoadSource = Box<dyn Fn() -> Option<sluice_protocol::Load> + Send + Sync>;

/// Which task position a run claims.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The changefeed's tenant.
    pub tenant: &'a str,
    /// The changefeed's name.
    pub changefeed: &'a str,
    /// The capture that runs it.
    pub capture: &'a str,
    /// The changefeed's epoch of this run (0 for `sluice run`).
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
    key: Arc<Key>,
    /// The counters saved with every checkpoint.
    counters: Option<CounterSource>,
    /// The load saved with every checkpoint.
    load: Option<LoadSource>,
}

/// A claimed key and what was last written to it.
struct Key {
    store: Arc<dyn MetaStore>,
    /// Checked with every save too (the server's ownership).
    guard: Option<Compare>,
    key: String,
    /// What earlier runs of the same changefeed epoch counted (a run picked up
    /// again counts on from there).
    base: Counters,
    last: Mutex<(TaskPosition, Revision)>,
    /// One write at a time: the pipeline's saves and the swap reports go
    /// through the same compare-and-swap on the key's revision.
    turn: tokio::sync::Mutex<()>,
}

/// Writes the end of a run into its claimed task position (see
/// [`MetaProgressStore::reporter`]).
#[derive(Clone)]
pub struct Reporter {
    key: Arc<Key>,
}

impl MetaProgressStore {
    /// Claim the changefeed's task position on `capture` for a new run (a new
    /// epoch of the key) of changefeed epoch `changefeed_epoch`, starting at
    /// `start` (`None`: at the saved checkpoint; a run of the same changefeed
    /// epoch as the saved one, picked up again, starts at the later of the
    /// two). `guard` is checked in the same transaction (the server passes its
    /// ownership). Returns the store and what earlier runs left: the position on
    /// this capture, with its fence raised to the highest fence any capture
    /// saved, since rows up to any of them may have reached the sink. The
    /// store's record ([`Self::claimed`]) holds the checkpoint the run starts at.
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
        let mut others = Vec::new();
        for kv in store.list(&prefix).await?.kvs {
            if kv.key == key_name {
                previous = keys::decode::<TaskPosition>(&kv.key, &kv.value)?;
                compare = Compare::mod_revision(&key_name, kv.mod_revision);
                highest_fence = highest_fence.max(previous.fence_ts);
                continue;
            }
            // Another capture's position: its fence, and where its source
            // stood (for work that moved here from it).
            match keys::decode::<TaskPosition>(&kv.key, &kv.value) {
                Ok(p) => {
                    highest_fence = highest_fence.max(p.fence_ts);
                    others.push(p);
                }
                Err(e) => tracing::warn!(error = %e, "Ignoring an unreadable task position."),
            }
        }
        previous.fence_ts = previous.fence_ts.max(highest_fence);
        let same_epoch = compare != Compare::absent(&key_name)
            && key.changefeed_epoch != 0
            && previous.changefeed_epoch == key.changefeed_epoch;
        let checkpoint_ts = match start {
            Some(s) if same_epoch => s.get().max(previous.checkpoint_ts),
            Some(s) => s.get(),
            None => previous.checkpoint_ts,
        };
        // Work that ran on another capture at this checkpoint (a whole run
        // moved or failed over, or the reading side of a split run) resumes
        // where that capture's source stood: a position is saved only with
        // the checkpoint it stands for, whichever epoch saved it. Resuming
        // by ts alone would find the source's place by its clock, which reads
        // again (or skips) what shares the checkpoint's second.
        if (previous.checkpoint_ts != checkpoint_ts || previous.source_position.is_none())
            && let Some(other) = others
                .iter()
                .filter(|p| p.checkpoint_ts == checkpoint_ts && p.source_position.is_some())
                .max_by_key(|p| p.changefeed_epoch)
        {
            previous.source_position = other.source_position.clone();
            previous.checkpoint_ts = checkpoint_ts;
        }
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
            state: TaskState::Running,
            // Counters are per run: a run picked up again counts on.
            counters: if same_epoch {
                previous.counters
            } else {
                Counters::default()
            },
            // A swap, shadow or validator is reported by the run that
            // carries it out.
            swap: None,
            shadow: None,
            validator: None,
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
                key: Arc::new(Key {
                    store,
                    guard,
                    key: key_name,
                    base: record.counters,
                    last: Mutex::new((record, result.revision)),
                    turn: tokio::sync::Mutex::new(()),
                }),
                counters: None,
                load: None,
            },
            previous,
        ))
    }

    /// Saves what `counters` reads (this run's counts, added to those of earlier
    /// runs of the same changefeed epoch) with every checkpoint and fence from now on.
    pub fn with_counters(mut self, counters: CounterSource) -> Self {
        self.counters = Some(counters);
        self
    }

    /// Saves what `load` reads with every checkpoint and fence from now on.
    pub fn with_load(mut self, load: LoadSource) -> Self {
        self.load = Some(load);
        self
    }

    fn load(&self) -> Option<sluice_protocol::Load> {
        self.load.as_ref().and_then(|l| l())
    }

    /// The record as last written (after [`Self::claim`]: the claim).
    pub fn claimed(&self) -> TaskPosition {
        self.key.last.lock().expect("not poisoned").0.clone()
    }

    /// Writes the end of this run once its pipeline is done with the store.
    pub fn reporter(&self) -> Reporter {
        Reporter {
            key: self.key.clone(),
        }
    }

    /// This run's counters as saved (added to earlier runs' of its epoch).
    fn counters(&self) -> Option<Counters> {
        let counters = self.counters.as_ref().and_then(|c| c())?;
        Some(self.key.base.plus(counters))
    }
}

impl Key {
    /// Writes the record as last written, changed by `change`. The write and
    /// the note of its revision run on a task of their own: a caller that goes
    /// away mid-write (a future dropped in a `select!`, an aborted task) would
    /// otherwise leave the store written but the note behind it, and every
    /// later save of this run, its end included, would find itself fenced.
    async fn save(
        self: &Arc<Self>,
        change: impl FnOnce(&mut TaskPosition) + Send + 'static,
    ) -> Result<(), ProgressStoreError> {
        let key = self.clone();
        tokio::spawn(async move { key.save_now(change).await })
            .await
            .map_err(|e| {
                ProgressStoreError::Unavailable(format!(
                    "the write of the task position ended abnormally: {e}"
                ))
            })?
    }

    async fn save_now(
        &self,
        change: impl FnOnce(&mut TaskPosition),
    ) -> Result<(), ProgressStoreError> {
        let _turn = self.turn.lock().await;
        let (mut record, revision) = self.last.lock().expect("not poisoned").clone();
        change(&mut record);
        let value =
            keys::encode(&record).map_err(|e| ProgressStoreError::Unavailable(e.to_string()))?;
        let own = Compare::mod_revision(&self.key, revision);
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
                record.epoch
            )));
        }
        *self.last.lock().expect("not poisoned") = (record, result.revision);
        Ok(())
    }
}

impl Reporter {
    /// Writes that the run ended in `state`, with this run's final `counters`
    /// (if known; added to those of earlier runs of the same changefeed epoch),
    /// unless a newer run claimed the key ([`ProgressStoreError::Fenced`]).
    /// The first end reported stays: a later one is not written.
    pub async fn report(
        &self,
        state: TaskState,
        counters: Option<Counters>,
    ) -> Result<(), ProgressStoreError> {
        if self
            .key
            .last
            .lock()
            .expect("not poisoned")
            .0
            .state
            .is_terminal()
        {
            return Ok(());
        }
        let base = self.key.base;
        self.key
            .save(move |record| {
                record.state = state;
                if let Some(c) = counters {
                    record.counters = base.plus(c);
                }
            })
            .await
    }

    /// Writes where the swap this run carries out stands.
    pub async fn report_swap(
        &self,
        report: sluice_protocol::SwapReport,
    ) -> Result<(), ProgressStoreError> {
        self.key
            .save(move |record| record.swap = Some(report))
            .await
    }

    /// Writes what the shadow this run carries out did (none: it ended).
    pub async fn report_shadow(
        &self,
        report: Option<sluice_protocol::ShadowReport>,
    ) -> Result<(), ProgressStoreError> {
        self.key.save(move |record| record.shadow = report).await
    }

    /// Writes what this run's continuous validator found.
    pub async fn report_validator(
        &self,
        report: sluice_core::ValidatorReport,
    ) -> Result<(), ProgressStoreError> {
        self.key
            .save(move |record| record.validator = Some(report))
            .await
    }
}

impl ProgressStore for MetaProgressStore {
    fn save_fence(&mut self, fence: CommitTs) -> StoreFuture<'_> {
        let (counters, load) = (self.counters(), self.load());
        Box::pin(self.key.save(move |record| {
            record.fence_ts = fence.get().max(record.fence_ts);
            if let Some(c) = counters {
                record.counters = c;
            }
            if load.is_some() {
                record.load = load;
            }
        }))
    }

    fn save_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        resolved: ResolvedTs,
    ) -> StoreFuture<'_> {
        let (counters, load) = (self.counters(), self.load());
        let checkpoint = checkpoint.clone();
        Box::pin(self.key.save(move |record| {
            record.checkpoint_ts = checkpoint.ts.get();
            record.resolved_ts = resolved.get();
            record.source_position = checkpoint.position;
            if let Some(c) = counters {
                record.counters = c;
            }
            if load.is_some() {
                record.load = load;
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::SourcePosition;

    #[tokio::test]
    async fn a_save_dropped_mid_write_does_not_fence_the_runs_next_saves() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetaStore> = Arc::new(
            sluice_meta::EmbeddedMetaStore::open(dir.path().join("meta.redb"))
                .await
                .unwrap(),
        );
        let (mut progress, _) =
            MetaProgressStore::claim(store.clone(), Claim::local("orders"), None, None)
                .await
                .unwrap();
        let reporter = progress.reporter();
        for round in 0..20u64 {
            // Polled once (the write is under way on the store's blocking
            // pool), then dropped, as a select! drops the branch it did not take.
            let dropped = progress.save_fence(CommitTs::new(100 + round));
            let _ = tokio::time::timeout(std::time::Duration::ZERO, dropped).await;
            progress
                .save_fence(CommitTs::new(200 + round))
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        reporter.report(TaskState::Finished, None).await.unwrap();
        let kv = store
            .get(&keys::task_position(RUN_TENANT, "orders", RUN_CAPTURE).unwrap())
            .await
            .unwrap()
            .unwrap();
        let saved: TaskPosition = keys::decode(&kv.key, &kv.value).unwrap();
        assert_eq!((saved.fence_ts, saved.state), (219, TaskState::Finished));
    }

    #[tokio::test]
    async fn work_moved_to_another_capture_resumes_at_the_source_position_saved_there() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetaStore> = Arc::new(
            sluice_meta::EmbeddedMetaStore::open(dir.path().join("meta.redb"))
                .await
                .unwrap(),
        );
        let on = |capture| Claim {
            tenant: "acme",
            changefeed: "orders",
            capture,
            changefeed_epoch: 3,
        };
        let (mut first, _) = MetaProgressStore::claim(store.clone(), on("c-1"), None, None)
            .await
            .unwrap();
        let position = SourcePosition {
            version: 1,
            bytes: vec![4, 2],
        };
        first
            .save_checkpoint(
                &Checkpoint {
                    ts: CheckpointTs::new(300),
                    position: Some(position.clone()),
                },
                ResolvedTs::new(310),
            )
            .await
            .unwrap();
        first.save_fence(CommitTs::new(320)).await.unwrap();
        // The owner moves the work to c-2 at the changefeed's checkpoint.
        let start = Some(CheckpointTs::new(300));
        let (second, previous) = MetaProgressStore::claim(store.clone(), on("c-2"), start, None)
            .await
            .unwrap();
        assert_eq!(
            previous.resume_point(CheckpointTs::new(300)).position,
            Some(position.clone())
        );
        assert_eq!(previous.fence_ts, 320, "rows up to c-1's fence are replays");
        assert_eq!(second.claimed().source_position, Some(position.clone()));
        // A later epoch placed on yet another capture (a failover, or the
        // receiving side of a split run taking it whole) resumes there too.
        let later = Claim {
            changefeed_epoch: 4,
            ..on("c-4")
        };
        let (fourth, previous) = MetaProgressStore::claim(store.clone(), later, start, None)
            .await
            .unwrap();
        assert_eq!(
            previous.resume_point(CheckpointTs::new(300)).position,
            Some(position.clone())
        );
        assert_eq!(fourth.claimed().source_position, Some(position));
        // At another checkpoint than the one saved with it, no position: the
        // source resumes by ts.
        let start = Some(CheckpointTs::new(200));
        let (_, previous) = MetaProgressStore::claim(store.clone(), on("c-3"), start, None)
            .await
            .unwrap();
        assert_eq!(previous.resume_point(CheckpointTs::new(200)).position, None);
    }

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
                state: TaskState::Running,
                counters: Counters::default(),
                swap: None,
                shadow: None,
                validator: None,
                load: None,
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
        assert_eq!(
            (p.state, p.counters),
            (TaskState::Running, Counters::default())
        );
    }

    #[test]
    fn the_reported_state_and_counters_have_their_documented_form() {
        let p = TaskPosition {
            version: 1,
            epoch: 2,
            changefeed_epoch: 5,
            checkpoint_ts: 10,
            state: TaskState::Failed {
                kind: sluice_protocol::ErrorKind::Config,
                message: "bad".into(),
            },
            counters: Counters {
                rows_read: 7,
                rows_written: 6,
                bytes_written: 300,
                retries: 1,
                ..Counters::default()
            },
            ..TaskPosition::default()
        };
        let text = serde_json::to_string(&p).unwrap();
        assert!(
            text.contains(r#""state":{"failed":{"kind":"config","message":"bad"}},"rows-read":7,"rows-written":6,"bytes-written":300,"retries":1"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<TaskPosition>(&text).unwrap(), p);
        // The owner reads the same record.
        let report: sluice_protocol::TaskReport = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (
                report.changefeed_epoch,
                report.checkpoint_ts,
                report.rows_written
            ),
            (5, 10, 6)
        );
        assert_eq!(report.state, p.state);
    }
}
