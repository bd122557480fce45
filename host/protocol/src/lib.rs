//! `sluice-protocol`: the records the owner and the captures exchange through
//! the meta store, in one small crate both depend on: a capture's
//! registration ([`CaptureInfo`]), what the owner assigns to it
//! ([`Assignment`]), what the capture reports back in its task position
//! ([`TaskPosition`], read by the owner as a [`TaskReport`]) with the swap and
//! shadow reports in it, how a run ended ([`TaskState`], [`Outcome`],
//! [`ErrorKind`]), and the changefeed [`Epoch`] that fences a run's writes.
//! Their stored forms are described in `docs/meta-layout.md`.

mod assignment;
mod capture;
mod epoch;
mod report;
mod task;

pub use assignment::{
    ASSIGNMENT_VERSION, Assignment, Desired, Receiver, ShipRole, Shipment, Tables,
    WHOLE_ASSIGNMENT_VERSION,
};
pub use capture::CaptureInfo;
pub use epoch::{Epoch, Fenced, fence};
pub use report::{
    LatencyReport, MAX_REPORTED_DIFFERENCES, ShadowDifference, ShadowReport, SwapReport, SwapState,
};
pub use task::{
    Counters, ErrorKind, Load, MAX_LOAD_TABLES, Outcome, RedoReport, TaskPosition, TaskReport,
    TaskState,
};

/// Longest error or warning message kept, in bytes (after escaping, give or
/// take one escaped character); longer ones are cut, with their length noted.
/// Twice a plugin's bound, so that a plugin message cut by the runtime still fits
/// whole with the context the pipeline adds.
pub const MAX_MESSAGE_BYTES: usize = 2 * sluice_core::MAX_MESSAGE_BYTES;

/// `message` as it may be stored and shown: control characters (newlines
/// included) escaped, and cut after about [`MAX_MESSAGE_BYTES`] on a character
/// boundary with the original length noted. So no message, however long or whatever it
/// holds, can outgrow a changefeed's record or forge a line in a log.
pub fn bound_message(message: &str) -> String {
    sluice_core::bounded_text(message, MAX_MESSAGE_BYTES)
}
