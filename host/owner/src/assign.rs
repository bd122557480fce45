//! The owner's half of assigning work through the meta store (TiCDC's shape).
//!
//! The owner writes an [`Assignment`] per (capture, changefeed) under
//! `/sluice/v1/assignment/{capture}/{tenant}/{changefeed}`: which tables of the
//! changefeed the capture runs, at which changefeed epoch, after which
//! checkpoint, and whether it should run, stop or abort. The capture runs what is
//! assigned to it and reports in its task position (`.../task/{capture}`): the
//! checkpoint, resolved ts, counters and the run's [`TaskState`]. The owner never
//! holds a capture's pipeline: [`AssignedWork`] is a handle that writes the
//! assignment, watches the reported positions and turns them into progress and
//! an [`Outcome`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::keys::{self};
use sluice_meta::{Compare, KeyValue, MetaError, MetaStore, Op, Revision, Txn, WatchEventKind};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::Epoch;
use crate::ErrorKind;
use crate::Outcome;
use crate::context::{LiveProgress, Work, WorkProgress};
use crate::id::ChangefeedId;
use crate::info::ChangefeedInfo;
use crate::records::GiveUp;
use crate::relocate::{self, Relocations};
use crate::tables::{self, Side, Sides};
use crate::{Assignment, Desired, Tables, TaskReport, WHOLE_ASSIGNMENT_VERSION};

/// How long [`AssignedWork::abort`] waits for the capture to report that its
/// pipeline is gone before it gives up waiting (the task position's fence still
/// keeps a late write of it from counting; see `docs/meta-layout.md`).
const ABORT_WAIT: Duration = Duration::from_secs(30);

/// How long the handle waits before retrying a meta-store call that failed.
const RETRY: Duration = Duration::from_millis(500);

impl From<&TaskReport> for WorkProgress {
    fn from(report: &TaskReport) -> Self {
        let r = report;
        WorkProgress {
            checkpoint_ts: CheckpointTs::new(r.checkpoint_ts),
            resolved_ts: CommitTs::new(r.resolved_ts),
            rows_read: r.rows_read,
            rows_written: r.rows_written,
            bytes_written: r.bytes_written,
            retries: r.retries,
            source_events: r.source_events,
            source_skipped_statements: r.source_skipped_statements,
            source_time_ms: r.source_time_ms,
            event_cache_bytes: r.event_cache_bytes,
            swap: r.swap.clone(),
            shadow: r.shadow.clone(),
            validator: r.validator.clone(),
            redo: r.redo,
            capture: None,
        }
    }
}

/// Writes assignments for the owner, under its ownership guard, and hands out
/// [`AssignedWork`] handles.
#[derive(Clone)]
pub struct Assigner {
    inner: Arc<Inner>,
    /// How long a stopping handle waits for the capture's report.
    stop_wait: Option<Duration>,
}

struct Inner {
    store: Arc<dyn MetaStore>,
    guard: Compare,
    give_up: GiveUp,
    /// This node's capture: where work goes when no capture is registered
    /// (tests), and first among equally loaded ones.
    capture: String,
    /// Wakes the owner once a handle saw its work end.
    wake: mpsc::UnboundedSender<ChangefeedId>,
    /// Work an earlier owner assigned that still runs ([`Assigner::adopt`]),
    /// taken by the first assignment of that changefeed and epoch; what is
    /// not taken goes ([`Assigner::release_unadopted`]).
    adopted: Mutex<BTreeMap<ChangefeedId, Adopted>>,
}

/// A run a new owner found going: its assignments on one or more captures.
struct Adopted {
    epoch: Epoch,
    sides: Sides,
    /// The assignments' keys and their mod revisions then.
    keys: Vec<(String, Revision)>,
}

/// One assignment a new owner found running.
struct Found {
    capture: String,
    key: String,
    revision: Revision,
    record: Assignment,
}

impl Assigner {
    /// Assigns work to `capture` in `store` while `guard` holds (`give_up` stops
    /// the server once it does not); `wake` is told of every changefeed whose
    /// work ended.
    pub fn new(
        store: Arc<dyn MetaStore>,
        guard: Compare,
        give_up: GiveUp,
        capture: String,
        wake: mpsc::UnboundedSender<ChangefeedId>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                guard,
                give_up,
                capture,
                wake,
                adopted: Mutex::default(),
            }),
            stop_wait: None,
        }
    }

    /// Once asked to stop, a handle waits at most `wait` for the capture to
    /// report the end (give it the capture's stop timeout and some slack); past
    /// it, the work counts as stopped, as a processor cancelled at its stop
    /// timeout does (the next run's claim fences whatever it still tries).
    /// Without it, a handle waits as long as it takes.
    pub fn with_stop_wait(mut self, wait: Duration) -> Self {
        self.stop_wait = Some(wait);
        self
    }

    /// A new owner, at start: keeps the assignments earlier owners made whose
    /// work still runs (to run, on a capture registered before the
    /// assignment was written, so that the same registration runs it), for
    /// [`Assigner::assign`] to follow where it runs instead of placing it
    /// anew; deletes every other one (the work of a capture that is gone or
    /// registered again, or being stopped). Returns what it kept.
    pub async fn adopt(&self) -> Result<Vec<(ChangefeedId, Epoch)>, MetaError> {
        let store = self.inner.store.as_ref();
        let registered: BTreeMap<String, Revision> = store
            .list(&keys::capture_prefix())
            .await?
            .kvs
            .into_iter()
            .filter_map(|kv| match keys::MetaKey::parse(&kv.key) {
                Some(keys::MetaKey::Capture { capture }) => Some((capture, kv.create_revision)),
                _ => None,
            })
            .collect();
        let listing = store.list(&keys::assignments_prefix()).await?;
        let mut found: BTreeMap<ChangefeedId, Vec<Found>> = BTreeMap::new();
        let mut stale = Vec::new();
        for kv in listing.kvs {
            let running = match (
                keys::MetaKey::parse(&kv.key),
                keys::decode::<Assignment>(&kv.key, &kv.value),
            ) {
                (
                    Some(keys::MetaKey::Assignment {
                        capture,
                        tenant,
                        changefeed,
                    }),
                    Ok(a),
                ) if a.desired == Desired::Run
                    && registered
                        .get(&capture)
                        .is_some_and(|since| *since < kv.mod_revision) =>
                {
                    ChangefeedId::new(tenant, changefeed).ok().map(|id| {
                        let found = Found {
                            capture,
                            key: kv.key.clone(),
                            revision: kv.mod_revision,
                            record: a,
                        };
                        (id, found)
                    })
                }
                _ => None,
            };
            match running {
                Some((id, adopted)) => found.entry(id).or_default().push(adopted),
                None => stale.push(kv.key),
            }
        }
        let mut adopted = BTreeMap::new();
        for (id, runs) in found {
            let epoch = runs[0].record.changefeed_epoch;
            let one_epoch = runs.iter().all(|f| f.record.changefeed_epoch == epoch);
            let sides = runs
                .iter()
                .map(|f| (f.capture.clone(), f.record.clone()))
                .collect::<Vec<_>>();
            match Sides::adopted(&sides).filter(|_| one_epoch) {
                Some(sides) => {
                    let keys = runs.into_iter().map(|f| (f.key, f.revision)).collect();
                    adopted.insert(id, Adopted { epoch, sides, keys });
                }
                // Never made by one owner: none of them is taken as running.
                None => stale.extend(runs.into_iter().map(|f| f.key)),
            }
        }
        for chunk in stale.chunks(sluice_meta::MAX_TXN_OPS) {
            let ops = chunk.iter().map(Op::delete);
            let result = self
                .inner
                .store
                .txn(Txn::new().when([self.inner.guard.clone()]).and_then(ops))
                .await?;
            if !result.succeeded {
                (self.inner.give_up)("this server is no longer the owner".into());
                return Err(MetaError::Unavailable {
                    reason: "this server is no longer the owner".into(),
                    source: None,
                });
            }
        }
        let kept = adopted
            .iter()
            .map(|(id, a)| (id.clone(), a.epoch))
            .collect();
        *self.inner.adopted.lock().expect("not poisoned") = adopted;
        Ok(kept)
    }

    /// Deletes the assignments [`Assigner::adopt`] kept that no assignment
    /// took (the owner does not run that changefeed at that epoch: it was
    /// paused, or fails, as the old owner left it), unless written since:
    /// their captures stop that work. Call once the owner started what it
    /// runs.
    pub async fn release_unadopted(&self) -> Result<(), MetaError> {
        let left = std::mem::take(&mut *self.inner.adopted.lock().expect("not poisoned"));
        for (id, a) in left {
            tracing::info!(changefeed = %id, captures = ?a.sides.captures(), epoch = a.epoch.0, "Ending work an earlier owner assigned that does not run now.");
            for (key, revision) in a.keys {
                let txn = Txn::new()
                    .when([
                        self.inner.guard.clone(),
                        Compare::mod_revision(&key, revision),
                    ])
                    .and_then([Op::delete(&key)]);
                self.inner.store.txn(txn).await?;
            }
        }
        Ok(())
    }

    /// Assigns `info`'s tables under `epoch`, after `checkpoint`, for the info
    /// stored at `info_revision`, and returns the handle that follows it: all
    /// of them to one capture, or split across captures as the changefeed's
    /// table placement says ([`crate::tables`]). The writes happen on the
    /// handle's own task.
    pub fn assign(
        &self,
        info: &ChangefeedInfo,
        epoch: Epoch,
        checkpoint: CheckpointTs,
        info_revision: Revision,
    ) -> AssignedWork {
        let record = Assignment {
            version: WHOLE_ASSIGNMENT_VERSION,
            changefeed_epoch: epoch,
            tables: Tables::All,
            checkpoint_ts: checkpoint,
            info_revision,
            desired: Desired::Run,
            shipment: None,
        };
        let (desired, desired_rx) = watch::channel(Desired::Run);
        let (revision, revision_rx) = watch::channel(info_revision);
        let live = Arc::new(Reported::default());
        let span = tracing::info_span!("assignment", id = %info.id, epoch = epoch.0);
        // Work that already runs at this epoch is followed where it is.
        let adopted = {
            let mut adopted = self.inner.adopted.lock().expect("not poisoned");
            match adopted.remove(&info.id) {
                Some(a) if a.epoch == epoch => Some(a.sides),
                Some(other) => {
                    adopted.insert(info.id.clone(), other);
                    None
                }
                None => None,
            }
        };
        let task = tokio::spawn(
            follow(
                self.inner.clone(),
                info.id.clone(),
                adopted,
                record,
                (desired_rx, revision_rx),
                live.clone(),
                self.stop_wait,
            )
            .instrument(span),
        );
        AssignedWork {
            epoch,
            live,
            desired,
            revision,
            task,
        }
    }
}

/// The latest reported progress of an assignment.
#[derive(Default)]
struct Reported(Mutex<Option<WorkProgress>>);

impl LiveProgress for Reported {
    fn progress(&self) -> Option<WorkProgress> {
        self.0.lock().expect("not poisoned").clone()
    }
}

/// Work assigned to captures through the meta store, as the owner follows it.
/// Progress and outcome are what the captures report in their task positions;
/// stop and abort are written into the assignment.
pub struct AssignedWork {
    epoch: Epoch,
    live: Arc<Reported>,
    desired: watch::Sender<Desired>,
    /// The info revision the assignment names.
    revision: watch::Sender<Revision>,
    task: JoinHandle<Outcome>,
}

impl Work for AssignedWork {
    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn live(&self) -> Arc<dyn LiveProgress> {
        self.live.clone()
    }

    fn signal_stop(&mut self) {
        self.desired.send_if_modified(|d| {
            let changed = *d == Desired::Run;
            if changed {
                *d = Desired::Stop;
            }
            changed
        });
    }

    fn is_stopping(&self) -> bool {
        *self.desired.borrow() != Desired::Run
    }

    fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Rewrites the assignment with the new info revision (the capture reads
    /// the info there and swaps what changed).
    fn reconfigure(&mut self, info_revision: Revision) {
        self.revision.send_if_modified(|r| {
            let newer = info_revision > *r;
            if newer {
                *r = info_revision;
            }
            newer
        });
    }

    async fn join(self) -> Outcome {
        joined(self.task.await)
    }

    /// Writes `abort` into the assignment and waits until the capture reports
    /// its pipeline gone (it aborts the task and awaits it before it reports),
    /// or the assignment can no longer be written (this server lost its
    /// ownership: the server then aborts its own capture's work), at most
    /// 30 s. A capture that reports nothing in time may still write
    /// to the sink, but only rows at or below the fence it saved: the next run
    /// claims the task position (compare-and-swap), which fences every later
    /// save of the old run, and replays up to that fence, flagged.
    async fn abort(mut self) {
        self.desired.send_replace(Desired::Abort);
        if tokio::time::timeout(ABORT_WAIT, &mut self.task)
            .await
            .is_err()
        {
            tracing::warn!(
                epoch = self.epoch.0,
                "The capture did not report its aborted work in time."
            );
            self.task.abort();
        }
    }
}

fn joined(result: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    match result {
        Ok(outcome) => outcome,
        Err(e) => Outcome::Failed {
            kind: ErrorKind::Retryable,
            message: format!("following the assigned work ended abnormally: {e}"),
        },
    }
}

/// Why following an assignment cannot go on.
enum Lost {
    /// The store refused the write: this server is no longer the owner.
    Ownership,
    /// The store did not take the write before the deadline.
    TimedOut,
}

/// Writes the assignment (with the desired state) under the ownership guard;
/// retries while the store does not answer, until `until` if given. Returns
/// the revision it landed at.
async fn write(
    inner: &Inner,
    key: &str,
    record: &Assignment,
    until: Option<tokio::time::Instant>,
) -> Result<Revision, Lost> {
    let value = keys::encode(record).expect("an assignment encodes");
    loop {
        if until.is_some_and(|u| tokio::time::Instant::now() >= u) {
            return Err(Lost::TimedOut);
        }
        let txn = Txn::new()
            .when([inner.guard.clone()])
            .and_then([Op::put(key, value.clone())]);
        match inner.store.txn(txn).await {
            Ok(r) if r.succeeded => return Ok(r.revision),
            Ok(_) => {
                (inner.give_up)("this server is no longer the owner".into());
                return Err(Lost::Ownership);
            }
            Err(e) => {
                tracing::warn!(error = %e, "Could not write the assignment; retrying.");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// The reported state of an assignment over its captures.
struct Reports {
    epoch: Epoch,
    /// The capture that reads the source (named in the progress).
    reader: String,
    /// The captures assigned, and what each reported for this epoch.
    captures: BTreeMap<String, Option<TaskReport>>,
    /// Set once a newer run took over a capture's position.
    fenced: bool,
    /// Set when an assigned capture's position does not decode: what to tell
    /// the operator (nobody knows which rows reached the sink).
    unreadable: Option<String>,
    /// Set once the owner asked the run to stop (a pause, a move, a drain;
    /// not because a side ended).
    asked_to_stop: bool,
}

impl Reports {
    /// Takes in a put or delete of a task position key.
    fn take(&mut self, kv: &KeyValue, deleted: bool) {
        let Some(keys::MetaKey::TaskPosition { capture, .. }) = keys::MetaKey::parse(&kv.key)
        else {
            return;
        };
        let Some(slot) = self.captures.get_mut(&capture) else {
            return;
        };
        if deleted {
            // Removed with its changefeed: no run will report any more.
            self.fenced = true;
            return;
        }
        match keys::decode::<TaskReport>(&kv.key, &kv.value) {
            Ok(r) if r.changefeed_epoch == self.epoch.0 => *slot = Some(r),
            Ok(r) if r.changefeed_epoch > self.epoch.0 => self.fenced = true,
            Ok(_) => {}
            Err(e) => {
                tracing::error!(key = %kv.key, error = %e, "A task position does not decode.");
                self.unreadable = Some(format!(
                    "the task position {} is unreadable ({e}), so which rows reached the sink \
                     is unknown; remove the changefeed and create it again with --start-ts at \
                     its checkpoint (rows after it are delivered again)",
                    kv.key
                ));
            }
        }
    }

    /// The changefeed's progress over its captures: the minimum checkpoint and
    /// resolved ts, the sum of the counters; none until every capture reported.
    fn progress(&self) -> Option<WorkProgress> {
        let mut out: Option<WorkProgress> = None;
        for (capture, report) in &self.captures {
            let p = WorkProgress {
                capture: Some(capture.clone()),
                ..WorkProgress::from(report.as_ref()?)
            };
            out = Some(match out {
                None => p,
                Some(o) => WorkProgress {
                    checkpoint_ts: o.checkpoint_ts.min(p.checkpoint_ts),
                    resolved_ts: o.resolved_ts.min(p.resolved_ts),
                    rows_read: o.rows_read + p.rows_read,
                    rows_written: o.rows_written + p.rows_written,
                    bytes_written: o.bytes_written + p.bytes_written,
                    retries: o.retries + p.retries,
                    source_events: o.source_events + p.source_events,
                    source_skipped_statements: o.source_skipped_statements
                        + p.source_skipped_statements,
                    source_time_ms: o.source_time_ms.max(p.source_time_ms),
                    event_cache_bytes: o.event_cache_bytes + p.event_cache_bytes,
                    swap: o.swap.or(p.swap),
                    shadow: o.shadow.or(p.shadow),
                    validator: o.validator.or(p.validator),
                    redo: match (o.redo, p.redo) {
                        (Some(a), Some(b)) => Some(a.merge(b)),
                        (a, b) => a.or(b),
                    },
                    capture: o.capture.or(p.capture),
                },
            });
        }
        out.map(|p| WorkProgress {
            capture: Some(self.reader.clone()),
            ..p
        })
    }

    /// A capture whose side of the run ended while another's runs, unless it
    /// finished (the reader finishing ends the receivers' streams too).
    fn ended_early(&self) -> Option<&str> {
        let ended = |r: &Option<TaskReport>| r.as_ref().and_then(|r| r.state.outcome());
        let running = self.captures.values().any(|r| ended(r).is_none());
        self.captures
            .iter()
            .find(|(_, r)| ended(r).is_some_and(|o| o != Outcome::Finished))
            .filter(|_| running)
            .map(|(c, _)| c.as_str())
    }

    /// How the work ended, once every capture's run has: a failure first, then
    /// a fence, then a stop; finished only if every capture finished.
    fn outcome(&self) -> Option<Outcome> {
        if let Some(message) = &self.unreadable {
            return Some(Outcome::Failed {
                kind: ErrorKind::Fatal,
                message: message.clone(),
            });
        }
        if self.fenced {
            return Some(Outcome::Fenced);
        }
        let mut ended = Vec::new();
        for report in self.captures.values() {
            ended.push(report.as_ref()?.state.outcome()?);
        }
        let rank = |o: &Outcome| match o {
            Outcome::Failed { .. } => 0,
            Outcome::Fenced => 1,
            Outcome::Stopped => 2,
            Outcome::Finished => 3,
        };
        match ended.into_iter().min_by_key(rank) {
            // A split run asked to stop: a side whose shipment ended as the
            // other side stopped fails retryably; that is the stop (the next
            // run starts from the checkpoint, as after any stop).
            Some(Outcome::Failed {
                kind: ErrorKind::Retryable,
                message,
            }) if self.asked_to_stop && self.captures.len() > 1 => {
                tracing::info!(%message, "A side of the stopped run ended with the others.");
                Some(Outcome::Stopped)
            }
            outcome => outcome,
        }
    }
}

/// The handle's task: writes the assignment, follows the captures' task
/// positions (list, then watch from the listing's revision; again after a
/// compaction), writes stop or abort when asked, and ends with the outcome the
/// captures reported (deleting the assignment, which is done).
async fn follow(
    inner: Arc<Inner>,
    id: ChangefeedId,
    adopted: Option<Sides>,
    mut record: Assignment,
    (mut desired, mut revision): (watch::Receiver<Desired>, watch::Receiver<Revision>),
    live: Arc<Reported>,
    stop_wait: Option<Duration>,
) -> Outcome {
    let lost = || Outcome::Failed {
        kind: ErrorKind::Retryable,
        message: "this server lost its ownership of the meta store".into(),
    };
    let (sides, registered, asked) = match adopted {
        Some(sides) => {
            tracing::info!(captures = ?sides.captures(), "Following the work an earlier owner assigned there.");
            (with_placement(&inner, &id, sides).await, true, None)
        }
        None => {
            let placed = place(&inner, &id).await;
            let sides = split(&inner, &id, placed.capture, placed.registered).await;
            tracing::info!(captures = ?sides.captures(), "Assigning the changefeed.");
            (sides, placed.registered, placed.asked)
        }
    };
    let captures = sides.captures();
    let mut written: Vec<Written> = sides
        .sides
        .iter()
        .map(|side| Written {
            key: keys::assignment(&side.capture, id.tenant(), id.name()).expect("valid names"),
            side: side.clone(),
            revision: Revision::ZERO,
        })
        .collect();
    if write_all(&inner, &mut written, &record, None)
        .await
        .is_err()
    {
        return lost();
    }
    if let Some(revision) = asked
        && let Err(e) = relocate::done(inner.store.as_ref(), &inner.guard, &id, revision).await
    {
        // Left, it is taken as asked again: the work stays where it went.
        tracing::warn!(error = %e, "Could not delete the carried out move.");
    }
    let prefix = keys::task_prefix(id.tenant(), id.name()).expect("valid names");
    let mut reports = Reports {
        epoch: record.changefeed_epoch,
        reader: sides.reader().to_string(),
        captures: captures.iter().map(|c| (c.clone(), None)).collect(),
        fenced: false,
        unreadable: None,
        asked_to_stop: false,
    };
    // Set once a stop is written: the capture's report is waited for until then.
    let mut deadline: Option<tokio::time::Instant> = None;
    // Until the handle is dropped: then no new info revision comes.
    let mut revision_open = true;
    let gave_up = || {
        tracing::warn!(
            "The capture did not report the end of stopped work in time; counting it as stopped."
        );
        Outcome::Stopped
    };
    let outcome = 'follow: loop {
        let listing = match inner.store.list(&prefix).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "Could not read the task positions; retrying.");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        for kv in &listing.kvs {
            reports.take(kv, false);
        }
        let mut stream = match inner.store.watch(&prefix, Some(listing.revision)).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "Could not watch the task positions; listing again.");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        // A drain of the capture or a move of the changefeed stops the work
        // there; the owner places it again.
        let mut relocations = match Relocations::watch(
            inner.store.as_ref(),
            &sides,
            &id,
            listing.revision,
        )
        .await
        {
            Ok((relocations, already)) => {
                if let Some(why) = already.filter(|_| record.desired == Desired::Run) {
                    tracing::info!(%why, "Stopping the work to place it elsewhere.");
                    reports.asked_to_stop = true;
                    match stop(&inner, &mut record, &mut written, &mut deadline, stop_wait).await {
                        Ok(()) => {}
                        Err(Lost::Ownership) => break 'follow lost(),
                        Err(Lost::TimedOut) => break 'follow gave_up(),
                    }
                }
                relocations
            }
            Err(e) => {
                tracing::debug!(error = %e, "Could not watch for drains and moves; listing again.");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        // A capture that was registered when the work was placed on it and is
        // no longer: its lease ended (it stopped writing before that), so the
        // work ends here and the owner places it again.
        let mut departures = match registered {
            false => None,
            true => match gone(&inner, &captures, listing.revision).await {
                Ok(Departures::Gone(capture)) => break 'follow departed(&capture),
                Ok(Departures::Watching(w)) => Some(w),
                Err(e) => {
                    tracing::debug!(error = %e, "Could not watch the captures; listing again.");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            },
        };
        loop {
            *live.0.lock().expect("not poisoned") = reports.progress();
            if let Some(outcome) = reports.outcome() {
                break 'follow outcome;
            }
            // One side of a split run that ended ends the others (its tables
            // have nobody to run them); the owner places the run again.
            if record.desired == Desired::Run
                && let Some(capture) = reports.ended_early()
            {
                tracing::info!(%capture, "One side of the run ended; stopping the others.");
                match stop(&inner, &mut record, &mut written, &mut deadline, stop_wait).await {
                    Ok(()) => {}
                    Err(Lost::Ownership) => break 'follow lost(),
                    Err(Lost::TimedOut) => break 'follow gave_up(),
                }
            }
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(ev)) => reports.take(&ev.kv, ev.kind == WatchEventKind::Delete),
                    // Compacted, or the stream ended: list again.
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "The task position watch ended; listing again.");
                        continue 'follow;
                    }
                    None => continue 'follow,
                },
                changed = desired.changed(), if record.desired != Desired::Abort => {
                    let next = if changed.is_ok() { *desired.borrow_and_update() } else { Desired::Abort };
                    if next == record.desired {
                        continue;
                    }
                    record.desired = next;
                    reports.asked_to_stop = true;
                    if next == Desired::Stop && deadline.is_none() {
                        deadline = stop_wait.map(|w| tokio::time::Instant::now() + w);
                    }
                    match write_all(&inner, &mut written, &record, deadline).await {
                        Ok(()) => {}
                        Err(Lost::Ownership) => break 'follow lost(),
                        Err(Lost::TimedOut) => break 'follow gave_up(),
                    }
                }
                changed = revision.changed(), if record.desired == Desired::Run && revision_open => {
                    if changed.is_err() {
                        revision_open = false;
                        continue;
                    }
                    let next = *revision.borrow_and_update();
                    if next <= record.info_revision {
                        continue;
                    }
                    record.info_revision = next;
                    if write_all(&inner, &mut written, &record, None).await.is_err() {
                        break 'follow lost();
                    }
                }
                why = relocations.next(), if record.desired == Desired::Run => match why {
                    Some(why) => {
                        tracing::info!(%why, "Stopping the work to place it elsewhere.");
                        reports.asked_to_stop = true;
                        match stop(&inner, &mut record, &mut written, &mut deadline, stop_wait).await {
                            Ok(()) => {}
                            Err(Lost::Ownership) => break 'follow lost(),
                            Err(Lost::TimedOut) => break 'follow gave_up(),
                        }
                    }
                    None => continue 'follow,
                },
                event = next_departure(&mut departures) => match event {
                    Some(Ok(ev)) if ev.kind == WatchEventKind::Delete => {
                        if let Some(capture) = captures.iter().find(|c| {
                            keys::capture(c).is_ok_and(|k| k == ev.kv.key)
                        }) {
                            break 'follow departed(capture);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => continue 'follow,
                },
                () = until(deadline) => break 'follow gave_up(),
            }
        }
    };
    // The task is done: its assignments go (only if still ours).
    for Written { key, revision, .. } in written {
        let txn = Txn::new()
            .when([inner.guard.clone(), Compare::mod_revision(&key, revision)])
            .and_then([Op::delete(&key)]);
        if let Err(e) = inner.store.txn(txn).await {
            tracing::warn!(error = %e, %key, "Could not delete a finished assignment.");
        }
    }
    let _ = inner.wake.send(id);
    outcome
}

/// Writes `Desired::Stop` into the assignments (the capture flushes, stops
/// and reports; the owner then places the work again), starting the stop's
/// deadline.
async fn stop(
    inner: &Inner,
    record: &mut Assignment,
    written: &mut [Written],
    deadline: &mut Option<tokio::time::Instant>,
    stop_wait: Option<Duration>,
) -> Result<(), Lost> {
    record.desired = Desired::Stop;
    if deadline.is_none() {
        *deadline = stop_wait.map(|w| tokio::time::Instant::now() + w);
    }
    write_all(inner, written, record, *deadline).await
}

/// One side of a run, as written.
struct Written {
    key: String,
    side: Side,
    /// The revision its last write landed at.
    revision: Revision,
}

/// Writes every side's assignment, its shared fields from `record` (the
/// reader's first).
async fn write_all(
    inner: &Inner,
    written: &mut [Written],
    record: &Assignment,
    until: Option<tokio::time::Instant>,
) -> Result<(), Lost> {
    for w in written.iter_mut() {
        w.revision = write(inner, &w.key, &w.side.assignment(record), until).await?;
    }
    Ok(())
}

/// An adopted run with the table placement it follows: the stored one if
/// it splits the run this way (a placement that changed meanwhile ends the
/// run, as a move does, so that the next run follows it).
async fn with_placement(inner: &Inner, id: &ChangefeedId, mut adopted: Sides) -> Sides {
    loop {
        match (
            tables::read(inner.store.as_ref(), id).await,
            tables::live_captures(inner.store.as_ref()).await,
        ) {
            (Ok((placement, _)), Ok(live)) => {
                let planned = Sides::plan(
                    adopted.reader().to_string(),
                    placement.clone(),
                    &live,
                    String::new,
                );
                if planned.same_split(&adopted) {
                    adopted.placement = placement;
                }
                return adopted;
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "Could not read the table placement; retrying.");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// The sides of a run read on `reader`: split as the changefeed's table
/// placement says among the live captures (none registered, in tests: whole).
/// Retries while the store does not answer.
async fn split(inner: &Inner, id: &ChangefeedId, reader: String, registered: bool) -> Sides {
    if !registered {
        return Sides::whole(reader);
    }
    loop {
        match (
            tables::read(inner.store.as_ref(), id).await,
            tables::live_captures(inner.store.as_ref()).await,
        ) {
            (Ok((placement, _)), Ok(live)) => {
                return Sides::plan(reader, placement, &live, tables::new_token);
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "Could not read the table placement; retrying.");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Where [`place`] put the work (the capture that reads it).
struct Placed {
    capture: String,
    /// Whether that capture was registered (a capture that is not, in tests
    /// without registrations, is never counted as gone).
    registered: bool,
    /// The revision of the move record that was read (carried out, or not
    /// possible any more): deleted once the work is assigned.
    asked: Option<Revision>,
}

/// The live capture with the fewest changefeeds assigned, then the fewest
/// rows per second (this node's first among equals), not one being drained; this node's when none is
/// registered. Waits while every capture is being drained (the work is
/// unschedulable: said in the log, never dropped), and retries while the store
/// does not answer.
async fn place(inner: &Inner, id: &ChangefeedId) -> Placed {
    let mut said = false;
    loop {
        let (load, drained, asked) = match (
            capture_loads(inner.store.as_ref(), None).await,
            drained(inner.store.as_ref()).await,
            relocate::preferred(inner.store.as_ref(), id).await,
        ) {
            (Ok(load), Ok(drained), Ok(asked)) => (load, drained, asked),
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
                tracing::warn!(error = %e, "Could not read the captures' load; retrying.");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        if load.is_empty() {
            return Placed {
                capture: inner.capture.clone(),
                registered: false,
                asked: asked.map(|(_, revision)| revision),
            };
        }
        let takes = |c: &String| load.contains_key(c) && !drained.contains(c);
        let chosen = match &asked {
            Some((to, _)) if takes(to) => Some(to.clone()),
            _ => load
                .iter()
                .filter(|(c, _)| !drained.contains(*c))
                // The fewest changefeeds; among equals, the fewest rows/s.
                .min_by_key(|(c, l)| (l.assigned, l.rows_per_s, **c != inner.capture, (*c).clone()))
                .map(|(c, _)| c.clone()),
        };
        if let Some((to, _)) = &asked
            && chosen.as_ref() != Some(to)
        {
            tracing::warn!(%to, "The capture a move named is gone or being drained; placing the changefeed by load.");
        }
        match chosen {
            Some(capture) => {
                return Placed {
                    capture,
                    registered: true,
                    asked: asked.map(|(_, revision)| revision),
                };
            }
            None => {
                if !said {
                    tracing::warn!(
                        "Every capture is being drained: the changefeed waits for one that takes work."
                    );
                    said = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The captures being drained.
pub async fn drained(
    store: &dyn MetaStore,
) -> Result<std::collections::BTreeSet<String>, MetaError> {
    let prefix = keys::drain_prefix();
    Ok(store
        .list(&prefix)
        .await?
        .kvs
        .iter()
        .filter_map(|kv| kv.key.strip_prefix(&prefix).map(str::to_string))
        .collect())
}

/// What runs on a capture, as the meta store says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureLoad {
    /// Assignments on it (running, or asked to stop and not gone yet).
    pub assigned: usize,
    /// Assignments asked to run.
    pub running: usize,
    /// Tables it runs by name (its sides of split changefeeds).
    pub tables: usize,
    /// Rows per second its running work handed to sinks, as each run last
    /// measured (reported in its task position of the same epoch).
    pub rows_per_s: u64,
}

/// One assignment on a registered capture, with what its run measured.
struct AssignedRun {
    capture: String,
    tenant: String,
    changefeed: String,
    /// None when it does not decode.
    assignment: Option<Assignment>,
    /// Rows per second its run handed to the sink, as last measured (0 for
    /// work not asked to run, or not measured at this epoch).
    rows_per_s: u64,
}

/// Every assignment on a registered capture (of `tenant`'s changefeeds
/// only, with one); `registered` is filled with the registered captures.
async fn assigned_runs(
    store: &dyn MetaStore,
    tenant: Option<&str>,
    registered: &mut BTreeMap<String, CaptureLoad>,
) -> Result<Vec<AssignedRun>, MetaError> {
    for kv in store.list(&keys::capture_prefix()).await?.kvs {
        if let Some(keys::MetaKey::Capture { capture }) = keys::MetaKey::parse(&kv.key) {
            registered.insert(capture, CaptureLoad::default());
        }
    }
    let mut runs = Vec::new();
    for kv in store.list(&keys::assignments_prefix()).await?.kvs {
        let Some(keys::MetaKey::Assignment {
            capture,
            tenant: t,
            changefeed,
        }) = keys::MetaKey::parse(&kv.key)
        else {
            continue;
        };
        if !registered.contains_key(&capture) || tenant.is_some_and(|tenant| tenant != t) {
            continue;
        }
        let assignment = keys::decode::<Assignment>(&kv.key, &kv.value).ok();
        let mut rows_per_s = 0;
        if let Some(a) = assignment.as_ref().filter(|a| a.desired == Desired::Run) {
            let key = keys::task_position(&t, &changefeed, &capture)?;
            if let Some(position) = store.get(&key).await?
                && let Ok(report) = keys::decode::<TaskReport>(&key, &position.value)
                && report.changefeed_epoch == a.changefeed_epoch.0
                && let Some(rate) = report.load
            {
                rows_per_s = rate.rows_per_s;
            }
        }
        runs.push(AssignedRun {
            capture,
            tenant: t,
            changefeed,
            assignment,
            rows_per_s,
        });
    }
    Ok(runs)
}

/// Every registered capture and what runs on it; with `tenant`, only that
/// tenant's work is counted.
pub async fn capture_loads(
    store: &dyn MetaStore,
    tenant: Option<&str>,
) -> Result<BTreeMap<String, CaptureLoad>, MetaError> {
    let mut load = BTreeMap::new();
    for run in assigned_runs(store, tenant, &mut load).await? {
        let l = load.get_mut(&run.capture).expect("registered");
        l.assigned += 1;
        let Some(a) = run.assignment.filter(|a| a.desired == Desired::Run) else {
            continue;
        };
        l.running += 1;
        if let Tables::Only(only) = &a.tables {
            l.tables += only.len();
        }
        l.rows_per_s += run.rows_per_s;
    }
    Ok(load)
}

/// Each running changefeed's rows per second, over its captures, as its
/// runs last measured.
pub async fn changefeed_rates(
    store: &dyn MetaStore,
) -> Result<BTreeMap<ChangefeedId, u64>, MetaError> {
    let mut rates = BTreeMap::new();
    for run in assigned_runs(store, None, &mut BTreeMap::new()).await? {
        if let Ok(id) = ChangefeedId::new(&run.tenant, &run.changefeed) {
            *rates.entry(id).or_default() += run.rows_per_s;
        }
    }
    Ok(rates)
}

/// The captures' registrations, as [`gone`] found them.
enum Departures {
    /// This one is gone already.
    Gone(String),
    /// All there; the watch tells of their deletions after the check.
    Watching(sluice_meta::WatchStream),
}

/// Checks that `captures` are registered and watches their registrations
/// from `after` on.
async fn gone(
    inner: &Inner,
    captures: &[String],
    after: Revision,
) -> Result<Departures, MetaError> {
    let watch = inner
        .store
        .watch(&keys::capture_prefix(), Some(after))
        .await?;
    for capture in captures {
        let key = keys::capture(capture)?;
        if inner.store.get(&key).await?.is_none() {
            return Ok(Departures::Gone(capture.clone()));
        }
    }
    Ok(Departures::Watching(watch))
}

/// The next event of the captures' watch; never without one.
async fn next_departure(
    watch: &mut Option<sluice_meta::WatchStream>,
) -> Option<Result<sluice_meta::WatchEvent, MetaError>> {
    match watch {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// The outcome of work whose capture is gone: stopped, so that the owner
/// places it again at once (the capture fenced itself before its lease ended;
/// what it wrote past the checkpoint comes again, flagged replay).
fn departed(capture: &str) -> Outcome {
    tracing::warn!(%capture, "The capture running this changefeed is gone; placing it again.");
    Outcome::Stopped
}

/// Resolves at `deadline`; never without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskState;

    #[test]
    fn the_assignment_record_has_its_documented_form() {
        let a = Assignment {
            version: 1,
            changefeed_epoch: Epoch(3),
            tables: Tables::All,
            checkpoint_ts: CheckpointTs::new(100),
            info_revision: Revision(7),
            desired: Desired::Run,
            shipment: None,
        };
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(
            text,
            r#"{"version":1,"changefeed-epoch":3,"tables":"all","checkpoint-ts":100,"info-revision":7,"desired":"run"}"#
        );
        assert_eq!(serde_json::from_str::<Assignment>(&text).unwrap(), a);
        let only = serde_json::to_string(&Tables::Only(vec!["db.t".into()])).unwrap();
        assert_eq!(only, r#"{"only":["db.t"]}"#);
    }

    #[test]
    fn reports_decode_old_records_and_states() {
        let old = r#"{"version":1,"epoch":3,"checkpoint-ts":10,"resolved-ts":11,"fence-ts":12}"#;
        let r: TaskReport = serde_json::from_str(old).unwrap();
        assert_eq!(
            (r.changefeed_epoch, r.checkpoint_ts, r.state),
            (0, 10, TaskState::Running)
        );
        let failed = r#"{"changefeed-epoch":2,"checkpoint-ts":5,"state":{"failed":{"kind":"config","message":"bad"}},"rows-written":9}"#;
        let r: TaskReport = serde_json::from_str(failed).unwrap();
        assert_eq!(
            r.state.outcome(),
            Some(Outcome::Failed {
                kind: ErrorKind::Config,
                message: "bad".into()
            })
        );
        assert_eq!(r.rows_written, 9);
    }

    fn kv(capture: &str, report: &str) -> KeyValue {
        KeyValue {
            key: keys::task_position("t", "c", capture).unwrap(),
            value: report.as_bytes().to_vec(),
            create_revision: Revision(1),
            mod_revision: Revision(1),
            lease: None,
        }
    }

    #[test]
    fn the_checkpoint_is_the_minimum_over_the_assigned_captures() {
        let mut reports = Reports {
            epoch: Epoch(2),
            reader: "b".into(),
            captures: [("a".to_string(), None), ("b".to_string(), None)]
                .into_iter()
                .collect(),
            fenced: false,
            unreadable: None,
            asked_to_stop: false,
        };
        reports.take(
            &kv(
                "a",
                r#"{"changefeed-epoch":2,"checkpoint-ts":50,"rows-written":3}"#,
            ),
            false,
        );
        assert_eq!(reports.progress(), None, "b has not reported");
        // Another epoch's report and an unassigned capture change nothing.
        reports.take(
            &kv("b", r#"{"changefeed-epoch":1,"checkpoint-ts":10}"#),
            false,
        );
        reports.take(
            &kv("z", r#"{"changefeed-epoch":2,"checkpoint-ts":1}"#),
            false,
        );
        assert_eq!(reports.progress(), None);
        reports.take(
            &kv(
                "b",
                r#"{"changefeed-epoch":2,"checkpoint-ts":40,"rows-written":4}"#,
            ),
            false,
        );
        let p = reports.progress().unwrap();
        assert_eq!((p.checkpoint_ts.get(), p.rows_written), (40, 7));
        assert_eq!(p.capture.as_deref(), Some("b"), "the reader is named");
        assert_eq!(reports.outcome(), None);
        assert_eq!(reports.ended_early(), None);
        reports.take(
            &kv(
                "a",
                r#"{"changefeed-epoch":2,"checkpoint-ts":60,"state":"finished"}"#,
            ),
            false,
        );
        assert_eq!(reports.outcome(), None, "b still runs");
        assert_eq!(reports.ended_early(), None, "a finished: b ends by itself");
        reports.take(
            &kv(
                "a",
                r#"{"changefeed-epoch":2,"checkpoint-ts":60,"state":"stopped"}"#,
            ),
            false,
        );
        assert_eq!(reports.ended_early(), Some("a"), "b is to stop too");
        // A split run asked to stop: b's shipment ends as a stops, which is
        // the stop (a failure of b's own, unasked, stays a failure).
        let lost = r#"{"changefeed-epoch":2,"checkpoint-ts":60,"state":{"failed":{"kind":"retryable","message":"the shipment ended"}}}"#;
        let mut asked = Reports {
            epoch: Epoch(2),
            reader: "a".into(),
            captures: reports.captures.clone(),
            fenced: false,
            unreadable: None,
            asked_to_stop: false,
        };
        asked.take(&kv("b", lost), false);
        assert!(matches!(asked.outcome(), Some(Outcome::Failed { .. })));
        asked.asked_to_stop = true;
        assert_eq!(asked.outcome(), Some(Outcome::Stopped));
        reports.take(
            &kv(
                "b",
                r#"{"changefeed-epoch":2,"checkpoint-ts":60,"state":"stopped"}"#,
            ),
            false,
        );
        assert_eq!(reports.outcome(), Some(Outcome::Stopped));
        reports.take(
            &kv("a", r#"{"changefeed-epoch":3,"checkpoint-ts":60}"#),
            false,
        );
        assert_eq!(reports.outcome(), Some(Outcome::Fenced));
    }

    /// A task position as a capture writes it (the fields the owner reads).
    fn position(epoch: u64, checkpoint: u64, state: &str, rows: u64) -> Vec<u8> {
        format!(
            r#"{{"version":1,"epoch":1,"changefeed-epoch":{epoch},"checkpoint-ts":{checkpoint},"resolved-ts":{checkpoint},"fence-ts":0,"state":{state},"rows-written":{rows}}}"#
        )
        .into_bytes()
    }

    async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..400 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting until {what}");
    }

    /// The assignment keys in `store`.
    async fn assigned(store: &Arc<dyn MetaStore>) -> Vec<String> {
        let listing = store.list(&keys::assignments_prefix()).await.unwrap();
        listing.kvs.into_iter().map(|kv| kv.key).collect()
    }

    /// An embedded store in `dir` and the guard of an owner of it.
    async fn owned_store(dir: &tempfile::TempDir) -> (Arc<dyn MetaStore>, Compare) {
        let store: Arc<dyn MetaStore> = Arc::new(
            sluice_meta::EmbeddedMetaStore::open(dir.path().join("meta.redb"))
                .await
                .unwrap(),
        );
        store.put("/owner", b"1".to_vec(), None).await.unwrap();
        let created = store.get("/owner").await.unwrap().unwrap().create_revision;
        (store, Compare::create_revision("/owner", created))
    }

    #[tokio::test]
    async fn the_handle_writes_the_assignment_and_follows_the_reported_position() {
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        let (wake, mut woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake);
        let id = ChangefeedId::new("t", "c").unwrap();
        let info = ChangefeedInfo::new(
            id.clone(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let key = keys::assignment("c-1", "t", "c").unwrap();
        let task = keys::task_position("t", "c", "c-1").unwrap();
        // A position of the previous epoch is not this work's.
        store
            .put(&task, position(1, 90, r#""finished""#, 5), None)
            .await
            .unwrap();

        let mut work = assigner.assign(&info, Epoch(2), CheckpointTs::new(100), Revision(7));
        let read = |store: Arc<dyn MetaStore>, key: String| async move {
            store
                .get(&key)
                .await
                .unwrap()
                .map(|kv| keys::decode::<Assignment>(&kv.key, &kv.value).unwrap())
        };
        let mut assigned = None;
        for _ in 0..400 {
            assigned = read(store.clone(), key.clone()).await;
            if assigned.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            assigned.unwrap(),
            Assignment {
                version: 1,
                changefeed_epoch: Epoch(2),
                tables: Tables::All,
                checkpoint_ts: CheckpointTs::new(100),
                info_revision: Revision(7),
                desired: Desired::Run,
                shipment: None,
            }
        );
        assert_eq!(work.live().progress(), None);

        // The capture claims the position and saves a checkpoint.
        store
            .put(&task, position(2, 150, r#""running""#, 40), None)
            .await
            .unwrap();
        let live = work.live();
        wait_until("the progress is read", || {
            live.progress()
                .is_some_and(|p| p.checkpoint_ts.get() == 150)
        })
        .await;
        assert_eq!(live.progress().unwrap().rows_written, 40);
        assert!(!work.is_finished());

        work.signal_stop();
        assert!(work.is_stopping());
        let mut desired = Desired::Run;
        for _ in 0..400 {
            desired = read(store.clone(), key.clone()).await.unwrap().desired;
            if desired != Desired::Run {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(desired, Desired::Stop);

        // The capture reports the stop; the owner is woken, the assignment goes.
        store
            .put(&task, position(2, 180, r#""stopped""#, 55), None)
            .await
            .unwrap();
        assert_eq!(woken.recv().await, Some(id));
        assert!(work.is_finished());
        assert_eq!(live.progress().unwrap().checkpoint_ts.get(), 180);
        assert_eq!(live.progress().unwrap().rows_written, 55);
        assert_eq!(work.join().await, Outcome::Stopped);
        assert_eq!(read(store.clone(), key.clone()).await, None);
    }

    #[tokio::test]
    async fn a_new_owner_adopts_only_work_that_still_runs_on_the_same_registration() {
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        let record = |epoch: u64, desired: Desired| {
            keys::encode(&Assignment {
                version: WHOLE_ASSIGNMENT_VERSION,
                changefeed_epoch: Epoch(epoch),
                tables: Tables::All,
                checkpoint_ts: CheckpointTs::new(100),
                info_revision: Revision(1),
                desired,
                shipment: None,
            })
            .unwrap()
        };
        let put = |key: String, value: Vec<u8>| {
            let store = store.clone();
            async move { store.put(&key, value, None).await.unwrap() }
        };
        let assignment = |capture: &str, name: &str| keys::assignment(capture, "t", name).unwrap();
        // c-2's assignment predates its registration: a restarted capture,
        // which does not run it.
        put(assignment("c-2", "old"), record(1, Desired::Run)).await;
        for c in ["c-0", "c-1", "c-2"] {
            put(keys::capture(c).unwrap(), b"{}".to_vec()).await;
        }
        put(assignment("c-1", "run"), record(2, Desired::Run)).await;
        put(assignment("c-0", "paused"), record(3, Desired::Run)).await;
        put(assignment("c-1", "stopping"), record(4, Desired::Stop)).await;
        put(assignment("c-9", "gone"), record(1, Desired::Run)).await;
        // One changefeed on two captures: neither is taken as running.
        put(assignment("c-0", "twice"), record(1, Desired::Run)).await;
        put(assignment("c-1", "twice"), record(1, Desired::Run)).await;
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-0".into(), wake);
        let run = ChangefeedId::new("t", "run").unwrap();
        let paused = ChangefeedId::new("t", "paused").unwrap();
        assert_eq!(
            assigner.adopt().await.unwrap(),
            [(paused, Epoch(3)), (run.clone(), Epoch(2))]
        );
        assert_eq!(
            assigned(&store).await,
            [assignment("c-0", "paused"), assignment("c-1", "run")]
        );
        // Assigned at that epoch, it stays where it runs (by load it would go
        // to c-0, which has nothing).
        let info =
            ChangefeedInfo::new(run, crate::info::tests::sample_config(), CommitTs::new(100));
        let before = store.get(&assignment("c-1", "run")).await.unwrap().unwrap();
        let _work = assigner.assign(&info, Epoch(2), CheckpointTs::new(150), Revision(1));
        // Written again (under this owner's guard), where it was.
        tokio::time::timeout(Duration::from_secs(5), async {
            while store
                .get(&assignment("c-1", "run"))
                .await
                .unwrap()
                .is_none_or(|kv| kv.mod_revision == before.mod_revision)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        // The owner did not start `paused` (it was paused before the old
        // owner could stop it): its work ends.
        assigner.release_unadopted().await.unwrap();
        assert_eq!(assigned(&store).await, [assignment("c-1", "run")]);
    }

    #[tokio::test]
    async fn a_newer_epoch_in_the_position_fences_the_handle() {
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake);
        let info = ChangefeedInfo::new(
            ChangefeedId::new("t", "c").unwrap(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let work = assigner.assign(&info, Epoch(2), CheckpointTs::new(100), Revision(1));
        let task = keys::task_position("t", "c", "c-1").unwrap();
        store
            .put(&task, position(3, 150, r#""running""#, 1), None)
            .await
            .unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(5), work.join())
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Fenced);
    }

    #[tokio::test]
    async fn an_unreadable_position_fails_the_work_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake);
        let info = ChangefeedInfo::new(
            ChangefeedId::new("t", "c").unwrap(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let task = keys::task_position("t", "c", "c-1").unwrap();
        store
            .put(&task, b"\xff{\"checkpoint-ts\":".to_vec(), None)
            .await
            .unwrap();
        let work = assigner.assign(&info, Epoch(1), CheckpointTs::new(100), Revision(1));
        let outcome = tokio::time::timeout(Duration::from_secs(5), work.join())
            .await
            .unwrap();
        let Outcome::Failed { kind, message } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(kind, ErrorKind::Fatal);
        assert!(message.contains(&task), "{message}");
        assert!(message.contains("create it again"), "{message}");
    }

    #[tokio::test]
    async fn a_stop_nobody_reports_counts_as_stopped_after_the_stop_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake)
            .with_stop_wait(Duration::from_millis(300));
        let info = ChangefeedInfo::new(
            ChangefeedId::new("t", "c").unwrap(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let mut work = assigner.assign(&info, Epoch(1), CheckpointTs::new(100), Revision(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        work.signal_stop();
        let outcome = tokio::time::timeout(Duration::from_secs(5), work.join())
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Stopped);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The assignment went with it.
        let key = keys::assignment("c-1", "t", "c").unwrap();
        assert_eq!(store.get(&key).await.unwrap(), None);
    }

    /// Registers `capture` as a server does, at `address`.
    async fn register(store: &Arc<dyn MetaStore>, capture: &str, address: &str) {
        let info = crate::CaptureInfo {
            version: 1,
            id: capture.into(),
            address: address.into(),
            http_address: String::new(),
            sluice_version: "test".into(),
            started_at_ms: 1,
        };
        let key = keys::capture(capture).unwrap();
        store
            .put(&key, keys::encode(&info).unwrap(), None)
            .await
            .unwrap();
    }

    /// Waits for `capture`'s assignment of `t/c` to satisfy `ready`.
    async fn assignment_on(
        store: &Arc<dyn MetaStore>,
        capture: &str,
        ready: impl Fn(&Assignment) -> bool,
    ) -> Assignment {
        let key = keys::assignment(capture, "t", "c").unwrap();
        for _ in 0..500 {
            if let Some(kv) = store.get(&key).await.unwrap() {
                let a: Assignment = keys::decode(&kv.key, &kv.value).unwrap();
                if ready(&a) {
                    return a;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no such assignment on {capture}");
    }

    #[tokio::test]
    async fn captures_load_counts_their_work_and_a_new_changefeed_goes_to_the_least_busy() {
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        register(&store, "c-1", "10.0.0.1:8300").await;
        register(&store, "c-2", "10.0.0.2:8300").await;
        // One changefeed on each; c-1's moves 5000 rows/s, c-2's 10.
        for (capture, name, rate) in [("c-1", "busy", 5000), ("c-2", "idle", 10)] {
            let record = Assignment {
                version: WHOLE_ASSIGNMENT_VERSION,
                changefeed_epoch: Epoch(3),
                tables: if rate > 100 {
                    Tables::Only(vec!["shop.a".into(), "shop.b".into()])
                } else {
                    Tables::All
                },
                checkpoint_ts: CheckpointTs::new(100),
                info_revision: Revision(1),
                desired: Desired::Run,
                shipment: None,
            };
            let key = keys::assignment(capture, "t", name).unwrap();
            store
                .put(&key, keys::encode(&record).unwrap(), None)
                .await
                .unwrap();
            let position = format!(
                r#"{{"version":1,"epoch":1,"changefeed-epoch":3,"checkpoint-ts":100,"resolved-ts":100,"fence-ts":0,"state":"running","load":{{"rows-per-s":{rate},"tables":[]}}}}"#
            );
            let key = keys::task_position("t", name, capture).unwrap();
            store.put(&key, position.into_bytes(), None).await.unwrap();
        }
        // A stale position (an older epoch) is not counted.
        let stale = keys::task_position("t", "busy", "c-2").unwrap();
        store
            .put(&stale, position(2, 100, r#""running""#, 1), None)
            .await
            .unwrap();
        let loads = capture_loads(store.as_ref(), None).await.unwrap();
        assert_eq!(
            loads.get("c-1"),
            Some(&CaptureLoad {
                assigned: 1,
                running: 1,
                tables: 2,
                rows_per_s: 5000
            })
        );
        assert_eq!(
            loads.get("c-2").map(|l| (l.assigned, l.rows_per_s)),
            Some((1, 10))
        );
        // Another tenant's view counts none of it.
        let theirs = capture_loads(store.as_ref(), Some("u")).await.unwrap();
        assert!(
            theirs.values().all(|l| *l == CaptureLoad::default()),
            "{theirs:?}"
        );

        // Equal in changefeeds: the one moving fewer rows takes the new one,
        // though this node (c-1) would be first among equals.
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake);
        let info = ChangefeedInfo::new(
            ChangefeedId::new("t", "c").unwrap(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let _work = assigner.assign(&info, Epoch(1), CheckpointTs::new(100), Revision(1));
        assignment_on(&store, "c-2", |a| a.tables == Tables::All).await;
        assert!(
            store
                .get(&keys::assignment("c-1", "t", "c").unwrap())
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_moved_table_ends_the_run_and_the_next_runs_it_on_its_capture_from_the_reader() {
        use crate::relocate::{MoveError, Placement};
        use crate::tables::{TableMove, request_table_move};
        use sluice_protocol::{Receiver, ShipRole};
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        register(&store, "c-1", "10.0.0.1:8300").await;
        register(&store, "c-2", "10.0.0.2:8300").await;
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake);
        let id = ChangefeedId::new("t", "c").unwrap();
        let info = ChangefeedInfo::new(
            id.clone(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let info_key = keys::changefeed_info("t", "c").unwrap();
        store.put(&info_key, info.encode(), None).await.unwrap();
        let first = assigner.assign(&info, Epoch(1), CheckpointTs::new(100), Revision(1));
        assignment_on(&store, "c-1", |a| a.tables == Tables::All).await;
        let on = |capture: &str| keys::task_position("t", "c", capture).unwrap();
        store
            .put(&on("c-1"), position(1, 150, r#""running""#, 10), None)
            .await
            .unwrap();

        // Bad requests change nothing.
        let store_ref = store.as_ref();
        assert!(matches!(
            request_table_move(store_ref, &id, "shop.orders", "c-9").await,
            Err(MoveError::NoCapture(_))
        ));
        assert!(matches!(
            request_table_move(store_ref, &id, "orders", "c-2").await,
            Err(MoveError::BadTable(_))
        ));
        let moved = request_table_move(store_ref, &id, "shop.orders", "c-2")
            .await
            .unwrap();
        assert_eq!(
            moved,
            TableMove {
                changefeed: id.clone(),
                table: "shop.orders".into(),
                from: "c-1".into(),
                to: "c-2".into()
            }
        );
        // The run ends where it is (stopped, flushed and saved there).
        assignment_on(&store, "c-1", |a| a.desired == Desired::Stop).await;
        store
            .put(&on("c-1"), position(1, 170, r#""stopped""#, 12), None)
            .await
            .unwrap();
        assert_eq!(first.join().await, Outcome::Stopped);

        // The next run: c-1 reads and ships shop.orders to c-2, one epoch,
        // one secret.
        let second = assigner.assign(&info, Epoch(2), CheckpointTs::new(170), Revision(1));
        let reads = assignment_on(&store, "c-1", |a| a.changefeed_epoch == Epoch(2)).await;
        let receives = assignment_on(&store, "c-2", |_| true).await;
        assert_eq!(
            (reads.version, reads.tables.clone(), receives.version),
            (
                sluice_protocol::ASSIGNMENT_VERSION,
                Tables::All,
                sluice_protocol::ASSIGNMENT_VERSION
            )
        );
        assert_eq!(receives.tables, Tables::Only(vec!["shop.orders".into()]));
        assert_eq!(
            (receives.changefeed_epoch, receives.checkpoint_ts),
            (Epoch(2), CheckpointTs::new(170))
        );
        let (reader_side, receiver_side) = (reads.shipment.unwrap(), receives.shipment.unwrap());
        assert_eq!(reader_side.token, receiver_side.token);
        assert_eq!(reader_side.token.len(), 32);
        assert_eq!(
            reader_side.role,
            ShipRole::Reads {
                receivers: vec![Receiver {
                    capture: "c-2".into(),
                    tables: vec!["shop.orders".into()]
                }]
            }
        );
        assert_eq!(
            receiver_side.role,
            ShipRole::Receives {
                reader: "c-1".into(),
                address: "10.0.0.1:8300".into()
            }
        );
        let placement = Placement::read(store_ref).await.unwrap();
        assert_eq!(placement.capture_of(&id), Some("c-1"));
        assert_eq!(placement.tables[&id]["shop.orders"], "c-2");
        // Asking again changes nothing and says where it runs.
        let again = request_table_move(store_ref, &id, "shop.orders", "c-2")
            .await
            .unwrap();
        assert_eq!((again.from.as_str(), again.to.as_str()), ("c-2", "c-2"));

        // The receiver fails: the reader is stopped too, and the run fails.
        store
            .put(&on("c-1"), position(2, 180, r#""running""#, 1), None)
            .await
            .unwrap();
        let failed = r#"{"failed":{"kind":"retryable","message":"the reader went away"}}"#;
        store
            .put(&on("c-2"), position(2, 175, failed, 1), None)
            .await
            .unwrap();
        assignment_on(&store, "c-1", |a| a.desired == Desired::Stop).await;
        store
            .put(&on("c-1"), position(2, 190, r#""stopped""#, 2), None)
            .await
            .unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(5), second.join())
            .await
            .unwrap();
        assert!(
            matches!(&outcome, Outcome::Failed { kind: ErrorKind::Retryable, message } if message.contains("reader went away")),
            "{outcome:?}"
        );
        assert!(
            assigned(&store).await.is_empty(),
            "both sides' assignments went"
        );
    }

    #[tokio::test]
    async fn a_capture_its_tables_are_placed_on_coming_back_ends_the_whole_run_and_the_next_splits()
    {
        use crate::tables::TablePlacement;
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        register(&store, "c-1", "10.0.0.1:8300").await;
        // shop.orders is placed on c-2, which is gone (its lease ended).
        let placement = TablePlacement {
            version: 1,
            tables: [("shop.orders".to_string(), "c-2".to_string())].into(),
        };
        store
            .put(
                &keys::table_placement("t", "c").unwrap(),
                keys::encode(&placement).unwrap(),
                None,
            )
            .await
            .unwrap();
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-1".into(), wake);
        let id = ChangefeedId::new("t", "c").unwrap();
        let info = ChangefeedInfo::new(
            id.clone(),
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        // Every table runs on the reader meanwhile.
        let first = assigner.assign(&info, Epoch(1), CheckpointTs::new(100), Revision(1));
        assignment_on(&store, "c-1", |a| {
            a.tables == Tables::All && a.shipment.is_none()
        })
        .await;
        let on = |capture: &str| keys::task_position("t", "c", capture).unwrap();
        store
            .put(&on("c-1"), position(1, 150, r#""running""#, 10), None)
            .await
            .unwrap();
        // Another capture coming changes nothing.
        register(&store, "c-3", "10.0.0.3:8300").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let a = assignment_on(&store, "c-1", |_| true).await;
        assert_eq!(a.desired, Desired::Run);
        // c-2 comes back: the run ends (stopped and saved where it is)...
        register(&store, "c-2", "10.0.0.2:8300").await;
        assignment_on(&store, "c-1", |a| a.desired == Desired::Stop).await;
        store
            .put(&on("c-1"), position(1, 170, r#""stopped""#, 12), None)
            .await
            .unwrap();
        assert_eq!(first.join().await, Outcome::Stopped);
        // ...and the next gives it shop.orders again.
        let _second = assigner.assign(&info, Epoch(2), CheckpointTs::new(170), Revision(1));
        let receives = assignment_on(&store, "c-2", |_| true).await;
        assert_eq!(receives.tables, Tables::Only(vec!["shop.orders".into()]));
        assert_eq!(receives.changefeed_epoch, Epoch(2));
        let reads = assignment_on(&store, "c-1", |a| a.changefeed_epoch == Epoch(2)).await;
        assert!(reads.shipment.is_some());
        // Running split as placed, the registrations it sees change nothing.
        register(&store, "c-2", "10.0.0.2:8300").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for capture in ["c-1", "c-2"] {
            let a = assignment_on(&store, capture, |_| true).await;
            assert_eq!(a.desired, Desired::Run, "{capture}");
        }
    }

    #[tokio::test]
    async fn a_new_owner_adopts_a_split_run_whole_and_keeps_each_side() {
        use sluice_protocol::{Receiver, ShipRole, Shipment};
        let dir = tempfile::tempdir().unwrap();
        let (store, guard) = owned_store(&dir).await;
        register(&store, "c-0", "10.0.0.1:8300").await;
        register(&store, "c-1", "10.0.0.2:8300").await;
        let side = |tables: Tables, token: &str, role: ShipRole| Assignment {
            version: sluice_protocol::ASSIGNMENT_VERSION,
            changefeed_epoch: Epoch(4),
            tables,
            checkpoint_ts: CheckpointTs::new(100),
            info_revision: Revision(1),
            desired: Desired::Run,
            shipment: Some(Shipment {
                token: token.into(),
                role,
            }),
        };
        let reads = ShipRole::Reads {
            receivers: vec![Receiver {
                capture: "c-1".into(),
                tables: vec!["s.t".into()],
            }],
        };
        let receives = ShipRole::Receives {
            reader: "c-0".into(),
            address: "10.0.0.1:8300".into(),
        };
        let only = || Tables::Only(vec!["s.t".into()]);
        let secret = "a-secret-of-sixteen-or-more";
        let put = |capture: &str, name: &str, a: Assignment| {
            let store = store.clone();
            let key = keys::assignment(capture, "t", name).unwrap();
            async move {
                store
                    .put(&key, keys::encode(&a).unwrap(), None)
                    .await
                    .unwrap()
            }
        };
        put("c-0", "c", side(Tables::All, secret, reads.clone())).await;
        put("c-1", "c", side(only(), secret, receives.clone())).await;
        // Sides that do not form one run (another secret): not adopted.
        put("c-0", "broken", side(Tables::All, secret, reads)).await;
        put(
            "c-1",
            "broken",
            side(only(), "another-secret-of-sixteen", receives),
        )
        .await;
        let (wake, _woken) = mpsc::unbounded_channel();
        let assigner = Assigner::new(store.clone(), guard, Arc::new(|_| {}), "c-0".into(), wake);
        let split = ChangefeedId::new("t", "c").unwrap();
        assert_eq!(assigner.adopt().await.unwrap(), [(split.clone(), Epoch(4))]);
        let key = |capture: &str| keys::assignment(capture, "t", "c").unwrap();
        assert_eq!(assigned(&store).await, [key("c-0"), key("c-1")]);
        let before = store.get(&key("c-1")).await.unwrap().unwrap();
        let info = ChangefeedInfo::new(
            split,
            crate::info::tests::sample_config(),
            CommitTs::new(100),
        );
        let _work = assigner.assign(&info, Epoch(4), CheckpointTs::new(150), Revision(2));
        // Each side is written again as it was (its tables, its side of the
        // shipment, the same secret), and keeps running.
        let receiver = assignment_on(&store, "c-1", |a| a.info_revision == Revision(2)).await;
        assert_eq!(receiver.tables, only());
        assert_eq!(receiver.shipment.as_ref().unwrap().token, secret);
        let reader = assignment_on(&store, "c-0", |a| a.info_revision == Revision(2)).await;
        assert_eq!(reader.tables, Tables::All);
        assert!(matches!(
            reader.shipment.unwrap().role,
            ShipRole::Reads { .. }
        ));
        assert!(store.get(&key("c-1")).await.unwrap().unwrap().mod_revision > before.mod_revision);
        tokio::time::sleep(Duration::from_millis(300)).await;
        for capture in ["c-0", "c-1"] {
            let a = assignment_on(&store, capture, |_| true).await;
            assert_eq!(a.desired, Desired::Run, "{capture}");
        }
    }
}
