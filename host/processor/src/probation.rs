//! A plugin version on trial after a swap (see [`Probation`]): the version it
//! replaced waits here, to be put back if the new one fails before the trial
//! has lasted its time and its flushes.
//!
//! A [`Trial`] is part of the live sink or filter it judges ([`crate::live`]):
//! the writer tells the live plugin of each failure and each acknowledged
//! flush, and never asks whether a trial runs.

use std::time::Instant;

use sluice_core::{CheckpointTs, PluginError};
use tokio::sync::oneshot;

use crate::swap::{Probation, Verdict};

/// The rest of a rollback, once the version put back has replaced the failed
/// one: tells the verdict.
pub(crate) struct RolledBack<P> {
    verdict: oneshot::Sender<Verdict<P>>,
    error: PluginError,
}

impl<P> RolledBack<P> {
    /// `failed` was replaced at `checkpoint`; `replayed_batches` go to the one
    /// put back again.
    pub(crate) fn tell(self, failed: P, checkpoint: CheckpointTs, replayed_batches: usize) {
        let _ = self.verdict.send(Verdict::RolledBack {
            failed,
            error: self.error,
            checkpoint,
            replayed_batches,
        });
    }

    /// Why the trial failed.
    pub(crate) fn error(&self) -> &PluginError {
        &self.error
    }
}

/// A version on trial, with the one it replaced.
pub(crate) struct Trial<P> {
    fallback: P,
    verdict: oneshot::Sender<Verdict<P>>,
    until: Instant,
    flushes_left: u64,
    flushes: u64,
    retries_left: u32,
}

impl<P> Trial<P> {
    pub(crate) fn new(fallback: P, p: Probation<P>) -> Self {
        Self {
            fallback,
            verdict: p.verdict,
            until: Instant::now() + p.duration,
            flushes_left: p.flushes,
            flushes: 0,
            retries_left: p.max_retries,
        }
    }

    /// Whether a failure of the plugin on trial is tolerated: only an error
    /// the plugin itself calls retryable, within the trial's retries (each
    /// one counts); a trap, a quota or deadline stop, or a fatal error fails
    /// the trial.
    pub(crate) fn tolerates(&mut self, error: &PluginError) -> bool {
        if matches!(error, PluginError::Retryable(_)) && self.retries_left > 0 {
            self.retries_left -= 1;
            return true;
        }
        false
    }

    /// The trial failed with `error`: the version to put back, and the
    /// verdict to tell once it is back.
    pub(crate) fn fail(self, error: PluginError) -> (P, RolledBack<P>) {
        (
            self.fallback,
            RolledBack {
                verdict: self.verdict,
                error,
            },
        )
    }

    /// The sink acknowledged a flush.
    pub(crate) fn flushed(&mut self) {
        self.flushes += 1;
        self.flushes_left = self.flushes_left.saturating_sub(1);
    }

    /// Ends the trial once its time and flushes have both passed; the fallback
    /// is dropped. Returns the flushes it lasted, or the trial when it goes on.
    pub(crate) fn judge(self) -> Result<u64, Self> {
        if self.flushes_left > 0 || Instant::now() < self.until {
            return Err(self);
        }
        let _ = self.verdict.send(Verdict::Passed {
            flushes: self.flushes,
        });
        Ok(self.flushes)
    }
}

/// Why a swap is refused while another is on probation.
pub(crate) fn on_probation() -> PluginError {
    PluginError::Refused(
        "the plugin swapped in last is still on probation; swap again once it has passed or rolled back".into(),
    )
}
