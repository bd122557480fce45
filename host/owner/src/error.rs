//! Errors of the owner's pure logic. Every one of them means "reject the request
//! and tell the operator what to do", except [`Fenced`] (drop the write: it came
//! from a superseded pipeline) and [`DecodeError`] (the stored record cannot be
//! read by this build).

use std::fmt;

use sluice_core::{CheckpointTs, CommitTs};

use crate::epoch::Epoch;
use sluice_config::ConfigError;

use crate::id::ChangefeedId;
use crate::state::FeedState;

/// A changefeed description fails its pure checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoError {
    #[error(
        "changefeed info version {found} is not supported; this build writes version {supported}"
    )]
    Version { found: u32, supported: u32 },
    /// The changefeed config fails its checks (the message names the key).
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "target ts {target} is not after start ts {start}; choose a later target ts, or leave \
         it out to replicate without end"
    )]
    TargetNotAfterStart { target: CommitTs, start: CommitTs },
    #[error(
        "the changefeed's description is {bytes} bytes when stored; at most {max} (the rest of \
         the meta store's record limit is kept for its status and errors): make the changefeed \
         file and the plugin options smaller"
    )]
    TooLarge { bytes: usize, max: usize },
    #[error(
        "{what} {ts} is {ahead_ms} ms in the future (physical time {physical_ms} ms since the Unix \
         epoch); give a ts at or before now (as a TSO: milliseconds << 18), or 0 for the \
         source's beginning"
    )]
    InFuture {
        what: &'static str,
        ts: u64,
        physical_ms: u64,
        ahead_ms: u64,
    },
}

/// An admin job that cannot be carried out in the changefeed's current state, or
/// whose arguments are wrong. The changefeed is left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Invalid(#[from] InfoError),
    #[error(
        "changefeed {id} already exists (state {state}); remove it first or choose another name"
    )]
    AlreadyExists { id: ChangefeedId, state: FeedState },
    #[error("changefeed {id} was removed; create it again")]
    Removed { id: ChangefeedId },
    #[error("changefeed {id} is {}; pause it before updating it", activity(*.state))]
    UpdateWhileActive { id: ChangefeedId, state: FeedState },
    #[error(
        "changefeed {id} has finished; only a stopped or failed changefeed can be updated; \
         remove it and create it again with the new settings"
    )]
    UpdateFinished { id: ChangefeedId },
    #[error(
        "changefeed {id} is {state} and not running, so there is nothing to pause; resume it \
         or remove it"
    )]
    NothingToPause { id: ChangefeedId, state: FeedState },
    #[error("changefeed {id} is {}; pause it before overwriting its checkpoint", activity(*.state))]
    OverwriteWhileActive { id: ChangefeedId, state: FeedState },
    #[error(
        "checkpoint {checkpoint} is not below the target ts {target} of changefeed {id}, so it \
         would finish at once; choose a smaller checkpoint"
    )]
    OverwritePastTarget {
        id: ChangefeedId,
        checkpoint: CheckpointTs,
        target: CommitTs,
    },
    #[error(
        "changefeed {id} already reached its target ts {target}; resume it with a checkpoint \
         below the target ts, or remove it"
    )]
    AtTarget { id: ChangefeedId, target: CommitTs },
    #[error(
        "target ts {target} of changefeed {id} is not after its checkpoint {checkpoint}, so it \
         would finish at once; choose a later target ts"
    )]
    TargetNotAfterCheckpoint {
        id: ChangefeedId,
        target: CommitTs,
        checkpoint: CheckpointTs,
    },
    #[error("changefeed {id} cannot be renamed to {new_id}; create a new changefeed instead")]
    IdChanged {
        id: ChangefeedId,
        new_id: ChangefeedId,
    },
    #[error(
        "the start ts of changefeed {id} cannot change (from {start} to {new_start}); to \
         replicate from another ts, resume it with an overwritten checkpoint"
    )]
    StartTsChanged {
        id: ChangefeedId,
        start: CommitTs,
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

/// A write from a pipeline whose epoch is not the changefeed's current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// The epoch the writer runs under.
    pub writer: Epoch,
    /// The changefeed's epoch as this reader knows it.
    pub current: Epoch,
}

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.writer < self.current {
            write!(
                f,
                "write from epoch {} fenced: the changefeed was restarted and now runs at epoch {}",
                self.writer, self.current
            )
        } else {
            write!(
                f,
                "write from epoch {} fenced: this copy of the changefeed is at epoch {}, older \
                 than the writer; reload it",
                self.writer, self.current
            )
        }
    }
}

impl std::error::Error for Fenced {}

/// A stored changefeed record this build cannot read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "stored {what} has version {found}, this build reads version {supported}; run a build \
         that knows version {found}"
    )]
    Version {
        what: &'static str,
        found: u32,
        supported: u32,
    },
    #[error("stored {what} is malformed")]
    Malformed {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// A backoff option out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("backoff option {field} {problem}")]
pub struct BackoffConfigError {
    pub field: &'static str,
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
            | OverwritePastTarget { .. } => Self::Invalid(e.to_string()),
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
