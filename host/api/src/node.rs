//! What the API serves from: the owner's handle, the plugin registry, the
//! capture, the meta store (for captures and health), and the server's limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_auth::{Authenticator, Tenancy};
use sluice_capture::Capture;
use sluice_config::ServerLimits;
use sluice_meta::MetaStore;
use sluice_owner::{FeedView, Owner};
use sluice_registry::PluginRegistry;
use tokio::sync::Semaphore;

/// Largest gRPC message the server decodes: a changefeed file (128 KiB) or an
/// upload chunk (the CLI sends 1 MiB), with room to spare.
pub const MAX_GRPC_MESSAGE_BYTES: usize = 4 << 20;

/// How long a caught-up changefeed must see no new data to count as synced.
pub const SYNCED_QUIET_MS: u64 = 5_000;

/// Everything the gRPC services and the HTTP endpoints answer from.
pub struct Node {
    /// The owner (commands) and its snapshot (queries).
    pub owner: Owner,
    /// The meta store: the captures' registrations and the server's health.
    pub store: Arc<dyn MetaStore>,
    /// Uploaded plugins.
    pub registry: Arc<PluginRegistry>,
    /// The work this capture runs (its plugins' counters and directories).
    pub capture: Arc<Capture>,
    /// This capture's id.
    pub capture_id: String,
    /// The gRPC address.
    pub addr: SocketAddr,
    /// When the server started.
    pub started: Instant,
    /// When the server started, in ms since the Unix epoch.
    pub started_at_ms: u64,
    /// Bytes of uploads in flight, one permit a byte (`--max-uploads-mib`).
    pub uploads: Arc<Semaphore>,
    /// `--max-uploads-mib`.
    pub upload_budget_mib: u64,
    /// What a changefeed may ask for.
    pub limits: ServerLimits,
    /// How long a stopping processor may take (`--stop-timeout-ms`).
    pub stop_timeout: Duration,
    /// Tenant and token records.
    pub tenancy: Tenancy,
    /// Checks every request's token.
    pub auth: Arc<Authenticator>,
    /// Where changes made through the API are recorded.
    pub audit: sluice_auth::AuditLog,
    /// Whether `/metrics` and `/healthz` answer without a token
    /// (`--metrics-auth` off).
    pub open_metrics: bool,
    /// One quota check and change of a tenant's changefeeds at a time.
    pub feed_turns: TenantTurns,
    /// One quota check and upload of a tenant's plugins at a time.
    pub plugin_turns: TenantTurns,
}

/// Per-tenant turns: what checks a tenant's quota and then spends it holds
/// its tenant's turn, so two requests of one tenant cannot both pass a
/// check that only one of them fits; other tenants never wait for it.
#[derive(Default)]
pub struct TenantTurns(
    std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
);

impl TenantTurns {
    /// Waits for `tenant`'s turn; it ends when the guard is dropped.
    pub async fn enter(&self, tenant: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(tenant.to_string())
            .or_default()
            .clone();
        turn.lock_owned().await
    }
}

impl Node {
    /// Whether the server can do its work: the meta store answers.
    pub async fn health(&self) -> (bool, String) {
        match self.store.revision().await {
            Ok(rev) => (
                true,
                format!(
                    "meta store at revision {}, up {} s",
                    rev.get(),
                    self.started.elapsed().as_secs()
                ),
            ),
            Err(e) => (false, format!("meta store unavailable: {e}")),
        }
    }

    /// Where the sink of `v` keeps its data, if it was granted a directory:
    /// the path on this capture, or, for work another capture runs, the path
    /// under that capture's data dir.
    pub fn sink_data_dir(&self, v: &FeedView) -> Option<PathBuf> {
        let info = &v.changefeed.info;
        if !info.config.sink.capabilities.data_dir.is_granted() {
            return None;
        }
        let elsewhere = v
            .progress
            .as_ref()
            .and_then(|p| p.capture.as_deref())
            .is_some_and(|c| c != self.capture_id);
        Some(if elsewhere {
            sluice_capture::plugin_data_dir(std::path::Path::new(""), &info.id, "sink")
        } else {
            self.capture.plugin_data_dir(&info.id, "sink")
        })
    }

    /// What `tenant` holds now: its changefeeds (not removed) with what
    /// they hold (plugin memory, buffers, database connections), its
    /// uploaded plugins.
    pub async fn tenant_usage(
        &self,
        tenant: &str,
    ) -> Result<sluice_auth::TenantUsage, sluice_registry::RegistryError> {
        let feeds = self.owner.snapshot().list(tenant);
        let plugins = self.registry.list(tenant).await?;
        let held = sluice_auth::TenantUsage {
            plugin_bytes: plugins.iter().map(|p| p.size_bytes).sum(),
            plugin_versions: plugins.len() as u64,
            ..sluice_auth::TenantUsage::default()
        };
        Ok(feeds.iter().fold(held, |sum, v| {
            sum.plus(&crate::tenants::footprint(&v.changefeed.info))
        }))
    }

    /// How long an admin job waits for stopped work to be taken in.
    pub fn settle_within(&self) -> Duration {
        self.stop_timeout + Duration::from_secs(2)
    }
}
