//! The meta store's errors, grouped by what the caller does next.

use std::path::PathBuf;

use crate::store::{LeaseId, Revision};

/// A boxed cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a meta store call failed.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    // --- Reject the request: the caller must change it. Nothing was applied. ---
    /// A key, or a name that goes into a key, is not valid.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The refused key, or the name part (tenant, changefeed, plugin...) that
        /// would have gone into one; empty for an empty key.
        key: String,
        /// Which rule it breaks, phrased so it can be shown to the user as is.
        reason: String,
    },
    /// The request breaks a limit every store enforces (size, op count, a key
    /// written twice in one transaction, a zero TTL).
    #[error("invalid request: {reason}")]
    InvalidRequest {
        /// What is wrong with the request and, for a limit, how to stay within it;
        /// phrased so it can be shown to the user as is.
        reason: String,
    },

    // --- The lease is gone: grant a new one and write its keys again. ---
    /// The lease expired or was revoked (or never existed); keys attached to it are
    /// gone or going.
    #[error(
        "lease {lease} was not found: it expired or was revoked, and its keys are deleted; \
         grant a new lease and put its keys again"
    )]
    LeaseNotFound {
        /// The lease the call named; do not use it again.
        lease: LeaseId,
    },

    // --- The history is gone: read the state again, then watch from there. ---
    /// The store no longer has every change after `requested`.
    #[error(
        "the changes after revision {requested} are no longer kept (only those after revision \
         {compacted} are); list the keys again and watch after the listing's revision"
    )]
    Compacted {
        /// The revision the watch was to resume after (or, for a watch that fell
        /// behind, the last revision it had delivered).
        requested: Revision,
        /// The store keeps only the changes after this revision; list the keys and
        /// watch after the listing's revision, which is at least this one.
        compacted: Revision,
    },

    // --- Retry with backoff. ---
    /// The store could not be reached, read or written; the request may or may not
    /// have been applied. Retry (re-reading before a compare-and-swap).
    #[error("the meta store is unavailable: {reason}; retry with backoff")]
    Unavailable {
        /// What could not be done, naming the store (an etcd endpoint error, a file
        /// that cannot be written, a runtime shutting down).
        reason: String,
        /// The underlying I/O, storage engine or etcd client error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    // --- An operator must act. ---
    /// The embedded store's file is damaged or is not a meta store.
    #[error(
        "meta store file {path} is damaged or is not a Sluice meta store ({reason}); restore it \
         from a backup, or move it away to start with an empty meta store"
    )]
    Corrupt {
        /// The embedded store's file.
        path: PathBuf,
        /// What is wrong with its contents.
        reason: String,
        /// The storage engine's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The embedded store's file is open in another process or store.
    #[error(
        "meta store file {path} is already open in another sluice process (or another store in \
         this one); stop that process, or give this one its own data dir"
    )]
    InUse {
        /// The embedded store's file, whose lock another holder has.
        path: PathBuf,
    },
    /// Written by a newer Sluice: a file format or key layout this build does not know.
    #[error(
        "{location} uses layout version {found}, but this build of sluice supports up to \
         version {supported}; upgrade sluice"
    )]
    NewerLayout {
        /// Where the version was read, for the message: the embedded store's file,
        /// or the meta store's layout key.
        location: String,
        /// The version written there.
        found: u64,
        /// The newest version this build reads and writes
        /// ([`FORMAT_VERSION`](crate::FORMAT_VERSION) for the file,
        /// [`LAYOUT_VERSION`](crate::keys::LAYOUT_VERSION) for the key layout).
        supported: u64,
    },
    /// A value the control plane wrote cannot be decoded.
    #[error("the value of {key} cannot be decoded ({reason}); fix or delete the key")]
    BadValue {
        /// The key whose value is bad; fix or delete it.
        key: String,
        /// What is wrong with the value.
        reason: String,
        /// The JSON decoder's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
}

impl MetaError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// An implementation answered in a way the trait rules out.
    pub(crate) fn unexpected(what: String) -> Self {
        Self::Unavailable {
            reason: format!("the meta store answered unexpectedly ({what})"),
            source: None,
        }
    }
}
