//! The owner: every changefeed's record in the meta store, its feed state manager
//! and its processor. Admin jobs and processor reports go through here; every
//! change to a record is persisted before it is acted on (persist, then act).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::keys::MetaKey;
use sluice_meta::{Compare, Op, Revision, Txn, keys};
use sluice_owner::{
    AdminJob, Changefeed, ChangefeedId, ChangefeedInfo, ChangefeedStatus, Clock, Decision, Effect,
    FeedState, FeedStateManager, PluginId, SeededJitter, SystemClock,
};
use sluice_processor::Progress;
use tonic::Status;

use super::Ctx;
use sluice_capture::{self as processor, Live, Outcome, PluginCounters, Processor, TaskPosition};
use sluice_config::spec::{self, FeedSpec};

type Manager = FeedStateManager<SystemClock, SeededJitter>;

/// The status of a changefeed is written at most this often while it runs (and
/// on every state change and at shutdown).
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Counters of earlier processors of a changefeed, so that totals do not restart
/// with every processor.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub rows_read: u64,
    pub rows_written: u64,
    pub bytes_written: u64,
    pub retries: u64,
}

impl Totals {
    fn add(&mut self, p: &Progress) {
        self.rows_read += p.rows_read;
        self.rows_written += p.rows_written;
        self.bytes_written += p.bytes_written;
        self.retries += p.retries;
    }
}

struct Feed {
    manager: Manager,
    saved_info: ChangefeedInfo,
    /// Mod revision of the stored info (compare-and-swap on every write).
    info_revision: Revision,
    saved_status: ChangefeedStatus,
    status_saved_at: Instant,
    processor: Option<Processor>,
    totals: Totals,
    /// Source resolved ts of the latest processor.
    resolved: CommitTs,
    /// When the checkpoint last moved (ms since the Unix epoch), for synced status.
    last_advance_ms: u64,
    /// Counters of the plugins of the latest processor, kept after it ends and
    /// handed on to the next, so that plugin series neither vanish nor go
    /// backwards; dropped when the changefeed is removed.
    plugins: PluginCounters,
}

/// A changefeed as the API shows it.
#[derive(Debug, Clone)]
pub struct FeedView {
    pub changefeed: Changefeed,
    pub resolved_ts: CommitTs,
    pub progress: Option<Progress>,
    pub totals: Totals,
    /// (role, plugin, counters) of the latest processor's plugins, running or not.
    pub plugins: PluginCounters,
    pub sink_data_dir: Option<std::path::PathBuf>,
    pub last_advance_ms: u64,
}

impl FeedView {
    /// Counters including the running processor's.
    pub fn counters(&self) -> Totals {
        let mut t = self.totals;
        if let Some(p) = &self.progress {
            t.add(p);
        }
        t
    }
}

pub struct Owner {
    ctx: Arc<Ctx>,
    feeds: BTreeMap<ChangefeedId, Feed>,
    /// Set at shutdown: no admin jobs, no new processors.
    closing: bool,
    /// Changefeeds whose stored records this build cannot read: left alone.
    unreadable: std::collections::BTreeSet<(String, String)>,
}

fn unavailable(e: anyhow::Error) -> Status {
    match e.downcast_ref::<sluice_meta::MetaError>() {
        Some(sluice_meta::MetaError::InvalidRequest { reason }) => Status::invalid_argument(
            format!("the changefeed cannot be stored: {reason}; make its file smaller"),
        ),
        _ => Status::unavailable(format!("meta store: {e:#}; retry")),
    }
}

/// Illegal transitions are preconditions; a wrong description is an argument.
fn admin_status(e: sluice_owner::AdminError) -> Status {
    use sluice_owner::AdminError::*;
    match e {
        Invalid(_)
        | IdChanged { .. }
        | StartTsChanged { .. }
        | TargetNotAfterCheckpoint { .. }
        | OverwritePastTarget { .. } => Status::invalid_argument(e.to_string()),
        _ => Status::failed_precondition(e.to_string()),
    }
}

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

impl Owner {
    /// Loads every changefeed from the store and starts the ones that run. A
    /// changefeed that was running gets a new epoch; its checkpoint is raised to
    /// what its processors saved, if that is higher.
    pub async fn load(ctx: Arc<Ctx>) -> anyhow::Result<Self> {
        let listing = ctx.store.list(&keys::tenants_prefix()).await?;
        let mut infos = BTreeMap::new();
        let mut statuses = BTreeMap::new();
        let mut tasks: BTreeMap<(String, String), Vec<TaskPosition>> = BTreeMap::new();
        let mut unreadable = std::collections::BTreeSet::new();
        for kv in &listing.kvs {
            // A record this build cannot read is skipped (and its changefeed left
            // alone), so that one bad value does not stop every other changefeed.
            let skip = |e: &dyn std::fmt::Display| {
                tracing::error!(key = %kv.key, error = %e, "Skipping a record that does not decode.");
            };
            match MetaKey::parse(&kv.key) {
                Some(MetaKey::ChangefeedInfo { tenant, changefeed }) => {
                    match ChangefeedInfo::decode(&kv.value) {
                        Ok(info) => {
                            infos.insert(info.id.clone(), (info, kv.mod_revision));
                        }
                        Err(e) => {
                            skip(&e);
                            unreadable.insert((tenant, changefeed));
                        }
                    }
                }
                Some(MetaKey::ChangefeedStatus { tenant, changefeed }) => {
                    match ChangefeedStatus::decode(&kv.value) {
                        Ok(status) => {
                            statuses.insert((tenant, changefeed), status);
                        }
                        Err(e) => {
                            skip(&e);
                            unreadable.insert((tenant, changefeed));
                        }
                    }
                }
                Some(MetaKey::TaskPosition {
                    tenant, changefeed, ..
                }) => match keys::decode::<TaskPosition>(&kv.key, &kv.value) {
                    Ok(position) => tasks
                        .entry((tenant, changefeed))
                        .or_default()
                        .push(position),
                    Err(e) => skip(&e),
                },
                _ => {}
            }
        }
        let mut owner = Owner {
            ctx,
            feeds: BTreeMap::new(),
            closing: false,
            unreadable: unreadable.clone(),
        };
        for (id, (info, revision)) in infos {
            let key = (id.tenant().to_string(), id.name().to_string());
            if unreadable.contains(&key) {
                // Its status cannot be read: leave the changefeed alone rather than
                // overwrite what a newer build wrote.
                continue;
            }
            let saved_status = statuses
                .remove(&key)
                .unwrap_or_else(|| ChangefeedStatus::at_start(info.start_ts));
            let mut cf = Changefeed {
                info: info.clone(),
                status: saved_status.clone(),
            };
            // Processors save the checkpoint more often than the owner copies it:
            // take theirs, but only from the current epoch (an older one may
            // predate an overwritten checkpoint or a removal).
            if !matches!(cf.state(), FeedState::Removed | FeedState::Finished) {
                for task in tasks.get(&key).into_iter().flatten() {
                    if task.changefeed_epoch == cf.epoch().0 {
                        let saved = CheckpointTs::new(task.checkpoint_ts);
                        cf.status.checkpoint_ts = cf.status.checkpoint_ts.max(saved);
                    }
                }
            }
            if cf.state().is_running() {
                // A restart: the processors of the previous epoch are gone, or
                // fenced once the new one claims the task position.
                cf.info.epoch = cf.info.epoch.next();
            }
            let manager = FeedStateManager::new(
                cf,
                owner.ctx.backoff,
                SystemClock,
                SeededJitter::from_random_seed(),
            )?;
            owner.feeds.insert(
                id.clone(),
                Feed {
                    manager,
                    saved_info: info,
                    info_revision: revision,
                    saved_status,
                    status_saved_at: Instant::now(),
                    processor: None,
                    totals: Totals::default(),
                    resolved: CommitTs::ZERO,
                    last_advance_ms: now_ms(),
                    plugins: PluginCounters::new(),
                },
            );
            owner.persist(&id, true).await?;
        }
        owner.tick().await;
        Ok(owner)
    }

    /// Writes what changed of `id`'s record in one transaction, under this
    /// capture's ownership: the info (compare-and-swap on its revision) at once, the
    /// status when `force` or at most every second.
    async fn persist(&mut self, id: &ChangefeedId, force: bool) -> anyhow::Result<()> {
        self.persist_once(id, force, false).await
    }

    async fn persist_once(
        &mut self,
        id: &ChangefeedId,
        force: bool,
        adopted: bool,
    ) -> anyhow::Result<()> {
        let ctx = self.ctx.clone();
        let Some(feed) = self.feeds.get_mut(id) else {
            return Ok(());
        };
        let cf = feed.manager.changefeed().clone();
        let info_key = keys::changefeed_info(id.tenant(), id.name())?;
        let status_key = keys::changefeed_status(id.tenant(), id.name())?;
        let write_info = cf.info != feed.saved_info;
        let status_due = force || feed.status_saved_at.elapsed() >= STATUS_EVERY;
        let write_status =
            cf.status != feed.saved_status && status_due && cf.state() != FeedState::Removed;
        if !write_info && !write_status {
            return Ok(());
        }
        let mut compares = vec![ctx.owner_guard.clone()];
        let mut ops = Vec::new();
        let info_bytes = cf.info.encode();
        if write_info {
            compares.push(if feed.info_revision == Revision::ZERO {
                Compare::absent(&info_key)
            } else {
                Compare::mod_revision(&info_key, feed.info_revision)
            });
            ops.push(Op::put(&info_key, info_bytes.clone()));
        }
        if write_status {
            ops.push(Op::put(&status_key, cf.status.encode()));
        }
        let result = ctx
            .store
            .txn(Txn::new().when(compares).and_then(ops))
            .await?;
        let revision = if result.succeeded {
            result.revision
        } else {
            // Either an earlier write landed although its answer was lost (the
            // stored info is ours: adopt it), or this capture is no longer the
            // owner, or someone else changed the record: stop acting.
            let stored = ctx.store.get(&info_key).await?;
            match stored {
                // Adopted once; if the write fails again, the guard is what fails.
                Some(kv) if write_info && kv.value == info_bytes && !adopted => {
                    feed.info_revision = kv.mod_revision;
                    return Box::pin(self.persist_once(id, force, true)).await;
                }
                // A new changefeed whose key holds a record this build could not
                // read: refuse the request, the server is fine.
                Some(_) if feed.info_revision == Revision::ZERO && !adopted => {
                    anyhow::bail!(
                        "changefeed {id} has a stored record this server cannot read; remove it with a matching version first"
                    );
                }
                _ => {
                    let why = format!(
                        "changefeed {id} was changed outside this server, or this server lost its ownership"
                    );
                    ctx.give_up(why.clone());
                    anyhow::bail!(why);
                }
            }
        };
        if write_info {
            feed.info_revision = revision;
            feed.saved_info = cf.info;
        }
        if write_status {
            feed.saved_status = cf.status;
            feed.status_saved_at = Instant::now();
        }
        Ok(())
    }

    /// One round of the owner loop: collect ended processors, pass checkpoints to
    /// the managers, let time pass, act on the decisions, persist.
    pub async fn tick(&mut self) {
        let ids: Vec<ChangefeedId> = self.feeds.keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.tick_one(&id).await {
                tracing::warn!(changefeed = %id, error = format!("{e:#}"), "Owner could not update the changefeed; retrying.");
            }
        }
    }

    async fn tick_one(&mut self, id: &ChangefeedId) -> anyhow::Result<()> {
        let ended = self.collect(id).await;
        let feed = self.feeds.get_mut(id).expect("listed");
        if let Some(p) = &feed.processor {
            let (epoch, live) = (p.epoch, p.live.clone());
            feed.absorb(epoch, &live, None);
        }
        // The latest decision reflects everything absorbed above.
        let decision = feed.manager.tick();
        // Persist before acting; a processor's final checkpoint at once.
        let force = ended || feed.manager.changefeed().info != feed.saved_info;
        self.persist(id, force).await?;
        self.act(id, decision).await
    }

    /// Takes in the changefeed's processor if it has ended (its final checkpoint
    /// and how it ended). Returns whether one had.
    async fn collect(&mut self, id: &ChangefeedId) -> bool {
        let feed = self.feeds.get_mut(id).expect("listed");
        if !feed.processor.as_ref().is_some_and(Processor::is_finished) {
            return false;
        }
        let processor = feed.processor.take().expect("checked");
        let epoch = processor.epoch;
        let live = processor.live.clone();
        let outcome = processor.join().await;
        tracing::debug!(changefeed = %id, ?outcome, "Processor ended.");
        feed.absorb(epoch, &live, Some(outcome));
        true
    }

    /// Whether the changefeed's processor is where its state wants it: none is
    /// stopping (an admin job that stops or restarts it waits for this, without
    /// holding the owner).
    pub fn settled(&self, id: &ChangefeedId) -> bool {
        self.feeds
            .get(id)
            .is_none_or(|f| f.processor.as_ref().is_none_or(|p| !p.is_stopping()))
    }

    /// Carries out a manager's decision (after it was persisted).
    async fn act(&mut self, id: &ChangefeedId, decision: Decision) -> anyhow::Result<()> {
        match decision {
            Decision::Run | Decision::Restart { .. } => {
                // Exactly one processor, of the current epoch.
                let feed = self.feeds.get_mut(id).expect("present");
                let cf = feed.manager.changefeed();
                let (epoch, checkpoint) = (cf.epoch(), cf.checkpoint());
                if !self.closing && feed.processor.as_ref().is_none_or(|p| p.epoch != epoch) {
                    self.start(id, epoch, checkpoint).await?;
                }
            }
            Decision::WaitUntil(_) | Decision::Fail(_) | Decision::Finish | Decision::Idle => {
                self.stop(id).await?;
            }
        }
        Ok(())
    }

    /// Asks the changefeed's processor, if one runs, to stop; the owner loop
    /// takes in its final checkpoint once it has ended (the processor wakes it).
    /// Never waits: a struggling sink's stop must not hold the owner.
    async fn stop(&mut self, id: &ChangefeedId) -> anyhow::Result<()> {
        let feed = self.feeds.get_mut(id).expect("present");
        if let Some(processor) = &mut feed.processor {
            processor.signal_stop();
        }
        Ok(())
    }

    /// Starts a processor under `epoch` once no older one runs: an older one is
    /// asked to stop, and the owner loop starts this one after it has ended.
    async fn start(
        &mut self,
        id: &ChangefeedId,
        epoch: sluice_owner::Epoch,
        checkpoint: CheckpointTs,
    ) -> anyhow::Result<()> {
        self.collect(id).await;
        if self.feeds[id].processor.is_some() {
            return self.stop(id).await;
        }
        let feed = self.feeds.get_mut(id).expect("present");
        let info = feed.manager.changefeed().info.clone();
        feed.plugins = carry_over(&feed.plugins, &info);
        feed.processor = Some(Processor::start(
            self.ctx.capture.clone(),
            info,
            epoch,
            checkpoint,
            feed.plugins.clone(),
        ));
        Ok(())
    }

    /// Refuses admin jobs and new processors from now on (server shutdown).
    pub fn close(&mut self) {
        self.closing = true;
    }

    fn open_for_jobs(&self) -> Result<(), Status> {
        if self.closing {
            return Err(Status::unavailable(
                "the server is stopping; retry once it is back",
            ));
        }
        Ok(())
    }

    /// Stops every processor cleanly and saves every status (server shutdown).
    pub async fn shutdown(&mut self) {
        // Signal every processor first, then collect them: the stops overlap, each
        // bounded by the stop timeout.
        for feed in self.feeds.values_mut() {
            if let Some(processor) = &mut feed.processor {
                processor.signal_stop();
            }
        }
        for feed in self.feeds.values_mut() {
            if let Some(processor) = feed.processor.take() {
                let (epoch, live) = (processor.epoch, processor.live.clone());
                let outcome = processor.join().await;
                feed.absorb(epoch, &live, Some(outcome));
            }
        }
        let ids: Vec<ChangefeedId> = self.feeds.keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.persist(&id, true).await {
                tracing::warn!(changefeed = %id, error = format!("{e:#}"), "Could not save the final status.");
            }
        }
    }

    /// Cancels every processor without flushing (the server may no longer act):
    /// what they did not flush is replayed, flagged, by the next owner.
    pub async fn abort_all(&mut self) {
        for feed in self.feeds.values_mut() {
            if let Some(processor) = feed.processor.take() {
                processor.abort().await;
            }
        }
    }

    // ------------------------------------------------------------- admin jobs

    /// Plugin instances `info` reserves when it runs: one per filter and the sink.
    fn instances_of(info: &ChangefeedInfo) -> u64 {
        info.filters.len() as u64 + 1
    }

    /// Refuses `info` if, with the tenant's other changefeeds (every one not
    /// removed reserves its instances, running or not), it would pass the
    /// tenant's share of the instance pool: one tenant cannot take the instances
    /// every other tenant needs.
    fn within_tenant_instances(&self, info: &ChangefeedInfo) -> Result<(), Status> {
        let tenant = info.id.tenant();
        let others: u64 = self
            .feeds
            .iter()
            .filter(|(id, f)| {
                id.tenant() == tenant
                    && **id != info.id
                    && f.manager.changefeed().state() != FeedState::Removed
            })
            .map(|(_, f)| Self::instances_of(&f.manager.changefeed().info))
            .sum();
        let want = Self::instances_of(info);
        let cap = self.ctx.limits.max_tenant_instances;
        if others + want > cap {
            return Err(Status::resource_exhausted(format!(
                "tenant {tenant} would hold {} plugin instances (its changefeeds hold {others}, this one needs {want}); a tenant may hold at most {cap} (--max-tenant-plugin-instances): remove a changefeed or use fewer filters",
                others + want
            )));
        }
        Ok(())
    }

    /// Whether `id` may be created (before describing it, which takes a while).
    pub fn check_new(&self, id: &ChangefeedId) -> Result<(), Status> {
        self.open_for_jobs()?;
        if self
            .unreadable
            .contains(&(id.tenant().to_string(), id.name().to_string()))
        {
            return Err(Status::failed_precondition(format!(
                "changefeed {id} has stored records this server cannot read (written by another version?); \
                 run the version that wrote them to remove it"
            )));
        }
        if let Some(feed) = self.feeds.get(id)
            && feed.manager.changefeed().state() != FeedState::Removed
        {
            return Err(Status::already_exists(format!(
                "changefeed {id} already exists (state {}); remove it first or pick another name",
                feed.manager.changefeed().state()
            )));
        }
        Ok(())
    }

    /// Every plugin `info` names is still uploaded (it was checked before the
    /// owner's lock was taken; deletes happen under the lock).
    pub async fn plugins_present(&self, info: &ChangefeedInfo) -> Result<(), Status> {
        for plugin in info.filters.iter().chain([&info.sink]) {
            let present = self
                .ctx
                .registry
                .get(info.id.tenant(), &plugin.plugin)
                .await
                .map_err(super::grpc::registry_status)?;
            if present.is_none() {
                return Err(Status::not_found(format!(
                    "plugin {} was removed meanwhile; upload it again",
                    plugin.plugin
                )));
            }
        }
        Ok(())
    }

    /// Creates a changefeed from a description made by [`describe`].
    pub async fn create(&mut self, info: ChangefeedInfo) -> Result<FeedView, Status> {
        let id = info.id.clone();
        self.check_new(&id)?;
        self.within_tenant_instances(&info)?;
        self.plugins_present(&info).await?;
        if let Some(feed) = self.feeds.get(&id)
            && feed.manager.changefeed().state() != FeedState::Removed
        {
            return Err(Status::already_exists(format!(
                "changefeed {id} already exists (state {}); remove it first or pick another name",
                feed.manager.changefeed().state()
            )));
        }
        if self.feeds.contains_key(&id) {
            return self.admin(&id, AdminJob::Create(Box::new(info))).await;
        }
        let cf = Changefeed::create(info, now_ms())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let manager = FeedStateManager::new(
            cf,
            self.ctx.backoff,
            SystemClock,
            SeededJitter::from_random_seed(),
        )
        .map_err(|e| Status::internal(e.to_string()))?;
        // An empty saved record: the first persist writes everything (key absent).
        let mut saved_info = manager.changefeed().info.clone();
        saved_info.version = 0;
        let saved_status = ChangefeedStatus {
            version: 0,
            ..manager.changefeed().status.clone()
        };
        self.feeds.insert(
            id.clone(),
            Feed {
                manager,
                saved_info,
                info_revision: Revision::ZERO,
                saved_status,
                status_saved_at: Instant::now(),
                processor: None,
                totals: Totals::default(),
                resolved: CommitTs::ZERO,
                last_advance_ms: now_ms(),
                plugins: PluginCounters::new(),
            },
        );
        if let Err(e) = self.persist(&id, true).await {
            self.feeds.remove(&id);
            return Err(unavailable(e));
        }
        let cf = self.feeds[&id].manager.changefeed().clone();
        self.start(&id, cf.epoch(), cf.checkpoint())
            .await
            .map_err(unavailable)?;
        Ok(self.view(&id).expect("present"))
    }

    /// The start ts and target ts an update of `id` keeps unless it sets them.
    pub fn update_base(&self, id: &ChangefeedId) -> Result<(CommitTs, Option<CommitTs>), Status> {
        let info = &self.require(id)?.manager.changefeed().info;
        Ok((info.start_ts, info.target_ts))
    }

    /// Applies an admin job to an existing changefeed: persist, then act.
    pub async fn admin(&mut self, id: &ChangefeedId, job: AdminJob) -> Result<FeedView, Status> {
        self.open_for_jobs()?;
        if let AdminJob::Update(info) = &job {
            self.within_tenant_instances(info)?;
        }
        let feed = self.feeds.get_mut(id).ok_or_else(|| not_found(id))?;
        let before = feed.manager.changefeed().clone();
        let effect = feed.manager.apply_admin_job(job).map_err(admin_status)?;
        if let Err(e) = self.persist(id, true).await {
            // Not stored: undo, so that memory matches the store.
            let feed = self.feeds.get_mut(id).expect("present");
            feed.manager = FeedStateManager::new(
                before,
                self.ctx.backoff,
                SystemClock,
                SeededJitter::from_random_seed(),
            )
            .expect("config was valid");
            return Err(unavailable(e));
        }
        match effect {
            Effect::Start { epoch, checkpoint } => {
                self.start(id, epoch, checkpoint)
                    .await
                    .map_err(unavailable)?;
            }
            Effect::Stop => self.stop(id).await.map_err(unavailable)?,
            Effect::Remove => {
                self.stop(id).await.map_err(unavailable)?;
                self.forget(id).await.map_err(unavailable)?;
            }
            // Removing again finishes what a failed removal left behind.
            Effect::Unchanged
                if self.feeds[id].manager.changefeed().state() == FeedState::Removed =>
            {
                self.forget(id).await.map_err(unavailable)?;
            }
            Effect::Updated | Effect::Unchanged => {}
        }
        Ok(self.view(id).expect("present"))
    }

    /// Deletes what a removed changefeed kept (status, task positions); its info
    /// stays as a tombstone so that a new incarnation continues its epochs.
    async fn forget(&mut self, id: &ChangefeedId) -> anyhow::Result<()> {
        let store = &self.ctx.store;
        let mut ops = vec![Op::delete(keys::changefeed_status(id.tenant(), id.name())?)];
        for kv in store
            .list(&keys::task_prefix(id.tenant(), id.name())?)
            .await?
            .kvs
        {
            ops.push(Op::delete(kv.key));
        }
        let result = store
            .txn(
                Txn::new()
                    .when([self.ctx.owner_guard.clone()])
                    .and_then(ops),
            )
            .await?;
        if !result.succeeded {
            let why = "this server is no longer the owner".to_string();
            self.ctx.give_up(why.clone());
            anyhow::bail!(why);
        }
        if let Some(feed) = self.feeds.get_mut(id) {
            feed.totals = Totals::default();
            feed.plugins.clear();
        }
        Ok(())
    }

    fn require(&self, id: &ChangefeedId) -> Result<&Feed, Status> {
        self.feeds.get(id).ok_or_else(|| not_found(id))
    }

    // ------------------------------------------------------------- queries

    pub fn view(&self, id: &ChangefeedId) -> Option<FeedView> {
        let feed = self.feeds.get(id)?;
        let progress = feed.processor.as_ref().and_then(|p| p.live.progress());
        let mut cf = feed.manager.changefeed().clone();
        let mut resolved = feed.resolved;
        // The running processor's progress is newer than the owner's last round
        // (up to 200 ms old): show it. It is durable downstream already.
        if let (Some(p), Some(processor)) = (&progress, &feed.processor)
            && processor.epoch == cf.epoch()
            && cf.state().is_running()
        {
            cf.status.checkpoint_ts = cf.status.checkpoint_ts.max(p.checkpoint_ts);
            resolved = resolved.max(CommitTs::from(p.resolved_ts));
        }
        let sink_data_dir = cf
            .info
            .sink
            .capabilities
            .data_dir
            .then(|| spec::plugin_data_dir(&self.ctx.data_dir, id, "sink"));
        Some(FeedView {
            resolved_ts: resolved.max(CommitTs::from(cf.checkpoint())),
            changefeed: cf,
            progress,
            totals: feed.totals,
            plugins: feed.plugins.clone(),
            sink_data_dir,
            last_advance_ms: feed.last_advance_ms,
        })
    }

    pub fn get(&self, id: &ChangefeedId) -> Result<FeedView, Status> {
        if self.require(id)?.manager.changefeed().state() == FeedState::Removed {
            return Err(not_found(id));
        }
        Ok(self.view(id).expect("present"))
    }

    /// Changefeeds of `tenant` (all tenants when empty), removed ones left out.
    pub fn list(&self, tenant: &str) -> Vec<FeedView> {
        self.feeds
            .iter()
            .filter(|(id, f)| {
                (tenant.is_empty() || id.tenant() == tenant)
                    && f.manager.changefeed().state() != FeedState::Removed
            })
            .filter_map(|(id, _)| self.view(id))
            .collect()
    }

    /// Changefeeds of `tenant` that use `plugin` (removed ones do not count).
    pub fn users_of(&self, tenant: &str, plugin: &PluginId) -> Vec<String> {
        self.feeds
            .iter()
            .filter(|(id, f)| {
                let info = &f.manager.changefeed().info;
                id.tenant() == tenant
                    && info.state != FeedState::Removed
                    && info
                        .filters
                        .iter()
                        .chain([&info.sink])
                        .any(|p| &p.plugin == plugin)
            })
            .map(|(id, _)| id.to_string())
            .collect()
    }
}

/// The counters for a processor of `info`: those of the previous processor where
/// the role still runs the same plugin (they carry on), fresh ones elsewhere
/// (an update that changed a plugin starts its series anew; the old ones go).
fn carry_over(previous: &PluginCounters, info: &ChangefeedInfo) -> PluginCounters {
    processor::plugin_roles(info)
        .into_iter()
        .map(|(role, plugin)| {
            let stats = previous
                .iter()
                .find(|(r, p, _)| *r == role && *p == plugin)
                .map(|(_, _, s)| s.clone())
                .unwrap_or_default();
            (role, plugin, stats)
        })
        .collect()
}

fn not_found(id: &ChangefeedId) -> Status {
    Status::not_found(format!(
        "no changefeed {id}; `sluice cli changefeed list` shows the existing ones"
    ))
}

impl Feed {
    /// Takes in what a processor of `epoch` reached and, when it ended, how.
    /// Reports of another epoch are fenced and change nothing.
    fn absorb(&mut self, epoch: sluice_owner::Epoch, live: &Live, outcome: Option<Outcome>) {
        if let Some(p) = live.progress() {
            self.resolved = self.resolved.max(CommitTs::from(p.resolved_ts));
            let before = self.manager.changefeed().checkpoint();
            let _ = self.manager.on_checkpoint(epoch, p.checkpoint_ts);
            if self.manager.changefeed().checkpoint() > before {
                self.last_advance_ms = now_ms();
            }
            if outcome.is_some() {
                self.totals.add(&p);
            }
        }
        let _ = match outcome {
            None | Some(Outcome::Stopped) | Some(Outcome::Fenced) => return,
            Some(Outcome::Finished) => self.manager.on_target_reached(epoch),
            Some(Outcome::Failed { kind, message }) => self.manager.on_error(epoch, kind, message),
        };
    }
}

/// Checks a changefeed file against the registry and the plugins' own
/// `validate-config`, and turns it into a description.
pub async fn describe(
    ctx: &Ctx,
    id: &ChangefeedId,
    text: &str,
    start_ts: CommitTs,
    target_ts: Option<CommitTs>,
) -> Result<ChangefeedInfo, Status> {
    let spec = FeedSpec::parse(text).map_err(|e| {
        Status::invalid_argument(format!("invalid changefeed file: {}", crate::chain(&e)))
    })?;
    for (at, plugin) in spec.plugins() {
        let kind = if at == "sink" {
            sluice_runtime::PluginKind::Sink
        } else {
            sluice_runtime::PluginKind::Filter
        };
        let record = ctx
            .registry
            .get(id.tenant(), &plugin.plugin)
            .await
            .map_err(super::grpc::registry_status)?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "{at}.plugin: no plugin {} in tenant {}; upload it first (sluice cli plugin upload)",
                    plugin.plugin,
                    id.tenant()
                ))
            })?;
        if record.world != kind.world() {
            return Err(Status::invalid_argument(format!(
                "{at}.plugin: {} is a {} plugin; {at} needs a {}",
                plugin.plugin,
                record.world,
                kind.world()
            )));
        }
    }
    let info = spec
        .to_info(text, id.clone(), start_ts, target_ts)
        .map_err(|e| Status::invalid_argument(crate::chain(&e)))?;
    info.validate()
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    ctx.limits.check(&info).map_err(Status::invalid_argument)?;
    // Each plugin checks its own options (on the plugin's own thread).
    for (i, plugin) in info.filters.iter().enumerate() {
        let component = load_plugin(ctx, id, &plugin.plugin).await?;
        let mut filter =
            sluice_runtime::WasmFilter::new(component, spec::settings_of(plugin, None))
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
        filter.validate_config().await.map_err(|e| {
            Status::invalid_argument(format!(
                "filters[{i}].config was rejected by `{}`: {e}",
                plugin.plugin
            ))
        })?;
    }
    let component = load_plugin(ctx, id, &info.sink.plugin).await?;
    let mut sink = sluice_runtime::WasmSink::new(component, spec::settings_of(&info.sink, None))
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    sink.validate_config().await.map_err(|e| {
        Status::invalid_argument(format!(
            "sink.config was rejected by `{}`: {e}",
            info.sink.plugin
        ))
    })?;
    Ok(info)
}

async fn load_plugin(
    ctx: &Ctx,
    id: &ChangefeedId,
    plugin: &PluginId,
) -> Result<sluice_runtime::PluginComponent, Status> {
    ctx.registry
        .load(id.tenant(), plugin)
        .await
        .map_err(super::grpc::registry_status)
}
