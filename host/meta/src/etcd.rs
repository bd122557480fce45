//! `EtcdMetaStore`: the meta store on etcd (3.4+, `etcd-client` 0.21), for a
//! cluster of captures. Same semantics as the embedded store: both pass
//! `conformance`.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare as EtcdCompare, CompareOp, EventType, GetOptions, PutOptions, TxnOp,
    TxnOpResponse, WatchOptions,
};

use crate::error::MetaError;
use crate::store::{KeyValue, Lease, LeaseId, Listing, MetaStore, Revision, validate_lease_ttl};
use crate::txn::{Compare, Op, OpResult, Txn, TxnResult};
use crate::watch::{WatchEvent, WatchEventKind, WatchStream};

/// A meta store backed by an etcd cluster.
#[derive(Clone)]
pub struct EtcdMetaStore {
    client: Client,
}

impl std::fmt::Debug for EtcdMetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMetaStore").finish_non_exhaustive()
    }
}

fn unavailable(e: etcd_client::Error) -> MetaError {
    MetaError::Unavailable {
        reason: format!("etcd: {e}"),
        source: Some(Box::new(e)),
    }
}

fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    // "requested lease not found" from the server, "lease not found" from keep-alive.
    e.to_string().contains("lease not found")
}

fn kv_of(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: kv.value().to_vec(),
        create_revision: Revision(kv.create_revision().max(0) as u64),
        mod_revision: Revision(kv.mod_revision().max(0) as u64),
        lease: (kv.lease() != 0).then(|| LeaseId(kv.lease())),
    }
}

fn compare(c: &Compare) -> EtcdCompare {
    match c {
        Compare::Absent { key } => EtcdCompare::create_revision(key.as_str(), CompareOp::Equal, 0),
        Compare::ModRevision { key, revision } => {
            EtcdCompare::mod_revision(key.as_str(), CompareOp::Equal, revision.get() as i64)
        }
        Compare::CreateRevision { key, revision } => {
            EtcdCompare::create_revision(key.as_str(), CompareOp::Equal, revision.get() as i64)
        }
        Compare::Value { key, value } => {
            EtcdCompare::value(key.as_str(), CompareOp::Equal, value.clone())
        }
    }
}

fn op(o: &Op) -> TxnOp {
    match o {
        Op::Put { key, value, lease } => TxnOp::put(
            key.as_str(),
            value.clone(),
            lease.map(|l| PutOptions::new().with_lease(l.get())),
        ),
        Op::Delete { key } => TxnOp::delete(key.as_str(), None),
        Op::Get { key } => TxnOp::get(key.as_str(), None),
    }
}

impl EtcdMetaStore {
    /// Connect to the etcd cluster at `endpoints` (e.g. `["127.0.0.1:2379"]`).
    pub async fn connect(endpoints: &[String]) -> Result<Self, MetaError> {
        let client = Client::connect(endpoints, None)
            .await
            .map_err(unavailable)?;
        Ok(Self { client })
    }

    /// Make the changes at or below `revision` unavailable (etcd compaction).
    pub async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.client
            .clone()
            .compact(revision.get() as i64, None)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait]
impl MetaStore for EtcdMetaStore {
    async fn txn(&self, txn: Txn) -> Result<TxnResult, MetaError> {
        txn.validate()?;
        let lease_of = |ops: &[Op]| {
            ops.iter().find_map(|o| match o {
                Op::Put { lease: Some(l), .. } => Some(*l),
                _ => None,
            })
        };
        let request = etcd_client::Txn::new()
            .when(txn.compares.iter().map(compare).collect::<Vec<_>>())
            .and_then(txn.success.iter().map(op).collect::<Vec<_>>())
            .or_else(txn.failure.iter().map(op).collect::<Vec<_>>());
        let response = match self.client.clone().txn(request).await {
            Ok(r) => r,
            Err(e) if is_lease_not_found(&e) => {
                let lease = lease_of(&txn.success)
                    .or(lease_of(&txn.failure))
                    .unwrap_or(LeaseId(0));
                return Err(MetaError::LeaseNotFound { lease });
            }
            Err(e) => return Err(unavailable(e)),
        };
        let revision = Revision(response.header().map_or(0, |h| h.revision()).max(0) as u64);
        let results = response
            .op_responses()
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Put(_) => OpResult::Put,
                TxnOpResponse::Delete(d) => OpResult::Delete {
                    deleted: d.deleted() > 0,
                },
                TxnOpResponse::Get(g) => OpResult::Get(g.kvs().first().map(kv_of)),
                TxnOpResponse::Txn(_) => OpResult::Put,
            })
            .collect();
        Ok(TxnResult {
            succeeded: response.succeeded(),
            revision,
            results,
        })
    }

    async fn list(&self, prefix: &str) -> Result<Listing, MetaError> {
        let options = if prefix.is_empty() {
            GetOptions::new().with_all_keys()
        } else {
            GetOptions::new().with_prefix()
        };
        let key = if prefix.is_empty() { "\0" } else { prefix };
        let response = self
            .client
            .clone()
            .get(key, Some(options))
            .await
            .map_err(unavailable)?;
        Ok(Listing {
            kvs: response.kvs().iter().map(kv_of).collect(),
            revision: Revision(response.header().map_or(0, |h| h.revision()).max(0) as u64),
        })
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, MetaError> {
        validate_lease_ttl(ttl)?;
        // etcd counts whole seconds.
        let secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
        let response = self
            .client
            .clone()
            .lease_grant(secs, None)
            .await
            .map_err(unavailable)?;
        Ok(Lease {
            id: LeaseId(response.id()),
            ttl: Duration::from_secs(response.ttl().max(0) as u64),
        })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        let mut client = self.client.clone();
        let not_found = |e: etcd_client::Error| {
            if is_lease_not_found(&e) {
                MetaError::LeaseNotFound { lease }
            } else {
                unavailable(e)
            }
        };
        let (mut keeper, mut stream) = client
            .lease_keep_alive(lease.get())
            .await
            .map_err(not_found)?;
        keeper.keep_alive().await.map_err(not_found)?;
        match stream.message().await.map_err(not_found)? {
            Some(r) if r.ttl() > 0 => Ok(Duration::from_secs(r.ttl() as u64)),
            _ => Err(MetaError::LeaseNotFound { lease }),
        }
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        match self.client.clone().lease_revoke(lease.get()).await {
            Ok(_) => Ok(()),
            Err(e) if is_lease_not_found(&e) => Err(MetaError::LeaseNotFound { lease }),
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn watch(&self, prefix: &str, after: Option<Revision>) -> Result<WatchStream, MetaError> {
        let mut options = if prefix.is_empty() {
            WatchOptions::new().with_all_keys()
        } else {
            WatchOptions::new().with_prefix()
        };
        if let Some(after) = after {
            options = options.with_start_revision(after.get() as i64 + 1);
        }
        let key = if prefix.is_empty() { "\0" } else { prefix };
        let mut stream = self
            .client
            .clone()
            .watch(key, Some(options))
            .await
            .map_err(unavailable)?;
        let (tx, out) = WatchStream::channel();
        let requested = after.unwrap_or(Revision::ZERO);
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    m = stream.message() => m,
                    _ = tx.closed() => return,
                };
                let response = match message {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(unavailable(e))).await;
                        return;
                    }
                };
                if response.compact_revision() > 0 {
                    let compacted = Revision((response.compact_revision() - 1).max(0) as u64);
                    let _ = tx
                        .send(Err(MetaError::Compacted {
                            requested,
                            compacted,
                        }))
                        .await;
                    return;
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let kind = match event.event_type() {
                        EventType::Put => WatchEventKind::Put,
                        EventType::Delete => WatchEventKind::Delete,
                    };
                    let kv = kv_of(kv);
                    let revision = kv.mod_revision;
                    if tx
                        .send(Ok(WatchEvent { kind, kv, revision }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                if response.canceled() {
                    return;
                }
            }
        });
        Ok(out)
    }
}
