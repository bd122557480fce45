//! The states of a changefeed and which moves between them are legal (TiCDC's
//! rules).
//!
//! | from \ to | normal | warning | pending | failed | stopped | finished | removed |
//! |-----------|--------|---------|---------|--------|---------|----------|---------|
//! | normal    |        | warning reported | retryable error | config/fatal error | pause | target reached | remove |
//! | warning   | checkpoint moved | | retryable error | config/fatal error, no progress for `fail-after` | pause | target reached | remove |
//! | pending   |        | restart after backoff | | config/fatal error, no progress for `fail-after` | pause | target reached | remove |
//! | failed    | resume |         |         |        |         |          | remove  |
//! | stopped   | resume |         |         |        |         |          | remove  |
//! | finished  | resume |         |         |        |         |          | remove  |
//! | removed   | create again |   |         |        |         |          |         |
//!
//! An empty cell is a move that never happens.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The state of a changefeed, as stored and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeedState {
    /// Running, no error since the checkpoint last moved.
    Normal,
    /// Running, but a warning was reported or it was restarted after an error and
    /// its checkpoint has not moved since. Back to normal once it moves.
    Warning,
    /// Stopped after a retryable error, waiting for its backoff to restart.
    Pending,
    /// Stopped for good by a config or fatal error, or by retrying without
    /// progress for too long. Leaves only by resume or remove.
    Failed,
    /// Paused by an operator.
    Stopped,
    /// The checkpoint reached the target ts (or a bounded source ended).
    Finished,
    /// Removed by an operator. Nothing moves it but creating it again.
    Removed,
}

impl FeedState {
    /// Every state, in declaration order.
    pub const ALL: [FeedState; 7] = [
        FeedState::Normal,
        FeedState::Warning,
        FeedState::Pending,
        FeedState::Failed,
        FeedState::Stopped,
        FeedState::Finished,
        FeedState::Removed,
    ];

    /// Whether a pipeline of the changefeed should be running.
    pub fn is_running(self) -> bool {
        matches!(self, FeedState::Normal | FeedState::Warning)
    }

    /// Whether the changefeed wants to run: running, or waiting to restart.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            FeedState::Normal | FeedState::Warning | FeedState::Pending
        )
    }

    /// The state's name as stored and shown (`normal`, `warning`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FeedState::Normal => "normal",
            FeedState::Warning => "warning",
            FeedState::Pending => "pending",
            FeedState::Failed => "failed",
            FeedState::Stopped => "stopped",
            FeedState::Finished => "finished",
            FeedState::Removed => "removed",
        }
    }

    /// Whether `self -> to` is a legal move (see the table in the module docs).
    /// Staying in the same state is always legal.
    pub fn may_become(self, to: FeedState) -> bool {
        use FeedState::*;
        if self == to {
            return true;
        }
        match self {
            Normal | Warning | Pending => match to {
                Normal => self == Warning,
                Warning => self != Warning,
                Pending | Failed | Stopped | Finished | Removed => true,
            },
            Failed | Stopped | Finished => matches!(to, Normal | Removed),
            Removed => to == Normal,
        }
    }
}

impl fmt::Display for FeedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_lowercase_names() {
        for state in FeedState::ALL {
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                format!("\"{state}\"")
            );
        }
    }

    #[test]
    fn only_resume_or_remove_leave_failed_stopped_and_finished() {
        use FeedState::*;
        for from in [Failed, Stopped, Finished] {
            let allowed: Vec<_> = FeedState::ALL
                .into_iter()
                .filter(|to| *to != from && from.may_become(*to))
                .collect();
            assert_eq!(allowed, [Normal, Removed], "from {from}");
        }
        let allowed: Vec<_> = FeedState::ALL
            .into_iter()
            .filter(|to| *to != Removed && Removed.may_become(*to))
            .collect();
        assert_eq!(allowed, [Normal]);
        assert!(!Pending.may_become(Normal));
    }
}
