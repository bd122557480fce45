//! The gRPC admin API (`sluice.v1`): changefeeds, cluster, plugins. Commands go
//! to the owner; queries read its snapshot.

use std::sync::Arc;

use crate::v1 as pb;
use crate::v1::changefeed_service_server::{ChangefeedService, ChangefeedServiceServer};
use crate::v1::cluster_service_server::{ClusterService, ClusterServiceServer};
use crate::v1::plugin_service_server::{PluginService, PluginServiceServer};
use crate::v1::tenant_service_server::TenantServiceServer;
use sluice_capture::CaptureInfo;
use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::keys::{self, MetaKey};
use sluice_owner::{
    ChangefeedId, ChangefeedInfo, Clock, FeedState, FeedView, PluginId, SystemClock,
};
use sluice_registry::{PluginRecord, RegistryError};
use sluice_runtime::PluginKind;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::caller;
use crate::error::{auth_status, registry_status, status};
use crate::node::{MAX_GRPC_MESSAGE_BYTES, Node, SYNCED_QUIET_MS};
use crate::tenants::{feed_footprint, feed_grants, footprint};
use sluice_auth::{Access, Caller, TenantUsage};

/// The gRPC services of the admin API.
#[derive(Clone)]
pub struct Api {
    node: Arc<Node>,
}

impl Api {
    /// Refuses a table for the plugin in `role` of `running` that passes
    /// the server's limits; else the changefeed's config with it in place.
    fn within_limits(
        &self,
        running: &sluice_config::ChangefeedConfig<PluginId>,
        role: sluice_owner::PluginRole,
        table: &sluice_config::PluginConfig,
    ) -> Result<sluice_config::ChangefeedConfig<PluginId>, Status> {
        let mut probe = running.clone();
        match role {
            sluice_owner::PluginRole::Sink => probe.sink = table.clone(),
            sluice_owner::PluginRole::Filter(i) => probe.filters[i] = table.clone(),
        }
        self.node
            .limits
            .check(&probe)
            .map_err(Status::invalid_argument)?;
        Ok(probe)
    }

    /// The services, answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }

    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// The changefeeds a listing naming `tenant` shows `caller`: that
    /// tenant's, or for an empty name every tenant the caller may see.
    fn visible(&self, caller: &Caller, tenant: &str) -> Result<Vec<FeedView>, Status> {
        let scope = caller.scope(tenant).map_err(auth_status)?;
        Ok(self
            .node
            .owner
            .snapshot()
            .list(scope.as_deref().unwrap_or("")))
    }

    /// After an admin job: waits, reading the owner's snapshot, until the
    /// changefeed's old work (if the job stopped or replaced it) has ended and
    /// been taken in, so that the answer shows where it stopped. Holds nothing
    /// meanwhile (a struggling sink's stop must not stall other requests);
    /// bounded by the stop timeout.
    async fn settle(&self, id: &ChangefeedId) -> Result<FeedView, Status> {
        self.node
            .owner
            .settle(id, self.node.settle_within())
            .await
            .map_err(status)
    }

    /// `sluice.v1.ChangefeedService`.
    pub fn changefeeds(&self) -> ChangefeedServiceServer<Api> {
        ChangefeedServiceServer::new(self.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }
    /// `sluice.v1.ClusterService`.
    pub fn cluster(&self) -> ClusterServiceServer<Api> {
        ClusterServiceServer::new(self.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }
    /// `sluice.v1.TenantService`.
    pub fn tenants(&self) -> TenantServiceServer<Api> {
        TenantServiceServer::new(self.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }
    /// `sluice.v1.PluginService`.
    pub fn plugins(&self) -> PluginServiceServer<Api> {
        // Chunks are small; the whole upload is bounded by the registry's limit.
        PluginServiceServer::new(self.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }
}

/// Checks a changefeed file (pure: no plugin is loaded here) and turns it into
/// a description; the owner checks the plugins.
fn describe(
    node: &Node,
    id: &ChangefeedId,
    text: &str,
    start_ts: CommitTs,
    target_ts: Option<CommitTs>,
) -> Result<ChangefeedInfo, Status> {
    let config = sluice_config::ChangefeedConfig::parse(text)
        .map_err(|e| Status::invalid_argument(format!("invalid changefeed file: {e}")))?;
    let mut info = ChangefeedInfo::new(id.clone(), config, start_ts);
    // Shown back by queries: without passwords.
    info.spec = Some(sluice_config::redact_secrets(text));
    info.target_ts = target_ts;
    info.validate()
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    node.limits
        .check(&info.config)
        .map_err(Status::invalid_argument)?;
    Ok(info)
}

/// Fill an unset memory quota of `plugin` with what its uploaded component
/// declares it needs (the registry keeps it from the upload), so that the
/// quota stored, charged to the tenant and given to the instances is one.
async fn resolve_memory(
    node: &Node,
    tenant: &str,
    plugin: &mut sluice_config::PluginConfig<PluginId>,
) -> Result<(), Status> {
    if plugin.limits.memory.is_some() {
        return Ok(());
    }
    let declared = node
        .registry
        .get(tenant, &plugin.plugin)
        .await
        .map_err(registry_status)?
        .and_then(|r| r.declared_memory);
    plugin.limits.resolve_memory(declared);
    Ok(())
}

/// [`resolve_memory`] of every plugin of a changefeed.
async fn resolve_feed_memory(node: &Node, info: &mut ChangefeedInfo) -> Result<(), Status> {
    let tenant = info.id.tenant().to_string();
    for plugin in info.config.plugins_mut() {
        resolve_memory(node, &tenant, plugin).await?;
    }
    Ok(())
}

/// The changefeed a request names, in the tenant `caller` may `access`
/// (its own when the request names none).
fn changefeed_id(
    caller: &Caller,
    r: Option<&pb::ChangefeedRef>,
    access: Access,
) -> Result<ChangefeedId, Status> {
    let r = r.ok_or_else(|| Status::invalid_argument("the request names no changefeed (id)"))?;
    let tenant = caller.tenant(&r.tenant, access).map_err(auth_status)?;
    ChangefeedId::new(tenant, &r.name).map_err(|e| Status::invalid_argument(e.to_string()))
}

/// The plugin a request names, in the tenant `caller` may `access`.
fn plugin_id(
    caller: &Caller,
    r: Option<&pb::PluginRef>,
    access: Access,
) -> Result<(String, PluginId), Status> {
    let r = r.ok_or_else(|| Status::invalid_argument("the request names no plugin (id)"))?;
    let tenant = caller.tenant(&r.tenant, access).map_err(auth_status)?;
    let id =
        PluginId::new(&r.name, &r.version).map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((tenant, id))
}

/// How records (swaps, shadows) name who asked: the tenant, the token and
/// the caller's address.
fn asked_by<T>(request: &Request<T>, caller: &Caller, tenant: &str) -> String {
    format!("tenant {tenant} token {}{}", caller.token_id, peer(request))
}

/// Refuses a ts ahead of this server's clock (TiCDC refuses one past PD's).
fn not_future(what: &'static str, ts: CommitTs) -> Result<(), Status> {
    sluice_owner::check_not_future(what, ts, SystemClock.now_ms())
        .map_err(|e| Status::invalid_argument(e.to_string()))
}

fn ts(v: u64) -> Option<CommitTs> {
    (v > 0).then_some(CommitTs::new(v))
}

/// A changefeed state as its protobuf enum.
pub fn state_pb(s: FeedState) -> pb::FeedState {
    match s {
        FeedState::Normal => pb::FeedState::Normal,
        FeedState::Warning => pb::FeedState::Warning,
        FeedState::Pending => pb::FeedState::Pending,
        FeedState::Failed => pb::FeedState::Failed,
        FeedState::Stopped => pb::FeedState::Stopped,
        FeedState::Finished => pb::FeedState::Finished,
        FeedState::Removed => pb::FeedState::Removed,
    }
}

fn id_pb(id: &ChangefeedId) -> pb::ChangefeedRef {
    pb::ChangefeedRef {
        tenant: id.tenant().to_string(),
        name: id.name().to_string(),
    }
}

/// A changefeed as the API shows it: its info, state, positions and errors.
pub fn changefeed_pb(v: &FeedView) -> pb::Changefeed {
    let info = &v.changefeed.info;
    pb::Changefeed {
        id: Some(id_pb(&info.id)),
        state: state_pb(info.state).into(),
        config_toml: info.spec.clone().unwrap_or_default(),
        start_ts: info.start_ts.get(),
        target_ts: info.target_ts.map_or(0, CommitTs::get),
        checkpoint_ts: v.changefeed.checkpoint().get(),
        epoch: info.epoch.0,
        created_at_ms: info.created_at_ms,
        failure: info
            .failure
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        sink: info.config.sink.plugin.to_string(),
        filters: info
            .config
            .filters
            .iter()
            .map(|f| f.plugin.to_string())
            .collect(),
        swaps: info.swaps.iter().map(swap_pb).collect(),
        shadow: info.shadow.as_ref().map(shadow_record_pb),
    }
}

/// A shadow record as the API shows it.
fn shadow_record_pb(s: &sluice_owner::ShadowRecord) -> pb::ShadowRecord {
    pb::ShadowRecord {
        seq: s.seq,
        role: s.role.clone(),
        live: s.live.to_string(),
        candidate: s.candidate.plugin.to_string(),
        by: s.by.clone(),
        at_ms: s.at_ms,
        state: s.state.as_str().to_string(),
        reason: s.reason.clone().unwrap_or_default(),
        ended_at_ms: s.ended_at_ms.unwrap_or(0),
        max_lag_ms: s.max_lag_ms,
        max_queued_bytes: s.max_queued_bytes,
    }
}

/// What the shadow of `v` did, from the capture's last report of it.
pub fn shadow_status_pb(v: &FeedView) -> pb::ShadowStatus {
    let info = &v.changefeed.info;
    let record = info.shadow.as_ref();
    let report = v
        .shadow
        .clone()
        .filter(|r| record.is_some_and(|s| s.seq == r.seq))
        .unwrap_or_default();
    let latency = |l: &sluice_owner::LatencyReport| pb::CallLatency {
        calls: l.calls,
        mean_us: l.mean_us,
        p50_us: l.p50_us,
        p99_us: l.p99_us,
        max_us: l.max_us,
    };
    pb::ShadowStatus {
        id: Some(id_pb(&info.id)),
        shadow: record.map(shadow_record_pb),
        batches: report.batches,
        rows_compared: report.rows_compared,
        rows_differing: report.rows_differing,
        differences: report
            .differences
            .iter()
            .map(|d| pb::ShadowDifference {
                table: d.table.clone(),
                key: d.key.clone(),
                column: d.column.clone(),
                live: d.live.clone(),
                candidate: d.candidate.clone(),
            })
            .collect(),
        errors: report.errors,
        last_error: report.last_error.clone().unwrap_or_default(),
        live: Some(latency(&report.live_latency)),
        candidate: Some(latency(&report.candidate_latency)),
        rows_written: report.rows_written,
        flushes: report.flushes,
        lag_ms: report.lag_ms,
        dropped: report
            .dropped
            .clone()
            .or_else(|| {
                record
                    .filter(|s| s.state == sluice_owner::ShadowState::Dropped)
                    .and_then(|s| s.reason.clone())
            })
            .unwrap_or_default(),
    }
}

/// A swap record as the API shows it.
fn swap_pb(s: &sluice_owner::SwapRecord) -> pb::SwapRecord {
    pb::SwapRecord {
        seq: s.seq,
        from: s.from.plugin.to_string(),
        to: s.to.plugin.to_string(),
        by: s.by.clone(),
        at_ms: s.at_ms,
        state: s.state.as_str().to_string(),
        barrier_ts: s.barrier_ts.map_or(0, |b| b.get()),
        pause_ms: s.pause_ms.unwrap_or(0),
        pause_us: s.pause_us.unwrap_or(0),
        reason: s.reason.clone().unwrap_or_default(),
        ended_at_ms: s.ended_at_ms.unwrap_or(0),
        role: s.role.clone(),
    }
}

/// Which plugin of `config` a request names: the sink (`filter` empty), or a
/// filter by position or name.
fn role_of(
    config: &sluice_config::ChangefeedConfig<PluginId>,
    filter: &str,
) -> Result<sluice_owner::PluginRole, Status> {
    if filter.is_empty() {
        return Ok(sluice_owner::PluginRole::Sink);
    }
    sluice_owner::PluginRole::filter_named(&config.filters, filter)
        .map_err(Status::invalid_argument)
}

/// A plugin table a request gives: `running` with the plugin changed to
/// `plugin` when `table_toml` is empty; else the table (`[key]` or its
/// keys), whose `plugin` must agree with `plugin` when both are given.
fn plugin_table(
    running: &sluice_config::PluginConfig,
    plugin: &str,
    table_toml: &str,
    field: &str,
    key: &str,
) -> Result<sluice_config::PluginConfig, Status> {
    let invalid = |m: String| Status::invalid_argument(m);
    let to = if table_toml.trim().is_empty() {
        let mut to = running.clone();
        to.plugin = plugin
            .parse()
            .map_err(|e| invalid(format!("plugin: {e}")))?;
        to
    } else {
        let mut table: toml::Table = table_toml
            .parse()
            .map_err(|e| invalid(format!("{field}: {e}")))?;
        for outer in ["sink", "filter"] {
            if let Some(toml::Value::Table(inner)) = table.remove(outer) {
                table = inner;
            }
        }
        if !plugin.is_empty() {
            match table.get("plugin").and_then(toml::Value::as_str) {
                Some(p) if p != plugin => {
                    return Err(invalid(format!(
                        "{field} names plugin `{p}` and the request `{plugin}`; name one"
                    )));
                }
                _ => {
                    table.insert("plugin".into(), toml::Value::String(plugin.to_string()));
                }
            }
        }
        toml::Value::Table(table)
            .try_into::<sluice_config::PluginConfig>()
            .map_err(|e| invalid(format!("{field}: {e}")))?
    };
    to.validate(key, sluice_config::Mode::Server)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(to)
}

/// A probation from a request's optional numbers, defaults for the rest.
fn probation_of(
    ms: Option<u64>,
    flushes: Option<u64>,
    retries: Option<u32>,
) -> Result<sluice_owner::ProbationPolicy, Status> {
    let defaults = sluice_owner::ProbationPolicy::default();
    let probation = sluice_owner::ProbationPolicy {
        window_ms: ms.unwrap_or(defaults.window_ms),
        flushes: flushes.unwrap_or(defaults.flushes),
        max_retries: retries.unwrap_or(defaults.max_retries),
    };
    probation.validate().map_err(Status::invalid_argument)?;
    Ok(probation)
}

/// The swap a request asks for, checked as far as can be without the owner:
/// which plugin, its new table (the running one with the plugin changed, or
/// the one given), and the probation's numbers.
fn swap_ask(
    config: &sluice_config::ChangefeedConfig<PluginId>,
    r: &pb::SwapSinkRequest,
    by: String,
) -> Result<sluice_owner::SwapAsk, Status> {
    let role = role_of(config, &r.filter)?;
    let running = match role {
        sluice_owner::PluginRole::Sink => &config.sink,
        sluice_owner::PluginRole::Filter(i) => &config.filters[i],
    };
    let to = plugin_table(running, &r.plugin, &r.sink_toml, "sink_toml", &role.key())?;
    let probation = probation_of(r.probation_ms, r.probation_flushes, r.probation_retries)?;
    Ok(sluice_owner::SwapAsk {
        role,
        to,
        probation,
        by,
        expect: Some(running.plugin.clone()),
        promotes: None,
    })
}

/// ` from ADDRESS` of the request's peer, for a record's `by`; empty when
/// unknown.
fn peer<T>(request: &Request<T>) -> String {
    request
        .remote_addr()
        .map(|a| format!(" from {a}"))
        .unwrap_or_default()
}

/// Wall-clock lag of a ts behind now, in milliseconds.
pub(crate) fn lag_ms(ts: u64, now_ms: u64) -> u64 {
    if ts == 0 {
        return 0;
    }
    now_ms.saturating_sub(CommitTs::new(ts).physical_millis())
}

/// The status of `v`; `sink_data_dir` is where its sink keeps its data.
pub fn status_pb(v: &FeedView, sink_data_dir: Option<&std::path::Path>) -> pb::ChangefeedStatus {
    let info = &v.changefeed.info;
    let now = SystemClock.now_ms();
    let checkpoint = v.changefeed.checkpoint().get();
    let resolved = v.resolved_ts.get();
    let counters = v.counters();
    pb::ChangefeedStatus {
        id: Some(id_pb(&info.id)),
        state: state_pb(info.state).into(),
        checkpoint_ts: checkpoint,
        resolved_ts: resolved,
        checkpoint_lag_ms: lag_ms(checkpoint, now),
        resolved_lag_ms: lag_ms(resolved, now),
        epoch: info.epoch.0,
        last_errors: info
            .errors
            .iter()
            .map(|e| pb::ErrorRecord {
                at_ms: e.at_ms,
                kind: e.kind.as_str().to_string(),
                message: e.message.clone(),
            })
            .collect(),
        last_warnings: info
            .warnings
            .iter()
            .map(|w| pb::ErrorRecord {
                at_ms: w.at_ms,
                kind: "warning".into(),
                message: w.message.clone(),
            })
            .collect(),
        rows_read: counters.rows_read,
        rows_written: counters.rows_written,
        retries: counters.retries,
        sink_data_dir: sink_data_dir
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        capture: v
            .progress
            .as_ref()
            .and_then(|p| p.capture.clone())
            .unwrap_or_default(),
        failure: info
            .failure
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        source_time_ms: v.progress.as_ref().map_or(0, |p| p.source_time_ms),
        source_events: counters.source_events,
        source_skipped_statements: counters.source_skipped_statements,
        validator: v
            .progress
            .as_ref()
            .and_then(|p| p.validator.as_ref())
            .map(|r| pb::ValidatorStatus {
                mode: r.mode.clone(),
                matched: r.matched,
                mismatched: r.mismatched,
                pending: r.pending,
                skipped: r.skipped,
                errors: r.errors,
                last_error: r.last_error.clone().unwrap_or_default(),
                mismatches: r.mismatches.clone(),
            }),
        redo: v
            .progress
            .as_ref()
            .and_then(|p| p.redo)
            .map(|r| pb::RedoStatus {
                resolved_ts: r.resolved_ts,
                resolved_lag_ms: lag_ms(r.resolved_ts, now),
                checkpoint_ts: r.checkpoint_ts,
                bytes_written: r.bytes_written,
                flushes: r.flushes,
                flush_ms: r.flush_ms,
                busy_ms: r.busy_ms,
                waiting_events: r.waiting_events,
                failing: r.failing > 0,
            }),
    }
}

/// TiCDC's synced status: synced once everything the source resolved is
/// downstream and nothing new arrived for a while.
pub fn synced_pb(v: &FeedView, quiet_ms: u64) -> pb::SyncedStatus {
    let now = SystemClock.now_ms();
    let checkpoint = v.changefeed.checkpoint().get();
    let resolved = v.resolved_ts.get();
    let idle_ms = now.saturating_sub(v.last_advance_ms);
    let caught_up = checkpoint >= resolved;
    let synced = caught_up && idle_ms >= quiet_ms;
    let info = if synced {
        "everything upstream up to the resolved ts is downstream".to_string()
    } else if !caught_up {
        format!("the checkpoint {checkpoint} is behind the resolved ts {resolved}; wait")
    } else {
        format!(
            "caught up, but the checkpoint moved {idle_ms} ms ago; synced after {quiet_ms} ms without new data"
        )
    };
    pb::SyncedStatus {
        synced,
        checkpoint_ts: checkpoint,
        puller_resolved_ts: resolved,
        last_synced_ts: checkpoint,
        now_ts: CommitTs::compose(now, 0).get(),
        info,
    }
}

fn world_pb(world: &str) -> pb::PluginWorld {
    match world {
        "sink" => pb::PluginWorld::Sink,
        "filter" => pb::PluginWorld::Filter,
        _ => pb::PluginWorld::Unspecified,
    }
}

fn plugin_pb(r: &PluginRecord, used_by: Vec<String>) -> pb::Plugin {
    pb::Plugin {
        id: Some(pb::PluginRef {
            tenant: r.tenant.clone(),
            name: r.name.clone(),
            version: r.plugin_version.clone(),
        }),
        world: world_pb(&r.world).into(),
        sha256: r.sha256.clone(),
        size_bytes: r.size_bytes,
        uploaded_at_ms: r.uploaded_at_ms,
        used_by: used_by
            .iter()
            .filter_map(|u| u.split_once('/'))
            .map(|(tenant, name)| pb::ChangefeedRef {
                tenant: tenant.into(),
                name: name.into(),
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl ChangefeedService for Api {
    async fn create_changefeed(
        &self,
        request: Request<pb::CreateChangefeedRequest>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let caller = caller(&request)?;
        let r = request.into_inner();
        let id = changefeed_id(&caller, r.id.as_ref(), Access::Write)?;
        let start_ts = CommitTs::new(r.start_ts);
        not_future("start-ts", start_ts)?;
        let mut info = describe(&self.node, &id, &r.config_toml, start_ts, ts(r.target_ts))?;
        resolve_feed_memory(&self.node, &mut info).await?;
        let _turn = self.node.feed_turns.enter(id.tenant()).await;
        self.admit(
            id.tenant(),
            &TenantUsage::default(),
            &footprint(&info),
            &feed_grants(&info.config),
        )
        .await?;
        let view = self.node.owner.create(info).await.map_err(status)?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn get_changefeed(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Read)?;
        let view = self.node.owner.snapshot().get(&id).map_err(status)?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn list_changefeeds(
        &self,
        request: Request<pb::ListChangefeedsRequest>,
    ) -> Result<Response<pb::ListChangefeedsResponse>, Status> {
        let views = self.visible(&caller(&request)?, &request.get_ref().tenant)?;
        Ok(Response::new(pb::ListChangefeedsResponse {
            changefeeds: views.iter().map(changefeed_pb).collect(),
        }))
    }

    async fn update_changefeed(
        &self,
        request: Request<pb::UpdateChangefeedRequest>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let caller = caller(&request)?;
        let r = request.into_inner();
        let id = changefeed_id(&caller, r.id.as_ref(), Access::Write)?;
        // The start ts never changes; the target ts stays unless the request sets it.
        let current = self.node.owner.snapshot().get(&id).map_err(status)?;
        let (start_ts, target_ts) = (
            current.changefeed.info.start_ts,
            current.changefeed.info.target_ts,
        );
        let target_ts = match r.target_ts {
            None => target_ts,
            Some(t) => ts(t),
        };
        let mut info = describe(&self.node, &id, &r.config_toml, start_ts, target_ts)?;
        resolve_feed_memory(&self.node, &mut info).await?;
        let _turn = self.node.feed_turns.enter(id.tenant()).await;
        self.admit(
            id.tenant(),
            &footprint(&current.changefeed.info),
            &footprint(&info),
            &feed_grants(&info.config),
        )
        .await?;
        self.node.owner.update(info).await.map_err(status)?;
        let view = self.settle(&id).await?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn swap_sink(
        &self,
        request: Request<pb::SwapSinkRequest>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let who = caller(&request)?;
        let id = changefeed_id(&who, request.get_ref().id.as_ref(), Access::Write)?;
        let by = asked_by(&request, &who, id.tenant());
        let r = request.into_inner();
        let current = self.node.owner.snapshot().get(&id).map_err(status)?;
        let running = &current.changefeed.info.config;
        let mut ask = swap_ask(running, &r, by)?;
        resolve_memory(&self.node, id.tenant(), &mut ask.to).await?;
        let swapped = self.within_limits(running, ask.role, &ask.to)?;
        let _turn = self.node.feed_turns.enter(id.tenant()).await;
        let info = &current.changefeed.info;
        let shadow = info
            .running_shadow()
            .map(|s| (&s.candidate, s.max_queued_bytes));
        self.admit(
            id.tenant(),
            &footprint(info),
            &feed_footprint(&swapped, shadow),
            &ask.to.capabilities.hosts(&ask.role.key()),
        )
        .await?;
        let view = self.node.owner.swap(&id, ask).await.map_err(status)?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn start_shadow(
        &self,
        request: Request<pb::StartShadowRequest>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let who = caller(&request)?;
        let id = changefeed_id(&who, request.get_ref().id.as_ref(), Access::Write)?;
        let by = asked_by(&request, &who, id.tenant());
        let r = request.into_inner();
        let current = self.node.owner.snapshot().get(&id).map_err(status)?;
        let running = &current.changefeed.info.config;
        let role = role_of(running, &r.filter)?;
        let live = match role {
            sluice_owner::PluginRole::Sink => &running.sink,
            sluice_owner::PluginRole::Filter(i) => &running.filters[i],
        };
        let mut candidate =
            plugin_table(live, &r.plugin, &r.table_toml, "table_toml", &role.key())?;
        resolve_memory(&self.node, id.tenant(), &mut candidate).await?;
        self.within_limits(running, role, &candidate)?;
        let ask = sluice_owner::ShadowAsk {
            role,
            candidate,
            max_lag_ms: r.max_lag_ms.unwrap_or(30_000),
            max_queued_bytes: r.max_queued_bytes.unwrap_or(64 << 20),
            by,
            expect: Some(live.plugin.clone()),
        };
        ask.validate().map_err(Status::invalid_argument)?;
        let _turn = self.node.feed_turns.enter(id.tenant()).await;
        let info = &current.changefeed.info;
        self.admit(
            id.tenant(),
            &footprint(info),
            &feed_footprint(&info.config, Some((&ask.candidate, ask.max_queued_bytes))),
            &ask.candidate.capabilities.hosts("shadow"),
        )
        .await?;
        let view = self
            .node
            .owner
            .shadow_start(&id, ask)
            .await
            .map_err(status)?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn get_shadow(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::ShadowStatus>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Read)?;
        let view = self.node.owner.snapshot().get(&id).map_err(status)?;
        Ok(Response::new(shadow_status_pb(&view)))
    }

    async fn stop_shadow(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Write)?;
        let view = self.node.owner.shadow_stop(&id).await.map_err(status)?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn promote_shadow(
        &self,
        request: Request<pb::PromoteShadowRequest>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let who = caller(&request)?;
        let id = changefeed_id(&who, request.get_ref().id.as_ref(), Access::Write)?;
        let by = format!("{} (promote)", asked_by(&request, &who, id.tenant()));
        let r = request.into_inner();
        let probation = probation_of(r.probation_ms, r.probation_flushes, r.probation_retries)?;
        let view = self
            .node
            .owner
            .promote(&id, probation, by)
            .await
            .map_err(status)?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn pause_changefeed(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Write)?;
        self.node.owner.pause(&id).await.map_err(status)?;
        let view = self.settle(&id).await?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn resume_changefeed(
        &self,
        request: Request<pb::ResumeChangefeedRequest>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let caller = caller(&request)?;
        let r = request.into_inner();
        let id = changefeed_id(&caller, r.id.as_ref(), Access::Write)?;
        if let Some(ts) = r.overwrite_checkpoint_ts {
            not_future("overwrite-checkpoint-ts", CommitTs::new(ts))?;
        }
        let overwrite = r.overwrite_checkpoint_ts.map(CheckpointTs::new);
        self.node
            .owner
            .resume(&id, overwrite)
            .await
            .map_err(status)?;
        let view = self.settle(&id).await?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn remove_changefeed(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::Changefeed>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Write)?;
        self.node.owner.remove(&id).await.map_err(status)?;
        let view = self.settle(&id).await?;
        Ok(Response::new(changefeed_pb(&view)))
    }

    async fn get_status(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::ChangefeedStatus>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Read)?;
        let view = self.node.owner.snapshot().get(&id).map_err(status)?;
        let dir = self.node.sink_data_dir(&view);
        Ok(Response::new(status_pb(&view, dir.as_deref())))
    }

    async fn get_synced_status(
        &self,
        request: Request<pb::ChangefeedRef>,
    ) -> Result<Response<pb::SyncedStatus>, Status> {
        let id = changefeed_id(&caller(&request)?, Some(request.get_ref()), Access::Read)?;
        let view = self.node.owner.snapshot().get(&id).map_err(status)?;
        Ok(Response::new(synced_pb(&view, SYNCED_QUIET_MS)))
    }
}

/// Every live capture, the owner marked, with the changefeeds assigned to it
/// of `tenant` (of every tenant for `None`: an admin's view; a tenant sees no
/// count of the others').
pub async fn captures(node: &Node, tenant: Option<&str>) -> Result<Vec<pb::Capture>, Status> {
    let store = &node.store;
    let listing = store
        .list(&keys::capture_prefix())
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let owner = sluice_owner::election::current_owner(store.as_ref())
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?
        .map(|(c, _)| c.id);
    // What each capture runs.
    let loads = sluice_owner::capture_loads(store.as_ref(), tenant)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let drained = sluice_owner::drained(store.as_ref())
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut out = Vec::new();
    for kv in &listing.kvs {
        if !matches!(MetaKey::parse(&kv.key), Some(MetaKey::Capture { .. })) {
            continue;
        }
        let c: CaptureInfo =
            keys::decode(&kv.key, &kv.value).map_err(|e| Status::internal(e.to_string()))?;
        out.push(pb::Capture {
            is_owner: owner.as_deref() == Some(c.id.as_str()),
            changefeeds: loads
                .get(&c.id)
                .map_or(0, |l| u32::try_from(l.running).unwrap_or(u32::MAX)),
            tables: loads
                .get(&c.id)
                .map_or(0, |l| u32::try_from(l.tables).unwrap_or(u32::MAX)),
            rows_per_s: loads.get(&c.id).map_or(0, |l| l.rows_per_s),
            draining: drained.contains(&c.id),
            id: c.id,
            address: c.address,
            version: c.sluice_version,
            started_at_ms: c.started_at_ms,
        });
    }
    Ok(out)
}

impl Api {
    /// The changefeed a move request names, once the caller may move work
    /// (an admin) and the capture's id is well formed; not found unless this
    /// owner knows the changefeed.
    fn move_of<T>(
        &self,
        request: &Request<T>,
        id: Option<&pb::ChangefeedRef>,
        capture: &str,
    ) -> Result<ChangefeedId, Status> {
        let caller = caller(request)?;
        caller.check("*", Access::Server).map_err(auth_status)?;
        let id = changefeed_id(&caller, id, Access::Write)?;
        sluice_meta::keys::validate_name(sluice_meta::keys::NameKind::Capture, capture)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.node.owner.snapshot().get(&id).map_err(status)?;
        Ok(id)
    }
}

fn table_move_pb(m: sluice_owner::tables::TableMove) -> pb::TableMove {
    pb::TableMove {
        id: Some(id_pb(&m.changefeed)),
        table: m.table,
        from_capture: m.from,
        to_capture: m.to,
    }
}

fn move_pb(m: &sluice_owner::relocate::Move) -> pb::ChangefeedMove {
    pb::ChangefeedMove {
        id: Some(pb::ChangefeedRef {
            tenant: m.changefeed.tenant().to_string(),
            name: m.changefeed.name().to_string(),
        }),
        from_capture: m.from.clone(),
        to_capture: m.to.clone(),
    }
}

fn move_status(e: sluice_owner::relocate::MoveError) -> Status {
    use sluice_owner::relocate::MoveError;
    match e {
        MoveError::Store(e) => Status::unavailable(e.to_string()),
        MoveError::NoCapture(_) => Status::not_found(e.to_string()),
        MoveError::Draining(_) | MoveError::NotRunning(_) => {
            Status::failed_precondition(e.to_string())
        }
        MoveError::BadTable(_) => Status::invalid_argument(e.to_string()),
    }
}

#[tonic::async_trait]
impl ClusterService for Api {
    async fn drain_capture(
        &self,
        request: Request<pb::DrainCaptureRequest>,
    ) -> Result<Response<pb::DrainCaptureResponse>, Status> {
        caller(&request)?
            .check("*", Access::Server)
            .map_err(auth_status)?;
        let capture = &request.get_ref().capture_id;
        let store = &self.node.store;
        let unavailable = |e: sluice_meta::MetaError| Status::unavailable(e.to_string());
        let key = keys::drain(capture).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if store
            .get(&keys::capture(capture).map_err(|e| Status::invalid_argument(e.to_string()))?)
            .await
            .map_err(unavailable)?
            .is_none()
        {
            return Err(Status::not_found(format!(
                "no live capture {capture}; `sluice cli capture list` shows them"
            )));
        }
        if request.get_ref().cancel {
            store.delete(&key).await.map_err(unavailable)?;
        } else {
            store
                .put(&key, b"{}".to_vec(), None)
                .await
                .map_err(unavailable)?;
        }
        let remaining = sluice_owner::capture_loads(store.as_ref(), None)
            .await
            .map_err(unavailable)?
            .get(capture)
            .map_or(0, |l| l.assigned);
        Ok(Response::new(pb::DrainCaptureResponse {
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        }))
    }

    async fn move_changefeed(
        &self,
        request: Request<pb::MoveChangefeedRequest>,
    ) -> Result<Response<pb::ChangefeedMove>, Status> {
        let r = request.get_ref();
        let id = self.move_of(&request, r.id.as_ref(), &r.capture_id)?;
        let moved =
            sluice_owner::relocate::request_move(self.node.store.as_ref(), &id, &r.capture_id)
                .await
                .map_err(move_status)?;
        Ok(Response::new(move_pb(&moved)))
    }

    async fn move_table(
        &self,
        request: Request<pb::MoveTableRequest>,
    ) -> Result<Response<pb::TableMove>, Status> {
        let r = request.get_ref();
        let id = self.move_of(&request, r.id.as_ref(), &r.capture_id)?;
        sluice_owner::tables::validate_table(&r.table).map_err(move_status)?;
        // A table the changefeed's filter leaves out is never read: moving it
        // would say something untrue (most likely a misspelt name).
        let view = self.node.owner.snapshot().get(&id).map_err(status)?;
        let (schema, table) = r.table.split_once('.').expect("validated");
        if !sluice_source::filter::TableFilter::new(&view.changefeed.info.config.filter)
            .allows_table(schema, table)
        {
            return Err(Status::invalid_argument(format!(
                "changefeed {id} does not replicate {}: its [filter] rules leave it out",
                r.table
            )));
        }
        let moved = sluice_owner::tables::request_table_move(
            self.node.store.as_ref(),
            &id,
            &r.table,
            &r.capture_id,
        )
        .await
        .map_err(move_status)?;
        Ok(Response::new(table_move_pb(moved)))
    }

    async fn rebalance_tables(
        &self,
        request: Request<pb::RebalanceTablesRequest>,
    ) -> Result<Response<pb::RebalanceTablesResponse>, Status> {
        let r = request.get_ref();
        let caller = caller(&request)?;
        caller.check("*", Access::Server).map_err(auth_status)?;
        let id = changefeed_id(&caller, r.id.as_ref(), Access::Write)?;
        let measure = match r.by.as_str() {
            "" | "tables" => sluice_owner::tables::Measure::Tables,
            "rows" => sluice_owner::tables::Measure::Rows,
            other => {
                return Err(Status::invalid_argument(format!(
                    "rebalance by {other:?}: by `tables` or `rows`"
                )));
            }
        };
        self.node.owner.snapshot().get(&id).map_err(status)?;
        let moves = sluice_owner::tables::rebalance_tables(self.node.store.as_ref(), &id, measure)
            .await
            .map_err(move_status)?;
        Ok(Response::new(pb::RebalanceTablesResponse {
            moves: moves.into_iter().map(table_move_pb).collect(),
        }))
    }

    async fn rebalance_changefeeds(
        &self,
        request: Request<pb::RebalanceChangefeedsRequest>,
    ) -> Result<Response<pb::RebalanceChangefeedsResponse>, Status> {
        caller(&request)?
            .check("*", Access::Server)
            .map_err(auth_status)?;
        let spread = match request.get_ref().by.as_str() {
            "" | "changefeeds" => sluice_owner::relocate::Spread::Changefeeds,
            "rows" => sluice_owner::relocate::Spread::Rows,
            other => {
                return Err(Status::invalid_argument(format!(
                    "rebalance by {:?}: by `changefeeds` or `rows`",
                    sluice_core::bounded_text(other, 64)
                )));
            }
        };
        let moves = sluice_owner::relocate::rebalance(self.node.store.as_ref(), spread)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(pb::RebalanceChangefeedsResponse {
            moves: moves.iter().map(move_pb).collect(),
        }))
    }

    async fn list_captures(
        &self,
        request: Request<pb::ListCapturesRequest>,
    ) -> Result<Response<pb::ListCapturesResponse>, Status> {
        // Any valid token may see where the cluster's captures are.
        let scope = caller(&request)?.scope("").map_err(auth_status)?;
        Ok(Response::new(pb::ListCapturesResponse {
            captures: captures(&self.node, scope.as_deref()).await?,
        }))
    }

    async fn list_processors(
        &self,
        request: Request<pb::ListProcessorsRequest>,
    ) -> Result<Response<pb::ListProcessorsResponse>, Status> {
        let r = request.get_ref();
        let views = self.visible(&caller(&request)?, &r.tenant)?;
        let running: std::collections::BTreeSet<ChangefeedId> = views
            .iter()
            .filter(|v| v.progress.is_some())
            .filter(|v| r.changefeed.is_empty() || v.changefeed.id().name() == r.changefeed)
            .map(|v| v.changefeed.id().clone())
            .collect();
        let store = &self.node.store;
        let unavailable = |e: sluice_meta::MetaError| Status::unavailable(e.to_string());
        let mut processors = Vec::new();
        // Each capture's part, as assigned, once its run claimed its task
        // position (it runs).
        for kv in store
            .list(&keys::assignments_prefix())
            .await
            .map_err(unavailable)?
            .kvs
        {
            let Some(MetaKey::Assignment {
                capture,
                tenant,
                changefeed,
            }) = MetaKey::parse(&kv.key)
            else {
                continue;
            };
            let Ok(id) = ChangefeedId::new(tenant, changefeed) else {
                continue;
            };
            let Ok(a) = keys::decode::<sluice_owner::Assignment>(&kv.key, &kv.value) else {
                continue;
            };
            if !running.contains(&id) || a.desired != sluice_owner::Desired::Run {
                continue;
            }
            let key = keys::task_position(id.tenant(), id.name(), &capture)
                .map_err(|e| Status::internal(e.to_string()))?;
            let Some(report) = store
                .get(&key)
                .await
                .map_err(unavailable)?
                .and_then(|kv| keys::decode::<sluice_owner::TaskReport>(&kv.key, &kv.value).ok())
                .filter(|t| t.changefeed_epoch == a.changefeed_epoch.0)
            else {
                continue;
            };
            let reads = !matches!(
                a.shipment,
                Some(sluice_owner::Shipment {
                    role: sluice_owner::ShipRole::Receives { .. },
                    ..
                })
            );
            processors.push(pb::Processor {
                changefeed: Some(id_pb(&id)),
                capture_id: capture,
                checkpoint_ts: report.checkpoint_ts,
                resolved_ts: report.resolved_ts,
                tables: match a.tables {
                    sluice_owner::Tables::Only(t) => t,
                    sluice_owner::Tables::All => Vec::new(),
                },
                reads,
            });
        }
        Ok(Response::new(pb::ListProcessorsResponse { processors }))
    }

    async fn get_owner(
        &self,
        request: Request<pb::GetOwnerRequest>,
    ) -> Result<Response<pb::Capture>, Status> {
        let scope = caller(&request)?.scope("").map_err(auth_status)?;
        captures(&self.node, scope.as_deref())
            .await?
            .into_iter()
            .find(|c| c.is_owner)
            .map(Response::new)
            .ok_or_else(|| Status::unavailable("no owner is elected; retry shortly"))
    }

    async fn health(
        &self,
        request: Request<pb::HealthRequest>,
    ) -> Result<Response<pb::HealthResponse>, Status> {
        caller(&request)?;
        let (healthy, detail) = self.node.health().await;
        Ok(Response::new(pb::HealthResponse { healthy, detail }))
    }
}

#[tonic::async_trait]
impl PluginService for Api {
    type RolloutPluginStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::RolloutEvent, Status>> + Send + 'static>,
    >;

    async fn rollout_plugin(
        &self,
        request: Request<pb::RolloutRequest>,
    ) -> Result<Response<Self::RolloutPluginStream>, Status> {
        let who = caller(&request)?;
        let tenant = who
            .tenant(&request.get_ref().tenant, Access::Write)
            .map_err(auth_status)?;
        let caller = format!(" token {}{}", who.token_id, peer(&request));
        let r = request.into_inner();
        let version = |field: &str, v: &str| -> Result<PluginId, Status> {
            v.parse()
                .map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
        };
        let plan = sluice_owner::RolloutPlan {
            by: format!("tenant {tenant}{caller}"),
            tenant,
            from: version("from", &r.from)?,
            to: version("to", &r.to)?,
            batch_size: (r.batch_size.max(1)) as usize,
            probation: probation_of(r.probation_ms, r.probation_flushes, r.probation_retries)?,
        };
        plan.validate().map_err(Status::invalid_argument)?;
        let owner = self.node.owner.clone();
        let (events, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let (steps, mut step_rx) = tokio::sync::mpsc::channel(16);
            let forward = {
                let events = events.clone();
                async move {
                    loop {
                        // Ends as soon as the caller goes away, which
                        // closes the steps and so stops the rollout.
                        let step: sluice_owner::RolloutStep = tokio::select! {
                            step = step_rx.recv() => match step {
                                Some(step) => step,
                                None => break,
                            },
                            () = events.closed() => break,
                        };
                        let event = pb::RolloutEvent {
                            changefeed: step.changefeed.to_string(),
                            role: step.role.to_string(),
                            state: step.state,
                            reason: step.reason,
                            seq: step.seq,
                            ..pb::RolloutEvent::default()
                        };
                        if events.send(Ok(event)).await.is_err() {
                            // The caller went away: no new swap starts.
                            break;
                        }
                    }
                }
            };
            let run = sluice_owner::rollout(&owner, plan, steps);
            let (summary, ()) = tokio::join!(run, forward);
            let last = pb::RolloutEvent {
                state: if summary.stopped {
                    "stopped"
                } else {
                    "finished"
                }
                .into(),
                swapped: summary.swapped,
                failed: summary.failed,
                skipped: summary.skipped,
                remaining: summary.remaining,
                ..pb::RolloutEvent::default()
            };
            let _ = events.send(Ok(last)).await;
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn upload_plugin(
        &self,
        request: Request<Streaming<pb::UploadPluginRequest>>,
    ) -> Result<Response<pb::Plugin>, Status> {
        let caller = caller(&request)?;
        let mut stream = request.into_inner();
        let limit = self.node.registry.max_bytes();
        let header = match stream.next().await {
            Some(Ok(pb::UploadPluginRequest {
                part: Some(pb::upload_plugin_request::Part::Header(h)),
            })) => h,
            Some(Err(e)) => return Err(e),
            _ => {
                return Err(Status::invalid_argument(
                    "the first message of an upload must be the header (id, world, sha256)",
                ));
            }
        };
        let (tenant, id) = plugin_id(&caller, header.id.as_ref(), Access::Write)?;
        self.node
            .tenancy
            .require(&tenant)
            .await
            .map_err(auth_status)?;
        let kind = match pb::PluginWorld::try_from(header.world) {
            Ok(pb::PluginWorld::Sink) => PluginKind::Sink,
            Ok(pb::PluginWorld::Filter) => PluginKind::Filter,
            _ => {
                return Err(Status::invalid_argument(
                    "the header names no world: say whether the plugin is a sink or a filter",
                ));
            }
        };
        let mut bytes = Vec::new();
        // Every byte held counts against the server-wide budget of uploads in
        // flight until this upload is done.
        let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
        while let Some(message) = stream.next().await {
            match message?.part {
                Some(pb::upload_plugin_request::Part::Chunk(chunk)) => {
                    if (bytes.len() + chunk.len()) as u64 > limit {
                        return Err(Status::resource_exhausted(format!(
                            "the plugin is over the upload limit of {limit} bytes; make it smaller (build with the plugin profile) or ask the operator to raise --max-plugin-mib"
                        )));
                    }
                    let permit = u32::try_from(chunk.len())
                        .ok()
                        .and_then(|n| self.node.uploads.clone().try_acquire_many_owned(n).ok())
                        .ok_or_else(|| {
                            Status::resource_exhausted(format!(
                                "the server holds its limit of {} MiB of uploads in flight; retry in a moment",
                                self.node.upload_budget_mib
                            ))
                        })?;
                    match &mut held {
                        Some(h) => h.merge(permit),
                        None => held = Some(permit),
                    }
                    bytes.extend_from_slice(&chunk);
                }
                _ => {
                    return Err(Status::invalid_argument(
                        "only the first message of an upload may be a header",
                    ));
                }
            }
        }
        if !header.sha256.is_empty() {
            let got = sluice_registry::hex_sha256(&bytes);
            if !got.eq_ignore_ascii_case(&header.sha256) {
                return Err(Status::invalid_argument(format!(
                    "the upload arrived with sha256 {got}, not {} as announced; upload again",
                    header.sha256
                )));
            }
        }
        let _turn = self.node.plugin_turns.enter(&tenant).await;
        // Uploading the same bytes again adds nothing.
        if self
            .node
            .registry
            .get(&tenant, &id)
            .await
            .map_err(registry_status)?
            .is_none()
        {
            let upload = TenantUsage {
                plugin_bytes: bytes.len() as u64,
                plugin_versions: 1,
                ..TenantUsage::default()
            };
            self.admit(&tenant, &TenantUsage::default(), &upload, &[])
                .await?;
        }
        let record = self
            .node
            .registry
            .upload(&tenant, &id, kind, &bytes)
            .await
            .map_err(registry_status)?;
        let used_by = self.node.owner.snapshot().users_of(&tenant, &id);
        Ok(Response::new(plugin_pb(&record, used_by)))
    }

    async fn list_plugins(
        &self,
        request: Request<pb::ListPluginsRequest>,
    ) -> Result<Response<pb::ListPluginsResponse>, Status> {
        let tenant = caller(&request)?
            .tenant(&request.get_ref().tenant, Access::Read)
            .map_err(auth_status)?;
        let records = self
            .node
            .registry
            .list(&tenant)
            .await
            .map_err(registry_status)?;
        let owner = self.node.owner.snapshot();
        let plugins = records
            .iter()
            .map(|r| {
                let used_by = PluginId::new(&r.name, &r.plugin_version)
                    .map(|id| owner.users_of(&tenant, &id))
                    .unwrap_or_default();
                plugin_pb(r, used_by)
            })
            .collect();
        Ok(Response::new(pb::ListPluginsResponse { plugins }))
    }

    async fn get_plugin(
        &self,
        request: Request<pb::PluginRef>,
    ) -> Result<Response<pb::Plugin>, Status> {
        let (tenant, id) = plugin_id(&caller(&request)?, Some(request.get_ref()), Access::Read)?;
        let record = self
            .node
            .registry
            .get(&tenant, &id)
            .await
            .map_err(registry_status)?
            .ok_or_else(|| {
                registry_status(RegistryError::NotFound {
                    tenant: tenant.clone(),
                    id: id.to_string(),
                })
            })?;
        let used_by = self.node.owner.snapshot().users_of(&tenant, &id);
        Ok(Response::new(plugin_pb(&record, used_by)))
    }

    async fn delete_plugin(
        &self,
        request: Request<pb::PluginRef>,
    ) -> Result<Response<pb::Plugin>, Status> {
        let (tenant, id) = plugin_id(&caller(&request)?, Some(request.get_ref()), Access::Write)?;
        let record = self
            .node
            .registry
            .get(&tenant, &id)
            .await
            .map_err(registry_status)?
            .ok_or_else(|| {
                registry_status(RegistryError::NotFound {
                    tenant: tenant.clone(),
                    id: id.to_string(),
                })
            })?;
        // The owner deletes it, so that no create or update starts using it
        // meanwhile.
        self.node
            .owner
            .delete_plugin(&tenant, &id)
            .await
            .map_err(status)?;
        Ok(Response::new(plugin_pb(&record, Vec::new())))
    }
}

/// Gives tonic's own codec errors the documented form and the codes the gRPC
/// spec asks for: a message over the size limit is `RESOURCE_EXHAUSTED` (tonic
/// says `OUT_OF_RANGE`), and bytes that are not a message of this API are
/// `INVALID_ARGUMENT` (tonic says `INTERNAL`). Such errors are answered before a
/// handler runs, in the response headers ("trailers only").
pub fn remap_codec_errors<B>(mut response: http::Response<B>) -> http::Response<B> {
    let headers = response.headers_mut();
    let status = headers.get("grpc-status").and_then(|v| v.to_str().ok());
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let replacement = match status {
        Some("11") if message.contains("message%20length%20too%20large")
            || message.contains("message length too large") =>
        {
            Some((
                tonic::Code::ResourceExhausted,
                format!(
                    "the request is over the server's limit of {} bytes per message; a changefeed file may be at most {} bytes, and uploads go in chunks (the CLI sends 1 MiB)",
                    MAX_GRPC_MESSAGE_BYTES,
                    sluice_config::bounds::MAX_FILE_BYTES
                ),
            ))
        }
        // prost's own words, percent-encoded or not: not a message of ours.
        Some("13")
            if message.starts_with("failed%20to%20decode%20Protobuf%20message")
                || message.starts_with("failed to decode Protobuf message") =>
        {
            Some((
            tonic::Code::InvalidArgument,
            "the request is not a valid message of this API (a truncated or foreign protobuf, or a string that is not UTF-8)".to_string(),
            ))
        }
        _ => None,
    };
    if let Some((code, text)) = replacement {
        headers.insert("grpc-status", http::HeaderValue::from(code as i32));
        // Plain ASCII without '%': valid as a percent-encoded grpc-message.
        if let Ok(value) = http::HeaderValue::from_str(&text) {
            headers.insert("grpc-message", value);
        }
    }
    response
}
