//! Compare-and-swap transactions (etcd's `Txn`: compares, then one of two branches).

use crate::error::MetaError;
use crate::store::{KeyValue, LeaseId, MAX_REQUEST_BYTES, MAX_TXN_OPS, Revision};

/// A condition on one key, evaluated at the start of the transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key does not exist.
    Absent {
        /// The key that must be missing.
        key: String,
    },
    /// The key's mod revision equals `revision`. A missing key has mod revision
    /// `Revision::ZERO`, so `ModRevision { revision: ZERO }` also means "absent".
    ModRevision {
        /// The key to check.
        key: String,
        /// The mod revision it must have, usually from an earlier read of the key.
        revision: Revision,
    },
    /// The key's create revision equals `revision` (missing: `Revision::ZERO`).
    /// "The key is still the one I created", for election and fencing.
    CreateRevision {
        /// The key to check.
        key: String,
        /// The create revision it must have, usually the revision that the
        /// caller's own create wrote.
        revision: Revision,
    },
    /// The key exists and its value equals `value`. Fails for a missing key, even
    /// with an empty `value` (etcd does the same).
    Value {
        /// The key to check.
        key: String,
        /// The exact bytes its value must have.
        value: Vec<u8>,
    },
}

impl Compare {
    /// The key does not exist.
    pub fn absent(key: impl Into<String>) -> Self {
        Self::Absent { key: key.into() }
    }

    /// The key's mod revision equals `revision`.
    pub fn mod_revision(key: impl Into<String>, revision: Revision) -> Self {
        Self::ModRevision {
            key: key.into(),
            revision,
        }
    }

    /// The key's create revision equals `revision`.
    pub fn create_revision(key: impl Into<String>, revision: Revision) -> Self {
        Self::CreateRevision {
            key: key.into(),
            revision,
        }
    }

    /// The key exists with this value.
    pub fn value(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self::Value {
            key: key.into(),
            value: value.into(),
        }
    }

    /// The key the compare looks at.
    pub fn key(&self) -> &str {
        match self {
            Self::Absent { key }
            | Self::ModRevision { key, .. }
            | Self::CreateRevision { key, .. }
            | Self::Value { key, .. } => key,
        }
    }

    /// Whether the compare holds for the current value of its key.
    pub fn holds(&self, current: Option<&KeyValue>) -> bool {
        match self {
            Self::Absent { .. } => current.is_none(),
            Self::ModRevision { revision, .. } => {
                current.map_or(Revision::ZERO, |kv| kv.mod_revision) == *revision
            }
            Self::CreateRevision { revision, .. } => {
                current.map_or(Revision::ZERO, |kv| kv.create_revision) == *revision
            }
            Self::Value { value, .. } => current.is_some_and(|kv| kv.value == *value),
        }
    }
}

/// One step of a transaction branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set the key; attach it to `lease`, or detach it from any lease with `None`.
    Put {
        /// The key to set (created if missing).
        key: String,
        /// The new value; it replaces the old one whole.
        value: Vec<u8>,
        /// The lease to attach the key to, which must still be alive; `None` keeps
        /// the key until it is deleted.
        lease: Option<LeaseId>,
    },
    /// Delete the key if it exists.
    Delete {
        /// The key to delete; a missing key is not an error.
        key: String,
    },
    /// Read the key (seeing the ops before it in the same branch).
    Get {
        /// The key to read; its value lands in the matching [`OpResult::Get`].
        key: String,
    },
}

impl Op {
    /// A put without a lease.
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
        }
    }

    /// A put attached to `lease`.
    pub fn put_with_lease(
        key: impl Into<String>,
        value: impl Into<Vec<u8>>,
        lease: LeaseId,
    ) -> Self {
        Self::Put {
            key: key.into(),
            value: value.into(),
            lease: Some(lease),
        }
    }

    /// A delete.
    pub fn delete(key: impl Into<String>) -> Self {
        Self::Delete { key: key.into() }
    }

    /// A get.
    pub fn get(key: impl Into<String>) -> Self {
        Self::Get { key: key.into() }
    }

    /// The key the op touches.
    pub fn key(&self) -> &str {
        match self {
            Self::Put { key, .. } | Self::Delete { key } | Self::Get { key } => key,
        }
    }

    fn is_write(&self) -> bool {
        !matches!(self, Self::Get { .. })
    }
}

/// Compares, and the ops to run when they all hold (`success`) or not (`failure`).
/// An empty transaction reads the store revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Every compare must hold for `success` to run.
    pub compares: Vec<Compare>,
    /// Ops when every compare holds.
    pub success: Vec<Op>,
    /// Ops otherwise.
    pub failure: Vec<Op>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add compares.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.compares.extend(compares);
        self
    }

    /// Add ops to the success branch.
    pub fn and_then(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.success.extend(ops);
        self
    }

    /// Add ops to the failure branch.
    pub fn or_else(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.failure.extend(ops);
        self
    }

    /// Check what every implementation refuses, before anything is applied: invalid
    /// keys, more than [`MAX_TXN_OPS`] compares or ops per branch, more than
    /// [`MAX_REQUEST_BYTES`], a key written twice in one branch.
    pub fn validate(&self) -> Result<(), MetaError> {
        for (what, len) in [
            ("compares", self.compares.len()),
            ("success ops", self.success.len()),
            ("failure ops", self.failure.len()),
        ] {
            if len > MAX_TXN_OPS {
                return Err(MetaError::InvalidRequest {
                    reason: format!(
                        "a transaction has {len} {what}, more than the limit of {MAX_TXN_OPS}; \
                         split it into several transactions"
                    ),
                });
            }
        }
        let mut bytes = 0usize;
        for compare in &self.compares {
            validate_key(compare.key())?;
            bytes += compare.key().len();
            if let Compare::Value { value, .. } = compare {
                bytes += value.len();
            }
        }
        for branch in [&self.success, &self.failure] {
            let mut written = std::collections::HashSet::new();
            for op in branch {
                validate_key(op.key())?;
                bytes += op.key().len();
                if let Op::Put { value, .. } = op {
                    bytes += value.len();
                }
                if op.is_write() && !written.insert(op.key()) {
                    return Err(MetaError::InvalidRequest {
                        reason: format!(
                            "a transaction branch writes key {:?} twice; write each key at most once",
                            op.key()
                        ),
                    });
                }
            }
        }
        if bytes > MAX_REQUEST_BYTES {
            return Err(MetaError::InvalidRequest {
                reason: format!(
                    "the request carries {bytes} bytes of keys and values, more than the limit of \
                     {MAX_REQUEST_BYTES}; store large data elsewhere and keep a reference in the meta store"
                ),
            });
        }
        Ok(())
    }
}

/// A key every store accepts: not empty.
pub fn validate_key(key: &str) -> Result<(), MetaError> {
    if key.is_empty() {
        return Err(MetaError::InvalidKey {
            key: String::new(),
            reason: "a key must not be empty".into(),
        });
    }
    Ok(())
}

/// What one op of the branch that ran produced, in op order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// A put was applied (at [`TxnResult::revision`]).
    Put,
    /// A delete ran; `deleted` says whether the key existed.
    Delete {
        /// `true` if the key existed and was deleted; `false` if it was missing
        /// (deleting a missing key is not a write).
        deleted: bool,
    },
    /// A get's value.
    Get(Option<KeyValue>),
}

/// The outcome of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResult {
    /// `true` if every compare held and `success` ran; `false` if `failure` ran.
    pub succeeded: bool,
    /// The store revision after the transaction: the transaction's own revision if it
    /// wrote anything, else the revision it read at.
    pub revision: Revision,
    /// One result per op of the branch that ran.
    pub results: Vec<OpResult>,
}

impl TxnResult {
    /// The values of the branch's gets, in op order.
    pub fn gets(&self) -> impl Iterator<Item = Option<&KeyValue>> {
        self.results.iter().filter_map(|r| match r {
            OpResult::Get(kv) => Some(kv.as_ref()),
            _ => None,
        })
    }
}
