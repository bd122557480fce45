//! The owner runtime: every changefeed's record, its feed state manager and its
//! work on the capture. Admin jobs and work reports go through here; every change
//! to a record is persisted before it is acted on (persist, then act). Only the
//! owner's actor task ([`crate::Owner`]) holds a [`Runtime`]; it never waits for
//! work to stop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::Revision;

use crate::Epoch;
use crate::Outcome;
use crate::actor::PluginChange;
use crate::actor::{Entry, Snapshot};
use crate::admin::{AdminJob, Effect};
use crate::backoff::{BackoffConfig, SeededJitter};
use crate::clock::{Clock, SystemClock};
use crate::context::{InfoWrite, OwnerContext, SaveError, Work, WorkProgress};
use crate::error::OwnerError;
use crate::id::ChangefeedId;
use crate::info::{Changefeed, ChangefeedInfo, ChangefeedStatus};
use crate::manager::{Decision, FeedStateManager};
use crate::plugin::PluginId;
use crate::state::FeedState;
use crate::swap::{PluginRole, record_for};

type Manager = FeedStateManager<SystemClock, SeededJitter>;

/// The status of a changefeed is written at most this often while it runs (and
/// on every state change and at shutdown).
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// How the owner runs.
#[derive(Debug, Clone, Copy)]
pub struct OwnerConfig {
    /// Error backoff of every changefeed.
    pub backoff: BackoffConfig,
    /// Plugin instances one tenant's changefeeds may hold (one per filter and
    /// one for the sink of every changefeed not removed).
    pub max_tenant_instances: u64,
}

/// Counters of earlier work of a changefeed, so that totals do not restart with
/// every (re)start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Row changes read from the source.
    pub rows_read: u64,
    /// Row changes handed to the sink.
    pub rows_written: u64,
    /// Bytes of row data handed to the sink.
    pub bytes_written: u64,
    /// Plugin calls that failed and were retried.
    pub retries: u64,
    /// Upstream events the source read.
    pub source_events: u64,
    /// Upstream statements the source did not recognise.
    pub source_skipped_statements: u64,
}

impl Totals {
    pub(crate) fn add(&mut self, p: &WorkProgress) {
        self.rows_read += p.rows_read;
        self.rows_written += p.rows_written;
        self.bytes_written += p.bytes_written;
        self.retries += p.retries;
        self.source_events += p.source_events;
        self.source_skipped_statements += p.source_skipped_statements;
    }
}

struct Feed<W> {
    manager: Manager,
    saved_info: ChangefeedInfo,
    /// Mod revision of the stored info (compare-and-swap on every write).
    info_revision: Revision,
    saved_status: ChangefeedStatus,
    status_saved_at: Instant,
    work: Option<W>,
    totals: Totals,
    /// Source resolved ts of the latest work.
    resolved: CommitTs,
    /// When the checkpoint last moved (ms since the Unix epoch), for synced status.
    last_advance_ms: u64,
    /// What its work last reported about a shadow (kept after the work
    /// ends, not stored).
    last_shadow: Option<crate::ShadowReport>,
}

impl<W: Work> Feed<W> {
    fn new(
        manager: Manager,
        saved_info: ChangefeedInfo,
        info_revision: Revision,
        saved_status: ChangefeedStatus,
    ) -> Self {
        Self {
            manager,
            saved_info,
            info_revision,
            saved_status,
            status_saved_at: Instant::now(),
            work: None,
            totals: Totals::default(),
            resolved: CommitTs::ZERO,
            last_advance_ms: now_ms(),
            last_shadow: None,
        }
    }

    /// Takes in what work of `epoch` reached and, when it ended, how. Reports
    /// of another epoch are fenced and change nothing.
    fn absorb(&mut self, epoch: Epoch, progress: Option<WorkProgress>, outcome: Option<Outcome>) {
        if let Some(p) = progress {
            self.resolved = self.resolved.max(p.resolved_ts);
            let before = self.manager.changefeed().checkpoint();
            let _ = self.manager.on_checkpoint(epoch, p.checkpoint_ts);
            if self.manager.changefeed().checkpoint() > before {
                self.last_advance_ms = now_ms();
            }
            if outcome.is_some() {
                self.totals.add(&p);
            }
            if let Some(report) = &p.swap {
                self.manager.on_swap_report(report);
            }
            if let Some(report) = &p.shadow {
                self.manager.on_shadow_report(report);
                self.last_shadow = Some(report.clone());
            }
        }
        let _ = match outcome {
            None | Some(Outcome::Fenced) => return,
            Some(Outcome::Stopped) => {
                let _ = self.manager.on_run_stopped(epoch);
                return;
            }
            Some(Outcome::Finished) => {
                self.manager.on_finished_with_swap();
                self.manager.on_target_reached(epoch)
            }
            Some(Outcome::Failed { kind, message }) => self.manager.on_error(epoch, kind, message),
        };
    }

    fn entry(&self) -> Entry {
        Entry {
            changefeed: self.manager.changefeed().clone(),
            totals: self.totals,
            resolved: self.resolved,
            last_advance_ms: self.last_advance_ms,
            last_shadow: self.last_shadow.clone(),
            work: self.work.as_ref().map(|w| (w.epoch(), w.live())),
            stopping: self.work.as_ref().is_some_and(Work::is_stopping),
        }
    }
}

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

fn manager(cf: Changefeed, backoff: BackoffConfig) -> Result<Manager, OwnerError> {
    FeedStateManager::new(cf, backoff, SystemClock, SeededJitter::from_random_seed())
        .map_err(|e| OwnerError::Internal(e.to_string()))
}

/// A create, update or swap whose plugins are being checked, outside the actor.
struct Pending {
    token: u64,
    /// The changefeed as it would be.
    info: ChangefeedInfo,
    create: bool,
    /// For a swap or a shadow: the job that records it.
    change: Option<AdminJob>,
}

pub(crate) struct Runtime<C: OwnerContext> {
    ctx: Arc<C>,
    config: OwnerConfig,
    feeds: BTreeMap<ChangefeedId, Feed<C::Work>>,
    /// Set at shutdown: no admin jobs, no new work.
    closing: bool,
    /// Changefeeds whose stored records this build cannot read: left alone.
    unreadable: BTreeSet<ChangefeedId>,
    /// Creates and updates being checked: their ids are taken and their plugins
    /// in use.
    pending: Vec<Pending>,
    next_token: u64,
}

impl<C: OwnerContext> Runtime<C> {
    /// Loads every changefeed and starts the ones that run. A changefeed that was
    /// running gets a new epoch; its checkpoint is raised to what its task
    /// positions of the current epoch saved, if that is higher.
    pub(crate) async fn load(ctx: Arc<C>, config: OwnerConfig) -> Result<Self, OwnerError> {
        let stored = ctx.load().await?;
        let unreadable: BTreeSet<ChangefeedId> = stored.unreadable.into_iter().collect();
        let mut statuses: BTreeMap<ChangefeedId, ChangefeedStatus> =
            stored.statuses.into_iter().collect();
        let mut runtime = Runtime {
            ctx,
            config,
            feeds: BTreeMap::new(),
            closing: false,
            unreadable,
            pending: Vec::new(),
            next_token: 0,
        };
        for (info, revision) in stored.infos {
            let id = info.id.clone();
            if runtime.unreadable.contains(&id) {
                // Its status cannot be read: leave the changefeed alone rather than
                // overwrite what a newer build wrote.
                continue;
            }
            let saved_status = statuses
                .remove(&id)
                .unwrap_or_else(|| ChangefeedStatus::at_start(info.start_ts));
            let mut cf = Changefeed {
                info: info.clone(),
                status: saved_status.clone(),
            };
            // Task positions are saved more often than the owner copies them:
            // take theirs, but only from the current epoch (an older one may
            // predate an overwritten checkpoint or a removal), and the lowest
            // of them: a run split across captures has one per side, and a
            // receiving side can have saved past what the reading side saved
            // its source position with.
            if !matches!(cf.state(), FeedState::Removed | FeedState::Finished) {
                cf.status.checkpoint_ts = recovered_checkpoint(
                    cf.status.checkpoint_ts,
                    stored
                        .positions
                        .iter()
                        .filter(|(p, epoch, _)| *p == id && *epoch == cf.epoch())
                        .map(|(.., checkpoint)| *checkpoint),
                );
            }
            if cf.state().is_running() && !stored.running.contains(&(id.clone(), cf.epoch())) {
                // A restart: the work of the previous epoch is gone, or fenced
                // once the new one claims the task position. (Work that still
                // runs under this epoch is adopted: it goes on.)
                cf.info.epoch = cf.info.epoch.next();
            }
            if let Some(open) = cf.info.swaps.last_mut().filter(|s| s.state.is_open()) {
                // What the store says runs is what runs: the new version, on
                // probation again, with the old one to fall back to.
                open.reason = Some(crate::bound_message(&format!(
                    "the server restarted while the swap was {}; {} runs on probation again \
                     from checkpoint {}, with {} to fall back to",
                    open.state.as_str(),
                    open.to.plugin,
                    cf.status.checkpoint_ts,
                    open.from.plugin
                )));
            }
            let manager = manager(cf, config.backoff)?;
            runtime
                .feeds
                .insert(id.clone(), Feed::new(manager, info, revision, saved_status));
            runtime.persist(&id, true).await?;
        }
        runtime.tick().await;
        runtime.ctx.release_unadopted().await?;
        Ok(runtime)
    }

    /// The context, for work done outside the owner task.
    pub(crate) fn context(&self) -> Arc<C> {
        self.ctx.clone()
    }

    /// What readers see.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            feeds: self
                .feeds
                .iter()
                .map(|(id, f)| (id.clone(), f.entry()))
                .collect(),
            closing: self.closing,
        }
    }

    /// Writes what changed of `id`'s record in one transaction: the info at once,
    /// the status when `force` or at most every second.
    async fn persist(&mut self, id: &ChangefeedId, force: bool) -> Result<(), SaveError> {
        let Some(feed) = self.feeds.get_mut(id) else {
            return Ok(());
        };
        let cf = feed.manager.changefeed().clone();
        let write_info = cf.info != feed.saved_info;
        let status_due = force || feed.status_saved_at.elapsed() >= STATUS_EVERY;
        let write_status =
            cf.status != feed.saved_status && status_due && cf.state() != FeedState::Removed;
        if !write_info && !write_status {
            return Ok(());
        }
        let info = write_info.then_some(InfoWrite {
            info: &cf.info,
            revision: feed.info_revision,
        });
        let status = write_status.then_some(&cf.status);
        let revision = self.ctx.save(id, info, status).await?;
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

    /// One round: collect ended work, pass checkpoints to the managers, let time
    /// pass, act on the decisions, persist.
    pub(crate) async fn tick(&mut self) {
        let ids: Vec<ChangefeedId> = self.feeds.keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.tick_one(&id).await {
                tracing::warn!(changefeed = %id, error = %e, "Owner could not update the changefeed; retrying.");
            }
        }
    }

    async fn tick_one(&mut self, id: &ChangefeedId) -> Result<(), SaveError> {
        let ended = self.collect(id).await;
        let feed = self.feeds.get_mut(id).expect("listed");
        if let Some(w) = &feed.work {
            let (epoch, progress) = (w.epoch(), w.live().progress());
            feed.absorb(epoch, progress, None);
        }
        // The latest decision reflects everything absorbed above.
        let decision = feed.manager.tick();
        // Persist before acting; the final checkpoint of ended work at once.
        let force = ended || feed.manager.changefeed().info != feed.saved_info;
        self.persist(id, force).await?;
        self.act(id, decision).await;
        Ok(())
    }

    /// Takes in the changefeed's work if it has ended (its final checkpoint and
    /// how it ended). Returns whether it had.
    async fn collect(&mut self, id: &ChangefeedId) -> bool {
        let feed = self.feeds.get_mut(id).expect("listed");
        if !feed.work.as_ref().is_some_and(Work::is_finished) {
            return false;
        }
        let work = feed.work.take().expect("checked");
        let (epoch, live) = (work.epoch(), work.live());
        let outcome = work.join().await;
        tracing::debug!(changefeed = %id, ?outcome, "Work ended.");
        feed.absorb(epoch, live.progress(), Some(outcome));
        true
    }

    /// Carries out a manager's decision (after it was persisted).
    async fn act(&mut self, id: &ChangefeedId, decision: Decision) {
        match decision {
            Decision::Run | Decision::Restart { .. } => {
                // Exactly one piece of work, of the current epoch.
                let feed = &self.feeds[id];
                let cf = feed.manager.changefeed();
                let (epoch, checkpoint) = (cf.epoch(), cf.checkpoint());
                if !self.closing && feed.work.as_ref().is_none_or(|w| w.epoch() != epoch) {
                    self.start(id, epoch, checkpoint).await;
                }
            }
            Decision::WaitUntil(_) | Decision::Fail(_) | Decision::Finish | Decision::Idle => {
                self.stop(id);
            }
        }
    }

    /// Asks the changefeed's work, if any, to stop; a later round takes in its
    /// final checkpoint once it has ended (the capture wakes the owner). Never
    /// waits: a struggling sink's stop must not hold the owner.
    fn stop(&mut self, id: &ChangefeedId) {
        if let Some(work) = &mut self.feeds.get_mut(id).expect("present").work {
            work.signal_stop();
        }
    }

    /// Starts work under `epoch` once no older work runs: older work is asked to
    /// stop, and a later round starts this one after it has ended.
    async fn start(&mut self, id: &ChangefeedId, epoch: Epoch, checkpoint: CheckpointTs) {
        self.collect(id).await;
        if self.feeds[id].work.is_some() {
            return self.stop(id);
        }
        let feed = self.feeds.get_mut(id).expect("present");
        let info = feed.manager.changefeed().info.clone();
        let revision = feed.info_revision;
        feed.work = Some(self.ctx.start_work(&info, epoch, checkpoint, revision));
    }

    fn open_for_jobs(&self) -> Result<(), OwnerError> {
        if self.closing {
            return Err(OwnerError::Unavailable(
                "the server is stopping; retry once it is back".into(),
            ));
        }
        Ok(())
    }

    /// Refuses admin jobs and new work from now on (server shutdown).
    pub(crate) fn close(&mut self) {
        self.closing = true;
    }

    /// Stops every piece of work cleanly and saves every status (`abort`: cancels
    /// every piece without flushing, for when the server may no longer act;
    /// what they did not flush is replayed, flagged, by the next owner).
    pub(crate) async fn shutdown(&mut self, abort: bool) {
        self.closing = true;
        if abort {
            for feed in self.feeds.values_mut() {
                if let Some(work) = feed.work.take() {
                    work.abort().await;
                }
            }
            return;
        }
        // Signal every piece first, then collect them: the stops overlap, each
        // bounded by the capture's stop timeout.
        for feed in self.feeds.values_mut() {
            if let Some(work) = &mut feed.work {
                work.signal_stop();
            }
        }
        for feed in self.feeds.values_mut() {
            if let Some(work) = feed.work.take() {
                let (epoch, live) = (work.epoch(), work.live());
                let outcome = work.join().await;
                feed.absorb(epoch, live.progress(), Some(outcome));
            }
        }
        let ids: Vec<ChangefeedId> = self.feeds.keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.persist(&id, true).await {
                tracing::warn!(changefeed = %id, error = %e, "Could not save the final status.");
            }
        }
    }

    // ------------------------------------------------------------- admin jobs

    /// Plugin instances `info` reserves when it runs: one per filter and the sink.
    fn instances_of(info: &ChangefeedInfo) -> u64 {
        info.config.filters.len() as u64 + 1 + u64::from(info.running_shadow().is_some())
    }

    /// Refuses `info` if, with the tenant's other changefeeds (every one not
    /// removed reserves its instances, running or not, and so does every create
    /// being checked), it would pass the tenant's share of the instance pool.
    fn within_tenant_instances(&self, info: &ChangefeedInfo) -> Result<(), OwnerError> {
        let tenant = info.id.tenant();
        let stored = self
            .feeds
            .iter()
            .filter(|(id, f)| {
                id.tenant() == tenant
                    && **id != info.id
                    && f.manager.changefeed().state() != FeedState::Removed
            })
            .map(|(_, f)| Self::instances_of(&f.manager.changefeed().info));
        let pending = self
            .pending
            .iter()
            .filter(|p| p.create && p.info.id.tenant() == tenant && p.info.id != info.id)
            .map(|p| Self::instances_of(&p.info));
        let others: u64 = stored.chain(pending).sum();
        let want = Self::instances_of(info);
        let cap = self.config.max_tenant_instances;
        if others + want > cap {
            return Err(OwnerError::Exhausted(format!(
                "tenant {tenant} would hold {} plugin instances (its changefeeds hold {others}, this one needs {want}); a tenant may hold at most {cap} (--max-tenant-plugin-instances): remove a changefeed or use fewer filters",
                others + want
            )));
        }
        Ok(())
    }

    /// Checks that `id` may be created (the only check: the id stays taken while
    /// the create's plugins are checked).
    fn check_new(&self, id: &ChangefeedId) -> Result<(), OwnerError> {
        self.open_for_jobs()?;
        if self.unreadable.contains(id) {
            return Err(OwnerError::Precondition(format!(
                "changefeed {id} has stored records this server cannot read (written by another version?); \
                 run the version that wrote them to remove it"
            )));
        }
        if let Some(feed) = self.feeds.get(id)
            && feed.manager.changefeed().state() != FeedState::Removed
        {
            return Err(OwnerError::AlreadyExists(format!(
                "changefeed {id} already exists (state {}); remove it first or pick another name",
                feed.manager.changefeed().state()
            )));
        }
        if self.pending.iter().any(|p| p.create && p.info.id == *id) {
            return Err(OwnerError::AlreadyExists(format!(
                "changefeed {id} is being created; pick another name"
            )));
        }
        Ok(())
    }

    /// Takes the first step of a create or update: the checks that need the
    /// owner's state. Returns a token for [`Runtime::finish`] once the plugins
    /// were checked outside the owner.
    pub(crate) fn begin(&mut self, info: &ChangefeedInfo, create: bool) -> Result<u64, OwnerError> {
        if create {
            self.check_new(&info.id)?;
        } else {
            self.open_for_jobs()?;
            self.require(&info.id)?;
        }
        self.within_tenant_instances(info)?;
        self.next_token += 1;
        self.pending.push(Pending {
            token: self.next_token,
            info: info.clone(),
            create,
            change: None,
        });
        Ok(self.next_token)
    }

    /// Takes the first step of a swap or a shadow start: the changefeed
    /// exists, can take it, and the ask is sound. Returns a token for
    /// [`Runtime::finish`] and the changefeed as it would be (for a shadow:
    /// with the candidate in its role), whose plugins are checked outside the
    /// owner.
    pub(crate) fn begin_change(
        &mut self,
        id: &ChangefeedId,
        change: PluginChange,
    ) -> Result<(u64, ChangefeedInfo), OwnerError> {
        self.open_for_jobs()?;
        let feed = self.require(id)?;
        let cf = feed.manager.changefeed();
        let info = &cf.info;
        let (role, expect) = match &change {
            PluginChange::Swap(ask) => (ask.role, &ask.expect),
            PluginChange::Shadow(ask) => (ask.role, &ask.expect),
        };
        let live = info.plugin(role).ok_or_else(|| {
            OwnerError::Invalid(format!(
                "changefeed {id} has no {role} (it has {} filters)",
                info.config.filters.len()
            ))
        })?;
        if let Some(expected) = expect
            && *expected != live.plugin
        {
            return Err(crate::error::AdminError::SwapStale {
                id: id.clone(),
                expected: expected.to_string(),
                current: live.plugin.to_string(),
            }
            .into());
        }
        let (job, probe) = match change {
            PluginChange::Swap(ask) => {
                let record =
                    record_for(live, ask, info.epoch, now_ms()).map_err(OwnerError::Invalid)?;
                (AdminJob::Swap(Box::new(record)), None)
            }
            PluginChange::Shadow(ask) => {
                let candidate = ask.candidate.clone();
                let record = ask.record(live, now_ms()).map_err(OwnerError::Invalid)?;
                (AdminJob::ShadowStart(Box::new(record)), Some(candidate))
            }
        };
        // The job's own checks (state, a swap or shadow in progress), on a copy.
        let mut candidate = cf.clone();
        crate::admin::apply_admin_job(&mut candidate, job.clone(), now_ms())?;
        if let Some(p) = self
            .pending
            .iter()
            .find(|p| p.info.id == *id && p.change.is_some())
        {
            let what = p.change.as_ref().map(AdminJob::name).unwrap_or_default();
            return Err(OwnerError::Precondition(format!(
                "a {what} of {id} is being checked; wait for its answer"
            )));
        }
        let mut checked = candidate.info.clone();
        if let Some(table) = probe {
            // The candidate is checked in its role; one more instance counts
            // against the tenant's share.
            match role {
                PluginRole::Sink => checked.config.sink = table,
                PluginRole::Filter(i) => checked.config.filters[i] = table,
            }
            self.within_tenant_instances(&candidate.info)?;
        }
        self.next_token += 1;
        self.pending.push(Pending {
            token: self.next_token,
            info: candidate.info.clone(),
            create: false,
            change: Some(job),
        });
        Ok((self.next_token, checked))
    }

    /// The second step of a create or update: its plugins passed their checks
    /// (or `checked` says why not).
    pub(crate) async fn finish(
        &mut self,
        token: u64,
        info: ChangefeedInfo,
        checked: Result<(), OwnerError>,
    ) -> Result<(), OwnerError> {
        let Some(at) = self.pending.iter().position(|p| p.token == token) else {
            return Err(OwnerError::Internal("an unknown create or update".into()));
        };
        let pending = self.pending.remove(at);
        let create = pending.create;
        checked?;
        let id = info.id.clone();
        if let Some(job) = pending.change {
            return self.admin(&id, job).await;
        }
        if !create {
            return self.admin(&id, AdminJob::Update(Box::new(info))).await;
        }
        self.open_for_jobs()?;
        if self.feeds.contains_key(&id) {
            // A removed changefeed's tombstone: the new incarnation continues
            // its epochs.
            return self.admin(&id, AdminJob::Create(Box::new(info))).await;
        }
        let cf =
            Changefeed::create(info, now_ms()).map_err(|e| OwnerError::Invalid(e.to_string()))?;
        let manager = manager(cf, self.config.backoff)?;
        // An empty saved record: the first persist writes everything (key absent).
        let mut saved_info = manager.changefeed().info.clone();
        saved_info.version = 0;
        let saved_status = ChangefeedStatus {
            version: 0,
            ..manager.changefeed().status.clone()
        };
        self.feeds.insert(
            id.clone(),
            Feed::new(manager, saved_info, Revision::ZERO, saved_status),
        );
        if let Err(e) = self.persist(&id, true).await {
            self.feeds.remove(&id);
            return Err(e.into());
        }
        let cf = self.feeds[&id].manager.changefeed().clone();
        self.start(&id, cf.epoch(), cf.checkpoint()).await;
        Ok(())
    }

    /// Applies an admin job to an existing changefeed: persist, then act.
    pub(crate) async fn admin(
        &mut self,
        id: &ChangefeedId,
        job: AdminJob,
    ) -> Result<(), OwnerError> {
        self.open_for_jobs()?;
        if let AdminJob::Update(info) = &job {
            self.within_tenant_instances(info)?;
        }
        if let AdminJob::ShadowStart(record) = &job {
            // One more instance: checked again here, in the owner's order,
            // so that concurrent starts cannot pass the share together.
            let feed = self.require(id)?;
            let mut with = feed.manager.changefeed().info.clone();
            with.begin_shadow((**record).clone());
            self.within_tenant_instances(&with)?;
        }
        let feed = self
            .feeds
            .get_mut(id)
            .ok_or_else(|| OwnerError::no_changefeed(id))?;
        let before = feed.manager.changefeed().clone();
        let effect = feed.manager.apply_admin_job(job)?;
        if let Err(e) = self.persist(id, true).await {
            // Not stored: undo, so that memory matches the store.
            let feed = self.feeds.get_mut(id).expect("present");
            feed.manager = manager(before, self.config.backoff)?;
            return Err(e.into());
        }
        match effect {
            Effect::Start { epoch, checkpoint } => self.start(id, epoch, checkpoint).await,
            Effect::Stop => self.stop(id),
            Effect::Remove => {
                self.stop(id);
                self.forget(id).await?;
            }
            Effect::Reconfigured => {
                let feed = self.feeds.get_mut(id).expect("present");
                let revision = feed.info_revision;
                if let Some(work) = &mut feed.work {
                    work.reconfigure(revision);
                }
            }
            // Removing again finishes what a failed removal left behind.
            Effect::Unchanged
                if self.feeds[id].manager.changefeed().state() == FeedState::Removed =>
            {
                self.forget(id).await?;
            }
            Effect::Updated | Effect::Unchanged => {}
        }
        Ok(())
    }

    /// Drops what a removed changefeed kept besides its tombstone.
    async fn forget(&mut self, id: &ChangefeedId) -> Result<(), SaveError> {
        self.ctx.forget(id).await?;
        if let Some(feed) = self.feeds.get_mut(id) {
            feed.totals = Totals::default();
        }
        self.ctx.forget_work(id);
        Ok(())
    }

    fn require(&self, id: &ChangefeedId) -> Result<&Feed<C::Work>, OwnerError> {
        self.feeds
            .get(id)
            .ok_or_else(|| OwnerError::no_changefeed(id))
    }

    /// Removes a plugin unless a changefeed (or a create or update being
    /// checked) uses it.
    pub(crate) async fn delete_plugin(
        &mut self,
        tenant: &str,
        plugin: &PluginId,
    ) -> Result<(), OwnerError> {
        let mut users = self.snapshot().users_of(tenant, plugin);
        for p in &self.pending {
            let info = &p.info;
            if info.id.tenant() == tenant && info.config.plugins().any(|(_, r)| &r.plugin == plugin)
            {
                users.push(info.id.to_string());
            }
        }
        users.sort();
        users.dedup();
        self.ctx.delete_plugin(tenant, plugin, &users).await
    }
}

/// The checkpoint a new owner takes for a changefeed: the one its status
/// saved, or the lowest of those its current epoch's sides saved in their
/// task positions (`sides`), if that is later.
fn recovered_checkpoint(
    status: CheckpointTs,
    sides: impl Iterator<Item = CheckpointTs>,
) -> CheckpointTs {
    sides.min().map_or(status, |lowest| status.max(lowest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_owner_takes_the_lowest_checkpoint_of_the_sides_of_a_run() {
        let ts = CheckpointTs::new;
        let got = |status, sides: &[u64]| {
            recovered_checkpoint(ts(status), sides.iter().map(|s| ts(*s))).get()
        };
        // A receiving side saved past the reading side: the reader's.
        assert_eq!(got(100, &[150, 130]), 130);
        assert_eq!(got(100, &[150]), 150);
        assert_eq!(got(100, &[]), 100);
        assert_eq!(got(100, &[90, 160]), 100);
    }
}
