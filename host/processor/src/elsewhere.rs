//! A changefeed's tables run by other captures, from the reading capture's
//! side (ADR 0013): their events are shipped from this pipeline's source, so
//! its checkpoint (and the source position saved with it) never passes what
//! they made durable, and a DDL it applies waits until they made everything
//! below it durable (a barrier across captures); it tells the source each
//! DDL it passed, so that what follows goes on to the other captures.

use std::time::Duration;

use sluice_core::CommitTs;
use tokio::sync::watch;

use crate::error::PipelineError;

/// How long a DDL waits for the other captures to make what is below it
/// durable before the run fails (retryably).
const REACH_WITHIN: Duration = Duration::from_secs(120);

/// The other captures' durable ts, and where to tell of passed DDLs.
#[derive(Default)]
pub(crate) struct TablesElsewhere {
    durable: Vec<watch::Receiver<u64>>,
    passed: Option<watch::Sender<u64>>,
}

/// Why a DDL could not wait for the other captures.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotReached(String);

impl TablesElsewhere {
    pub(crate) fn new(durable: Vec<watch::Receiver<u64>>, passed: watch::Sender<u64>) -> Self {
        Self {
            durable,
            passed: Some(passed),
        }
    }

    /// What each other capture made durable.
    pub(crate) fn durable(&self) -> impl Iterator<Item = CommitTs> + '_ {
        self.durable.iter().map(|w| CommitTs::new(*w.borrow()))
    }

    /// Waits until every other capture made durable everything below the
    /// DDL at `ts` (at most [`REACH_WITHIN`]).
    pub(crate) async fn reach(&mut self, ts: CommitTs) -> Result<(), PipelineError> {
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

/// Waits until every watch reaches `below`; `Err` once one's sender is gone.
async fn all_reach(durable: &mut [watch::Receiver<u64>], below: u64) -> Result<(), ()> {
    for w in durable {
        w.wait_for(|&d| d >= below).await.map_err(|_| ())?;
    }
    Ok(())
}

fn not_reached(why: String) -> PipelineError {
    PipelineError::Source(Box::new(NotReached(why)))
}
