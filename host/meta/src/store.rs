//! The `MetaStore` role and the values it reads and writes.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::MetaError;
use crate::txn::{Op, OpResult, Txn, TxnResult};
use crate::watch::WatchStream;

/// A store-wide counter that increases by one with every write (etcd semantics).
///
/// A write is one `put`, one `delete` that removed a key, one `txn` that changed
/// anything, or one lease revocation or expiry that removed keys; all changes of a
/// write share its revision. Reads and writes that change nothing leave it alone.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Revision(pub u64);

impl Revision {
    /// The revision of a store nothing was written to; also what
    /// [`Compare::ModRevision`](crate::Compare::ModRevision) sees for a missing key.
    pub const ZERO: Self = Self(0);

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one.
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A lease: keys attached to it are deleted when it expires or is revoked.
/// The id is an `i64` because etcd's is; `0` is never a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseId(pub i64);

impl LeaseId {
    /// The raw value.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for LeaseId {
    /// Lower-case hex, as etcd prints lease ids.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The id to attach keys with and to keep alive.
    pub id: LeaseId,
    /// The TTL the store granted. It may be longer than the one asked for (etcd
    /// counts whole seconds and has a minimum); keep the lease alive well within it,
    /// for example every `ttl / 3`.
    pub ttl: Duration,
}

/// One key with its value and revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value. Empty in a [`WatchEventKind::Delete`](crate::WatchEventKind::Delete) event.
    pub value: Vec<u8>,
    /// The revision that created the key (since it last did not exist).
    /// `Revision::ZERO` in a delete event.
    pub create_revision: Revision,
    /// The revision of the last write to the key; in a delete event, the delete's.
    pub mod_revision: Revision,
    /// The lease the key is attached to.
    pub lease: Option<LeaseId>,
}

/// The keys under a prefix, and the store revision they were read at.
///
/// Watch with `after = revision` to see every change that follows the listing,
/// with no gap and no overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The keys, sorted by key (byte order).
    pub kvs: Vec<KeyValue>,
    /// The store revision the listing reflects.
    pub revision: Revision,
}

/// Where the control plane keeps its state: a small, consistent key-value store with
/// revisions, compare-and-swap transactions, leases and watches (etcd's model).
///
/// Implementations: [`EmbeddedMetaStore`](crate::EmbeddedMetaStore) (one file, one
/// node) and, for a cluster, an etcd-backed store. The server picks one at run time,
/// so the trait is object safe: use it as `Arc<dyn MetaStore>`.
///
/// Keys are non-empty UTF-8 strings, compared and sorted as bytes. A prefix is a plain
/// byte prefix: `/a/b` lists `/a/b`, `/a/b/c` and `/a/bc`; end it with `/` to list a
/// "directory". Every request is bounded by [`MAX_REQUEST_BYTES`] and a transaction
/// by [`MAX_TXN_OPS`] per list (etcd's limits, so both implementations refuse the
/// same requests).
#[async_trait]
pub trait MetaStore: Send + Sync {
    /// Run a transaction: if every compare holds, apply `success`, else `failure`,
    /// as one write with one revision. Ops run in order; a `Get` sees the ops before
    /// it. A branch may not write (put or delete) the same key twice.
    ///
    /// Errors: `InvalidKey`/`InvalidRequest` (nothing applied), `LeaseNotFound` when
    /// the chosen branch puts with a lease that is gone (nothing applied),
    /// `Unavailable`.
    async fn txn(&self, txn: Txn) -> Result<TxnResult, MetaError>;

    /// The keys starting with `prefix` (all keys for `""`), sorted, and the revision
    /// they were read at.
    async fn list(&self, prefix: &str) -> Result<Listing, MetaError>;

    /// Grant a lease that expires `ttl` after the grant or the last keep-alive.
    /// `InvalidRequest` for a TTL that [`validate_lease_ttl`] refuses.
    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, MetaError>;

    /// Extend a lease by its TTL from now; returns the TTL. `LeaseNotFound` when it
    /// expired or was revoked: its keys are gone (or going), so grant a new one.
    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError>;

    /// Revoke a lease now, deleting its keys in one write. `LeaseNotFound` when it
    /// had already expired or been revoked.
    async fn revoke(&self, lease: LeaseId) -> Result<(), MetaError>;

    /// Watch the keys starting with `prefix`.
    ///
    /// With `after: None`, the stream yields the changes made after the call. With
    /// `after: Some(rev)`, it first yields the changes with a revision greater than
    /// `rev` that the store still has, then live ones. If the store no longer has all
    /// of them, the result is [`MetaError::Compacted`]: either from this call or as
    /// the stream's first item. Events come in revision order; the events of one
    /// write share its revision and come one after the other, in the write's order.
    /// After an `Err` item the stream ends.
    async fn watch(&self, prefix: &str, after: Option<Revision>) -> Result<WatchStream, MetaError>;

    /// The value of `key`, if it exists.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let mut result = self.txn(Txn::new().and_then([Op::get(key)])).await?;
        match result.results.pop() {
            Some(OpResult::Get(kv)) => Ok(kv),
            other => Err(MetaError::unexpected(format!("a get returned {other:?}"))),
        }
    }

    /// Set `key` to `value`, attached to `lease` (or detached from any lease).
    /// Returns the revision of the write.
    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Revision, MetaError> {
        let op = Op::Put {
            key: key.to_owned(),
            value,
            lease,
        };
        Ok(self.txn(Txn::new().and_then([op])).await?.revision)
    }

    /// Delete `key`; `true` if it existed. Deleting a missing key is not a write.
    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        let mut result = self.txn(Txn::new().and_then([Op::delete(key)])).await?;
        match result.results.pop() {
            Some(OpResult::Delete { deleted }) => Ok(deleted),
            other => Err(MetaError::unexpected(format!(
                "a delete returned {other:?}"
            ))),
        }
    }

    /// The current store revision (a transaction that reads nothing).
    async fn revision(&self) -> Result<Revision, MetaError> {
        Ok(self.txn(Txn::new()).await?.revision)
    }
}

/// The most bytes (keys plus values) one request may carry. etcd's default
/// `--max-request-bytes` is 1.5 MiB including framing; 1 MiB of payload fits it.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// The most compares, and the most ops per branch, in one transaction (etcd's
/// default `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// The longest lease TTL (etcd's `MaxLeaseTTL`, about 285 years).
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(9_000_000_000);

/// A TTL every store accepts: longer than zero, at most [`MAX_LEASE_TTL`].
pub fn validate_lease_ttl(ttl: Duration) -> Result<(), MetaError> {
    if ttl.is_zero() || ttl > MAX_LEASE_TTL {
        return Err(MetaError::InvalidRequest {
            reason: format!(
                "a lease TTL must be longer than zero and at most {} s, not {ttl:?}",
                MAX_LEASE_TTL.as_secs()
            ),
        });
    }
    Ok(())
}
