//! `sluice-redo`: the redo log of consistent replication (`[consistent] level =
//! "eventual"`). A changefeed with redo writes every event to this log, and
//! makes it durable, before any sink sees it; after the loss of the whole site
//! the log alone brings a fresh downstream to the upstream's state at its
//! resolved ts.
//!
//! - [`format`](mod@format): files of length- and CRC32C-framed records, versioned.
//! - [`meta`]: the checkpoint and resolved ts, in one file replaced whole.
//! - [`storage`]: where the files live, written durably (fsync of file and
//!   directory).
//! - [`log`]: the writer (append, flush by the caller's size and time, GC) and
//!   the reader (damage found and named; a torn tail past the resolved ts
//!   skipped and said).
//! - [`replay`]: records turned back into the batches and DDLs a sink takes.
//! - [`apply`]: the events of (checkpoint, resolved] in commit-ts order, DDLs
//!   in place, for `sluice redo apply`.
//!
//! It knows nothing of plugins or wasmtime.

pub mod apply;
mod buf;
pub mod format;
pub mod log;
pub mod meta;
pub mod replay;
pub mod storage;

#[cfg(test)]
mod tests;

pub use apply::{Replay, ReplayEvent, Skipped};
pub use format::{Damage, LogKind, Record};
pub use log::{
    FileName, Flushed, Listing, LogError, LogReader, LogWriter, REMOVED_MARKER, Sealed, remove_log,
};
pub use meta::Meta;
pub use storage::{Storage, StorageError, StorageUri};
