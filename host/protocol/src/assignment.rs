//! What the owner assigns to a capture
//! (`/sluice/v1/assignment/{capture}/{tenant}/{changefeed}`).

use serde::{Deserialize, Serialize};
use sluice_core::CheckpointTs;
use sluice_meta::Revision;

use crate::Epoch;

/// Newest version of the stored [`Assignment`] this build reads: 2 has a
/// [`Shipment`] (an assignment without one is still written as version 1, so
/// that a capture of an older build runs it).
pub const ASSIGNMENT_VERSION: u32 = 2;

/// The version of an [`Assignment`] without a [`Shipment`].
pub const WHOLE_ASSIGNMENT_VERSION: u32 = 1;

/// How a capture's part of a changefeed whose tables are split across
/// captures gets its events (ADR 0013).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Shipment {
    /// The secret a receiver presents to the reader (the same in the
    /// reader's and the receivers' assignments of one run).
    pub token: String,
    /// Which side this capture is.
    pub role: ShipRole,
}

/// The side of a shipment a capture is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShipRole {
    /// This capture reads the source, runs the tables no receiver runs, and
    /// ships each receiver its tables.
    Reads {
        /// The receiving captures.
        receivers: Vec<Receiver>,
    },
    /// This capture runs its tables ([`Assignment::tables`]) from what the
    /// reader ships.
    Receives {
        /// The reading capture's id.
        reader: String,
        /// Its gRPC address.
        address: String,
    },
}

/// A capture that runs some of a changefeed's tables from what the reader
/// ships.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Receiver {
    /// Its id.
    pub capture: String,
    /// The tables it runs (`schema.table`).
    pub tables: Vec<String>,
}

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
    /// With the changefeed's tables split across captures: which side of
    /// the shipment this capture is (none: it reads and runs every table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shipment: Option<Shipment>,
}
