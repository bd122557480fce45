//! A changefeed's tables run by other captures, from the reading capture's
//! side (ADR 0013): their events are shipped from this pipeline's source, so
//! its checkpoint (and the source position saved with it) never passes what
//! they saved, and a DDL across captures is applied here only once they made
//! everything below it durable (a barrier); the source is told of every DDL
//! passed, so that what follows goes on to the other captures.

use std::time::Duration;

use sluice_core::CommitTs;
use tokio::sync::watch;

use crate::error::PipelineError;

/// How long a DDL across captures waits for the other captures to make what
/// is below it durable before the run fails (retryably).
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
    /// Since when the DDL across captures has waited for them.
    waiting: Option<(u64, std::time::Instant)>,
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
}

impl TablesElsewhere {
    pub(crate) fn new(e: Elsewhere) -> Self {
        Self {
            durable: e.durable,
            across: Some(e.across),
            passed: Some(e.passed),
            waiting: None,
        }
    }

    /// Whether the DDL at `ts` may be applied now: it is not across
    /// captures, or every other capture flushed everything below it. Fails
    /// once a capture is gone, or after [`REACH_WITHIN`] of asking.
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
        let since = match self.waiting {
            Some((at, since)) if at == ts.get() => since,
            _ => {
                let now = std::time::Instant::now();
                self.waiting = Some((ts.get(), now));
                now
            }
        };
        if since.elapsed() > REACH_WITHIN {
            return Err(not_reached(format!(
                "the captures running this changefeed's other tables did not make the rows below \
                 the DDL at {ts} durable within {} s",
                REACH_WITHIN.as_secs()
            )));
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
    /// flushed everything below it (at most [`REACH_WITHIN`]; at the end of
    /// a run, where nothing else is to be done meanwhile).
    pub(crate) async fn reach(&mut self, ts: CommitTs) -> Result<(), PipelineError> {
        if !self.is_across(ts) {
            return Ok(());
        }
        let below = ts.get().saturating_sub(1);
        let all = all_reach(&mut self.durable, below);
        match tokio::time::timeout(REACH_WITHIN, all).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(())) => Err(not_reached(format!(
                "a capture running some of this changefeed's tables went away before the DDL at {ts}"
            ))),
            Err(_) => Err(not_reached(format!(
                "the captures running this changefeed's other tables did not make the rows below \
                 the DDL at {ts} durable within {} s",
                REACH_WITHIN.as_secs()
            ))),
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

/// Waits until every capture flushed `below`; `Err` once one's reports end.
async fn all_reach(durable: &mut [watch::Receiver<(u64, u64)>], below: u64) -> Result<(), ()> {
    for w in durable {
        w.wait_for(|&(flushed, _)| flushed >= below)
            .await
            .map_err(|_| ())?;
    }
    Ok(())
}

fn not_reached(why: String) -> PipelineError {
    PipelineError::Source(Box::new(NotReached(why)))
}
