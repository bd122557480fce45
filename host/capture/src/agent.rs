//! The capture's agent: runs what the owner assigned to this capture.
//!
//! It lists this capture's assignments (`/sluice/v1/assignment/{capture}/`),
//! then watches them from the listing's revision (and lists again when the
//! store compacted that history or the watch ends). For a new assignment, or a
//! newer epoch, it reads the changefeed's info by key, checks that it is the
//! info the assignment was made for, and starts a [`Processor`]; it asks the
//! processor to stop, or aborts it, when the assignment says so or is deleted.
//! The processor reports its progress and how it ended in its task position;
//! the agent reports `stopped` for work it aborted, and for a stop of work it
//! never started.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use sluice_meta::keys::{self, MetaKey};
use sluice_meta::{KeyValue, MetaError, Revision, WatchEventKind};
use sluice_owner::{ChangefeedId, ChangefeedInfo};
use sluice_protocol::{
    ASSIGNMENT_VERSION, Assignment, Desired, Epoch, ErrorKind, Outcome, ShipRole, Tables,
    TaskPosition,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::processor::{Live, Processor, report_end};
use crate::work::Capture;

/// How long the agent waits before retrying the meta store, and how often it
/// takes in processors that ended.
const RETRY: Duration = Duration::from_millis(500);

/// How long an abort waits for the cancelled processors' reports.
const ABORT_REPORT_WAIT: Duration = Duration::from_secs(5);

/// A running agent; [`Agent::stop`] ends it.
pub struct Agent {
    /// Set once asked to stop.
    stop: watch::Sender<Option<Halt>>,
    task: JoinHandle<()>,
}

/// How the agent ends its processors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halt {
    /// Ask each to stop, and wait.
    Flush,
    /// Cancel each, then report it stopped.
    Abort,
    /// Cancel each and report nothing, as if the process had been killed.
    #[cfg(test)]
    Vanish,
}

impl Agent {
    /// Starts the agent of `capture` (its id and meta store are in its context).
    pub fn start(capture: Arc<Capture>) -> Self {
        let (stop, stop_rx) = watch::channel(None);
        let span = tracing::info_span!("agent", capture = %capture.ctx().capture_id);
        let task = tokio::spawn(run(capture, stop_rx).instrument(span));
        Self { stop, task }
    }

    /// Stops the agent and the work it runs: each processor is asked to stop and
    /// waited for (it reports how it ended), or with `abort` cancelled at once
    /// and then reported `stopped` where the store still takes the write (a
    /// server that lost its ownership cannot). Returns once no processor of this
    /// agent runs.
    pub async fn stop(self, abort: bool) {
        self.halt(if abort { Halt::Abort } else { Halt::Flush })
            .await;
    }

    async fn halt(self, how: Halt) {
        self.stop.send_replace(Some(how));
        let _ = self.task.await;
    }

    /// Ends the agent as a killed process would: its processors are cancelled
    /// and report nothing.
    #[cfg(test)]
    pub(crate) async fn vanish(self) {
        self.halt(Halt::Vanish).await;
    }
}

/// A processor the agent started.
struct Running {
    epoch: Epoch,
    /// The info revision the processor follows.
    info_revision: sluice_meta::Revision,
    processor: Processor,
}

struct State {
    capture: Arc<Capture>,
    running: BTreeMap<ChangefeedId, Running>,
}

/// The changefeed of one of this capture's assignment keys.
fn changefeed_of(key: &str) -> Option<ChangefeedId> {
    match MetaKey::parse(key)? {
        MetaKey::Assignment {
            tenant, changefeed, ..
        } => ChangefeedId::new(&tenant, &changefeed).ok(),
        _ => None,
    }
}

/// The assignment in `kv`; none (logged) if it does not decode or a newer build
/// wrote it (it may mean more than this build can read).
fn decode(kv: &KeyValue) -> Option<Assignment> {
    let a = keys::decode::<Assignment>(&kv.key, &kv.value)
        .inspect_err(|e| tracing::error!(key = %kv.key, error = %e, "Ignoring an assignment that does not decode."))
        .ok()?;
    if a.version > ASSIGNMENT_VERSION {
        tracing::error!(key = %kv.key, version = a.version, supported = ASSIGNMENT_VERSION, "Ignoring an assignment written by a newer sluice; upgrade this capture.");
        return None;
    }
    Some(a)
}

async fn run(capture: Arc<Capture>, mut stop: watch::Receiver<Option<Halt>>) {
    let ctx = capture.ctx().clone();
    let prefix = keys::assignment_prefix(&ctx.capture_id).expect("a valid capture id");
    let mut state = State {
        capture,
        running: BTreeMap::new(),
    };
    let mut reap = tokio::time::interval(RETRY);
    reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A stop that cancels ends the following at once, even in the middle of
    // a call to a meta store that does not answer (the server stops right
    // after, so a processor an interrupted start left behind goes with it). A
    // flushing stop lets the step in progress finish, so that every processor
    // it starts or stops is in `running` for the halt below.
    let mut halted = stop.clone();
    let follow = async {
        'list: while stop.borrow().is_none() {
            let listing = match ctx.store.list(&prefix).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "Could not list this capture's assignments; retrying.");
                    let _ = tokio::time::timeout(RETRY, stop.changed()).await;
                    continue;
                }
            };
            let mut present = BTreeSet::new();
            let mut result = Ok(());
            for kv in &listing.kvs {
                let Some(id) = changefeed_of(&kv.key) else {
                    continue;
                };
                present.insert(id.clone());
                if let Some(a) = decode(kv) {
                    result =
                        result.and(state.on_assignment(id, Some((a, kv.create_revision))).await);
                }
            }
            // Assignments deleted while nobody watched.
            let gone: Vec<ChangefeedId> = state
                .running
                .keys()
                .filter(|id| !present.contains(*id))
                .cloned()
                .collect();
            for id in gone {
                result = result.and(state.on_assignment(id, None).await);
            }
            if let Err(e) = result {
                tracing::warn!(error = %e, "Could not act on an assignment; listing again.");
                let _ = tokio::time::timeout(RETRY, stop.changed()).await;
                continue;
            }
            let mut events = match ctx.store.watch(&prefix, Some(listing.revision)).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "Could not watch the assignments; listing again.");
                    continue;
                }
            };
            loop {
                tokio::select! {
                    event = events.next() => {
                        let event = match event {
                            Some(Ok(ev)) => ev,
                            // Compacted, or the stream ended: list again.
                            Some(Err(e)) => {
                                tracing::debug!(error = %e, "The assignment watch ended; listing again.");
                                continue 'list;
                            }
                            None => continue 'list,
                        };
                        let Some(id) = changefeed_of(&event.kv.key) else {
                            continue;
                        };
                        let assignment = match event.kind {
                            WatchEventKind::Put => match decode(&event.kv) {
                                Some(a) => Some((a, event.kv.create_revision)),
                                None => continue,
                            },
                            WatchEventKind::Delete => None,
                        };
                        if let Err(e) = state.on_assignment(id, assignment).await {
                            tracing::warn!(error = %e, "Could not act on an assignment; listing again.");
                            let _ = tokio::time::timeout(RETRY, stop.changed()).await;
                            continue 'list;
                        }
                    }
                    _ = reap.tick() => state.reap().await,
                    _ = stop.changed() => break 'list,
                }
            }
        }
    };
    tokio::select! {
        () = follow => {}
        _ = halted.wait_for(|h| h.is_some_and(|h| h != Halt::Flush)) => {}
    }
    let how = stop.borrow().unwrap_or(Halt::Abort);
    let running = std::mem::take(&mut state.running);
    if how != Halt::Flush {
        let report = how == Halt::Abort;
        // Every processor stops writing first; the reports need the meta
        // store, which may not answer (a lost lease is the usual reason to
        // abort), so they get a bounded wait.
        for r in running.values() {
            r.processor.cancel();
        }
        let reports = async {
            for (_, r) in running {
                r.processor.abort(report).await;
            }
        };
        if tokio::time::timeout(ABORT_REPORT_WAIT, reports)
            .await
            .is_err()
        {
            tracing::warn!(
                "The meta store did not take the cancelled processors' reports in time; \
                 the owner learns of their end from their assignments."
            );
        }
        return;
    }
    let mut stopping = Vec::new();
    for (_, mut r) in running {
        r.processor.signal_stop();
        stopping.push(r.processor);
    }
    for processor in stopping {
        processor.join().await;
    }
}

impl State {
    /// Takes in processors that ended (they reported how already).
    async fn reap(&mut self) {
        let ended: Vec<ChangefeedId> = self
            .running
            .iter()
            .filter(|(_, r)| r.processor.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ended {
            let r = self.running.remove(&id).expect("listed");
            let outcome = r.processor.join().await;
            tracing::debug!(changefeed = %id, epoch = r.epoch.0, ?outcome, "Work ended.");
        }
    }

    /// Acts on `id`'s assignment as it now stands (`None`: deleted), with the
    /// revision its key was created at. An error means the store did not
    /// answer: the caller lists again and retries.
    async fn on_assignment(
        &mut self,
        id: ChangefeedId,
        assignment: Option<(Assignment, Revision)>,
    ) -> Result<(), MetaError> {
        let Some((a, created)) = assignment else {
            // The owner took the task away: nothing of it may run here.
            if let Some(r) = self.running.remove(&id) {
                tracing::info!(changefeed = %id, epoch = r.epoch.0, "Assignment deleted; aborting its work.");
                r.processor.abort(true).await;
            }
            return Ok(());
        };
        if let Some(r) = self.running.get_mut(&id) {
            if r.epoch > a.changefeed_epoch {
                tracing::debug!(changefeed = %id, "Ignoring an assignment of an older epoch.");
                return Ok(());
            }
            if r.epoch == a.changefeed_epoch {
                match a.desired {
                    Desired::Run if a.info_revision > r.info_revision => {
                        // The info changed while the work runs (a swap).
                        let info_key = keys::changefeed_info(id.tenant(), id.name())?;
                        let ctx = self.capture.ctx().clone();
                        let Some(kv) = ctx.store.get(&info_key).await? else {
                            return Ok(());
                        };
                        if kv.mod_revision < a.info_revision {
                            tracing::warn!(changefeed = %id, "The stored info is older than the assignment names; waiting.");
                            return Ok(());
                        }
                        match ChangefeedInfo::decode(&kv.value) {
                            Ok(info) => {
                                r.info_revision = kv.mod_revision;
                                r.processor.reconfigure(info);
                            }
                            Err(e) => {
                                tracing::error!(changefeed = %id, error = %e, "The changefeed's new info does not decode; the work runs on as it was.");
                            }
                        }
                    }
                    Desired::Run => {}
                    Desired::Stop => r.processor.signal_stop(),
                    Desired::Abort => {
                        let r = self.running.remove(&id).expect("present");
                        r.processor.abort(true).await;
                    }
                }
                return Ok(());
            }
            // A newer epoch: the older run goes (the new run's claim would fence
            // it anyway).
            let r = self.running.remove(&id).expect("present");
            r.processor.abort(false).await;
        }
        self.begin(id, a, created).await
    }

    /// Starts the work of an assignment this agent does not run yet, unless it
    /// is stale or already done.
    async fn begin(
        &mut self,
        id: ChangefeedId,
        a: Assignment,
        created: Revision,
    ) -> Result<(), MetaError> {
        let ctx = self.capture.ctx().clone();
        let epoch = a.changefeed_epoch;
        let position_key = keys::task_position(id.tenant(), id.name(), &ctx.capture_id)?;
        if let Some(kv) = ctx.store.get(&position_key).await? {
            match keys::decode::<TaskPosition>(&kv.key, &kv.value) {
                Ok(p) if p.changefeed_epoch > epoch.0 => {
                    tracing::info!(changefeed = %id, epoch = epoch.0, newer = p.changefeed_epoch, "Ignoring an assignment of an older epoch.");
                    return Ok(());
                }
                Ok(p)
                    if p.changefeed_epoch == epoch.0
                        && p.state.is_terminal()
                        && kv.mod_revision > created =>
                {
                    // Done and reported already, after this assignment was
                    // made (an agent that restarted). An end reported
                    // before it belongs to an earlier placement of the same
                    // epoch here (work that moved away and back): run it.
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "Ignoring an unreadable task position.")
                }
            }
        }
        let checkpoint = a.checkpoint_ts;
        let report = |outcome: Outcome| {
            let ctx = ctx.clone();
            let id = id.clone();
            async move { report_end(&ctx, &id, epoch, checkpoint, &Live::default(), &outcome).await }
        };
        if a.desired != Desired::Run {
            // Stopped before it started here: nothing ran, nothing was written.
            report(Outcome::Stopped).await;
            return Ok(());
        }
        let info_key = keys::changefeed_info(id.tenant(), id.name())?;
        let Some(kv) = ctx.store.get(&info_key).await? else {
            tracing::warn!(changefeed = %id, "Ignoring an assignment of a changefeed that has no info.");
            return Ok(());
        };
        let info = match ChangefeedInfo::decode(&kv.value) {
            Ok(info) => info,
            Err(e) => {
                let message = format!("the changefeed's stored info does not decode: {e}");
                report(Outcome::Failed {
                    kind: ErrorKind::Fatal,
                    message,
                })
                .await;
                return Ok(());
            }
        };
        // The owner stores the info before it assigns: a newer epoch in the info
        // means this assignment is stale (a newer one follows); an older info
        // than the assignment was made for means the store went back in time.
        if info.epoch > epoch {
            tracing::info!(changefeed = %id, epoch = epoch.0, info_epoch = info.epoch.0, "Ignoring an assignment of an older epoch than the stored info.");
            return Ok(());
        }
        if info.epoch < epoch || kv.mod_revision < a.info_revision {
            tracing::warn!(changefeed = %id, epoch = epoch.0, info_epoch = info.epoch.0, info_revision = %kv.mod_revision, assigned_revision = %a.info_revision, "Ignoring an assignment made for a newer info than the stored one.");
            return Ok(());
        }
        // A subset of the tables comes from the capture that reads the
        // source; every other assignment reads it here.
        let receives = matches!(
            a.shipment.as_ref().map(|s| &s.role),
            Some(ShipRole::Receives { .. })
        );
        if receives != matches!(a.tables, Tables::Only(_)) {
            report(Outcome::Failed {
                kind: ErrorKind::Fatal,
                message: "the assignment names a subset of the tables without the capture that ships them, or the reverse".into(),
            })
            .await;
            return Ok(());
        }
        tracing::info!(changefeed = %id, epoch = epoch.0, checkpoint = a.checkpoint_ts.get(), shipment = ?a.shipment.as_ref().map(|s| &s.role), "Starting assigned work.");
        let processor = self
            .capture
            .start(&info, epoch, a.checkpoint_ts, a.shipment.clone());
        self.running.insert(
            id,
            Running {
                epoch,
                info_revision: kv.mod_revision,
                processor,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests;
