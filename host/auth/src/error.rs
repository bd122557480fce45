//! What can go wrong, grouped by what the caller does next.

use sluice_meta::MetaError;

/// An authentication, authorization or tenancy error.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No usable token: the caller must present a valid one (gRPC
    /// `UNAUTHENTICATED`, HTTP 401). The message never holds a secret.
    #[error("{0}")]
    Unauthenticated(String),
    /// The token is valid but may not do this (gRPC `PERMISSION_DENIED`, HTTP 403).
    #[error("{0}")]
    Denied(String),
    /// The request is wrong (a bad name, role or expiry); never retried.
    #[error("{0}")]
    Invalid(String),
    /// No such tenant or token.
    #[error("{0}")]
    NotFound(String),
    /// The tenant exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// The request would take the tenant past one of its quotas (gRPC
    /// `RESOURCE_EXHAUSTED`, HTTP 429).
    #[error("{0}")]
    Exhausted(String),
    /// Not now: the tenant still owns changefeeds or plugins.
    #[error("{0}")]
    InUse(String),
    /// The meta store failed; retry later.
    #[error("meta store")]
    Store(#[from] MetaError),
    /// The first admin token could not be written to or read from the data dir.
    #[error("{path}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}
