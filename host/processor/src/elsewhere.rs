//! A changefeed's tables run by other captures, from the reading capture's
//! side (ADR 0013): their events are shipped from this pipeline's source, so
//! its checkpoint (and the source position saved with it) never passes what
//! they saved, and a DDL across captures is applied here only once they made
//! everything below it durable (a barrier); the source is told of every DDL
//! passed, so that what follows goes on to the other captures.
//!
//! With a redo log ([`LogEverything`]), the source hands this pipeline every
//! table's events: the fence holds them all until the log has them, the
//! pipeline drops the other captures' tables as it takes them from the
//! fence, and the log's durable resolved ts goes to the source's outboxes,
//! which ship nothing above it. So the one log has every table of the
//! changefeed, its resolved ts is the redo ts of every capture, and no sink
//! on any capture passes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{CommitTs, DdlEvent, SourceEvent, TableSchema, TransactionRun};
use tokio::sync::watch;

use crate::error::PipelineError;

/// How long a DDL across captures waits for the other captures while none of
/// them makes anything more durable, before the run fails (retryably). A slow
/// sink that keeps flushing is waited for however long it takes.
const REACH_WITHIN: Duration = Duration::from_secs(120);

/// The other captures' reports, and the DDLs across them.
#[derive(Default)]
pub(crate) struct TablesElsewhere {
    /// Per capture: (flushed, saved) ts.
    durable: Vec<watch::Receiver<(u64, u64)>>,
    /// The commit ts of the last DDL across captures the source kept.
    across: Option<watch::Receiver<u64>>,
    /// Where to tell the source of each DDL passed.
    passed: Option<watch::Sender<u64>>,
    /// The DDL across captures waiting for them, since when they last made
    /// progress, and how far they had got then (the sum of their flushed ts).
    waiting: Option<(u64, tokio::time::Instant, u128)>,
    /// With a redo log: which events are this capture's.
    here: Option<Arc<dyn TablesHere>>,
    /// (table id, schema version) → whether this capture runs it.
    here_by_id: HashMap<(u32, u32), bool>,
    /// With a redo log: where its durable resolved ts goes.
    logged: Option<watch::Sender<u64>>,
}

/// Which of a split changefeed's tables and DDLs are this capture's.
pub trait TablesHere: Send + Sync {
    /// Whether this capture runs the table.
    fn runs(&self, schema: &TableSchema) -> bool;
    /// Whether this capture applies the DDL.
    fn applies(&self, ddl: &DdlEvent) -> bool;
}

/// A reading capture with a redo log: the source hands the pipeline every
/// table's events (see the module docs).
pub struct LogEverything {
    /// Which events are this capture's.
    pub here: Arc<dyn TablesHere>,
    /// Told the log's durable resolved ts, as it moves: the other captures
    /// get nothing above it.
    pub logged: watch::Sender<u64>,
}

/// Why a DDL could not wait for the other captures.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotReached(String);

/// The watches between a reading pipeline and its source (see
/// [`crate::Pipeline::with_tables_elsewhere`]).
pub struct Elsewhere {
    /// Per other capture: what it reported, (flushed, saved) ts.
    pub durable: Vec<watch::Receiver<(u64, u64)>>,
    /// The commit ts of the last DDL across captures the source kept.
    pub across: watch::Receiver<u64>,
    /// Told the commit ts of every DDL the pipeline applied (or found
    /// downstream already).
    pub passed: watch::Sender<u64>,
    /// With a redo log: every table's events come here.
    pub log: Option<LogEverything>,
}

impl TablesElsewhere {
    pub(crate) fn new(e: Elsewhere) -> Self {
        let (here, logged) = e.log.map(|l| (l.here, l.logged)).unzip();
        Self {
            durable: e.durable,
            across: Some(e.across),
            passed: Some(e.passed),
            waiting: None,
            here,
            here_by_id: HashMap::new(),
            logged,
        }
    }

    /// Where the redo log's durable resolved ts goes, when every table's
    /// events come here (taken once, by the run).
    pub(crate) fn take_logged(&mut self) -> Option<watch::Sender<u64>> {
        self.logged.take()
    }

    /// Whether every table's events come here (for the redo log).
    pub(crate) fn logs_every_table(&self) -> bool {
        self.here.is_some()
    }

    fn runs_here(&mut self, schema: &TableSchema) -> bool {
        let Some(here) = &self.here else {
            return true;
        };
        *self
            .here_by_id
            .entry((schema.table_id, schema.version))
            .or_insert_with(|| here.runs(schema))
    }

    /// `run` without the other captures' tables.
    pub(crate) fn keep_parts_here(&mut self, run: &mut TransactionRun) {
        if self.here.is_none() {
            return;
        }
        for part in &run.parts {
            self.runs_here(part.changes.schema());
        }
        let by_id = &self.here_by_id;
        drop(run.take_parts(|s| by_id.get(&(s.table_id, s.version)) != Some(&false)));
    }

    /// `event` as this capture runs it: a transaction without the other
    /// captures' tables; nothing for a DDL another capture applies.
    pub(crate) fn keep_here(&mut self, event: SourceEvent) -> Option<SourceEvent> {
        if self.here.is_none() {
            return Some(event);
        }
        match event {
            SourceEvent::Transaction(mut txn) => {
                let mut tables = std::mem::take(&mut txn.tables);
                tables.retain(|t| self.runs_here(t.schema()));
                txn.tables = tables;
                Some(SourceEvent::Transaction(txn))
            }
            SourceEvent::Ddl(ddl) => self
                .here
                .as_ref()
                .is_some_and(|h| h.applies(&ddl))
                .then_some(SourceEvent::Ddl(ddl)),
            other => Some(other),
        }
    }

    /// Whether the DDL at `ts` may be applied now: it is not across
    /// captures, or every other capture flushed everything below it. Fails
    /// once a capture is gone, or once none made more durable for
    /// [`REACH_WITHIN`] while it was asked.
    pub(crate) fn ready(&mut self, ts: CommitTs) -> Result<bool, PipelineError> {
        if !self.is_across(ts) {
            return Ok(true);
        }
        let below = ts.get().saturating_sub(1);
        if self.durable.iter().all(|w| w.borrow().0 >= below) {
            self.waiting = None;
            return Ok(true);
        }
        if self.durable.iter().any(|w| w.has_changed().is_err()) {
            return Err(not_reached(format!(
                "a capture running some of this changefeed's tables went away before the DDL at {ts}"
            )));
        }
        let got = progress(&self.durable);
        let since = match self.waiting {
            Some((at, since, had)) if at == ts.get() && had == got => since,
            _ => {
                let now = tokio::time::Instant::now();
                self.waiting = Some((ts.get(), now, got));
                now
            }
        };
        if since.elapsed() > REACH_WITHIN {
            return Err(stalled(ts));
        }
        Ok(false)
    }

    fn is_across(&self, ts: CommitTs) -> bool {
        self.across
            .as_ref()
            .is_some_and(|a| *a.borrow() == ts.get())
    }

    /// What each other capture saved.
    pub(crate) fn saved(&self) -> impl Iterator<Item = CommitTs> + '_ {
        self.durable.iter().map(|w| CommitTs::new(w.borrow().1))
    }

    /// For a DDL across captures at `ts`: waits until every other capture
    /// flushed everything below it (failing once one that has not got there
    /// makes nothing more durable for [`REACH_WITHIN`]; at the end of a run,
    /// where nothing else is to be done meanwhile).
    pub(crate) async fn reach(&mut self, ts: CommitTs) -> Result<(), PipelineError> {
        if !self.is_across(ts) {
            return Ok(());
        }
        let below = ts.get().saturating_sub(1);
        // Each capture that has not got there must make more durable within
        // REACH_WITHIN of its last step.
        loop {
            let mut lagging = None;
            for w in self.durable.iter_mut() {
                if w.borrow_and_update().0 < below {
                    lagging = Some(w);
                    break;
                }
            }
            let Some(w) = lagging else {
                return Ok(());
            };
            match tokio::time::timeout(REACH_WITHIN, w.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(not_reached(format!(
                        "a capture running some of this changefeed's tables went away before the DDL at {ts}"
                    )));
                }
                Err(_) => return Err(stalled(ts)),
            }
        }
    }

    /// The DDL at `ts` is applied (or was already downstream).
    pub(crate) fn passed(&self, ts: CommitTs) {
        if let Some(p) = &self.passed {
            p.send_if_modified(|at| {
                let later = ts.get() > *at;
                if later {
                    *at = ts.get();
                }
                later
            });
        }
    }
}

/// How far the other captures got: the sum of their flushed ts (it grows
/// whenever one of them makes more durable).
fn progress(durable: &[watch::Receiver<(u64, u64)>]) -> u128 {
    durable.iter().map(|w| u128::from(w.borrow().0)).sum()
}

fn stalled(ts: CommitTs) -> PipelineError {
    not_reached(format!(
        "the captures running this changefeed's other tables made nothing more durable for {} s \
         while the DDL at {ts} waited for the rows below it",
        REACH_WITHIN.as_secs()
    ))
}

fn not_reached(why: String) -> PipelineError {
    PipelineError::Source(Box::new(NotReached(why)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the run's error says of its cause.
    fn why(e: PipelineError) -> String {
        std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default()
    }

    /// One other capture whose flushed ts `flushed` sets, with the DDL
    /// across captures at `across`.
    fn elsewhere() -> (
        TablesElsewhere,
        watch::Sender<(u64, u64)>,
        watch::Sender<u64>,
    ) {
        let (flushed, durable) = watch::channel((0, 0));
        let (across_tx, across) = watch::channel(100);
        let (passed, _) = watch::channel(0);
        let e = TablesElsewhere::new(Elsewhere {
            durable: vec![durable],
            across,
            passed,
            log: None,
        });
        (e, flushed, across_tx)
    }

    #[tokio::test(start_paused = true)]
    async fn a_ddl_across_captures_waits_for_a_slow_capture_and_fails_only_a_stalled_one() {
        let (mut e, flushed, across) = elsewhere();
        // It keeps flushing, a step every 70 s: 280 s in all, past
        // REACH_WITHIN, and waited for.
        let slow = async {
            for flushed_ts in [24, 49, 74, 99] {
                tokio::time::sleep(Duration::from_secs(70)).await;
                flushed.send_replace((flushed_ts, 0));
            }
        };
        let started = tokio::time::Instant::now();
        let (reached, ()) = tokio::join!(e.reach(CommitTs::new(100)), slow);
        reached.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(280));
        // At the next DDL across captures it makes nothing more durable.
        across.send_replace(200);
        let started = tokio::time::Instant::now();
        let err = why(e.reach(CommitTs::new(200)).await.unwrap_err());
        assert!(err.contains("made nothing more durable for 120 s"), "{err}");
        assert_eq!(started.elapsed(), REACH_WITHIN);
    }

    #[tokio::test(start_paused = true)]
    async fn asked_while_the_run_goes_on_the_ddl_fails_only_once_no_capture_moves() {
        let (mut e, flushed, _across) = elsewhere();
        let ts = CommitTs::new(100);
        // Not across captures: at once.
        assert!(e.ready(CommitTs::new(50)).unwrap());
        assert!(!e.ready(ts).unwrap());
        tokio::time::advance(Duration::from_secs(100)).await;
        flushed.send_replace((40, 0));
        assert!(!e.ready(ts).unwrap());
        // 200 s since it was first asked, 100 s since the capture moved.
        tokio::time::advance(Duration::from_secs(100)).await;
        assert!(!e.ready(ts).unwrap());
        tokio::time::advance(Duration::from_secs(21)).await;
        let err = why(e.ready(ts).unwrap_err());
        assert!(err.contains("made nothing more durable"), "{err}");
        // Once it got there, ready.
        flushed.send_replace((99, 0));
        assert!(e.ready(ts).unwrap());
    }
}
