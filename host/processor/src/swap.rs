//! Replacing the sink, or a filter, of a running pipeline at a barrier (hot
//! swap).
//!
//! A [`SwapRequest`] sent through [`Pipeline::swaps`](crate::Pipeline::swaps)
//! is taken between two chunks of the event cache, so no transaction is half
//! written when it is handled:
//! 1. feeding stops (the pipeline is handling the request, not reading);
//! 2. every batch is written and the old sink flushes (DDL barriers included):
//!    the checkpoint passes every row it wrote;
//! 3. the old sink closes, the new one opens and takes over exactly above that
//!    checkpoint, so after a clean swap no row is delivered twice;
//! 4. if the old sink's final flush fails, the new one gets the unacknowledged
//!    batches, flagged replay; if the new one does not open, the old one is
//!    opened again and keeps running (the swap is refused, nothing is lost).
//!
//! The old sink is handed back in the reply, so that a caller can swap back to
//! it the same way; or, with a [`Probation`], the pipeline keeps it and swaps
//! back by itself (a rollback) if the new sink fails before the probation
//! passes: the failed sink is dropped, the old one opens again and gets every
//! batch above the last acknowledged checkpoint, flagged replay.

use std::time::Duration;

use sluice_core::{CheckpointTs, PluginError};
use tokio::sync::oneshot;

/// Asks a running pipeline to replace its sink with `sink`.
pub struct SwapRequest<S> {
    /// The new sink (not opened yet).
    pub sink: S,
    /// Keep the old sink and swap back to it if the new one fails within this
    /// window; none: hand the old sink back at once.
    pub probation: Option<Probation<S>>,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Result<Swapped<S>, SwapRefused<S>>>,
}

/// A swap that happened.
pub struct Swapped<S> {
    /// The old sink, closed; none when the pipeline keeps it for a
    /// [`Probation`].
    pub old: Option<S>,
    /// The checkpoint at the barrier: the old sink has every row up to it, the
    /// new one gets every row above it.
    pub barrier: CheckpointTs,
    /// Batches the new sink got again, flagged replay, because the old sink's
    /// final flush failed (0 after a clean swap).
    pub replayed_batches: usize,
    /// How long feeding stopped.
    pub pause: Duration,
}

/// A swap that did not happen: the old version runs on.
pub struct SwapRefused<S> {
    /// The new version, given back.
    pub plugin: S,
    /// Why: the new version's error when it was opened (or why it could not
    /// be swapped in).
    pub error: PluginError,
}

/// Asks a running pipeline to replace the filter at `index` with `filter`.
///
/// The same barrier as a sink's: feeding stops, every batch the old filter
/// transformed is written and flushed (the checkpoint at the barrier), then
/// the new filter opens and transforms every batch above it. A filter keeps
/// no rows of its own, so nothing is replayed. On probation, a failure of
/// the new filter puts the old one back, which transforms the batch that
/// failed and every one after it; batches the new filter transformed before
/// it failed stay delivered as it transformed them.
pub struct FilterSwapRequest<F> {
    /// Which filter of the chain (0-based).
    pub index: usize,
    /// The new filter (not opened yet).
    pub filter: F,
    /// Keep the old filter and swap back to it if the new one fails within
    /// this window; none: hand the old filter back at once.
    pub probation: Option<Probation<F>>,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Result<Swapped<F>, SwapRefused<F>>>,
}

impl<S> std::fmt::Debug for SwapRefused<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SwapRefused({})", self.error)
    }
}

/// How long a new sink (or filter) is on trial, and what ends the trial early.
pub struct Probation<S> {
    /// The trial lasts at least this long...
    pub duration: Duration,
    /// ...and at least this many acknowledged flushes of the new sink.
    pub flushes: u64,
    /// Retryable failures of the new sink tolerated during the trial; the next
    /// one rolls back. Any other failure (a trap, a quota or deadline stop, a
    /// fatal or config error) rolls back at once.
    pub max_retries: u32,
    /// Where the verdict goes (dropped undecided if the pipeline ends first).
    pub verdict: oneshot::Sender<Verdict<S>>,
}

/// How a probation ended.
pub enum Verdict<S> {
    /// The new sink passed: the old one was dropped.
    Passed {
        /// Acknowledged flushes of the new sink during the trial.
        flushes: u64,
    },
    /// The new sink failed: the old one runs again.
    RolledBack {
        /// The sink that failed (closed).
        failed: S,
        /// Why it was given up.
        error: PluginError,
        /// The checkpoint when it failed: the old sink got every batch above
        /// it again, flagged replay.
        checkpoint: CheckpointTs,
        /// How many batches that was.
        replayed_batches: usize,
    },
}
