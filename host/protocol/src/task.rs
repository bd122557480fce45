//! What a capture reports about its run of a task, in its task position
//! (`/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/task/{capture}`), and
//! how the owner reads it.

use std::fmt;

use serde::{Deserialize, Serialize};
use sluice_core::{Checkpoint, CheckpointTs, PluginError, SourcePosition};

use crate::report::{ShadowReport, SwapReport};

/// How a capture's run of a task stands, as it reports it in its task position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Running (also what a record written before states were reported reads as).
    #[default]
    Running,
    /// The source ended: everything read is downstream.
    Finished,
    /// Stopped on request (or aborted): what it did not flush is replayed.
    Stopped,
    /// Failed.
    Failed {
        /// What the owner does next.
        kind: ErrorKind,
        /// What went wrong, for the operator.
        message: String,
    },
    /// A newer run took over the task position.
    Fenced,
}

impl TaskState {
    /// How the run ended; none while it runs.
    pub fn outcome(&self) -> Option<Outcome> {
        Some(match self {
            Self::Running => return None,
            Self::Finished => Outcome::Finished,
            Self::Stopped => Outcome::Stopped,
            Self::Failed { kind, message } => Outcome::Failed {
                kind: *kind,
                message: message.clone(),
            },
            Self::Fenced => Outcome::Fenced,
        })
    }

    /// Whether the run has ended.
    pub fn is_terminal(&self) -> bool {
        *self != Self::Running
    }
}

impl From<Outcome> for TaskState {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Finished => Self::Finished,
            Outcome::Stopped => Self::Stopped,
            Outcome::Failed { kind, message } => Self::Failed { kind, message },
            Outcome::Fenced => Self::Fenced,
        }
    }
}

/// The part of a task position the owner reads (the capture writes the whole
/// Where a run's redo log stands (`[consistent] level = "eventual"`), as its
/// task position reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RedoReport {
    /// Every event at or below this is durable in the log.
    pub resolved_ts: u64,
    /// The log's checkpoint ts (what the sink has).
    pub checkpoint_ts: u64,
    /// Bytes written to the log by the run.
    pub bytes_written: u64,
    /// Flushes of the run.
    pub flushes: u64,
    /// Time the run's flushes took, in milliseconds.
    pub flush_ms: u64,
    /// Time the run's writer was busy, in milliseconds.
    pub busy_ms: u64,
    /// Events waiting at the fence for the log.
    pub waiting_events: u64,
    /// 1 while the latest write to the log failed (it is tried again), else 0.
    pub failing: u64,
}

impl RedoReport {
    /// Two runs' reports as one: the lower ts, the sums.
    pub fn merge(self, other: RedoReport) -> RedoReport {
        RedoReport {
            resolved_ts: self.resolved_ts.min(other.resolved_ts),
            checkpoint_ts: self.checkpoint_ts.min(other.checkpoint_ts),
            bytes_written: self.bytes_written + other.bytes_written,
            flushes: self.flushes + other.flushes,
            flush_ms: self.flush_ms + other.flush_ms,
            busy_ms: self.busy_ms + other.busy_ms,
            waiting_events: self.waiting_events + other.waiting_events,
            failing: self.failing + other.failing,
        }
    }
}

/// record, see `sluice_capture::TaskPosition`; unknown fields are ignored here,
/// missing ones default, so records of older versions decode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TaskReport {
    /// The changefeed epoch of the run that wrote it.
    #[serde(default)]
    pub changefeed_epoch: u64,
    /// Every row with commit ts <= this is durable downstream.
    pub checkpoint_ts: u64,
    /// The highest ts the source resolved.
    #[serde(default)]
    pub resolved_ts: u64,
    /// How the run stands.
    #[serde(default)]
    pub state: TaskState,
    /// Row changes read from the source by the run.
    #[serde(default)]
    pub rows_read: u64,
    /// Row changes handed to the sink by the run.
    #[serde(default)]
    pub rows_written: u64,
    /// Bytes of row data handed to the sink by the run.
    #[serde(default)]
    pub bytes_written: u64,
    /// Plugin calls of the run that failed and were retried.
    #[serde(default)]
    pub retries: u64,
    /// Upstream events the run's source read.
    #[serde(default)]
    pub source_events: u64,
    /// Upstream statements the run's source did not recognise.
    #[serde(default)]
    pub source_skipped_statements: u64,
    /// Upstream time of the source's last event (ms since the Unix epoch).
    #[serde(default)]
    pub source_time_ms: u64,
    /// Bytes of row data waiting in the run's event cache.
    #[serde(default)]
    pub event_cache_bytes: u64,
    /// Where the swap the run carries out stands.
    #[serde(default)]
    pub swap: Option<SwapReport>,
    /// What the shadow the run carries out did.
    #[serde(default)]
    pub shadow: Option<ShadowReport>,
    /// What the run's continuous validator found.
    #[serde(default)]
    pub validator: Option<sluice_core::ValidatorReport>,
    /// Where the run's redo log stands.
    #[serde(default)]
    pub redo: Option<RedoReport>,
    /// How busy the run is (absent in older records).
    #[serde(default)]
    pub load: Option<Load>,
}

/// The most tables a [`Load`] names (the busiest).
pub const MAX_LOAD_TABLES: usize = 256;

/// How busy a run is, measured between two saves of its task position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Load {
    /// Rows per second handed to the sink.
    pub rows_per_s: u64,
    /// Rows per second read, per table (`schema.table`) the run has seen,
    /// the busiest first, at most [`MAX_LOAD_TABLES`] (a table not named read
    /// no more than the last one named).
    pub tables: Vec<(String, u64)>,
}

/// What is saved (see `docs/meta-layout.md`, task position).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TaskPosition {
    /// The record's stored-form version.
    pub version: u32,
    /// Incremented by every run; a save from an older run is fenced.
    pub epoch: u64,
    /// The changefeed's epoch (in the server) of the run that claimed the key; 0
    /// for `sluice run`. On a restart the owner trusts only positions of the
    /// changefeed's current epoch: older ones may predate an overwritten
    /// checkpoint or a removal.
    #[serde(default)]
    pub changefeed_epoch: u64,
    /// Every row with commit ts <= this is durable downstream.
    pub checkpoint_ts: u64,
    /// The highest ts the source resolved.
    pub resolved_ts: u64,
    /// Rows above this never reached the sink.
    pub fence_ts: u64,
    /// The source position of the last transaction at or below `checkpoint-ts`,
    /// saved with it (absent in records of older versions, and for sources
    /// without positions): valid only together with that checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_position: Option<SourcePosition>,
    /// How the run that claimed the key stands: `running` until it ends, then
    /// how it ended (the owner takes its outcome from here). Absent in records
    /// of older versions (read as `running`).
    #[serde(default)]
    pub state: TaskState,
    /// What the run did so far, saved with its checkpoints and its end (absent
    /// in older records: zero).
    #[serde(default, flatten)]
    pub counters: Counters,
    /// Where the swap this run carries out stands (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapReport>,
    /// What the shadow this run carries out did (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowReport>,
    /// What this run's continuous validator found (absent when none runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<sluice_core::ValidatorReport>,
    /// How busy this run is (absent until it measured it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
}

/// What a run did, as reported in its task position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Counters {
    /// Where the run's redo log stands (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo: Option<RedoReport>,
    /// Row changes read from the source.
    #[serde(default)]
    pub rows_read: u64,
    /// Row changes handed to the sink.
    #[serde(default)]
    pub rows_written: u64,
    /// Bytes of row data handed to the sink.
    #[serde(default)]
    pub bytes_written: u64,
    /// Plugin calls that failed and were retried.
    #[serde(default)]
    pub retries: u64,
    /// Upstream events the source read (binlog events).
    #[serde(default)]
    pub source_events: u64,
    /// Upstream statements the source did not recognise (not replicated).
    #[serde(default)]
    pub source_skipped_statements: u64,
    /// Upstream time of the source's last event (ms since the Unix epoch; 0:
    /// unknown).
    #[serde(default)]
    pub source_time_ms: u64,
    /// Bytes of row data waiting in the event cache when saved.
    #[serde(default)]
    pub event_cache_bytes: u64,
}

impl Counters {
    /// Both counts added up (the latest upstream time of the two).
    pub fn plus(self, other: Counters) -> Counters {
        Counters {
            rows_read: self.rows_read + other.rows_read,
            rows_written: self.rows_written + other.rows_written,
            bytes_written: self.bytes_written + other.bytes_written,
            retries: self.retries + other.retries,
            source_events: self.source_events + other.source_events,
            source_skipped_statements: self.source_skipped_statements
                + other.source_skipped_statements,
            source_time_ms: self.source_time_ms.max(other.source_time_ms),
            event_cache_bytes: self.event_cache_bytes + other.event_cache_bytes,
            // Where the log stands now, not a sum over runs.
            redo: other.redo.or(self.redo),
        }
    }
}

impl TaskPosition {
    /// Where a run resumes when it starts at `checkpoint`: with the saved source
    /// position if it was saved with this very checkpoint (an overwritten
    /// checkpoint resumes by ts alone).
    pub fn resume_point(&self, checkpoint: CheckpointTs) -> Checkpoint {
        Checkpoint {
            ts: checkpoint,
            position: self
                .source_position
                .clone()
                .filter(|_| self.checkpoint_ts == checkpoint.get()),
        }
    }
}

/// How a capture's work for a changefeed ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The source ended (a bounded source, or the target ts): everything read is
    /// downstream.
    Finished,
    /// Stopped on request after writing, flushing and closing (or cancelled past
    /// the stop timeout: its unflushed rows are replayed, flagged, next time).
    Stopped,
    /// Failed; the owner classifies and reacts.
    Failed {
        /// What the owner does next.
        kind: ErrorKind,
        /// What went wrong, for the operator.
        message: String,
    },
    /// A newer epoch took over the task position; this one wrote nothing more.
    Fenced,
}

/// How the owner reacts to an error (DESIGN §3): grouped by what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The configuration is wrong: fail at once; retrying cannot help.
    Config,
    /// Retrying will not help: fail at once.
    Fatal,
    /// Transient: back off and restart from the checkpoint.
    Retryable,
}

impl ErrorKind {
    /// The kind of a plugin error. Traps, exhausted quotas and deadlines
    /// (`Stopped`) are retryable with a fresh instance; a call the host refused
    /// (`Refused`) would be refused again, so it is fatal.
    pub fn of_plugin_error(err: &PluginError) -> Self {
        match err {
            PluginError::Config(_) => ErrorKind::Config,
            e if e.is_retryable() => ErrorKind::Retryable,
            _ => ErrorKind::Fatal,
        }
    }

    /// The kind's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Fatal => "fatal",
            ErrorKind::Retryable => "retryable",
        }
    }
}

impl From<&PluginError> for ErrorKind {
    fn from(err: &PluginError) -> Self {
        ErrorKind::of_plugin_error(err)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_errors_map_to_error_kinds() {
        let kind = |e: PluginError| ErrorKind::of_plugin_error(&e);
        assert_eq!(kind(PluginError::Config("x".into())), ErrorKind::Config);
        assert_eq!(kind(PluginError::Fatal("x".into())), ErrorKind::Fatal);
        assert_eq!(
            kind(PluginError::Retryable("x".into())),
            ErrorKind::Retryable
        );
        assert_eq!(
            kind(PluginError::Stopped("trap".into())),
            ErrorKind::Retryable
        );
        assert_eq!(
            kind(PluginError::Refused("too big".into())),
            ErrorKind::Fatal
        );
    }
}
