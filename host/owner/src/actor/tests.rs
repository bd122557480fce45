//! The owner runtime, step by step, against a fake context: no process, no
//! meta store, no plugin.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use sluice_config::SourceConfig;
use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::Revision;
use tokio::sync::{Notify, mpsc};

use super::*;
use crate::Outcome;
use crate::backoff::BackoffConfig;
use crate::context::{InfoWrite, SaveError, Stored, Work};
use crate::info::ChangefeedStatus;

/// One piece of fake work; the test decides when and how it ends.
#[derive(Default)]
struct FakeWorkState {
    stopping: AtomicBool,
    outcome: Mutex<Option<Outcome>>,
    ended: Notify,
    progress: Mutex<Option<WorkProgress>>,
    /// Every info revision the work was told of after it started.
    reconfigured: Mutex<Vec<Revision>>,
}

impl FakeWorkState {
    fn end(&self, outcome: Outcome) {
        *self.outcome.lock().unwrap() = Some(outcome);
        self.ended.notify_waiters();
    }
}

impl LiveProgress for FakeWorkState {
    fn progress(&self) -> Option<WorkProgress> {
        self.progress.lock().unwrap().clone()
    }
}

struct FakeWork {
    epoch: Epoch,
    state: Arc<FakeWorkState>,
}

impl Work for FakeWork {
    fn epoch(&self) -> Epoch {
        self.epoch
    }
    fn live(&self) -> Arc<dyn LiveProgress> {
        self.state.clone()
    }
    fn signal_stop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
    }
    fn is_stopping(&self) -> bool {
        self.state.stopping.load(Ordering::SeqCst)
    }
    fn is_finished(&self) -> bool {
        self.state.outcome.lock().unwrap().is_some()
    }
    fn reconfigure(&mut self, info_revision: Revision) {
        self.state.reconfigured.lock().unwrap().push(info_revision);
    }
    async fn join(self) -> Outcome {
        loop {
            let ended = self.state.ended.notified();
            if let Some(outcome) = self.state.outcome.lock().unwrap().clone() {
                return outcome;
            }
            ended.await;
        }
    }
    async fn abort(self) {}
}

/// A write: (changefeed, info written, status written).
type Write = (
    ChangefeedId,
    Option<ChangefeedInfo>,
    Option<ChangefeedStatus>,
);
/// A start: (changefeed, epoch, checkpoint, its fake work).
type Start = (ChangefeedId, Epoch, CheckpointTs, Arc<FakeWorkState>);

#[derive(Default)]
struct FakeContext {
    stored: Mutex<Option<Stored>>,
    /// (changefeed, info written, status written), in order.
    writes: Mutex<Vec<Write>>,
    revision: AtomicU64,
    fail_writes: AtomicBool,
    plugin_checks: AtomicUsize,
    /// When set, plugin checks wait for it.
    gate: Option<Arc<Notify>>,
    /// (changefeed, epoch, checkpoint) of every start, and its state.
    started: Mutex<Vec<Start>>,
    /// Plugin checks refuse this plugin id.
    refuse: Mutex<Option<String>>,
}

impl OwnerContext for FakeContext {
    type Work = FakeWork;

    async fn load(&self) -> Result<Stored, OwnerError> {
        Ok(self.stored.lock().unwrap().take().unwrap_or_default())
    }

    async fn save(
        &self,
        id: &ChangefeedId,
        info: Option<InfoWrite<'_>>,
        status: Option<&ChangefeedStatus>,
    ) -> Result<Revision, SaveError> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(SaveError::Unavailable("the store is down".into()));
        }
        self.writes.lock().unwrap().push((
            id.clone(),
            info.map(|w| w.info.clone()),
            status.cloned(),
        ));
        Ok(Revision(self.revision.fetch_add(1, Ordering::SeqCst) + 1))
    }

    async fn forget(&self, _: &ChangefeedId) -> Result<(), SaveError> {
        Ok(())
    }

    async fn check(&self, _: &ChangefeedInfo) -> Result<Option<SourceConfig>, OwnerError> {
        self.plugin_checks.fetch_add(1, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        Ok(None)
    }

    async fn check_plugins(&self, info: &ChangefeedInfo) -> Result<(), OwnerError> {
        self.plugin_checks.fetch_add(1, Ordering::SeqCst);
        let refused = self.refuse.lock().unwrap().clone();
        match refused {
            Some(p) if info.config.sink.plugin.to_string() == p => Err(OwnerError::Invalid(
                format!("sink.config was rejected by `{p}`: no"),
            )),
            _ => Ok(()),
        }
    }

    async fn delete_plugin(
        &self,
        _: &str,
        p: &PluginId,
        used_by: &[String],
    ) -> Result<(), OwnerError> {
        if used_by.is_empty() {
            Ok(())
        } else {
            Err(OwnerError::Precondition(format!(
                "{p} is used by {}",
                used_by.join(", ")
            )))
        }
    }

    fn start_work(
        &self,
        info: &ChangefeedInfo,
        epoch: Epoch,
        checkpoint: CheckpointTs,
        _: Revision,
    ) -> FakeWork {
        let state = Arc::new(FakeWorkState::default());
        self.started
            .lock()
            .unwrap()
            .push((info.id.clone(), epoch, checkpoint, state.clone()));
        FakeWork { epoch, state }
    }

    fn forget_work(&self, _: &ChangefeedId) {}
}

fn id(name: &str) -> ChangefeedId {
    ChangefeedId::new("acme", name).unwrap()
}

fn info(name: &str) -> ChangefeedInfo {
    ChangefeedInfo::new(
        id(name),
        crate::info::tests::sample_config(),
        CommitTs::new(1),
    )
}

fn config() -> OwnerConfig {
    OwnerConfig {
        backoff: BackoffConfig::default(),
        max_tenant_instances: 64,
    }
}

async fn owner(ctx: FakeContext) -> (Owner, Arc<FakeContext>) {
    let ctx = Arc::new(ctx);
    let (_wake, woken) = mpsc::unbounded_channel();
    let (owner, _task) = Owner::start(ctx.clone(), config(), woken).await.unwrap();
    (owner, ctx)
}

fn work_of(ctx: &FakeContext, name: &str) -> Arc<FakeWorkState> {
    let started = ctx.started.lock().unwrap();
    let (.., state) = started.iter().rev().find(|(i, ..)| *i == id(name)).unwrap();
    state.clone()
}

#[tokio::test]
async fn a_create_checks_its_plugins_once_and_persists_before_it_starts() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    let view = owner.create(info("orders")).await.unwrap();
    assert_eq!(view.changefeed.state(), FeedState::Normal);
    assert_eq!(view.changefeed.epoch(), Epoch(1));
    assert_eq!(ctx.plugin_checks.load(Ordering::SeqCst), 1);
    let writes = ctx.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].1.as_ref().unwrap().epoch, Epoch(1));
    assert_eq!(
        ctx.started.lock().unwrap()[0].1,
        Epoch(1),
        "started at the stored epoch"
    );
    // A second create of the name is refused by the owner, before any plugin
    // is looked at.
    let err = owner.create(info("orders")).await.unwrap_err();
    assert!(matches!(err, OwnerError::AlreadyExists(_)), "{err:?}");
    assert_eq!(ctx.plugin_checks.load(Ordering::SeqCst), 1);
    assert_eq!(owner.snapshot().list("acme").len(), 1);
}

#[tokio::test]
async fn a_name_stays_taken_while_its_create_checks_plugins() {
    let gate = Arc::new(Notify::new());
    let (owner, ctx) = owner(FakeContext {
        gate: Some(gate.clone()),
        ..FakeContext::default()
    })
    .await;
    let first = tokio::spawn({
        let owner = owner.clone();
        async move { owner.create(info("orders")).await }
    });
    while ctx.plugin_checks.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let err = owner.create(info("orders")).await.unwrap_err();
    assert!(matches!(err, OwnerError::AlreadyExists(_)), "{err:?}");
    // The plugin it uses cannot be deleted meanwhile.
    let plugin: PluginId = "sink-file@0.1.0".parse().unwrap();
    let err = owner.delete_plugin("acme", &plugin).await.unwrap_err();
    assert!(err.to_string().contains("acme/orders"), "{err}");
    gate.notify_waiters();
    first.await.unwrap().unwrap();
    assert_eq!(ctx.started.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_stop_that_never_ends_holds_up_no_command_and_no_query() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    owner.create(info("stuck")).await.unwrap();
    owner.create(info("healthy")).await.unwrap();
    // The pause is stored and the work asked to stop; the work never ends.
    let paused = tokio::time::timeout(Duration::from_secs(1), owner.pause(&id("stuck")))
        .await
        .expect("the pause does not wait for the stop")
        .unwrap();
    assert_eq!(paused.changefeed.state(), FeedState::Stopped);
    assert!(work_of(&ctx, "stuck").stopping.load(Ordering::SeqCst));
    assert!(!owner.snapshot().settled(&id("stuck")));
    // Meanwhile every other request is answered.
    let snapshot = owner.snapshot();
    assert_eq!(
        snapshot.get(&id("healthy")).unwrap().changefeed.state(),
        FeedState::Normal
    );
    let view = tokio::time::timeout(Duration::from_secs(1), owner.pause(&id("healthy")))
        .await
        .expect("another changefeed's job is not held up")
        .unwrap();
    assert_eq!(view.changefeed.state(), FeedState::Stopped);
    // Settling gives up at its deadline, and succeeds once the work has ended.
    let view = owner
        .settle(&id("stuck"), Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(view.changefeed.state(), FeedState::Stopped);
    *work_of(&ctx, "stuck").progress.lock().unwrap() = Some(WorkProgress {
        checkpoint_ts: CheckpointTs::new(7),
        rows_read: 3,
        ..WorkProgress::default()
    });
    work_of(&ctx, "stuck").end(Outcome::Stopped);
    let view = owner
        .settle(&id("stuck"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(owner.snapshot().settled(&id("stuck")));
    assert_eq!(
        view.counters().rows_read,
        3,
        "the ended work's counters are kept"
    );
}

#[tokio::test]
async fn a_job_whose_write_fails_changes_nothing() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    owner.create(info("orders")).await.unwrap();
    ctx.fail_writes.store(true, Ordering::SeqCst);
    let err = owner.pause(&id("orders")).await.unwrap_err();
    assert!(matches!(err, OwnerError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("retry"), "{err}");
    let view = owner.snapshot().get(&id("orders")).unwrap();
    assert_eq!(view.changefeed.state(), FeedState::Normal);
    assert!(!work_of(&ctx, "orders").stopping.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_restart_takes_the_checkpoint_of_the_current_epoch_under_a_new_epoch() {
    let mut stored_info = info("orders");
    stored_info.epoch = Epoch(3);
    stored_info.created_at_ms = 1;
    let stored = Stored {
        infos: vec![(stored_info, Revision(5))],
        statuses: vec![(
            id("orders"),
            ChangefeedStatus {
                checkpoint_ts: CheckpointTs::new(100),
                ..ChangefeedStatus::at_start(CommitTs::new(1))
            },
        )],
        positions: vec![
            (id("orders"), Epoch(3), CheckpointTs::new(150)),
            // An older epoch's position may predate an overwritten checkpoint.
            (id("orders"), Epoch(2), CheckpointTs::new(900)),
        ],
        unreadable: vec![id("broken")],
        // Work of another epoch still running is not adopted.
        running: vec![(id("orders"), Epoch(2))],
    };
    let (owner, ctx) = owner(FakeContext {
        stored: Mutex::new(Some(stored)),
        ..FakeContext::default()
    })
    .await;
    let view = owner.snapshot().get(&id("orders")).unwrap();
    assert_eq!(view.changefeed.epoch(), Epoch(4));
    assert_eq!(view.changefeed.checkpoint(), CheckpointTs::new(150));
    let (_, epoch, checkpoint, _) = ctx.started.lock().unwrap()[0].clone();
    assert_eq!((epoch, checkpoint), (Epoch(4), CheckpointTs::new(150)));
    // A changefeed with records this build cannot read is left alone.
    let err = owner.create(info("broken")).await.unwrap_err();
    assert!(matches!(err, OwnerError::Precondition(_)), "{err:?}");
}

#[tokio::test]
async fn a_new_owner_adopts_work_that_still_runs_under_the_stored_epoch() {
    let mut stored_info = info("orders");
    stored_info.epoch = Epoch(3);
    stored_info.created_at_ms = 1;
    let stored = Stored {
        infos: vec![(stored_info, Revision(5))],
        positions: vec![(id("orders"), Epoch(3), CheckpointTs::new(150))],
        running: vec![(id("orders"), Epoch(3))],
        ..Stored::default()
    };
    let (owner, ctx) = owner(FakeContext {
        stored: Mutex::new(Some(stored)),
        ..FakeContext::default()
    })
    .await;
    let view = owner.snapshot().get(&id("orders")).unwrap();
    assert_eq!(view.changefeed.epoch(), Epoch(3), "the same run goes on");
    assert_eq!(view.changefeed.checkpoint(), CheckpointTs::new(150));
    let (_, epoch, checkpoint, _) = ctx.started.lock().unwrap()[0].clone();
    assert_eq!((epoch, checkpoint), (Epoch(3), CheckpointTs::new(150)));
}

#[tokio::test]
async fn a_flood_of_creates_is_bounded_and_refused_past_the_bound() {
    use super::{CONCURRENT_CHECKS, MAX_PENDING_CHECKS};
    let gate = Arc::new(Notify::new());
    let (owner, ctx) = owner(FakeContext {
        gate: Some(gate.clone()),
        ..FakeContext::default()
    })
    .await;
    const FLOOD: usize = 200;
    let creates: Vec<_> = (0..FLOOD)
        .map(|i| {
            let owner = owner.clone();
            tokio::spawn(async move { owner.create(info(&format!("feed-{i}"))).await })
        })
        .collect();
    // While every check waits, only CONCURRENT_CHECKS of them run, and every
    // create past MAX_PENDING_CHECKS is answered at once.
    let refused_at_once = loop {
        let done = creates.iter().filter(|c| c.is_finished()).count();
        if done >= FLOOD - MAX_PENDING_CHECKS {
            break done;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(refused_at_once, FLOOD - MAX_PENDING_CHECKS);
    while ctx.plugin_checks.load(Ordering::SeqCst) < CONCURRENT_CHECKS {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        ctx.plugin_checks.load(Ordering::SeqCst),
        CONCURRENT_CHECKS,
        "checks run at most {CONCURRENT_CHECKS} at a time"
    );
    // Queries still answer meanwhile.
    assert_eq!(owner.snapshot().list("acme").len(), 0);
    // Let the checks through, a wave at a time.
    while !creates.iter().all(|c| c.is_finished()) {
        gate.notify_waiters();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut created = 0;
    let mut unavailable = 0;
    for c in creates {
        match c.await.unwrap() {
            Ok(_) => created += 1,
            Err(OwnerError::Unavailable(m)) => {
                assert!(m.contains("retry"), "{m}");
                unavailable += 1;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(created, MAX_PENDING_CHECKS);
    assert_eq!(unavailable, FLOOD - MAX_PENDING_CHECKS);
    assert_eq!(owner.snapshot().list("acme").len(), MAX_PENDING_CHECKS);
    assert_eq!(
        ctx.plugin_checks.load(Ordering::SeqCst),
        MAX_PENDING_CHECKS,
        "a refused create checks no plugin"
    );
}

fn ask(plugin: &str) -> crate::SwapAsk {
    let mut to = crate::info::tests::sample_config().sink;
    to.plugin = plugin.parse().unwrap();
    crate::SwapAsk {
        role: crate::PluginRole::Sink,
        to,
        probation: crate::ProbationPolicy::default(),
        by: "acme".into(),
        expect: None,
        promotes: None,
    }
}

/// Waits until `cond` holds of the snapshot's view of `name`.
async fn wait_for(owner: &Owner, name: &str, cond: impl Fn(&FeedView) -> bool) -> FeedView {
    for _ in 0..500 {
        let view = owner.snapshot().get(&id(name)).unwrap();
        if cond(&view) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{name} never got there: {:?}",
        owner
            .snapshot()
            .get(&id(name))
            .unwrap()
            .changefeed
            .info
            .swaps
    );
}

#[tokio::test]
async fn a_swap_is_checked_recorded_and_told_to_the_running_work_which_reports_how_it_went() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    owner.create(info("orders")).await.unwrap();
    let old = owner
        .snapshot()
        .get(&id("orders"))
        .unwrap()
        .changefeed
        .info
        .config
        .sink
        .clone();
    let work = work_of(&ctx, "orders");

    // A plugin its check refuses changes nothing.
    *ctx.refuse.lock().unwrap() = Some("sink-file@0.2.0".into());
    let err = owner
        .swap(&id("orders"), ask("sink-file@0.2.0"))
        .await
        .unwrap_err();
    assert!(matches!(err, OwnerError::Invalid(_)), "{err:?}");
    let view = owner.snapshot().get(&id("orders")).unwrap();
    assert_eq!(view.changefeed.info.config.sink, old);
    assert!(view.changefeed.info.swaps.is_empty());
    // Grants the running sink does not hold are refused before any check.
    let mut wider = ask("sink-file@0.2.0");
    wider.to.capabilities.tcp.push("10.0.0.1:9000".into());
    let err = owner.swap(&id("orders"), wider).await.unwrap_err();
    assert!(err.to_string().contains("capabilities.tcp"), "{err}");

    *ctx.refuse.lock().unwrap() = None;
    let view = owner
        .swap(&id("orders"), ask("sink-file@0.2.0"))
        .await
        .unwrap();
    let info = &view.changefeed.info;
    assert_eq!(info.config.sink.plugin.to_string(), "sink-file@0.2.0");
    assert_eq!(info.swaps.len(), 1);
    let record = &info.swaps[0];
    assert_eq!((record.seq, record.state), (1, crate::SwapState::Pending));
    assert_eq!(record.from, old);
    assert_eq!(
        view.changefeed.epoch(),
        Epoch(1),
        "the work runs on: no new epoch"
    );
    // Stored in one write, then told to the work at the revision it landed at.
    let writes = ctx.writes.lock().unwrap().clone();
    let (_, Some(written), _) = writes.last().unwrap().clone() else {
        panic!("the info was written");
    };
    assert_eq!(written.swaps, info.swaps);
    assert_eq!(work.reconfigured.lock().unwrap().len(), 1);
    assert_eq!(ctx.started.lock().unwrap().len(), 1, "nothing restarted");
    // A second swap waits for the first.
    let err = owner
        .swap(&id("orders"), ask("sink-file@0.3.0"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("still pending"), "{err}");

    // The capture reports the barrier, then a rollback.
    let report = |state, reason: Option<&str>| WorkProgress {
        checkpoint_ts: CheckpointTs::new(50),
        swap: Some(crate::SwapReport {
            seq: 1,
            state,
            barrier_ts: Some(40),
            pause_ms: Some(3),
            pause_us: None,
            reason: reason.map(String::from),
        }),
        ..WorkProgress::default()
    };
    *work.progress.lock().unwrap() = Some(report(crate::SwapState::Probation, None));
    let view = wait_for(&owner, "orders", |v| {
        v.changefeed.info.swaps[0].state == crate::SwapState::Probation
    })
    .await;
    assert_eq!(
        view.changefeed.info.swaps[0].barrier_ts,
        Some(CheckpointTs::new(40))
    );
    *work.progress.lock().unwrap() = Some(report(
        crate::SwapState::RolledBack,
        Some("plugin instance was stopped: wasm trap"),
    ));
    let view = wait_for(&owner, "orders", |v| {
        v.changefeed.info.swaps[0].state == crate::SwapState::RolledBack
    })
    .await;
    let info = &view.changefeed.info;
    assert_eq!(info.config.sink, old, "the old version is the sink again");
    assert_eq!(info.state, FeedState::Warning);
    assert!(
        info.warnings.last().unwrap().message.contains("wasm trap"),
        "{:?}",
        info.warnings
    );
    // A stale report (the probation again) does not move it back.
    *work.progress.lock().unwrap() = Some(report(crate::SwapState::Probation, None));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let view = owner.snapshot().get(&id("orders")).unwrap();
    assert_eq!(
        view.changefeed.info.swaps[0].state,
        crate::SwapState::RolledBack
    );
    // And the swap is over: a new one may start.
    owner
        .swap(&id("orders"), ask("sink-file@0.3.0"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_swap_races_cleanly_with_pause_update_and_remove() {
    let (owner, _ctx) = owner(FakeContext::default()).await;
    owner.create(info("orders")).await.unwrap();
    owner
        .swap(&id("orders"), ask("sink-file@0.2.0"))
        .await
        .unwrap();
    // Pausing keeps the swap: the new version runs (on probation) at resume.
    let view = owner.pause(&id("orders")).await.unwrap();
    assert_eq!(
        view.changefeed.info.swaps[0].state,
        crate::SwapState::Pending
    );
    assert_eq!(
        view.changefeed.info.config.sink.plugin.to_string(),
        "sink-file@0.2.0"
    );
    // The plugin the swap would fall back to cannot be deleted meanwhile.
    let err = owner
        .delete_plugin("acme", &"sink-file@0.1.0".parse().unwrap())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("acme/orders"), "{err}");
    // An update overtakes it; exactly one sink remains, the updated one.
    let view = owner.update(info("orders")).await.unwrap();
    let info = &view.changefeed.info;
    assert_eq!(info.swaps[0].state, crate::SwapState::Superseded);
    assert_eq!(info.config.sink.plugin.to_string(), "sink-file@0.1.0");
    // A swap of a removed changefeed is refused.
    owner.remove(&id("orders")).await.unwrap();
    let err = owner
        .swap(&id("orders"), ask("sink-file@0.2.0"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("removed") || err.to_string().contains("no changefeed"),
        "{err}"
    );
}

fn with_filters(name: &str) -> ChangefeedInfo {
    let mut info = info(name);
    info.config.filters = vec![
        crate::PluginRef::new("filter-mask@0.1.0".parse().unwrap()),
        crate::PluginRef::new("filter-events@0.1.0".parse().unwrap()),
    ];
    info
}

#[tokio::test]
async fn a_filter_swap_names_its_filter_and_a_rollback_puts_the_old_one_back() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    owner.create(with_filters("orders")).await.unwrap();
    let work = work_of(&ctx, "orders");
    let view = owner.snapshot().get(&id("orders")).unwrap();
    let filters = &view.changefeed.info.config.filters;
    // By name or by position; a name two filters share, an unknown one and a
    // position past the chain are refused with what there is.
    assert_eq!(
        crate::PluginRole::filter_named(filters, "filter-events"),
        Ok(crate::PluginRole::Filter(1))
    );
    assert_eq!(
        crate::PluginRole::filter_named(filters, "0"),
        Ok(crate::PluginRole::Filter(0))
    );
    let err = crate::PluginRole::filter_named(filters, "filter-x").unwrap_err();
    assert!(
        err.contains("0: filter-mask@0.1.0, 1: filter-events@0.1.0"),
        "{err}"
    );
    let err = crate::PluginRole::filter_named(filters, "2").unwrap_err();
    assert!(err.contains("no filter at position 2"), "{err}");
    let twice = vec![filters[0].clone(), filters[0].clone()];
    let err = crate::PluginRole::filter_named(&twice, "filter-mask").unwrap_err();
    assert!(err.contains("by its position"), "{err}");
    assert_eq!(
        crate::PluginRole::parse("filter-1"),
        Some(crate::PluginRole::Filter(1))
    );
    assert_eq!(crate::PluginRole::parse("filter-"), None);
    assert_eq!(crate::PluginRole::parse("filter-99999999999"), None);

    let mut to = filters[1].clone();
    to.plugin = "filter-events@0.2.0".parse().unwrap();
    let swap = |to: crate::PluginRef| crate::SwapAsk {
        role: crate::PluginRole::Filter(1),
        to,
        probation: crate::ProbationPolicy::default(),
        by: "acme".into(),
        expect: None,
        promotes: None,
    };
    // Grants the running filter does not hold are refused, named by its key.
    let mut wider = to.clone();
    wider.capabilities.data_dir = crate::DataDir::HostChosen;
    let err = owner.swap(&id("orders"), swap(wider)).await.unwrap_err();
    assert!(
        err.to_string().contains("filters[1].capabilities.data-dir"),
        "{err}"
    );
    let err = owner
        .swap(
            &id("orders"),
            crate::SwapAsk {
                role: crate::PluginRole::Filter(5),
                ..swap(to.clone())
            },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no filter-5"), "{err}");

    let view = owner.swap(&id("orders"), swap(to.clone())).await.unwrap();
    let info = &view.changefeed.info;
    assert_eq!(info.config.filters[1], to);
    assert_eq!(
        info.config.filters[0].plugin.to_string(),
        "filter-mask@0.1.0"
    );
    assert_eq!(info.config.sink.plugin.to_string(), "sink-file@0.1.0");
    assert_eq!(info.swaps[0].role, "filter-1");
    assert_eq!(work.reconfigured.lock().unwrap().len(), 1);
    // The capture rolls it back: the old filter is the stored one again.
    *work.progress.lock().unwrap() = Some(WorkProgress {
        swap: Some(crate::SwapReport {
            seq: 1,
            state: crate::SwapState::RolledBack,
            barrier_ts: Some(40),
            pause_ms: Some(1),
            pause_us: None,
            reason: Some("wasm trap: unreachable".into()),
        }),
        ..WorkProgress::default()
    });
    let view = wait_for(&owner, "orders", |v| {
        v.changefeed.info.swaps[0].state == crate::SwapState::RolledBack
    })
    .await;
    let info = &view.changefeed.info;
    assert_eq!(
        info.config.filters[1].plugin.to_string(),
        "filter-events@0.1.0"
    );
    assert_eq!(info.state, FeedState::Warning);
}

fn shadow_ask(role: crate::PluginRole, plugin: &str) -> crate::ShadowAsk {
    let mut candidate = crate::PluginRef::new(plugin.parse().unwrap());
    if role == crate::PluginRole::Sink {
        candidate.config.insert("dir".into(), "staging".into());
    }
    crate::ShadowAsk {
        role,
        candidate,
        max_lag_ms: 30_000,
        max_queued_bytes: 1 << 20,
        by: "acme".into(),
        expect: None,
    }
}

#[tokio::test]
async fn a_shadow_is_recorded_blocks_other_swaps_and_ends_stopped_promoted_or_dropped() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    owner.create(with_filters("orders")).await.unwrap();
    let work = work_of(&ctx, "orders");
    // Numbers out of range are refused.
    let mut bad = shadow_ask(crate::PluginRole::Sink, "sink-file@0.2.0");
    bad.max_lag_ms = 10;
    assert!(bad.validate().unwrap_err().contains("100..="));
    bad.max_lag_ms = 1000;
    bad.max_queued_bytes = u64::MAX;
    assert!(bad.validate().unwrap_err().contains("max queued bytes"));
    // A candidate its check refuses changes nothing.
    *ctx.refuse.lock().unwrap() = Some("sink-file@0.2.0".into());
    let err = owner
        .shadow_start(
            &id("orders"),
            shadow_ask(crate::PluginRole::Sink, "sink-file@0.2.0"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, OwnerError::Invalid(_)), "{err:?}");
    assert!(
        owner
            .snapshot()
            .get(&id("orders"))
            .unwrap()
            .changefeed
            .info
            .shadow
            .is_none()
    );
    *ctx.refuse.lock().unwrap() = None;

    let view = owner
        .shadow_start(
            &id("orders"),
            shadow_ask(crate::PluginRole::Sink, "sink-file@0.2.0"),
        )
        .await
        .unwrap();
    let info = &view.changefeed.info;
    let shadow = info.shadow.as_ref().unwrap();
    assert_eq!((shadow.seq, shadow.state), (1, crate::ShadowState::Running));
    assert_eq!(shadow.live.to_string(), "sink-file@0.1.0");
    assert_eq!(
        info.config.sink.plugin.to_string(),
        "sink-file@0.1.0",
        "the live sink stays"
    );
    assert_eq!(work.reconfigured.lock().unwrap().len(), 1);
    // One shadow at a time; a swap other than its promotion is refused.
    let err = owner
        .shadow_start(
            &id("orders"),
            shadow_ask(crate::PluginRole::Filter(0), "filter-mask@0.2.0"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("runs shadow 1"), "{err}");
    let err = owner
        .swap(&id("orders"), ask("sink-file@0.3.0"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("stop it or promote it"), "{err}");
    // The candidate version cannot be deleted while it runs.
    let users = owner
        .snapshot()
        .users_of("acme", &"sink-file@0.2.0".parse().unwrap());
    assert_eq!(users, vec!["acme/orders".to_string()]);

    // A swap checked against another version than the one running there is
    // refused (the chain changed meanwhile), and so is the promotion of a
    // shadow that no longer runs.
    let stale = crate::SwapAsk {
        expect: Some("sink-file@0.0.9".parse().unwrap()),
        ..ask("sink-file@0.2.0")
    };
    let err = owner.swap(&id("orders"), stale).await.unwrap_err();
    assert!(err.to_string().contains("not sink-file@0.0.9"), "{err}");
    let gone = crate::SwapAsk {
        promotes: Some(7),
        ..ask("sink-file@0.2.0")
    };
    let err = owner.swap(&id("orders"), gone).await.unwrap_err();
    assert!(err.to_string().contains("runs shadow 1"), "{err}");

    // Promote: one write ends the shadow and records the swap, with the live
    // sink's options (the candidate's were for staging).
    let view = owner
        .promote(
            &id("orders"),
            crate::ProbationPolicy::default(),
            "acme".into(),
        )
        .await
        .unwrap();
    let info = &view.changefeed.info;
    let shadow = info.shadow.as_ref().unwrap();
    assert_eq!(shadow.state, crate::ShadowState::Promoted);
    assert_eq!(info.config.sink.plugin.to_string(), "sink-file@0.2.0");
    assert!(
        info.config.sink.config.is_empty(),
        "the live options: {:?}",
        info.config.sink
    );
    assert_eq!(info.swaps.last().unwrap().state, crate::SwapState::Pending);
    let err = owner.shadow_stop(&id("orders")).await.unwrap_err();
    assert!(err.to_string().contains("runs no shadow"), "{err}");

    // A shadow the capture drops ends `dropped` with why.
    *work.progress.lock().unwrap() = Some(WorkProgress {
        swap: Some(crate::SwapReport {
            seq: 1,
            state: crate::SwapState::Done,
            barrier_ts: Some(40),
            pause_ms: Some(1),
            pause_us: None,
            reason: None,
        }),
        ..WorkProgress::default()
    });
    wait_for(&owner, "orders", |v| {
        v.changefeed.info.swaps[0].state == crate::SwapState::Done
    })
    .await;
    owner
        .shadow_start(
            &id("orders"),
            shadow_ask(crate::PluginRole::Filter(0), "filter-mask@0.2.0"),
        )
        .await
        .unwrap();
    *work.progress.lock().unwrap() = Some(WorkProgress {
        shadow: Some(crate::ShadowReport {
            seq: 2,
            dropped: Some("the candidate filter failed 5 times in a row".into()),
            ..crate::ShadowReport::default()
        }),
        ..WorkProgress::default()
    });
    let view = wait_for(&owner, "orders", |v| {
        v.changefeed.info.shadow.as_ref().unwrap().state == crate::ShadowState::Dropped
    })
    .await;
    let shadow = view.changefeed.info.shadow.as_ref().unwrap();
    assert!(shadow.reason.as_ref().unwrap().contains("5 times"));
    assert_eq!(
        view.shadow.as_ref().unwrap().seq,
        2,
        "the last report is kept"
    );
    // Stop: nothing runs any more.
    let err = owner.shadow_stop(&id("orders")).await.unwrap_err();
    assert!(err.to_string().contains("runs no shadow"), "{err}");
}

#[tokio::test]
async fn a_rollout_goes_a_batch_at_a_time_and_stops_at_the_first_rollback() {
    let (owner, ctx) = owner(FakeContext::default()).await;
    for name in ["a", "b", "c", "d", "e"] {
        owner.create(info(name)).await.unwrap();
    }
    owner.pause(&id("e")).await.unwrap();
    // The captures: every swap passes, but c's rolls back.
    let reporter = tokio::spawn({
        let ctx = ctx.clone();
        let owner = owner.clone();
        async move {
            loop {
                for name in ["a", "b", "c", "d"] {
                    let view = owner.snapshot().get(&id(name)).unwrap();
                    if let Some(open) = view.changefeed.info.open_swap() {
                        let state = if name == "c" {
                            crate::SwapState::RolledBack
                        } else {
                            crate::SwapState::Done
                        };
                        *work_of(&ctx, name).progress.lock().unwrap() = Some(WorkProgress {
                            swap: Some(crate::SwapReport {
                                seq: open.seq,
                                state,
                                barrier_ts: Some(40),
                                pause_ms: Some(1),
                                pause_us: None,
                                reason: (name == "c").then(|| "wasm trap".into()),
                            }),
                            ..WorkProgress::default()
                        });
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let plan = crate::RolloutPlan {
        tenant: "acme".into(),
        from: "sink-file@0.1.0".parse().unwrap(),
        to: "sink-file@0.2.0".parse().unwrap(),
        batch_size: 2,
        probation: crate::ProbationPolicy::default(),
        by: "acme".into(),
    };
    let (tx, mut rx) = mpsc::channel(64);
    let summary = crate::rollout(&owner, plan.clone(), tx).await;
    reporter.abort();
    let mut steps = Vec::new();
    while let Ok(step) = rx.try_recv() {
        steps.push((step.changefeed.name().to_string(), step.state));
    }
    assert_eq!(
        summary,
        crate::RolloutSummary {
            swapped: 3,
            failed: 1,
            skipped: 1,
            remaining: 0,
            stopped: true,
        }
    );
    // e is skipped; a and b go first, then c and d; nothing after c's batch.
    assert_eq!(steps[0], ("e".into(), "skipped".into()));
    let order: Vec<&str> = steps[1..]
        .iter()
        .filter(|(_, s)| s == "swapping")
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(order, ["a", "b", "c", "d"]);
    assert!(steps.contains(&("c".into(), "rolled-back".into())));
    let sink = |n: &str| {
        owner
            .snapshot()
            .get(&id(n))
            .unwrap()
            .changefeed
            .info
            .config
            .sink
            .plugin
            .to_string()
    };
    assert_eq!(
        ["a", "b", "c", "d", "e"].map(sink),
        [
            "sink-file@0.2.0",
            "sink-file@0.2.0",
            "sink-file@0.1.0",
            "sink-file@0.2.0",
            "sink-file@0.1.0"
        ]
    );
    // With batches of one it would have stopped before d.
    let bad = crate::RolloutPlan {
        batch_size: 0,
        ..plan.clone()
    };
    assert!(bad.validate().unwrap_err().contains("1..=100"));
    let other = crate::RolloutPlan {
        to: "sink-x@0.2.0".parse().unwrap(),
        ..plan
    };
    assert!(other.validate().unwrap_err().contains("different plugins"));
}
