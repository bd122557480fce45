//! The owner's records in the meta store: every write is one transaction under
//! this capture's ownership (its candidate key, as created), the info
//! compare-and-swap on its revision. The I/O half of [`crate::OwnerContext`]
//! that the server plugs in.

use std::sync::Arc;

use sluice_core::CheckpointTs;
use sluice_meta::keys::{self, MetaKey};
use sluice_meta::{Compare, MetaError, MetaStore, Op, Revision, Txn};

use crate::Epoch;
use crate::TaskReport;
use crate::context::{InfoWrite, SaveError, Stored};
use crate::error::OwnerError;
use crate::id::ChangefeedId;
use crate::info::{ChangefeedInfo, ChangefeedStatus};

/// Called when the server can no longer act safely (lost its ownership).
pub type GiveUp = Arc<dyn Fn(String) + Send + Sync>;

/// Changefeed infos and statuses in a [`MetaStore`].
#[derive(Clone)]
pub struct MetaRecords {
    store: Arc<dyn MetaStore>,
    guard: Compare,
    give_up: GiveUp,
}

fn unavailable(e: MetaError) -> SaveError {
    match e {
        MetaError::InvalidRequest { reason } => SaveError::Refused(reason),
        other => SaveError::Unavailable(other.to_string()),
    }
}

fn key_error(e: impl std::fmt::Display) -> SaveError {
    SaveError::Unavailable(e.to_string())
}

impl MetaRecords {
    /// Records in `store`, written while `guard` holds; `give_up` stops the
    /// server once it does not.
    pub fn new(store: Arc<dyn MetaStore>, guard: Compare, give_up: GiveUp) -> Self {
        Self {
            store,
            guard,
            give_up,
        }
    }

    /// Reads every changefeed's records. A record this build cannot read is
    /// skipped (and its changefeed left alone), so that one bad value does not
    /// stop every other changefeed.
    pub async fn load(&self) -> Result<Stored, OwnerError> {
        let listing = self
            .store
            .list(&keys::tenants_prefix())
            .await
            .map_err(|e| OwnerError::Unavailable(format!("meta store: {e}")))?;
        let mut stored = Stored::default();
        for kv in &listing.kvs {
            let skip = |e: &dyn std::fmt::Display| {
                tracing::error!(key = %kv.key, error = %e, "Skipping a record that does not decode.");
            };
            let id_of = |tenant: &str, name: &str| ChangefeedId::new(tenant, name).ok();
            match MetaKey::parse(&kv.key) {
                Some(MetaKey::ChangefeedInfo { tenant, changefeed }) => {
                    match ChangefeedInfo::decode(&kv.value) {
                        Ok(info) => stored.infos.push((info, kv.mod_revision)),
                        Err(e) => {
                            skip(&e);
                            stored.unreadable.extend(id_of(&tenant, &changefeed));
                        }
                    }
                }
                Some(MetaKey::ChangefeedStatus { tenant, changefeed }) => {
                    match (
                        ChangefeedStatus::decode(&kv.value),
                        id_of(&tenant, &changefeed),
                    ) {
                        (Ok(status), Some(id)) => stored.statuses.push((id, status)),
                        (Err(e), id) => {
                            skip(&e);
                            stored.unreadable.extend(id);
                        }
                        (Ok(_), None) => {}
                    }
                }
                Some(MetaKey::TaskPosition {
                    tenant, changefeed, ..
                }) => match (
                    keys::decode::<TaskReport>(&kv.key, &kv.value),
                    id_of(&tenant, &changefeed),
                ) {
                    (Ok(p), Some(id)) => stored.positions.push((
                        id,
                        Epoch(p.changefeed_epoch),
                        CheckpointTs::new(p.checkpoint_ts),
                    )),
                    (Err(e), _) => skip(&e),
                    (Ok(_), None) => {}
                },
                _ => {}
            }
        }
        Ok(stored)
    }

    /// Writes the info (compare-and-swap) and/or the status of `id` in one
    /// transaction under the ownership.
    pub async fn save(
        &self,
        id: &ChangefeedId,
        info: Option<InfoWrite<'_>>,
        status: Option<&ChangefeedStatus>,
    ) -> Result<Revision, SaveError> {
        let info_key = keys::changefeed_info(id.tenant(), id.name()).map_err(key_error)?;
        let status_key = keys::changefeed_status(id.tenant(), id.name()).map_err(key_error)?;
        let info_bytes = info.map(|w| w.info.encode());
        let mut revision = info.map_or(Revision::ZERO, |w| w.revision);
        let mut adopted = false;
        loop {
            let mut compares = vec![self.guard.clone()];
            let mut ops = Vec::new();
            if let Some(bytes) = &info_bytes {
                compares.push(if revision == Revision::ZERO {
                    Compare::absent(&info_key)
                } else {
                    Compare::mod_revision(&info_key, revision)
                });
                ops.push(Op::put(&info_key, bytes.clone()));
            }
            if let Some(status) = status {
                ops.push(Op::put(&status_key, status.encode()));
            }
            let result = self
                .store
                .txn(Txn::new().when(compares).and_then(ops))
                .await
                .map_err(unavailable)?;
            if result.succeeded {
                return Ok(result.revision);
            }
            // Either an earlier write landed although its answer was lost (the
            // stored info is ours: adopt it, once), or this capture is no longer
            // the owner, or someone else changed the record: stop acting.
            let stored = self.store.get(&info_key).await.map_err(unavailable)?;
            match stored {
                Some(kv) if info_bytes.as_ref() == Some(&kv.value) && !adopted => {
                    revision = kv.mod_revision;
                    adopted = true;
                }
                // A new changefeed whose key holds a record this build could not
                // read: refuse the request, the server is fine.
                Some(_) if info.is_some() && revision == Revision::ZERO && !adopted => {
                    return Err(SaveError::Unreadable(id.clone()));
                }
                _ => {
                    let why = format!(
                        "changefeed {id} was changed outside this server, or this server lost its ownership"
                    );
                    (self.give_up)(why.clone());
                    return Err(SaveError::Lost(why));
                }
            }
        }
    }

    /// Deletes what a removed changefeed kept (status, task positions, asked
    /// moves, its table placement); its info stays as a tombstone so that a
    /// new incarnation continues its epochs.
    pub async fn forget(&self, id: &ChangefeedId) -> Result<(), SaveError> {
        let mut ops = vec![
            Op::delete(keys::changefeed_status(id.tenant(), id.name()).map_err(key_error)?),
            Op::delete(keys::changefeed_move(id.tenant(), id.name()).map_err(key_error)?),
            Op::delete(keys::table_placement(id.tenant(), id.name()).map_err(key_error)?),
        ];
        let prefix = keys::task_prefix(id.tenant(), id.name()).map_err(key_error)?;
        for kv in self.store.list(&prefix).await.map_err(unavailable)?.kvs {
            ops.push(Op::delete(kv.key));
        }
        let result = self
            .store
            .txn(Txn::new().when([self.guard.clone()]).and_then(ops))
            .await
            .map_err(unavailable)?;
        if !result.succeeded {
            let why = "this server is no longer the owner".to_string();
            (self.give_up)(why.clone());
            return Err(SaveError::Lost(why));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::CommitTs;
    use sluice_meta::EmbeddedMetaStore;

    use super::*;

    #[tokio::test]
    async fn an_update_keeps_the_table_placement_with_redo_or_without() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetaStore> = Arc::new(
            EmbeddedMetaStore::open(dir.path().join("meta.redb"))
                .await
                .unwrap(),
        );
        store.put("/owner", b"1".to_vec(), None).await.unwrap();
        let created = store.get("/owner").await.unwrap().unwrap().create_revision;
        let guard = Compare::create_revision("/owner", created);
        let records = MetaRecords::new(store.clone(), guard, Arc::new(|_| {}));
        let id = ChangefeedId::new("t", "c").unwrap();
        let mut info = ChangefeedInfo::new(
            id.clone(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        fn write(info: &ChangefeedInfo, revision: Revision) -> Option<InfoWrite<'_>> {
            Some(InfoWrite { info, revision })
        }
        let revision = records
            .save(&id, write(&info, Revision::ZERO), None)
            .await
            .unwrap();
        let placement = keys::table_placement("t", "c").unwrap();
        let placed = br#"{"version":1,"tables":{"shop.orders":"c-2"}}"#.to_vec();
        store.put(&placement, placed, None).await.unwrap();
        // An update without redo keeps it.
        let revision = records
            .save(&id, write(&info, revision), None)
            .await
            .unwrap();
        assert!(store.get(&placement).await.unwrap().is_some());
        // Turning redo on keeps it too: the reading capture logs every
        // table's events and ships only what its log has (ADR 0013).
        info.config.consistent.level = sluice_config::ConsistentLevel::Eventual;
        records
            .save(&id, write(&info, revision), None)
            .await
            .unwrap();
        assert!(store.get(&placement).await.unwrap().is_some());
        let stored = store
            .get(&keys::changefeed_info("t", "c").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(
            ChangefeedInfo::decode(&stored.value)
                .unwrap()
                .config
                .consistent
                .enabled()
        );
    }
}
