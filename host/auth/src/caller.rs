//! Who is calling, and which tenant a request may act on.

use std::sync::{Arc, Mutex};

use sluice_meta::keys::{NameKind, validate_name};

use crate::error::AuthError;
use crate::token::Role;

/// What a request does, for the permission check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads a tenant's changefeeds, plugins or status: any role of the tenant.
    Read,
    /// Changes a tenant's changefeeds or plugins: tenant-admin or admin.
    Write,
    /// Makes, lists or revokes a tenant's tokens: tenant-admin or admin.
    Tokens,
    /// Creates or removes tenants or sets quotas: admin only.
    Server,
}

/// The caller of a request, from its token: the API puts one in every
/// request it has authenticated.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's public id (never its secret).
    pub token_id: String,
    /// The token's tenant.
    pub tenant: String,
    /// The token's role.
    pub role: Role,
    /// The last tenant a check was asked for (the audit's "acted on"),
    /// shared by the clones of one request's caller.
    acted_on: Arc<Mutex<Option<String>>>,
}

impl PartialEq for Caller {
    fn eq(&self, other: &Self) -> bool {
        (&self.token_id, &self.tenant, self.role) == (&other.token_id, &other.tenant, other.role)
    }
}

impl Eq for Caller {}

impl Caller {
    /// The caller holding token `token_id` of `tenant` with `role`.
    pub fn new(token_id: impl Into<String>, tenant: impl Into<String>, role: Role) -> Self {
        Self {
            token_id: token_id.into(),
            tenant: tenant.into(),
            role,
            acted_on: Arc::default(),
        }
    }

    /// The tenant the request acted on, as far as it was checked.
    pub fn acted_on(&self) -> Option<String> {
        self.acted_on
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The tenant a request acts on: the one it names, or the caller's own
    /// when it names none. Refused when the caller may not `access` it.
    pub fn tenant(&self, named: &str, access: Access) -> Result<String, AuthError> {
        let tenant = if named.is_empty() {
            self.tenant.clone()
        } else {
            validate_name(NameKind::Tenant, named)
                .map_err(|e| AuthError::Invalid(e.to_string()))?;
            named.to_string()
        };
        self.check(&tenant, access)?;
        Ok(tenant)
    }

    /// Whether the caller may `access` `tenant`; the refusal says why.
    pub fn check(&self, tenant: &str, access: Access) -> Result<(), AuthError> {
        *self
            .acted_on
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tenant.to_string());
        if self.role == Role::Admin {
            return Ok(());
        }
        if access == Access::Server {
            return Err(AuthError::Denied(format!(
                "this needs the admin role; token {} is a {} of tenant `{}`",
                self.token_id, self.role, self.tenant
            )));
        }
        if tenant != self.tenant {
            return Err(AuthError::Denied(format!(
                "token {} belongs to tenant `{}` and may not act on tenant `{tenant}`",
                self.token_id, self.tenant
            )));
        }
        if access != Access::Read && self.role == Role::Viewer {
            return Err(AuthError::Denied(format!(
                "token {} is a viewer of tenant `{}`: it may read, not change; this needs the tenant-admin or admin role",
                self.token_id, self.tenant
            )));
        }
        Ok(())
    }

    /// Which tenants a listing covers: `None` for every tenant (an admin
    /// naming none), else the one tenant (checked for reading).
    pub fn scope(&self, named: &str) -> Result<Option<String>, AuthError> {
        if named.is_empty() && self.role == Role::Admin {
            return Ok(None);
        }
        self.tenant(named, Access::Read).map(Some)
    }

    /// Whether the caller may make a token with `role` in `tenant`: an admin
    /// any; a tenant-admin a viewer or tenant-admin of its own tenant.
    pub fn may_grant(&self, tenant: &str, role: Role) -> Result<(), AuthError> {
        self.check(tenant, Access::Tokens)?;
        if role > self.role {
            return Err(AuthError::Denied(format!(
                "token {} is a {}: it may not make a token with the {role} role",
                self.token_id, self.role
            )));
        }
        Ok(())
    }

    /// How records (swaps, shadows, rollouts) name who asked.
    pub fn label(&self) -> String {
        format!("token {} ({} of {})", self.token_id, self.role, self.tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(tenant: &str, role: Role) -> Caller {
        Caller::new("00000000000000aa", tenant, role)
    }

    #[test]
    fn a_request_naming_no_tenant_acts_on_the_callers_own() {
        let c = caller("acme", Role::Viewer);
        assert_eq!(c.acted_on(), None);
        assert_eq!(c.tenant("", Access::Read).unwrap(), "acme");
        assert_eq!(c.clone().acted_on().as_deref(), Some("acme"));
        assert_eq!(c.scope("").unwrap().as_deref(), Some("acme"));
        let admin = caller("default", Role::Admin);
        assert_eq!(admin.tenant("", Access::Write).unwrap(), "default");
        assert_eq!(admin.tenant("acme", Access::Server).unwrap(), "acme");
        assert_eq!(admin.scope("").unwrap(), None);
    }

    #[test]
    fn another_tenants_name_is_refused_with_the_reason() {
        let c = caller("acme", Role::TenantAdmin);
        for access in [Access::Read, Access::Write, Access::Tokens] {
            let e = c.tenant("globex", access).unwrap_err();
            assert!(matches!(e, AuthError::Denied(_)));
            assert_eq!(
                e.to_string(),
                "token 00000000000000aa belongs to tenant `acme` and may not act on tenant `globex`"
            );
        }
        assert!(c.tenant("acme", Access::Write).is_ok());
        assert!(matches!(
            c.tenant("a/b", Access::Read).unwrap_err(),
            AuthError::Invalid(_)
        ));
    }

    #[test]
    fn each_role_gets_exactly_its_accesses() {
        use Access::*;
        let table = [
            (Role::Viewer, [true, false, false, false]),
            (Role::TenantAdmin, [true, true, true, false]),
            (Role::Admin, [true, true, true, true]),
        ];
        for (role, allowed) in table {
            let c = caller("acme", role);
            for (access, ok) in [Read, Write, Tokens, Server].into_iter().zip(allowed) {
                assert_eq!(c.check("acme", access).is_ok(), ok, "{role} {access:?}");
            }
        }
    }

    #[test]
    fn a_tenant_admin_grants_no_role_above_its_own() {
        let c = caller("acme", Role::TenantAdmin);
        assert!(c.may_grant("acme", Role::Viewer).is_ok());
        assert!(c.may_grant("acme", Role::TenantAdmin).is_ok());
        assert!(c.may_grant("acme", Role::Admin).is_err());
        assert!(c.may_grant("globex", Role::Viewer).is_err());
        assert!(
            caller("acme", Role::Viewer)
                .may_grant("acme", Role::Viewer)
                .is_err()
        );
    }
}
