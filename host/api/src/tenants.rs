//! `sluice.v1.TenantService`: tenants and their API tokens.

use sluice_auth::{
    Access, AuthError, Caller, Role, TenantQuota, TenantRecord, TenantUsage, TokenRecord,
};
use sluice_config::{ChangefeedConfig, GrantedHost, PluginConfig, PluginId};
use sluice_owner::ChangefeedInfo;
use sluice_owner::{Clock, SystemClock};
use tonic::{Request, Response, Status};

use crate::auth::caller;
use crate::error::{auth_status, registry_status};
use crate::grpc::Api;
use crate::v1 as pb;
use crate::v1::tenant_service_server::TenantService;

/// A token's public part as the API shows it.
pub(crate) fn token_pb(r: &TokenRecord) -> pb::Token {
    pb::Token {
        id: r.id.clone(),
        tenant: r.tenant.clone(),
        role: r.role.as_str().to_string(),
        created_at_ms: r.created_at_ms,
        expires_at_ms: r.expires_at_ms.unwrap_or(0),
        revoked_at_ms: r.revoked_at_ms.unwrap_or(0),
        description: r.description.clone(),
    }
}

/// A quota as the API shows it.
fn quota_pb(q: &TenantQuota) -> pb::TenantQuota {
    pb::TenantQuota {
        max_changefeeds: q.max_changefeeds,
        max_plugin_bytes: q.max_plugin_bytes,
        max_plugin_versions: q.max_plugin_versions,
        max_plugin_memory: q.max_plugin_memory,
        max_buffer_bytes: q.max_buffer_bytes,
        max_sql_connections: q.max_sql_connections,
        cpu_weight: q.cpu_weight,
        max_cpu_millicores: q.max_cpu_millicores,
        max_plugin_concurrency: q.max_plugin_concurrency,
        egress: q.egress.as_ref().map(|rules| pb::Egress {
            rules: rules.clone(),
        }),
    }
}

/// A quota as a request sets it.
fn quota_from_pb(q: pb::TenantQuota) -> TenantQuota {
    TenantQuota {
        max_changefeeds: q.max_changefeeds,
        max_plugin_bytes: q.max_plugin_bytes,
        max_plugin_versions: q.max_plugin_versions,
        max_plugin_memory: q.max_plugin_memory,
        max_buffer_bytes: q.max_buffer_bytes,
        max_sql_connections: q.max_sql_connections,
        cpu_weight: q.cpu_weight,
        max_cpu_millicores: q.max_cpu_millicores,
        max_plugin_concurrency: q.max_plugin_concurrency,
        egress: q.egress.map(|e| e.rules),
    }
}

/// How a tenant with `quota` shares the plugin threads.
pub fn share_config(quota: &TenantQuota) -> sluice_runtime::ShareConfig {
    sluice_runtime::ShareConfig {
        weight: quota.cpu_weight.unwrap_or(sluice_auth::DEFAULT_CPU_WEIGHT),
        max_concurrency: quota
            .max_plugin_concurrency
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        max_millicores: quota.max_cpu_millicores,
    }
}

/// Applies every tenant's CPU settings to this server's plugin threads now
/// (each server does this every few seconds, so a change made through
/// another server arrives too).
pub async fn apply_shares(
    tenancy: &sluice_auth::Tenancy,
    shares: &sluice_runtime::CpuShares,
) -> Result<(), AuthError> {
    for record in tenancy.list_tenants().await? {
        shares.configure(&record.name, share_config(&record.quota));
    }
    Ok(())
}

/// What a changefeed running `config` (and the shadow candidate `shadow`
/// with its queue bound, if one runs) holds against its tenant's quotas:
/// one changefeed, its plugins' `limits.memory`, its event cache (which
/// holds its replay buffer and redo share) and the shadow's queue, and the
/// connections its plugins may open to their granted databases.
pub(crate) fn feed_footprint(
    config: &ChangefeedConfig<PluginId>,
    shadow: Option<(&PluginConfig, u64)>,
) -> TenantUsage {
    let mut usage = TenantUsage {
        changefeeds: 1,
        buffer_bytes: config
            .pipeline
            .event_cache_bytes
            .0
            .saturating_add(shadow.map_or(0, |(_, queued)| queued)),
        ..TenantUsage::default()
    };
    let plugins = config
        .plugins()
        .map(|(_, p)| p)
        .chain(shadow.map(|(c, _)| c));
    for p in plugins {
        usage.plugin_memory = usage.plugin_memory.saturating_add(p.limits.memory_bytes());
        usage.sql_connections = usage.sql_connections.saturating_add(
            p.limits
                .sql_connections
                .saturating_mul(p.capabilities.sql.len() as u64),
        );
    }
    usage
}

/// [`feed_footprint`] of a stored changefeed.
pub(crate) fn footprint(info: &ChangefeedInfo) -> TenantUsage {
    feed_footprint(
        &info.config,
        info.running_shadow()
            .map(|s| (&s.candidate, s.max_queued_bytes)),
    )
}

/// Every host the plugins of `config` are granted.
pub(crate) fn feed_grants(config: &ChangefeedConfig<PluginId>) -> Vec<GrantedHost> {
    config
        .plugins()
        .flat_map(|(key, p)| p.capabilities.hosts(&key))
        .collect()
}

fn tenant_ref(r: &pb::TenantRef) -> Result<&str, Status> {
    if r.name.is_empty() {
        return Err(Status::invalid_argument(
            "the request names no tenant (name)",
        ));
    }
    sluice_owner::validate_name(sluice_owner::NameKind::Tenant, &r.name)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok(&r.name)
}

impl Api {
    /// What `tenant` holds now.
    pub(crate) async fn usage(&self, tenant: &str) -> Result<TenantUsage, Status> {
        self.node()
            .tenant_usage(tenant)
            .await
            .map_err(registry_status)
    }

    /// Admits a request that replaces `before` (what a changefeed held, or
    /// nothing) by `after` in what `tenant` (which must exist) holds, and
    /// grants its plugins `grants`, against the tenant's quotas and egress
    /// allowlist. Call it in the tenant's turn.
    pub(crate) async fn admit(
        &self,
        tenant: &str,
        before: &TenantUsage,
        after: &TenantUsage,
        grants: &[GrantedHost],
    ) -> Result<(), Status> {
        let record = self
            .node()
            .tenancy
            .require(tenant)
            .await
            .map_err(auth_status)?;
        if let Some(rules) = &record.quota.egress {
            let egress = sluice_auth::Egress::parse(rules).map_err(auth_status)?;
            egress
                .check(
                    tenant,
                    rules,
                    grants
                        .iter()
                        .map(|g| (g.key.as_str(), g.grant.as_str(), g.host.as_str(), g.port)),
                )
                .map_err(auth_status)?;
        }
        let now = self.usage(tenant).await?;
        record
            .quota
            .admit(tenant, &now, &now.replace(before, after))
            .map_err(auth_status)
    }

    /// A tenant with what it owns now.
    async fn tenant_pb(&self, record: &TenantRecord) -> Result<pb::Tenant, Status> {
        let node = self.node();
        let usage = self.usage(&record.name).await?;
        let tokens = node
            .tenancy
            .list_tokens(Some(&record.name))
            .await
            .map_err(auth_status)?
            .iter()
            .filter(|t| t.revoked_at_ms.is_none())
            .count() as u64;
        Ok(pb::Tenant {
            name: record.name.clone(),
            created_at_ms: record.created_at_ms,
            changefeeds: usage.changefeeds,
            plugins: usage.plugin_versions,
            plugin_bytes: usage.plugin_bytes,
            tokens,
            quota: Some(quota_pb(&record.quota)),
            plugin_memory: usage.plugin_memory,
            buffer_bytes: usage.buffer_bytes,
            sql_connections: usage.sql_connections,
        })
    }

    /// The record of token `id` if `caller` may manage it; a token outside
    /// the caller's reach is "not found", as if it did not exist.
    async fn manageable_token(&self, caller: &Caller, id: &str) -> Result<TokenRecord, Status> {
        let missing = || Status::not_found(format!("no token {id}"));
        let record = self
            .node()
            .tenancy
            .get_token(id)
            .await
            .map_err(auth_status)?
            .ok_or_else(missing)?;
        if caller.check(&record.tenant, Access::Read).is_err() {
            return Err(missing());
        }
        caller
            .may_grant(&record.tenant, record.role)
            .map_err(auth_status)?;
        Ok(record)
    }
}

#[tonic::async_trait]
impl TenantService for Api {
    async fn create_tenant(
        &self,
        request: Request<pb::TenantRef>,
    ) -> Result<Response<pb::Tenant>, Status> {
        let caller = caller(&request)?;
        let name = tenant_ref(request.get_ref())?;
        caller.check(name, Access::Server).map_err(auth_status)?;
        let record = self
            .node()
            .tenancy
            .create_tenant(name, SystemClock.now_ms())
            .await
            .map_err(auth_status)?;
        tracing::info!(tenant = %name, token = %caller.token_id, "Tenant created.");
        Ok(Response::new(self.tenant_pb(&record).await?))
    }

    async fn list_tenants(
        &self,
        request: Request<pb::ListTenantsRequest>,
    ) -> Result<Response<pb::ListTenantsResponse>, Status> {
        let caller = caller(&request)?;
        let scope = caller.scope("").map_err(auth_status)?;
        let mut tenants = Vec::new();
        for record in self
            .node()
            .tenancy
            .list_tenants()
            .await
            .map_err(auth_status)?
        {
            if scope.as_ref().is_none_or(|t| *t == record.name) {
                tenants.push(self.tenant_pb(&record).await?);
            }
        }
        Ok(Response::new(pb::ListTenantsResponse { tenants }))
    }

    async fn get_tenant(
        &self,
        request: Request<pb::TenantRef>,
    ) -> Result<Response<pb::Tenant>, Status> {
        let caller = caller(&request)?;
        let name = caller
            .tenant(&request.get_ref().name, Access::Read)
            .map_err(auth_status)?;
        let record = self
            .node()
            .tenancy
            .require(&name)
            .await
            .map_err(auth_status)?;
        Ok(Response::new(self.tenant_pb(&record).await?))
    }

    async fn remove_tenant(
        &self,
        request: Request<pb::TenantRef>,
    ) -> Result<Response<pb::Tenant>, Status> {
        let caller = caller(&request)?;
        let name = tenant_ref(request.get_ref())?;
        caller.check(name, Access::Server).map_err(auth_status)?;
        let node = self.node();
        let record = node.tenancy.require(name).await.map_err(auth_status)?;
        let last = self.tenant_pb(&record).await?;
        let feeds = node.owner.snapshot().list(name);
        if !feeds.is_empty() {
            let names: Vec<&str> = feeds.iter().map(|v| v.changefeed.id().name()).collect();
            return Err(auth_status(AuthError::InUse(format!(
                "tenant `{name}` still owns changefeeds {}; remove them first",
                names.join(", ")
            ))));
        }
        let plugins = node.registry.list(name).await.map_err(registry_status)?;
        if !plugins.is_empty() {
            let ids: Vec<String> = plugins
                .iter()
                .map(|p| format!("{}@{}", p.name, p.plugin_version))
                .collect();
            return Err(auth_status(AuthError::InUse(format!(
                "tenant `{name}` still owns plugins {}; remove them first",
                ids.join(", ")
            ))));
        }
        node.tenancy
            .remove_tenant(name)
            .await
            .map_err(auth_status)?;
        node.auth.forget_all();
        tracing::info!(tenant = %name, token = %caller.token_id, "Tenant removed.");
        Ok(Response::new(last))
    }

    async fn set_tenant_quota(
        &self,
        request: Request<pb::SetTenantQuotaRequest>,
    ) -> Result<Response<pb::Tenant>, Status> {
        let caller = caller(&request)?;
        let r = request.into_inner();
        let name = tenant_ref(&pb::TenantRef {
            name: r.name.clone(),
        })?
        .to_string();
        caller.check(&name, Access::Server).map_err(auth_status)?;
        let quota = quota_from_pb(r.quota.unwrap_or_default());
        let record = self
            .node()
            .tenancy
            .set_quota(&name, quota.clone())
            .await
            .map_err(auth_status)?;
        self.node()
            .registry
            .runtime()
            .shares()
            .configure(&name, share_config(&quota));
        tracing::info!(tenant = %name, quota = ?quota, token = %caller.token_id, "Tenant quota set.");
        Ok(Response::new(self.tenant_pb(&record).await?))
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreatedToken>, Status> {
        let caller = caller(&request)?;
        let r = request.into_inner();
        let tenant = caller
            .tenant(&r.tenant, Access::Tokens)
            .map_err(auth_status)?;
        let role: Role = r.role.parse().map_err(auth_status)?;
        caller.may_grant(&tenant, role).map_err(auth_status)?;
        let grant = self
            .node()
            .tenancy
            .create_token(
                &tenant,
                role,
                (r.expires_at_ms > 0).then_some(r.expires_at_ms),
                &r.description,
                SystemClock.now_ms(),
            )
            .await
            .map_err(auth_status)?;
        tracing::info!(
            tenant = %tenant,
            role = %role,
            token = %grant.record.id,
            by = %caller.token_id,
            "Token created."
        );
        Ok(Response::new(pb::CreatedToken {
            info: Some(token_pb(&grant.record)),
            token: grant.secret.reveal().to_string(),
        }))
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        let caller = caller(&request)?;
        let named = &request.get_ref().tenant;
        let tenant = if named == "*" {
            caller.check("*", Access::Server).map_err(auth_status)?;
            None
        } else {
            Some(caller.tenant(named, Access::Tokens).map_err(auth_status)?)
        };
        let tokens = self
            .node()
            .tenancy
            .list_tokens(tenant.as_deref())
            .await
            .map_err(auth_status)?;
        Ok(Response::new(pb::ListTokensResponse {
            tokens: tokens.iter().map(token_pb).collect(),
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::TokenRef>,
    ) -> Result<Response<pb::Token>, Status> {
        let caller = caller(&request)?;
        let id = &request.get_ref().id;
        sluice_meta::keys::validate_name(sluice_meta::keys::NameKind::Token, id)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.manageable_token(&caller, id).await?;
        let record = self
            .node()
            .tenancy
            .revoke_token(id, SystemClock.now_ms())
            .await
            .map_err(auth_status)?;
        self.node().auth.forget(id);
        tracing::info!(token = %id, by = %caller.token_id, "Token revoked.");
        Ok(Response::new(token_pb(&record)))
    }

    async fn list_audit(
        &self,
        request: Request<pb::ListAuditRequest>,
    ) -> Result<Response<pb::ListAuditResponse>, Status> {
        let caller = caller(&request)?;
        let r = request.into_inner();
        // An admin naming no tenant reads every tenant's; anyone else the
        // tenant whose tokens it may manage.
        let tenant = if r.tenant.is_empty() && caller.role == Role::Admin {
            None
        } else {
            Some(
                caller
                    .tenant(&r.tenant, Access::Tokens)
                    .map_err(auth_status)?,
            )
        };
        let limit = if r.limit == 0 { 1000 } else { r.limit as usize };
        let entries = self
            .node()
            .audit
            .list(tenant.as_deref(), r.since_ms, limit)
            .await
            .map_err(auth_status)?;
        Ok(Response::new(pb::ListAuditResponse {
            entries: entries
                .into_iter()
                .map(|e| pb::AuditEntry {
                    at_ms: e.at_ms,
                    token: e.token,
                    caller_tenant: e.caller_tenant,
                    role: e.role,
                    address: e.address,
                    action: e.action,
                    tenant: e.tenant,
                    outcome: e.outcome,
                    message: e.message,
                })
                .collect(),
        }))
    }

    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::Token>, Status> {
        let caller = caller(&request)?;
        let record = self
            .node()
            .tenancy
            .get_token(&caller.token_id)
            .await
            .map_err(auth_status)?
            .ok_or_else(|| Status::unauthenticated("the token is gone"))?;
        Ok(Response::new(token_pb(&record)))
    }
}
