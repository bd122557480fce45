//! The owner as an actor: one task owns every changefeed's state ([`Runtime`]);
//! callers hold an [`Owner`] handle that sends it commands (each answered on its
//! own reply channel), and read what it last published ([`Snapshot`], through a
//! `tokio::sync::watch`). Queries, metrics and health read the snapshot and never
//! wait for the task, so a struggling sink's stop or a slow meta-store write
//! holds up no reader. The task checks a create's or update's plugins outside
//! itself, and never waits for work to stop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{CheckpointTs, CommitTs};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::Epoch;
use crate::admin::AdminJob;
use crate::context::{LiveProgress, OwnerContext, WorkProgress};
use crate::error::OwnerError;
use crate::id::ChangefeedId;
use crate::info::{Changefeed, ChangefeedInfo};
use crate::plugin::PluginId;
use crate::runtime::{OwnerConfig, Runtime, Totals};
use crate::shadow::ShadowAsk;
use crate::state::FeedState;
use crate::swap::SwapAsk;

/// A change of a running changefeed's plugins, checked before it is recorded.
#[derive(Debug)]
pub(crate) enum PluginChange {
    /// A swap.
    Swap(SwapAsk),
    /// A shadow start.
    Shadow(ShadowAsk),
}

/// How often the owner looks at every changefeed without being woken.
const TICK: Duration = Duration::from_millis(200);

/// Requests waiting for the owner task; past this a request is refused as
/// unavailable (retry) instead of queueing without bound.
pub const MAX_QUEUED_COMMANDS: usize = 1024;
/// Creates and updates whose plugins are being checked; past this a new one is
/// refused as unavailable, so a flood of creates holds no more than this many
/// descriptions and reservations.
pub const MAX_PENDING_CHECKS: usize = 64;
/// Plugin checks (each loads its plugins) that run at once; the others wait.
pub const CONCURRENT_CHECKS: usize = 2;

/// A changefeed as the owner last published it.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) changefeed: Changefeed,
    pub(crate) totals: Totals,
    pub(crate) resolved: CommitTs,
    pub(crate) last_advance_ms: u64,
    pub(crate) last_shadow: Option<crate::ShadowReport>,
    /// The epoch and progress of its current work, if any.
    pub(crate) work: Option<(Epoch, Arc<dyn LiveProgress>)>,
    /// Whether its work was asked to stop and has not been taken in yet.
    pub(crate) stopping: bool,
}

/// A changefeed as the API shows it.
#[derive(Debug, Clone)]
pub struct FeedView {
    /// Its record, with the running work's checkpoint if that is newer.
    pub changefeed: Changefeed,
    /// The highest ts the source resolved (at least the checkpoint).
    pub resolved_ts: CommitTs,
    /// Its running work's progress.
    pub progress: Option<WorkProgress>,
    /// Counters of its earlier work.
    pub totals: Totals,
    /// When its checkpoint last moved (ms since the Unix epoch).
    pub last_advance_ms: u64,
    /// What the capture last reported about the changefeed's shadow (the
    /// running work's, or the last work's while this owner runs).
    pub shadow: Option<crate::ShadowReport>,
}

impl FeedView {
    /// Counters including the running work's.
    pub fn counters(&self) -> Totals {
        let mut t = self.totals;
        if let Some(p) = &self.progress {
            t.add(p);
        }
        t
    }
}

/// What the owner last published: every changefeed.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub(crate) feeds: BTreeMap<ChangefeedId, Entry>,
    pub(crate) closing: bool,
}

impl Snapshot {
    /// `id` as the API shows it (removed ones too). Running work's progress is
    /// read now: it is newer than the owner's last round and durable already.
    pub fn view(&self, id: &ChangefeedId) -> Option<FeedView> {
        let e = self.feeds.get(id)?;
        let progress = e.work.as_ref().and_then(|(_, live)| live.progress());
        let progress_shadow = progress.as_ref().and_then(|p| p.shadow.clone());
        let mut cf = e.changefeed.clone();
        let mut resolved = e.resolved;
        if let (Some(p), Some((epoch, _))) = (&progress, &e.work)
            && *epoch == cf.epoch()
            && cf.state().is_running()
        {
            cf.status.checkpoint_ts = cf.status.checkpoint_ts.max(p.checkpoint_ts);
            resolved = resolved.max(p.resolved_ts);
        }
        Some(FeedView {
            resolved_ts: resolved.max(CommitTs::from(cf.checkpoint())),
            changefeed: cf,
            progress,
            totals: e.totals,
            last_advance_ms: e.last_advance_ms,
            shadow: progress_shadow.or_else(|| e.last_shadow.clone()),
        })
    }

    /// `id`, unless it does not exist or was removed.
    pub fn get(&self, id: &ChangefeedId) -> Result<FeedView, OwnerError> {
        match self.feeds.get(id) {
            Some(e) if e.changefeed.state() != FeedState::Removed => {
                Ok(self.view(id).expect("present"))
            }
            _ => Err(OwnerError::no_changefeed(id)),
        }
    }

    /// Changefeeds of `tenant` (all tenants when empty), removed ones left out.
    pub fn list(&self, tenant: &str) -> Vec<FeedView> {
        self.feeds
            .iter()
            .filter(|(id, e)| {
                (tenant.is_empty() || id.tenant() == tenant)
                    && e.changefeed.state() != FeedState::Removed
            })
            .filter_map(|(id, _)| self.view(id))
            .collect()
    }

    /// Changefeeds of `tenant` that use `plugin` (removed ones do not count),
    /// as a plugin or as the old version of a swap in progress (a rollback
    /// needs it).
    pub fn users_of(&self, tenant: &str, plugin: &PluginId) -> Vec<String> {
        self.feeds
            .iter()
            .filter(|(id, e)| {
                let info = &e.changefeed.info;
                id.tenant() == tenant
                    && info.state != FeedState::Removed
                    && (info.config.plugins().any(|(_, p)| &p.plugin == plugin)
                        || info.open_swap().is_some_and(|s| s.from_plugin() == plugin)
                        || info
                            .running_shadow()
                            .is_some_and(|s| &s.candidate.plugin == plugin))
            })
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Whether `id`'s work is where its state wants it: none is stopping.
    pub fn settled(&self, id: &ChangefeedId) -> bool {
        self.feeds.get(id).is_none_or(|e| !e.stopping)
    }

    /// Whether the owner refuses admin jobs (the server is stopping).
    pub fn closing(&self) -> bool {
        self.closing
    }
}

type Reply<T> = oneshot::Sender<Result<T, OwnerError>>;

enum Command {
    Begin {
        info: Box<ChangefeedInfo>,
        create: bool,
        reply: Reply<FeedView>,
    },
    Checked {
        token: u64,
        info: Box<ChangefeedInfo>,
        checked: Result<(), OwnerError>,
        reply: Reply<FeedView>,
    },
    Admin {
        id: ChangefeedId,
        job: AdminJob,
        reply: Reply<FeedView>,
    },
    Change {
        id: ChangefeedId,
        change: Box<PluginChange>,
        reply: Reply<FeedView>,
    },
    DeletePlugin {
        tenant: String,
        plugin: PluginId,
        reply: Reply<()>,
    },
    Close {
        reply: Reply<()>,
    },
    Shutdown {
        abort: bool,
        reply: Reply<()>,
    },
}

/// A handle on the owner task: commands go to it, queries read its snapshot.
#[derive(Clone)]
pub struct Owner {
    commands: mpsc::Sender<Command>,
    snapshot: watch::Receiver<Arc<Snapshot>>,
}

fn gone() -> OwnerError {
    OwnerError::Unavailable("the server is stopping; retry once it is back".into())
}

impl Owner {
    /// Loads every changefeed through `ctx`, starts the ones that run, and
    /// spawns the owner task. `wake` carries changefeeds whose work ended (the
    /// owner takes them in at once rather than at its next round).
    pub async fn start<C: OwnerContext>(
        ctx: Arc<C>,
        config: OwnerConfig,
        wake: mpsc::UnboundedReceiver<ChangefeedId>,
    ) -> Result<(Self, JoinHandle<()>), OwnerError> {
        let runtime = Runtime::load(ctx, config).await?;
        let (publish, snapshot) = watch::channel(Arc::new(runtime.snapshot()));
        let (commands, inbox) = mpsc::channel(MAX_QUEUED_COMMANDS);
        let (checked, checks) = mpsc::unbounded_channel();
        let task = tokio::spawn(
            run(runtime, inbox, (checked, checks), wake, publish)
                .instrument(tracing::info_span!("owner")),
        );
        Ok((Self { commands, snapshot }, task))
    }

    /// What the owner last published.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    async fn ask<T>(&self, command: impl FnOnce(Reply<T>) -> Command) -> Result<T, OwnerError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .try_send(command(reply))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => OwnerError::Unavailable(format!(
                    "the owner has {MAX_QUEUED_COMMANDS} requests waiting; retry shortly"
                )),
                mpsc::error::TrySendError::Closed(_) => gone(),
            })?;
        answer.await.map_err(|_| gone())?
    }

    /// Like `ask`, but waits for room in the queue (close and shutdown must
    /// not be refused).
    async fn ask_waiting<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<T, OwnerError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(command(reply))
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Creates a changefeed from a checked description and starts it. Its id is
    /// checked once, and its plugins once, outside the owner task.
    pub async fn create(&self, info: ChangefeedInfo) -> Result<FeedView, OwnerError> {
        self.ask(|reply| Command::Begin {
            info: Box::new(info),
            create: true,
            reply,
        })
        .await
    }

    /// Replaces the description of a stopped or failed changefeed.
    pub async fn update(&self, info: ChangefeedInfo) -> Result<FeedView, OwnerError> {
        self.ask(|reply| Command::Begin {
            info: Box::new(info),
            create: false,
            reply,
        })
        .await
    }

    /// Applies pause, resume or remove to `id`. Returns once the job is stored
    /// and its effect started; [`Owner::settle`] waits for stopped work.
    pub async fn admin(&self, id: &ChangefeedId, job: AdminJob) -> Result<FeedView, OwnerError> {
        let id = id.clone();
        self.ask(|reply| Command::Admin { id, job, reply }).await
    }

    /// Swaps `id`'s sink as `ask` says, while it runs: the new version is
    /// checked first (outside the owner task); then the swap is recorded and
    /// the capture carries it out at a barrier. Returns once it is recorded;
    /// `changefeed query` shows how it goes.
    pub async fn swap(&self, id: &ChangefeedId, ask: SwapAsk) -> Result<FeedView, OwnerError> {
        self.change(id, PluginChange::Swap(ask)).await
    }

    /// Runs a candidate in shadow beside one of `id`'s plugins, as `ask`
    /// says: the candidate is checked first (outside the owner task), then
    /// recorded; the capture starts it without stopping the work.
    pub async fn shadow_start(
        &self,
        id: &ChangefeedId,
        ask: ShadowAsk,
    ) -> Result<FeedView, OwnerError> {
        self.change(id, PluginChange::Shadow(ask)).await
    }

    /// Stops the shadow running beside one of `id`'s plugins.
    pub async fn shadow_stop(&self, id: &ChangefeedId) -> Result<FeedView, OwnerError> {
        self.admin(id, AdminJob::ShadowStop).await
    }

    /// Turns the shadow running beside one of `id`'s plugins into a swap to
    /// its candidate (on trial for `probation`): one write ends the shadow
    /// and records the swap.
    pub async fn promote(
        &self,
        id: &ChangefeedId,
        probation: crate::ProbationPolicy,
        by: String,
    ) -> Result<FeedView, OwnerError> {
        let view = self.snapshot().get(id)?;
        let info = &view.changefeed.info;
        let shadow = info.running_shadow().ok_or_else(|| {
            OwnerError::from(crate::error::AdminError::NoShadow { id: id.clone() })
        })?;
        let role = shadow.role().ok_or_else(|| {
            OwnerError::Invalid(format!("the shadow's role `{}` is unknown", shadow.role))
        })?;
        let live = info.plugin(role).ok_or_else(|| {
            OwnerError::Invalid(format!("changefeed {id} has no {role} any more"))
        })?;
        // A sink candidate ran against a staging target (its own options and
        // grants): the promoted version keeps the live sink's. A filter
        // candidate's options are what is promoted, within the live grants.
        let to = match role {
            crate::PluginRole::Sink => {
                let mut to = live.clone();
                to.plugin = shadow.candidate.plugin.clone();
                to.limits = shadow.candidate.limits;
                to
            }
            crate::PluginRole::Filter(_) => {
                let mut to = shadow.candidate.clone();
                to.capabilities = live.capabilities.clone();
                to
            }
        };
        let ask = SwapAsk {
            role,
            to,
            probation,
            by,
            expect: Some(live.plugin.clone()),
            promotes: Some(shadow.seq),
        };
        self.swap(id, ask).await
    }

    async fn change(
        &self,
        id: &ChangefeedId,
        change: PluginChange,
    ) -> Result<FeedView, OwnerError> {
        let id = id.clone();
        self.ask(|reply| Command::Change {
            id,
            change: Box::new(change),
            reply,
        })
        .await
    }

    /// Pauses `id`.
    pub async fn pause(&self, id: &ChangefeedId) -> Result<FeedView, OwnerError> {
        self.admin(id, AdminJob::Pause).await
    }

    /// Resumes `id`, from its checkpoint or from `overwrite_checkpoint`.
    pub async fn resume(
        &self,
        id: &ChangefeedId,
        overwrite_checkpoint: Option<CheckpointTs>,
    ) -> Result<FeedView, OwnerError> {
        self.admin(
            id,
            AdminJob::Resume {
                overwrite_checkpoint,
            },
        )
        .await
    }

    /// Removes `id`.
    pub async fn remove(&self, id: &ChangefeedId) -> Result<FeedView, OwnerError> {
        self.admin(id, AdminJob::Remove).await
    }

    /// Removes an uploaded plugin unless a changefeed uses it (checked by the
    /// owner task, so that no create starts using it meanwhile).
    pub async fn delete_plugin(&self, tenant: &str, plugin: &PluginId) -> Result<(), OwnerError> {
        let (tenant, plugin) = (tenant.to_string(), plugin.clone());
        self.ask(|reply| Command::DeletePlugin {
            tenant,
            plugin,
            reply,
        })
        .await
    }

    /// Waits, reading the snapshot, until `id`'s work is where its state wants
    /// it (stopped work was taken in) or `within` has passed, and returns `id`
    /// as it then stands. Holds nothing while it waits.
    pub async fn settle(
        &self,
        id: &ChangefeedId,
        within: Duration,
    ) -> Result<FeedView, OwnerError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut snapshot = self.snapshot.clone();
        loop {
            let now = snapshot.borrow_and_update().clone();
            if now.settled(id) || tokio::time::Instant::now() >= deadline {
                return now
                    .view(id)
                    .ok_or_else(|| OwnerError::NotFound(format!("no changefeed {id}")));
            }
            match tokio::time::timeout_at(deadline, snapshot.changed()).await {
                Ok(Ok(())) | Err(_) => {}
                // The owner task is gone: nothing will change any more.
                Ok(Err(_)) => {
                    return now
                        .view(id)
                        .ok_or_else(|| OwnerError::NotFound(format!("no changefeed {id}")));
                }
            }
        }
    }

    /// Refuses admin jobs and new work from now on (the server is stopping).
    pub async fn close(&self) {
        let _ = self.ask_waiting(|reply| Command::Close { reply }).await;
    }

    /// Stops every changefeed's work (cleanly, or at once with `abort`), saves
    /// every status and ends the owner task.
    pub async fn shutdown(&self, abort: bool) {
        let _ = self
            .ask_waiting(|reply| Command::Shutdown { abort, reply })
            .await;
    }
}

/// What a create, update or swap has checked outside the owner task.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// The plugins and the source (a create or update).
    Whole,
    /// The plugins only (a swap changes a plugin of a running changefeed).
    Plugins,
}

fn busy() -> OwnerError {
    OwnerError::Unavailable(format!(
        "{MAX_PENDING_CHECKS} creates, updates and swaps are having their plugins checked; \
         retry shortly"
    ))
}

/// Checks `info` on a task of its own (loading and validating plugins takes a
/// while: not in the owner task), at most [`CONCURRENT_CHECKS`] at a time, and
/// hands the answer back to the owner task as [`Command::Checked`].
fn spawn_check<C: OwnerContext>(
    (ctx, slots, outbox): (Arc<C>, Arc<Semaphore>, mpsc::UnboundedSender<Command>),
    token: u64,
    mut info: Box<ChangefeedInfo>,
    check: Check,
    reply: Reply<FeedView>,
) {
    tokio::spawn(
        async move {
            let checked = match slots.acquire_owned().await {
                Ok(_slot) => match check {
                    Check::Whole => ctx.check(&info).await.map(|pinned| {
                        if let Some(source) = pinned {
                            info.config.source = source;
                        }
                    }),
                    Check::Plugins => ctx.check_plugins(&info).await,
                },
                Err(_) => Err(gone()),
            };
            let _ = outbox.send(Command::Checked {
                token,
                info,
                checked,
                reply,
            });
        }
        .in_current_span(),
    );
}

async fn run<C: OwnerContext>(
    mut runtime: Runtime<C>,
    mut inbox: mpsc::Receiver<Command>,
    (outbox, mut checks): (
        mpsc::UnboundedSender<Command>,
        mpsc::UnboundedReceiver<Command>,
    ),
    mut wake: mpsc::UnboundedReceiver<ChangefeedId>,
    publish: watch::Sender<Arc<Snapshot>>,
) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let check_slots = Arc::new(Semaphore::new(CONCURRENT_CHECKS));
    let mut pending_checks = 0usize;
    loop {
        let command = tokio::select! {
            // Finished checks first: they release reservations.
            biased;
            Some(command) = checks.recv() => Some(command),
            command = inbox.recv() => match command {
                Some(command) => Some(command),
                None => break,
            },
            Some(_) = wake.recv() => None,
            _ = ticks.tick() => None,
        };
        let Some(command) = command else {
            runtime.tick().await;
            publish.send_replace(Arc::new(runtime.snapshot()));
            continue;
        };
        // Every answer is sent after the snapshot that shows its effect.
        let answer = |runtime: &Runtime<C>, id: &ChangefeedId| {
            let snapshot = Arc::new(runtime.snapshot());
            publish.send_replace(snapshot.clone());
            snapshot
                .view(id)
                .ok_or_else(|| OwnerError::no_changefeed(id))
        };
        match command {
            Command::Begin { reply, .. } if pending_checks >= MAX_PENDING_CHECKS => {
                let _ = reply.send(Err(busy()));
            }
            Command::Begin {
                info,
                create,
                reply,
            } => match runtime.begin(&info, create) {
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
                Ok(token) => {
                    pending_checks += 1;
                    let checks = (runtime.context(), check_slots.clone(), outbox.clone());
                    spawn_check(checks, token, info, Check::Whole, reply);
                }
            },
            Command::Checked {
                token,
                info,
                checked,
                reply,
            } => {
                pending_checks -= 1;
                let id = info.id.clone();
                let result = runtime.finish(token, *info, checked).await;
                let _ = reply.send(result.and_then(|()| answer(&runtime, &id)));
            }
            Command::Change { reply, .. } if pending_checks >= MAX_PENDING_CHECKS => {
                let _ = reply.send(Err(busy()));
            }
            Command::Change { id, change, reply } => match runtime.begin_change(&id, *change) {
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
                Ok((token, candidate)) => {
                    pending_checks += 1;
                    let checks = (runtime.context(), check_slots.clone(), outbox.clone());
                    spawn_check(checks, token, Box::new(candidate), Check::Plugins, reply);
                }
            },
            Command::Admin { id, job, reply } => {
                let result = runtime.admin(&id, job).await;
                let _ = reply.send(result.and_then(|()| answer(&runtime, &id)));
            }
            Command::DeletePlugin {
                tenant,
                plugin,
                reply,
            } => {
                let _ = reply.send(runtime.delete_plugin(&tenant, &plugin).await);
            }
            Command::Close { reply } => {
                runtime.close();
                publish.send_replace(Arc::new(runtime.snapshot()));
                let _ = reply.send(Ok(()));
            }
            Command::Shutdown { abort, reply } => {
                runtime.shutdown(abort).await;
                publish.send_replace(Arc::new(runtime.snapshot()));
                let _ = reply.send(Ok(()));
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
