//! `sluice-auth`: who may do what on a Sluice server.
//!
//! A **tenant** owns changefeeds, plugins and tokens. An API **token** is a
//! bearer secret (`sluice_<id>_<secret>`, 256 random bits) with a role
//! ([`Role`]: admin, tenant-admin, viewer) in one tenant and an optional
//! expiry; the meta store keeps only the SHA-256 of its secret, compared in
//! constant time. [`Authenticator`] turns a request's `authorization` header
//! into a [`Caller`], and [`Caller::tenant`] decides which tenant a request
//! acts on and whether the caller may: the tenant a request names only selects
//! within what its token may see. [`Tenancy`] reads and writes the tenant and
//! token records, and gives a new server its first admin token.
//!
//! No I/O but the meta store and, for the first admin token, one file in the
//! data dir; the API crate maps [`AuthError`] to gRPC codes and HTTP statuses.

mod audit;
mod caller;
mod egress;
mod error;
/// The note that lets `sluice cli` on the server's machine find its admin token.
pub mod local;
mod quota;
mod tenancy;
mod token;

pub use audit::{AuditEntry, AuditLog};
pub use caller::{Access, Caller};
pub use egress::{Egress, MAX_EGRESS_RULES};
pub use error::AuthError;
pub use quota::{DEFAULT_CPU_WEIGHT, TenantQuota, TenantUsage};
pub use tenancy::{
    ADMIN_TOKEN_FILE, Authenticator, DEFAULT_TENANT, Tenancy, TenantRecord, TokenGrant,
};
pub use token::{Role, TokenRecord, TokenSecret};
