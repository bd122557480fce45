//! Replacing the sink of a running pipeline at a barrier (hot swap).
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
//! it (a rollback) the same way.

use std::time::Duration;

use sluice_core::{CheckpointTs, PluginError};
use tokio::sync::oneshot;

/// Asks a running pipeline to replace its sink with `sink`.
pub struct SwapRequest<S> {
    /// The new sink (not opened yet).
    pub sink: S,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Result<Swapped<S>, SwapRefused<S>>>,
}

/// A swap that happened.
pub struct Swapped<S> {
    /// The old sink, closed.
    pub old: S,
    /// The checkpoint at the barrier: the old sink has every row up to it, the
    /// new one gets every row above it.
    pub barrier: CheckpointTs,
    /// Batches the new sink got again, flagged replay, because the old sink's
    /// final flush failed (0 after a clean swap).
    pub replayed_batches: usize,
    /// How long feeding stopped.
    pub pause: Duration,
}

/// A swap that did not happen: the old sink runs on.
pub struct SwapRefused<S> {
    /// The new sink, given back.
    pub sink: S,
    /// Why: the new sink's error when it was opened.
    pub error: PluginError,
}

impl<S> std::fmt::Debug for SwapRefused<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SwapRefused({})", self.error)
    }
}
