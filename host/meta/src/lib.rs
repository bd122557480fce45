//! `sluice-meta`: where the control plane keeps its state.
//!
//! [`MetaStore`] is etcd's model in a small, object-safe trait: keys with revisions,
//! compare-and-swap transactions, prefix listing, leases and watches that resume from
//! a revision. [`EmbeddedMetaStore`] implements it in one crash-safe redb file for a
//! single node; an etcd implementation serves clusters. [`keys`] builds the keys of
//! the versioned layout described in `docs/meta-layout.md`. With the `testing`
//! feature, `conformance` is the test suite every implementation must pass.

mod embedded;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
pub mod keys;
mod store;
mod txn;
mod watch;

#[cfg(feature = "testing")]
pub mod conformance;

pub use embedded::{EmbeddedMetaStore, EmbeddedOptions, FORMAT_VERSION};
pub use error::{BoxError, MetaError};
#[cfg(feature = "etcd")]
pub use etcd::EtcdMetaStore;
pub use store::{
    KeyValue, Lease, LeaseId, Listing, MAX_LEASE_TTL, MAX_REQUEST_BYTES, MAX_TXN_OPS, MetaStore,
    Revision, validate_lease_ttl,
};
pub use txn::{Compare, Op, OpResult, Txn, TxnResult, validate_key};
pub use watch::{WATCH_BUFFER, WatchEvent, WatchEventKind, WatchStream};
