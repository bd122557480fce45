//! What the owner assigns to a capture
//! (`/sluice/v1/assignment/{capture}/{tenant}/{changefeed}`).

use serde::{Deserialize, Serialize};
use sluice_core::CheckpointTs;
use sluice_meta::Revision;

use crate::Epoch;

/// Version of the stored [`Assignment`].
pub const ASSIGNMENT_VERSION: u32 = 1;

/// Which tables of a changefeed an assignment covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tables {
    /// Every table the source yields (the only assignment made today).
    All,
    /// Only these tables (`schema.table`), for per-table scheduling later.
    Only(Vec<String>),
}

/// What the owner wants the assigned capture to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Desired {
    /// Run the changefeed's pipeline for this epoch.
    Run,
    /// Write what was read, flush, close, and report `stopped`.
    Stop,
    /// Cancel the pipeline without flushing and report once it is gone.
    Abort,
}

/// One changefeed's task on one capture, as the owner assigned it
/// (`/sluice/v1/assignment/{capture}/{tenant}/{changefeed}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Assignment {
    /// Version of this stored form ([`ASSIGNMENT_VERSION`]).
    pub version: u32,
    /// The changefeed epoch the task runs under; the capture ignores an
    /// assignment older than what it (or the stored info) has seen.
    pub changefeed_epoch: Epoch,
    /// The tables assigned.
    pub tables: Tables,
    /// Replicate after this checkpoint.
    pub checkpoint_ts: CheckpointTs,
    /// The mod revision of the changefeed's stored info this assignment was made
    /// for (the capture reads the info by key and checks it).
    pub info_revision: Revision,
    /// Run, stop or abort.
    pub desired: Desired,
}
