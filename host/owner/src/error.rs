//! Errors of the owner's pure logic. Every one of them means "reject the request
//! and tell the operator what to do", except [`Fenced`] (drop the write: it came
//! from a superseded pipeline) and [`DecodeError`] (the stored record cannot be
//! read by this build).

use sluice_core::{CheckpointTs, CommitTs};

use sluice_config::ConfigError;

use crate::id::ChangefeedId;
use crate::state::FeedState;

/// A changefeed description fails its pure checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoError {
    /// The record's stored-form version is not one this build writes.
    #[error(
        "changefeed info version {found} is not supported; this build writes version {supported}"
    )]
    Version {
        /// The version found.
        found: u32,
        /// The version this build writes.
        supported: u32,
    },
    /// The changefeed config fails its checks (the message names the key).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The target ts is not after the start ts.
    #[error(
        "target ts {target} is not after start ts {start}; choose a later target ts, or leave \
         it out to replicate without end"
    )]
    TargetNotAfterStart {
        /// The target ts.
        target: CommitTs,
        /// The start ts.
        start: CommitTs,
    },
    /// The stored description would pass its share of the record limit.
    #[error(
        "the changefeed's description is {bytes} bytes when stored; at most {max} (the rest of \
         the meta store's record limit is kept for its status and errors): make the changefeed \
         file and the plugin options smaller"
    )]
    TooLarge {
        /// Its stored size.
        bytes: usize,
        /// The most it may take.
        max: usize,
    },
    /// A ts lies in the future.
    #[error(
        "{what} {ts} is {ahead_ms} ms in the future (physical time {physical_ms} ms since the Unix \
         epoch); give a ts at or before now (as a TSO: milliseconds << 18), or 0 for the \
         source's beginning"
    )]
    InFuture {
        /// Which ts (`start ts`, `checkpoint`, ...).
        what: &'static str,
        /// The ts given.
        ts: u64,
        /// Its physical part, milliseconds since the Unix epoch.
        physical_ms: u64,
        /// How far ahead of now it is.
        ahead_ms: u64,
    },
}

/// An admin job that cannot be carried out in the changefeed's current state, or
/// whose arguments are wrong. The changefeed is left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// The description fails its checks.
    #[error(transparent)]
    Invalid(#[from] InfoError),
    /// A create names a changefeed that exists.
    #[error(
        "changefeed {id} already exists (state {state}); remove it first or choose another name"
    )]
    AlreadyExists {
        /// The changefeed.
        id: ChangefeedId,
        /// Its state.
        state: FeedState,
    },
    /// The changefeed was removed.
    #[error("changefeed {id} was removed; create it again")]
    Removed {
        /// The changefeed.
        id: ChangefeedId,
    },
    /// An update of a changefeed that runs.
    #[error("changefeed {id} is {}; pause it before updating it", activity(*.state))]
    UpdateWhileActive {
        /// The changefeed.
        id: ChangefeedId,
        /// Its state.
        state: FeedState,
    },
    /// An update of a finished changefeed.
    #[error(
        "changefeed {id} has finished; only a stopped or failed changefeed can be updated; \
         remove it and create it again with the new settings"
    )]
    UpdateFinished {
        /// The changefeed.
        id: ChangefeedId,
    },
    /// A swap while another swap of the changefeed is still in progress.
    #[error(
        "changefeed {id} has swap {seq} ({from} -> {to}) still {state}; wait until it is done \
         or rolled back (see `changefeed query`)"
    )]
    SwapInProgress {
        /// The changefeed.
        id: ChangefeedId,
        /// The swap in progress.
        seq: u64,
        /// Its old version.
        from: String,
        /// Its new version.
        to: String,
        /// Where it stands.
        state: &'static str,
    },
    /// A swap of a changefeed that has finished.
    #[error("changefeed {id} has finished; there is no running sink to swap")]
    SwapFinished {
        /// The changefeed.
        id: ChangefeedId,
    },
    /// A swap or shadow naming a plugin the changefeed does not have.
    #[error("changefeed {id} has no {role}; check `changefeed query`")]
    NoSuchPlugin {
        /// The changefeed.
        id: ChangefeedId,
        /// The role asked for.
        role: String,
    },
    /// A swap or a second shadow while a shadow runs.
    #[error(
        "changefeed {id} runs shadow {seq} of {candidate} beside its {role}; stop it or promote it first"
    )]
    ShadowRunning {
        /// The changefeed.
        id: ChangefeedId,
        /// The shadow running.
        seq: u64,
        /// Beside what.
        role: String,
        /// Its candidate.
        candidate: String,
    },
    /// A shadow stop or promotion with no shadow running.
    #[error("changefeed {id} runs no shadow; start one with `changefeed shadow start`")]
    NoShadow {
        /// The changefeed.
        id: ChangefeedId,
    },
    /// A swap asked against a sink that is no longer the changefeed's.
    #[error(
        "changefeed {id} now runs {current}, not {expected}; check `changefeed query` and swap again"
    )]
    SwapStale {
        /// The changefeed.
        id: ChangefeedId,
        /// What the swap was checked against.
        expected: String,
        /// What the changefeed runs.
        current: String,
    },
    /// A pause of a changefeed that does not run.
    #[error(
        "changefeed {id} is {state} and not running, so there is nothing to pause; resume it \
         or remove it"
    )]
    NothingToPause {
        /// The changefeed.
        id: ChangefeedId,
        /// Its state.
        state: FeedState,
    },
    /// A checkpoint overwrite of a changefeed that runs.
    #[error("changefeed {id} is {}; pause it before overwriting its checkpoint", activity(*.state))]
    OverwriteWhileActive {
        /// The changefeed.
        id: ChangefeedId,
        /// Its state.
        state: FeedState,
    },
    /// A checkpoint overwrite at or past the target ts.
    #[error(
        "checkpoint {checkpoint} is not below the target ts {target} of changefeed {id}, so it \
         would finish at once; choose a smaller checkpoint"
    )]
    OverwritePastTarget {
        /// The changefeed.
        id: ChangefeedId,
        /// The checkpoint asked for.
        checkpoint: CheckpointTs,
        /// Its target ts.
        target: CommitTs,
    },
    /// A resume of a changefeed that reached its target ts.
    #[error(
        "changefeed {id} already reached its target ts {target}; resume it with a checkpoint \
         below the target ts, or remove it"
    )]
    AtTarget {
        /// The changefeed.
        id: ChangefeedId,
        /// Its target ts.
        target: CommitTs,
    },
    /// An update whose target ts is not after the checkpoint.
    #[error(
        "target ts {target} of changefeed {id} is not after its checkpoint {checkpoint}, so it \
         would finish at once; choose a later target ts"
    )]
    TargetNotAfterCheckpoint {
        /// The changefeed.
        id: ChangefeedId,
        /// The target ts asked for.
        target: CommitTs,
        /// Its checkpoint.
        checkpoint: CheckpointTs,
    },
    /// An update names another changefeed.
    #[error("changefeed {id} cannot be renamed to {new_id}; create a new changefeed instead")]
    IdChanged {
        /// The changefeed.
        id: ChangefeedId,
        /// The id the update gives.
        new_id: ChangefeedId,
    },
    /// An update changes the start ts.
    #[error(
        "the start ts of changefeed {id} cannot change (from {start} to {new_start}); to \
         replicate from another ts, resume it with an overwritten checkpoint"
    )]
    StartTsChanged {
        /// The changefeed.
        id: ChangefeedId,
        /// Its start ts.
        start: CommitTs,
        /// The start ts the update gives.
        new_start: CommitTs,
    },
}

/// How an error message describes an active changefeed.
fn activity(state: FeedState) -> &'static str {
    match state {
        FeedState::Normal => "running",
        FeedState::Warning => "running with a warning",
        FeedState::Pending => "waiting to restart after an error",
        FeedState::Failed => "failed",
        FeedState::Stopped => "stopped",
        FeedState::Finished => "finished",
        FeedState::Removed => "removed",
    }
}

/// A stored changefeed record this build cannot read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Written by a build with another stored-form version.
    #[error(
        "stored {what} has version {found}, this build reads version {supported}; run a build \
         that knows version {found}"
    )]
    Version {
        /// Which record (`changefeed info`, `changefeed status`).
        what: &'static str,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Not the JSON of the record.
    #[error("stored {what} is malformed")]
    Malformed {
        /// Which record.
        what: &'static str,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
}

/// A backoff option out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("backoff option {field} {problem}")]
pub struct BackoffConfigError {
    /// The option.
    pub field: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

/// Why the owner refused or could not carry out a request, grouped by what the
/// caller does next. The message says what was wrong and what to do; the API
/// maps the variant to a gRPC code and an HTTP status (and nothing else does).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnerError {
    /// The request itself is wrong (a bad file, id or ts): fix it, do not retry.
    #[error("{0}")]
    Invalid(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What the request would create exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// Not allowed in the current state (e.g. an update of a running
    /// changefeed): change the state first.
    #[error("{0}")]
    Precondition(String),
    /// Over a quota: free something first.
    #[error("{0}")]
    Exhausted(String),
    /// Stored data is damaged: an operator must act.
    #[error("{0}")]
    DataLoss(String),
    /// Not now (the meta store does not answer, the server is stopping): retry.
    #[error("{0}")]
    Unavailable(String),
    /// A bug: the owner broke one of its own rules.
    #[error("{0}")]
    Internal(String),
}

impl OwnerError {
    /// `changefeed {id}` does not exist.
    pub fn no_changefeed(id: &ChangefeedId) -> Self {
        Self::NotFound(format!(
            "no changefeed {id}; `sluice cli changefeed list` shows the existing ones"
        ))
    }
}

impl From<AdminError> for OwnerError {
    /// Illegal transitions are preconditions; a wrong description is invalid.
    fn from(e: AdminError) -> Self {
        use AdminError::*;
        match e {
            Invalid(_)
            | IdChanged { .. }
            | StartTsChanged { .. }
            | TargetNotAfterCheckpoint { .. }
            | OverwritePastTarget { .. }
            | NoSuchPlugin { .. } => Self::Invalid(e.to_string()),
            _ => Self::Precondition(e.to_string()),
        }
    }
}

impl From<crate::context::SaveError> for OwnerError {
    fn from(e: crate::context::SaveError) -> Self {
        use crate::context::SaveError;
        match e {
            SaveError::Refused(reason) => Self::Invalid(format!(
                "the changefeed cannot be stored: {reason}; make its file smaller"
            )),
            SaveError::Lost(why) => Self::Unavailable(format!("meta store: {why}; retry")),
            SaveError::Unreadable(_) => Self::Precondition(e.to_string()),
            SaveError::Unavailable(_) => Self::Unavailable(format!("{e}; retry")),
        }
    }
}
